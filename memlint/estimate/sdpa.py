"""Scaled dot-product attention: the backend choice of the modelled torch, and each backend's memory.

``aten::scaled_dot_product_attention`` is intercepted at the aten level (a
kernel for the ``AutogradMeta`` key, registered during the trace by
:mod:`memlint.estimate.emulation`), so the choice applies to every caller:
``F.scaled_dot_product_attention``, ``nn.MultiheadAttention`` /
``nn.Transformer*`` (through ``F.multi_head_attention_forward``) and the
attention modules of transformers.  The kernel follows
``scaled_dot_product_attention`` in ``aten/src/ATen/native/transformers/attention.cpp``:
boolean masks become float masks, then the chosen backend's aten op runs
(its meta kernel gives the outputs it keeps: output, logsumexp, RNG state),
and the backward ops' kernel-internal buffers are added by
:func:`backward_scratch`.

Backend choice (``select_sdp_backend`` in ``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp``
for CUDA, ``select_sdp_backend_cpp`` in ``sdp_utils_cpp.cpp`` for the CPU),
:func:`choose_cuda_backend` / :func:`choose_cpu_backend`.  The CUDA priority
order is the default of the modelled torch, :data:`CUDA_PRIORITY` (flash,
memory-efficient, math, cuDNN -- ``torch._C._get_sdp_priority_order()``); the
cuDNN backend moves first only with a cuDNN runtime newer than 9.15.0 on
sm90/sm100 (``check_prefer_cudnn_attention``), which memlint models only
when the target names its cuDNN version.
"""

from __future__ import annotations

from dataclasses import dataclass

from memlint.estimate.units import round_up

#: Default priority order of the CUDA backends in the modelled torch (enum values
#: of ``torch.nn.attention.SDPBackend``: flash 1, efficient 2, math 0, cudnn 3).
CUDA_PRIORITY = ("flash", "efficient", "math", "cudnn")
#: cuDNN runtime from which torch prefers cuDNN attention on sm90/sm100 (sdp_utils.cpp).
PREFER_CUDNN_FROM = 91500


@dataclass(frozen=True)
class SdpaCall:
    """The arguments of one SDPA call that the backend choice reads (q/k/v: [B, H, L, D] tensors)."""

    query: object
    key: object
    value: object
    attn_mask: object = None
    dropout_p: float = 0.0
    is_causal: bool = False
    enable_gqa: bool = False

    @property
    def requires_grad(self) -> bool:
        import torch  # noqa: PLC0415

        return torch.is_grad_enabled() and any(t.requires_grad for t in (self.query, self.key, self.value))


def _dense_ok(call: SdpaCall, gqa_ok: bool, singleton_ok: bool) -> bool:
    """check_tensor_shapes, check_batch_size_and_num_heads_dense, nonzero lengths, last-dim stride 1."""
    q, k, v = call.query, call.key, call.value
    if not (q.dim() == k.dim() == v.dim() == 4):
        return False
    if not (q.shape[0] == k.shape[0] == v.shape[0]):
        return False
    if call.enable_gqa and gqa_ok:
        if k.shape[1] != v.shape[1] or q.shape[1] % k.shape[1]:
            return False
    elif not (q.shape[1] == k.shape[1] == v.shape[1]):
        return False
    if q.shape[-2] == 0 or k.shape[-2] == 0:
        return False
    strides_ok = all(t.stride(-1) == 1 for t in (q, k, v))
    return strides_ok or (singleton_ok and q.shape[-1] == 1)


def _same_dtype(call: SdpaCall, allowed) -> bool:
    q = call.query
    return q.dtype == call.key.dtype == call.value.dtype and q.dtype in allowed


def _gemm_alignment(dtype, cc: tuple[int, int]) -> int:
    """minimum_gemm_alignment (sdp_utils.cpp): tensor cores from sm80 (sm70 for fp16/bf16)."""
    import torch  # noqa: PLC0415

    half = dtype in (torch.float16, torch.bfloat16)
    tensor_cores = cc[0] >= 8 or (cc[0] >= 7 and half)
    alignment = 4 if cc[0] >= 8 else 1
    return max(alignment, 128 // (16 if half else 32)) if tensor_cores else alignment


def can_use_flash(call: SdpaCall, cc: tuple[int, int]) -> bool:
    """can_use_flash_attention of sdp_utils.cpp for compute capability ``cc``."""
    import torch  # noqa: PLC0415

    q, k, v = call.query, call.key, call.value
    if q.dim() != 4 or call.attn_mask is not None:
        return False
    head = q.shape[-1]
    if not (head == k.shape[-1] == v.shape[-1] and head <= 256):
        return False
    if not ((8, 0) <= cc <= (12, 1)):
        return False
    if call.requires_grad and ((8, 6) <= cc <= (8, 9) or (12, 0) <= cc <= (12, 1)):
        if not (head <= 192 or (call.dropout_p == 0.0 and head > 224)):
            return False
    if call.is_causal and q.shape[-2] != k.shape[-2]:
        return False
    allowed = (torch.float16, torch.bfloat16) if cc[0] >= 8 else (torch.float16,)
    return _same_dtype(call, allowed) and _dense_ok(call, gqa_ok=True, singleton_ok=True)


def can_use_efficient(call: SdpaCall, cc: tuple[int, int]) -> bool:
    """can_use_mem_efficient_attention of sdp_utils.cpp for compute capability ``cc``."""
    import torch  # noqa: PLC0415

    q, k, v = call.query, call.key, call.value
    if not ((5, 0) <= cc <= (12, 1)) or q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return False
    alignment = _gemm_alignment(q.dtype, cc)
    if q.shape[-1] != k.shape[-1] or q.shape[-1] % alignment or v.shape[-1] % alignment:
        return False
    if cc[0] >= 8 and any(t.storage_offset() % alignment for t in (q, k, v)):
        return False
    allowed = (torch.float16, torch.float32, torch.bfloat16) if cc[0] >= 8 else (torch.float16, torch.float32)
    return _same_dtype(call, allowed) and _dense_ok(call, gqa_ok=True, singleton_ok=False)


def can_use_cudnn(call: SdpaCall, cc: tuple[int, int], cudnn_version: int) -> bool:
    """The main conditions of can_use_cudnn_attention (sdp_utils.cpp) for a cuDNN 9 runtime.

    sm80-sm121, fp16/bf16, dense inputs (grouped-query allowed), head dims
    multiples of 8 and at most 128 (256 on sm90/sm100 from cuDNN 9.22),
    dropout a multiple of 1/16, key length other than 1.
    """
    import torch  # noqa: PLC0415

    q, k, v = call.query, call.key, call.value
    if not ((8, 0) <= cc <= (12, 1)) or q.dim() != 4:
        return False
    limit = 256 if (cc[0] in (9, 10) and cudnn_version > 92200) else 128
    heads_ok = all(d % 8 == 0 and d <= limit for d in (q.shape[-1], v.shape[-1]))
    dropout_ok = call.dropout_p * 16.0 == int(call.dropout_p * 16.0)
    allowed = (torch.float16, torch.bfloat16)
    return (heads_ok and dropout_ok and k.shape[2] != 1 and _same_dtype(call, allowed)
            and _dense_ok(call, gqa_ok=True, singleton_ok=True))


def choose_cuda_backend(call: SdpaCall, cc: tuple[int, int], cudnn_version: int | None = None) -> str:
    """``"flash"``, ``"efficient"``, ``"cudnn"`` or ``"math"`` as select_sdp_backend picks them for ``cc``.

    cudnn_version: the cuDNN runtime as an integer (91500 = 9.15.0) or None
    (unknown: the default priority order, in which math precedes cuDNN).
    """
    order = list(CUDA_PRIORITY)
    prefer_cudnn = (cudnn_version is not None and cudnn_version > PREFER_CUDNN_FROM
                    and cc[0] in (9, 10) and cc[1] in (0, 3))
    if prefer_cudnn:
        order = ["cudnn", "flash", "efficient", "math"]
    tests = {"flash": lambda: can_use_flash(call, cc), "efficient": lambda: can_use_efficient(call, cc),
             "math": lambda: True, "cudnn": lambda: prefer_cudnn and can_use_cudnn(call, cc, cudnn_version)}
    return next(backend for backend in order if tests[backend]())


def choose_cpu_backend(call: SdpaCall) -> str:
    """``"flash"`` or ``"math"`` as select_sdp_backend_cpp (sdp_utils_cpp.cpp) picks them."""
    import torch  # noqa: PLC0415

    q, k, v = call.query, call.key, call.value
    if call.dropout_p > 0.0 or q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return "math"
    if call.attn_mask is not None and not _cpu_mask_ok(call):
        return "math"
    if not (q.shape[-1] == k.shape[-1] == v.shape[-1]):
        return "math"
    allowed = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
    if not (_same_dtype(call, allowed) and _dense_ok(call, gqa_ok=True, singleton_ok=False)):
        return "math"
    return "flash"


def _cpu_mask_ok(call: SdpaCall) -> bool:
    """check_attn_mask_shape (sdp_utils_cpp.h)."""
    mask, q, k = call.attn_mask, call.query, call.key
    if mask.requires_grad:
        return False
    if mask.shape[-2] not in (q.shape[2], 1) or mask.shape[-1] not in (k.shape[2], 1):
        return False
    if mask.dim() == 2:
        return True
    return mask.dim() == 4 and mask.shape[0] in (1, q.shape[0]) and mask.shape[1] in (1, q.shape[1])


def convert_boolean_mask(mask, dtype):
    """convert_boolean_attn_mask (attention.cpp): a boolean mask becomes a float mask (0 / -inf) of ``dtype``."""
    import torch  # noqa: PLC0415

    if mask is None or mask.dtype != torch.bool:
        return mask
    zero = torch.scalar_tensor(0.0, dtype=dtype, device=mask.device)
    return torch.where(mask.logical_not(), float("-inf"), zero)


def _pad_last_dim(tensor, alignment: int):
    """pad_last_dim<alignment, false> (attention.cpp): a padded copy when the last dim is not a multiple."""
    import torch  # noqa: PLC0415

    rest = tensor.shape[-1] % alignment
    return tensor if rest == 0 else torch.nn.functional.pad(tensor, (0, alignment - rest))


def _preprocess_mem_eff_mask(mask, query, key):
    """preprocess_mask (attention.cpp): pad the bias to 16-aligned strides, expand to [B, H, L, S]."""
    if any(stride % 16 for stride in mask.stride()[:-1]):
        last = mask.shape[-1]
        mask = _pad_last_dim(mask, 16)[..., :last]
    return mask.expand(query.shape[0], query.shape[1], query.shape[2], key.shape[2])


def run_backend(backend: str, call: SdpaCall, scale, on_cuda: bool):
    """Call the aten op of ``backend`` the way attention.cpp does; returns the attention output."""
    import torch  # noqa: PLC0415

    aten = torch.ops.aten
    q, k, v = call.query, call.key, call.value
    mask = convert_boolean_mask(call.attn_mask, q.dtype)
    lse = call.requires_grad
    if backend == "cudnn":
        return aten._scaled_dot_product_cudnn_attention(q, k, v, mask, lse, call.dropout_p, call.is_causal, False,
                                                        scale=scale)[0]
    if backend == "flash" and on_cuda:
        head = q.shape[-1]
        padded = [_pad_last_dim(t, 8) for t in (q, k, v)]
        scale = head ** -0.5 if scale is None else scale
        out = aten._scaled_dot_product_flash_attention(*padded, call.dropout_p, call.is_causal, False, scale=scale)[0]
        return out if out.shape[-1] == head else out[..., :head]
    if backend == "flash":
        return aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, call.dropout_p, call.is_causal,
                                                                attn_mask=mask, scale=scale)[0]
    if backend == "efficient":
        if mask is not None:
            mask = _preprocess_mem_eff_mask(mask, q, k)
        if k.shape[1] != q.shape[1]:
            k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
        return aten._scaled_dot_product_efficient_attention(q, k, v, mask, lse, call.dropout_p, call.is_causal,
                                                            scale=scale)[0]
    return aten._scaled_dot_product_attention_math(q, k, v, mask, call.dropout_p, call.is_causal, None,
                                                   scale=scale, enable_gqa=call.enable_gqa)[0]


def make_sdpa_kernel(target, choices, note_unmodelled):
    """The ``AutogradMeta`` kernel of ``aten::scaled_dot_product_attention`` for ``target``.

    choices: a Counter; ``choices["sdpa:<backend>"]`` counts the calls.
    note_unmodelled: ``callable(what)`` for kernels whose scratch is not modelled (cuDNN attention).
    """
    def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False):
        call = SdpaCall(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
        if target.is_cuda:
            backend = choose_cuda_backend(call, target.compute_capability, target.cudnn_version)
        else:
            backend = choose_cpu_backend(call)
        choices[f"sdpa:{backend}"] += 1
        if backend == "cudnn":
            note_unmodelled("cuDNN attention: its workspace is not modelled")
        if backend == "efficient" and key.shape[1] != query.shape[1]:
            note_unmodelled("memory-efficient attention with grouped-query K/V: modelled with K/V expanded to the "
                            "query heads (the kernel's own GQA handling is not modelled)")
        return run_backend(backend, call, scale, target.is_cuda)

    return kernel


def flash_backward_scratch(args) -> list[tuple[int, str]]:
    """Buffers mha_bwd (flash_api.cpp) allocates during the flash backward: (bytes, what).

    softmax_d fp32 [B, H, round128(Lq)]; dq_accum fp32 [B, round128(Lq), H, round32(D)];
    with grouped-query attention dk/dv expanded to the query heads [B, Lk, H, D] before the sum.
    args: those of aten._scaled_dot_product_flash_attention_backward (grad_out, query, key, ...).
    """
    query, key = args[1], args[2]
    batch, heads, length, dim = query.shape
    rounded = round_up(length, 128)
    out = [(batch * heads * rounded * 4, "flash bwd softmax_d"),
           (batch * rounded * heads * round_up(dim, 32) * 4, "flash bwd dq_accum")]
    if key.shape[1] != heads:
        expanded = batch * key.shape[2] * heads * dim * query.element_size()
        out += [(expanded, "flash bwd dk_expanded"), (expanded, "flash bwd dv_expanded")]
    return out


def efficient_backward_scratch(args, cc: tuple[int, int]) -> list[tuple[int, str]]:
    """Buffers of the memory-efficient backward (attention_backward.cu, kernel_backward.h): (bytes, what).

    delta fp32 [B, H, M]; and the fp32 grad-query accumulator [B, M, H, K] the
    kernel keeps when kNeedsAccumGradQ (split keys from sm70, or an output
    dtype other than fp32).  The grad-key/value accumulators (head dims above
    the in-register limit) are not modelled.
    args: those of aten._scaled_dot_product_efficient_attention_backward (grad_out, query, ...).
    """
    import torch  # noqa: PLC0415

    query = args[1]
    batch, heads, length, dim = query.shape
    out = [(batch * heads * length * 4, "efficient bwd delta")]
    if cc >= (7, 0) or query.dtype != torch.float32:
        out.append((batch * length * heads * dim * 4, "efficient bwd grad_q accumulator"))
    return out
