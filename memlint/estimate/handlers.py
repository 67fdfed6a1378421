"""CUDA semantics the meta device lacks: autocast, op handlers and data-dependent fallbacks.

The trace runs on the ``meta`` device, whose kernels compute shapes but not
CUDA's memory behaviour.  Three pieces close the gap:

* :class:`CudaSemanticsMode` (a ``TorchFunctionMode``, i.e. *above* autograd, so
  every cast or replacement is recorded in the autograd graph exactly as CUDA
  autocast records it) applies CUDA autocast's op lists and the op handlers
  of :data:`OP_HANDLERS` that work at the function level;
* :data:`OP_HANDLERS` -- one entry per op whose CUDA memory differs from the
  meta kernel, each with its source/reason (rendered in docs/estimator.md);
* :data:`FALLBACKS` -- ops that cannot run on meta (data-dependent output
  shapes); the tracer uses the upper-bound fallback listed and reports the op
  by name and module (never a silent number).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

# ---------------------------------------------------------------------------
# Autocast op lists.  Source: aten/src/ATen/autocast_mode.cpp (torch 2.13),
# CUDA ``lower_precision_fp`` and ``fp32`` / ``fp32_set_opt_dtype`` lists,
# restricted to ops reachable as torch functions.

AUTOCAST_LOWER = frozenset({
    "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "convolution", "_convolution", "prelu", "addmm", "addmv", "addr",
    "matmul", "__matmul__", "__rmatmul__", "einsum", "mm", "mv", "linalg_vecdot", "linear",
    "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot", "lstm_cell", "gru_cell",
    "rnn_tanh_cell", "rnn_relu_cell", "scaled_dot_product_attention",
})
AUTOCAST_FP32 = frozenset({
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow", "__pow__", "softplus", "layer_norm", "group_norm",
    "frobenius_norm", "nuclear_norm", "cosine_similarity", "poisson_nll_loss",
    "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div",
    "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss",
    "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
})
# fp32_set_opt_dtype: computed in fp32 without copying the input (dtype=float32 argument).
AUTOCAST_FP32_OPT_DTYPE = frozenset({"softmax", "log_softmax", "cumsum", "cumprod"})


@dataclass(frozen=True)
class OpHandler:
    """A row of the op handler table: op name, what the CUDA kernel keeps, and the source."""

    op: str
    cuda_memory: str
    source: str


OP_HANDLERS: dict[str, OpHandler] = {h.op: h for h in [
    OpHandler(
        "scaled_dot_product_attention",
        "Backend chosen as sdp_utils.cpp does for the target compute capability and dtype, in "
        "priority order flash > memory-efficient > math. flash: sm80+, fp16/bf16, no attn_mask, "
        "head_dim <= 256 and a multiple of 8; keeps out + logsumexp fp32[B,H,L]; backward adds "
        "dq_accum fp32[B,L128,H,D] and softmax_d fp32[B,H,L128] temporaries. memory-efficient: "
        "sm50+ (bf16 needs sm80), fp16/bf16/fp32, head_dim multiple of 8 (4 for fp32); keeps out + "
        "logsumexp fp32[B,H,ceil(L/32)*32]. math: materialises the [B,H,L,S] attention matrix "
        "(and softmax, dropout mask), upcasting fp16/bf16 to fp32 on CUDA.",
        "aten/src/ATen/native/transformers/cuda/sdp_utils.cpp (check_sm_version, "
        "check_tensor_dtype, check_head_dim_size_flash), attention.cpp "
        "(_scaled_dot_product_attention_math), flash_api.cpp / mem_eff attention_backward.cu",
    ),
    OpHandler(
        "dropout",
        "CUDA uses the fused native_dropout kernel (is_fused_kernel_acceptable): output plus a "
        "bool mask (1 byte/element) saved for backward. The meta trace of F.dropout would keep a "
        "float mask from bernoulli_, so the handler calls native_dropout.",
        "aten/src/ATen/native/Dropout.cpp (dropout -> native_dropout on CUDA); "
        "aten/src/ATen/native/cuda/Dropout.cu (mask dtype bool)",
    ),
    OpHandler(
        "convolution",
        "cuDNN allocates a workspace through the caching allocator for the duration of the "
        "kernel (forward and each backward). APPROXIMATION: max(input, output) bytes, capped "
        "at 256 MiB per call; the real size depends on the algorithm cuDNN's heuristics pick.",
        "aten/src/ATen/native/cudnn/Conv_v7.cpp (Workspace allocated with "
        "c10::cuda::CUDACachingAllocator); size is algorithm-dependent (approximation)",
    ),
    OpHandler(
        "batch_norm",
        "cudnn_batch_norm saves mean and invstd (fp32[C] each) and a reserve space that is empty "
        "for plain NCHW training; identical to the meta native_batch_norm outputs, so no change.",
        "aten/src/ATen/native/cudnn/BatchNorm.cpp (cudnnGetBatchNormalizationTrainingExReserveSpaceSize)",
    ),
    OpHandler(
        "cross_entropy",
        "Under autocast, log_softmax runs with dtype=float32 (fp32_set_opt_dtype): an fp32 [N,C] "
        "log-prob tensor saved for nll_loss backward, no fp32 copy of the logits. Without autocast "
        "the meta kernels keep the same tensors as CUDA.",
        "aten/src/ATen/autocast_mode.cpp (log_softmax in fp32_set_opt_dtype); "
        "aten/src/ATen/native/LossNLL.cpp (cross_entropy -> log_softmax + nll_loss)",
    ),
    OpHandler(
        "mm/addmm/bmm (cuBLAS)",
        "The first cuBLAS call on each thread allocates a persistent workspace through the caching "
        "allocator: 32 MiB on sm90+, 8.125 MiB otherwise; forward and the autograd device thread "
        "each hold one (category 'workspace').",
        "aten/src/ATen/cuda/CublasHandlePool.cpp (parseChosenWorkspaceSize, getNewWorkspace)",
    ),
    OpHandler(
        "optimizer (foreach / fused)",
        "On CUDA, built-in optimizers default to the foreach implementation: its intermediate "
        "lists (e.g. Adam's sqrt(exp_avg_sq)) are allocated for all parameters at once; the trace "
        "runs the real foreach step(). fused=True kernels cannot run on meta: traced with the "
        "per-parameter implementation (same state; temporaries at most one parameter's size) and "
        "reported as unsupported.",
        "torch/optim/optimizer.py (_default_to_fused_or_foreach), torch/optim/adam.py (_multi_tensor_adam)",
    ),
]}


# ---------------------------------------------------------------------------
# Scaled dot-product attention backend selection.

def choose_sdpa_backend(q, k, v, attn_mask, cc: tuple[int, int]) -> str:
    """``"flash"``, ``"efficient"`` or ``"math"`` as PyTorch would pick on a GPU of compute capability ``cc``.

    q/k/v: [B, H, L, D] tensors (after autocast).  Source: sdp_utils.cpp (see OP_HANDLERS).
    """
    import torch  # noqa: PLC0415

    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return "math"
    dtype = q.dtype
    head_dim = q.shape[-1]
    same_dims = k.shape[-1] == head_dim and v.shape[-1] == head_dim
    low = dtype in (torch.float16, torch.bfloat16)
    if cc >= (8, 0) and low and attn_mask is None and same_dims and head_dim <= 256 and head_dim % 8 == 0:
        return "flash"
    align = 8 if low else 4
    dtype_ok = dtype == torch.float32 or dtype == torch.float16 or (dtype == torch.bfloat16 and cc >= (8, 0))
    if cc >= (5, 0) and dtype_ok and head_dim % align == 0 and k.shape[-1] == head_dim:
        return "efficient"
    return "math"


def _fused_attention_function():
    import torch  # noqa: PLC0415

    class FusedAttention(torch.autograd.Function):
        """Memory model of the flash / memory-efficient attention kernels (shapes only)."""

        @staticmethod
        def forward(ctx, q, k, v, backend: str):  # noqa: D401
            batch, heads, length, _ = q.shape
            out = q.new_empty((batch, heads, length, v.shape[-1]))
            lse_len = length if backend == "flash" else -(-length // 32) * 32
            lse = q.new_empty((batch, heads, lse_len), dtype=torch.float32)
            ctx.backend = backend
            ctx.save_for_backward(q, k, v, out, lse)
            return out

        @staticmethod
        def backward(ctx, grad_out):
            q, k, v, out, lse = ctx.saved_tensors
            batch, heads, length, dim = q.shape
            rounded = -(-length // 128) * 128
            softmax_d = q.new_empty((batch, heads, rounded), dtype=torch.float32)
            dq_accum = q.new_empty((batch, rounded, heads, -(-dim // 8) * 8), dtype=torch.float32)
            dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            del softmax_d, dq_accum, out, lse
            return dq, dk, dv, None

    return FusedAttention


_FUSED_ATTENTION = None


def sdpa(func, args, kwargs, cc, choices=None):
    """Run F.scaled_dot_product_attention with the memory of the backend CUDA would use.

    choices: optional Counter; ``choices["sdpa:<backend>"]`` is incremented.
    """
    import torch  # noqa: PLC0415

    global _FUSED_ATTENTION
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    bound = dict(zip(names, args))
    bound.update(kwargs)
    q, k, v = bound["query"], bound["key"], bound["value"]
    backend = choose_sdpa_backend(q, k, v, bound.get("attn_mask"), cc)
    if backend == "efficient" and bound.get("enable_gqa") and k.shape[1] != q.shape[1]:
        # Grouped-query attention: the flash kernels accept K/V with fewer heads,
        # the memory-efficient kernel does not, so PyTorch falls back to math
        # (sdp_utils.cpp, check_grouped_query_attention; torch 2.5+ docs of
        # scaled_dot_product_attention's enable_gqa).
        backend = "math"
    if choices is not None:
        choices[f"sdpa:{backend}"] += 1
    if backend == "math":
        if q.dtype in (torch.float16, torch.bfloat16):
            low = q.dtype
            up = [t.float() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in args]
            up_kw = {key: (t.float() if isinstance(t, torch.Tensor) and t.is_floating_point() else t)
                     for key, t in kwargs.items()}
            return func(*up, **up_kw).to(low)
        return func(*args, **kwargs)
    if _FUSED_ATTENTION is None:
        _FUSED_ATTENTION = _fused_attention_function()
    # Dropout inside flash / mem-efficient kernels keeps only a philox seed/offset (no mask).
    return _FUSED_ATTENTION.apply(q, k, v, backend)


# ---------------------------------------------------------------------------
# "cuda" -> "meta": code that names the CUDA device explicitly (x.cuda(), .to("cuda"),
# torch.zeros(..., device="cuda")) must trace on the meta device of a CPU-only machine.

def _is_cuda_device(value) -> bool:
    import torch  # noqa: PLC0415

    if isinstance(value, str):
        return value == "cuda" or value.startswith("cuda:")
    return isinstance(value, torch.device) and value.type == "cuda"


def map_cuda_to_meta(name: str, args: tuple, kwargs: dict):
    """Rewrite CUDA device arguments of a torch function call to ``"meta"``.

    Returns ``(args, kwargs, replacement)``; ``replacement`` is a callable result
    for ``Tensor.cuda()`` (which becomes ``.to("meta")``), else None.
    """
    if name == "cuda" and args and hasattr(args[0], "to"):
        tensor = args[0]
        return args, kwargs, lambda: tensor.to("meta")
    if "device" in kwargs and _is_cuda_device(kwargs["device"]):
        kwargs = dict(kwargs, device="meta")
    if name == "to":
        args = tuple("meta" if _is_cuda_device(a) else a for a in args)
    return args, kwargs, None


def make_cuda_to_meta_mode():
    """A TorchFunctionMode that only applies :func:`map_cuda_to_meta` (used around factories and inputs)."""
    from torch.overrides import TorchFunctionMode  # noqa: PLC0415

    class CudaToMetaMode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            args, kwargs, replacement = map_cuda_to_meta(getattr(func, "__name__", ""), tuple(args), kwargs or {})
            return replacement() if replacement else func(*args, **kwargs)

    return CudaToMetaMode()


# ---------------------------------------------------------------------------
# The function mode.

def make_cuda_semantics_mode(autocast_dtype, cc: tuple[int, int]):
    """Build a CudaSemanticsMode (TorchFunctionMode) instance.

    autocast_dtype: torch.float16 / torch.bfloat16 to emulate ``torch.autocast("cuda", dtype)``,
    or None for no autocast.  cc: target compute capability for backend choices.
    Call ``clear_cast_cache()`` where CUDA would exit the autocast region (end of forward).
    """
    import torch  # noqa: PLC0415
    from torch.overrides import TorchFunctionMode  # noqa: PLC0415

    float_types = (torch.float32, torch.float16, torch.bfloat16)

    class CudaSemanticsMode(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.autocast_dtype = autocast_dtype
            self.autocast_enabled = autocast_dtype is not None
            self.cc = cc
            self.cache: dict[int, Any] = {}
            self.choices: Counter = Counter()

        def clear_cast_cache(self):
            self.cache.clear()

        def _cast(self, value, dtype):
            if isinstance(value, torch.Tensor):
                if value.dtype == dtype or value.dtype not in float_types or value.device.type != "meta":
                    return value
                if value.is_leaf and value.requires_grad:
                    cached = self.cache.get(id(value))
                    if cached is None or cached[0] is not value:
                        cached = (value, value.to(dtype))
                        self.cache[id(value)] = cached
                    return cached[1]
                return value.to(dtype)
            if isinstance(value, (list, tuple)):
                return type(value)(self._cast(v, dtype) for v in value)
            return value

        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", "")
            args, kwargs, replacement = map_cuda_to_meta(name, tuple(args), kwargs or {})
            if replacement is not None:
                return replacement()
            if self.autocast_enabled:
                if name in AUTOCAST_LOWER:
                    args = self._cast(tuple(args), self.autocast_dtype)
                    kwargs = {k: self._cast(v, self.autocast_dtype) for k, v in kwargs.items()}
                elif name in AUTOCAST_FP32:
                    args = self._cast(tuple(args), torch.float32)
                    kwargs = {k: self._cast(v, torch.float32) for k, v in kwargs.items()}
                elif name in AUTOCAST_FP32_OPT_DTYPE and kwargs.get("dtype") is None:
                    first = args[0] if args else None
                    if isinstance(first, torch.Tensor) and first.dtype in (torch.float16, torch.bfloat16):
                        if name in ("softmax", "log_softmax") and len(args) >= 3:
                            args = tuple(args[:2]) + (torch.float32,) + tuple(args[3:])
                        else:
                            kwargs = dict(kwargs, dtype=torch.float32)
                elif name == "cross_entropy":
                    return self._cross_entropy(func, args, kwargs)
            if name == "scaled_dot_product_attention":
                return sdpa(func, args, kwargs, self.cc, self.choices)
            if name == "dropout":
                return self._dropout(func, args, kwargs)
            return func(*args, **kwargs)

        def _dropout(self, func, args, kwargs):
            names = ("input", "p", "training", "inplace")
            bound = dict(zip(names, args))
            bound.update(kwargs)
            x, p = bound["input"], bound.get("p", 0.5)
            training, inplace = bound.get("training", True), bound.get("inplace", False)
            if (isinstance(x, torch.Tensor) and training and not inplace and 0.0 < p < 1.0
                    and x.is_floating_point() and x.numel() > 0):
                self.choices["dropout:native_dropout(bool mask)"] += 1
                return torch.native_dropout(x, p, True)[0]
            return func(*args, **kwargs)

        def _cross_entropy(self, func, args, kwargs):
            names = ("input", "target", "weight", "size_average", "ignore_index", "reduce",
                     "reduction", "label_smoothing")
            bound = dict(zip(names, args))
            bound.update(kwargs)
            x = bound["input"]
            if (not isinstance(x, torch.Tensor) or bound.get("label_smoothing", 0.0)
                    or bound.get("target") is None or bound["target"].is_floating_point()):
                return func(*self._cast(tuple(args), torch.float32),
                            **{k: self._cast(v, torch.float32) for k, v in kwargs.items()})
            logp = torch.log_softmax(x, 1 if x.dim() > 1 else 0, dtype=torch.float32)
            weight = bound.get("weight")
            return torch.nn.functional.nll_loss(
                logp, bound["target"], weight=None if weight is None else weight.float(),
                ignore_index=bound.get("ignore_index", -100), reduction=bound.get("reduction", "mean"))

    return CudaSemanticsMode()


# ---------------------------------------------------------------------------
# Data-dependent ops: fallbacks (upper bounds) used when the meta kernel raises.

def _meta_empty(shape, dtype):
    import torch  # noqa: PLC0415

    return torch.empty(shape, dtype=dtype, device="meta")


def _fallback_nonzero(args, kwargs):
    import torch  # noqa: PLC0415

    x = args[0]
    return _meta_empty((x.numel(), x.dim()), torch.int64), "assumed every element non-zero (upper bound)"


def _fallback_masked_select(args, kwargs):
    import torch  # noqa: PLC0415

    x, mask = args[0], args[1]
    numel = torch.broadcast_shapes(x.shape, mask.shape).numel()
    return _meta_empty((numel,), x.dtype), "assumed the mask selects every element (upper bound)"


def _fallback_unique2(args, kwargs):
    import torch  # noqa: PLC0415

    x = args[0]
    return_inverse = kwargs.get("return_inverse", args[2] if len(args) > 2 else False)
    return_counts = kwargs.get("return_counts", args[3] if len(args) > 3 else False)
    inverse = _meta_empty(x.shape if return_inverse else (0,), torch.int64)
    counts = _meta_empty((x.numel(),) if return_counts else (0,), torch.int64)
    return (_meta_empty((x.numel(),), x.dtype), inverse, counts), "assumed all elements distinct (upper bound)"


def _fallback_unique_consecutive(args, kwargs):
    import torch  # noqa: PLC0415

    x = args[0]
    return ((_meta_empty((x.numel(),), x.dtype), _meta_empty(x.shape, torch.int64),
             _meta_empty((x.numel(),), torch.int64)), "assumed all elements distinct (upper bound)")


def _fallback_item(args, kwargs):
    x = args[0]
    if x.dtype.is_floating_point:
        return 1.0, "value unknown on meta: assumed 1.0"
    if str(x.dtype) == "torch.bool":
        return True, "value unknown on meta: assumed True"
    return 1, "value unknown on meta: assumed 1"


def _bool_indices_to_long(indices):
    import torch  # noqa: PLC0415

    out = []
    for index in indices:
        if isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8):
            full = _meta_empty((index.numel(),), torch.int64)
            out.extend([full] * index.dim())
        else:
            out.append(index)
    return out


def _fallback_index(args, kwargs):
    import torch  # noqa: PLC0415

    x, indices = args[0], _bool_indices_to_long(args[1])
    return torch.ops.aten.index.Tensor(x, indices), "boolean mask assumed all True (upper bound)"


def _fallback_index_put(args, kwargs):
    import torch  # noqa: PLC0415

    x, indices = args[0], _bool_indices_to_long(args[1])
    values = args[2]
    return torch.ops.aten.index_put.default(x, indices, values, *args[3:]), "boolean mask assumed all True"


def _fallback_index_put_(args, kwargs):
    x = args[0]
    return x, "in-place masked write: no new memory"


def _fallback_true(args, kwargs):
    return True, "value unknown on meta: assumed True"


def fallback_table() -> dict[Any, Callable]:
    """Map aten overload packets to fallbacks ``(args, kwargs) -> (output, description)``."""
    import torch  # noqa: PLC0415

    aten = torch.ops.aten
    return {
        aten.nonzero: _fallback_nonzero,
        aten.masked_select: _fallback_masked_select,
        aten._unique2: _fallback_unique2,
        aten.unique_consecutive: _fallback_unique_consecutive,
        aten.unique_dim: _fallback_unique_consecutive,
        aten._local_scalar_dense: _fallback_item,
        aten.index: _fallback_index,
        aten.index_put: _fallback_index_put,
        aten.index_put_: _fallback_index_put_,
        aten._index_put_impl_: _fallback_index_put_,
        aten.is_nonzero: _fallback_true,
        aten.equal: _fallback_true,
    }
