"""Op handlers: what the meta trace must change for the target's kernels, each with its source.

The trace runs on the ``meta`` device, whose kernels compute shapes but not
every kernel's memory.  Three mechanisms close the gap, all at the dispatch
level (so they apply to every op, wherever it is reached):

* kernel emulation (autocast lists, SDPA backends, CUDA dropout, fused RNNs)
  -- :mod:`memlint.estimate.emulation`, registered kernels;
* :func:`dispatch_rules` -- per-op rules the ledger's ``TorchDispatchMode``
  applies after the meta kernel ran: buffers a kernel allocates and frees
  inside itself (scratch), outputs the meta kernel returns empty but the real
  kernel fills (oneDNN's LSTM workspace), cuBLAS's persistent workspace;
* :data:`FALLBACKS` -- ops that cannot run on meta (data-dependent output
  shapes); the tracer uses the upper-bound fallback listed and reports the op
  by name and module (never a silent number).

:data:`OP_HANDLERS` lists them all with their sources (rendered in docs/estimator.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class OpHandler:
    """A row of the op handler table: op, target device(s), what the real kernel keeps, and the source."""

    op: str
    device: str
    memory: str
    source: str


OP_HANDLERS: dict[str, OpHandler] = {h.op + "/" + h.device: h for h in [
    OpHandler(
        "autocast (every listed op)", "cuda, cpu",
        "Floating arguments cast as the target device's autocast lists say (lower precision, fp32, "
        "fp32 with dtype, promote); casts of float32 weights cached until the outermost autocast exits. "
        "Applied at the dispatch key, so ops inside composite modules and C++ composite ops are cast too.",
        "aten/src/ATen/autocast_mode.h and autocast_mode.cpp (memlint/estimate/autocast.py, checked against "
        "the installed torch's AutocastCUDA/AutocastCPU registrations)"),
    OpHandler(
        "scaled_dot_product_attention", "cuda",
        "Backend as select_sdp_backend picks it (flash > memory-efficient > math; cuDNN first only with a "
        "cuDNN > 9.15 runtime on sm90/sm100). flash: head dim padded to a multiple of 8; keeps out, "
        "logsumexp fp32[B,H,L]; backward scratch softmax_d fp32[B,H,round128(L)] and dq_accum "
        "fp32[B,round128(L),H,round32(D)] (+ dk/dv expanded to the query heads under GQA). "
        "memory-efficient: boolean mask made float, padded to 16-aligned strides; keeps out, logsumexp "
        "fp32[B,H,round32(L)]; backward scratch delta fp32[B,H,L] and an fp32 grad-query accumulator. "
        "math: the composite (fp16/bf16 upcast to fp32, [B,H,L,S] matrix, dropout mask).",
        "aten/src/ATen/native/transformers/cuda/sdp_utils.cpp (select_sdp_backend, can_use_*), attention.cpp "
        "(scaled_dot_product_attention), cuda/flash_attn/flash_api.cpp (mha_bwd), "
        "cuda/mem_eff_attention/kernel_backward.h (kNeedsAccumGradQ)"),
    OpHandler(
        "scaled_dot_product_attention", "cpu",
        "Backend as select_sdp_backend_cpp picks it: the CPU flash kernel unless dropout > 0, an "
        "unsupported mask shape or dtype; else the math composite.",
        "aten/src/ATen/native/transformers/sdp_utils_cpp.cpp; checked against torch._fused_sdp_choice"),
    OpHandler(
        "dropout", "cuda",
        "native_dropout (output + bool mask, 1 byte/element) where is_fused_kernel_acceptable holds; the "
        "composite otherwise. On the CPU the composite keeps a float mask of the input's size.",
        "aten/src/ATen/native/Dropout.cpp (dropout, is_fused_kernel_acceptable)"),
    OpHandler(
        "lstm", "cpu",
        "oneDNN: mkldnn_rnn_layer per layer and direction; its workspace (kept for the backward) sized as "
        "oneDNN lays it out.",
        "aten/src/ATen/native/mkldnn/RNN.cpp (mkldnn_rnn); oneDNN src/cpu/rnn/rnn_utils.cpp (set_offsets, "
        "get_good_ld); measured: PyTorch 2.13.0+cpu / oneDNN v3.12.0, 45 shapes exact"),
    OpHandler(
        "lstm, gru, rnn_tanh, rnn_relu", "cuda",
        "cuDNN (_cudnn_rnn): reserve space APPROXIMATED as the gate activations, LSTM cell states and "
        "inner layer outputs of every step; workspace and dropout state not modelled (reported).",
        "aten/src/ATen/native/cudnn/RNN.cpp (_cudnn_rnn keeps reserve for the backward); the sizes come "
        "from cudnnGetRNNTempSpaceSizes at run time (undocumented)"),
    OpHandler(
        "mm, addmm, bmm, ... (cuBLAS)", "cuda",
        "The first cuBLAS call on each thread allocates a persistent workspace through the caching "
        "allocator: 32 MiB on sm9x/sm10x/sm12x, 8.125 MiB otherwise; forward and the autograd device "
        "thread each hold one (category 'workspace'). cuBLASLt shares it.",
        "aten/src/ATen/cuda/CublasHandlePool.cpp (parseChosenWorkspaceSize, TORCH_CUBLASLT_UNIFIED_WORKSPACE)"),
    OpHandler(
        "convolution", "cuda",
        "NOT MODELLED: cuDNN allocates an algorithm-dependent workspace through the caching allocator; "
        "no published rule gives its size. Reported with the modules that run convolutions.",
        "aten/src/ATen/native/cudnn/Conv_v7.cpp (workspace from the caching allocator)"),
    OpHandler(
        "convolution(_backward), mm/addmm/bmm (bf16), mkldnn_rnn_layer(_backward), norm backward, CPU flash "
        "attention, embedding backward, mixed-dtype elementwise, bf16 mean", "cpu",
        "Kernel scratch (oneDNN reorders to blocked layouts and scratchpads, float accumulation buffers) "
        "allocated and freed inside the kernel: "
        "MEASURED on this CPU by running each distinct call once on zero-filled tensors under the "
        "profiler; calls over 512 MiB of operands are reported instead.",
        "memlint/estimate/cpu_scratch.py (measurement; the layouts depend on the CPU's instruction set)"),
    OpHandler(
        "optimizer (foreach / fused)", "cuda, cpu",
        "Built-in optimizers traced through their real step(): foreach (CUDA's default) keeps intermediate "
        "lists for all parameters at once; fused=True cannot run on meta and is traced per parameter "
        "(reported).",
        "torch/optim/optimizer.py (_default_to_fused_or_foreach), torch/optim/adam.py (_multi_tensor_adam)"),
]}

#: aten ops that run on cuBLAS (each thread's first call allocates the workspace).
MATMUL_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv", "_scaled_mm",
                        "_addmm_activation", "linear"})
#: aten ops that run on cuDNN convolution kernels (workspace not modelled: reported).
CONV_OPS = frozenset({"convolution", "convolution_backward", "cudnn_convolution", "cudnn_convolution_transpose"})


@dataclass
class DispatchRules:
    """What the ledger's dispatch mode does per op (see :func:`dispatch_rules`).

    scratch: op name -> ``(args) -> [(bytes, what)]`` buffers allocated and freed inside the kernel;
    outputs: op name -> ``(args, outputs) -> (outputs, note)`` replacements of meta placeholders;
    unmodelled: op name -> what is not modelled about it (reported with the module);
    probed: op name -> ``(args) -> bool``: calls whose scratch is measured on this CPU
    (:mod:`memlint.estimate.cpu_scratch`).
    """

    scratch: dict[str, Callable]
    outputs: dict[str, Callable]
    unmodelled: dict[str, str]
    probed: dict = field(default_factory=dict)


def dispatch_rules(target) -> DispatchRules:
    """The per-op rules for ``target`` (a :class:`memlint.estimate.target.Target`)."""
    from memlint.estimate import rnn, sdpa  # noqa: PLC0415

    if not target.is_cuda:
        from memlint.estimate.cpu_scratch import PROBED_OPS  # noqa: PLC0415

        return DispatchRules({}, {"mkldnn_rnn_layer": rnn.onednn_workspace_handler}, {}, PROBED_OPS)
    cc = target.compute_capability
    return DispatchRules(
        scratch={"_scaled_dot_product_flash_attention_backward": sdpa.flash_backward_scratch,
                 "_scaled_dot_product_efficient_attention_backward":
                     lambda args: sdpa.efficient_backward_scratch(args, cc)},
        outputs={},
        unmodelled={op: "cuDNN convolution workspace" for op in CONV_OPS})


# ---------------------------------------------------------------------------
# "cuda" -> "meta": code that names the CUDA device explicitly (x.cuda(), .to("cuda"),
# torch.zeros(..., device="cuda")) must trace on the meta device of a CPU-only machine;
# a copy to the host (x.cpu(), .to("cpu")) is not device memory.

def _is_device(value, kind: str) -> bool:
    import torch  # noqa: PLC0415

    if isinstance(value, str):
        return value == kind or value.startswith(f"{kind}:")
    return isinstance(value, torch.device) and value.type == kind


def map_cuda_to_meta(name: str, args: tuple, kwargs: dict, func=None):
    """Rewrite CUDA device arguments of a torch function call to ``"meta"``.

    Returns ``(args, kwargs, replacement)``; ``replacement`` is a callable
    result instead of the call: ``Tensor.cuda(i)`` / ``.to("cuda:i")`` become
    :func:`memlint.estimate.placement.move` (the device index is kept beside the
    meta tensor), a factory call with ``device="cuda:i"`` runs ``func`` under
    :func:`memlint.estimate.placement.explicit_device`, and ``Tensor.cpu()`` /
    ``.to("cpu")`` of a meta tensor is an alias of it (a host copy holds no
    device memory).  None otherwise.  ``func``: the function called (needed for
    the device-keeping replacements of ``.to`` and factory calls).
    """
    import torch  # noqa: PLC0415

    from memlint.estimate import placement  # noqa: PLC0415

    tensor = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if name == "_parse_to":  # Module.to(1): an int names a CUDA device (torch would look for an accelerator)
        args = tuple(_int_as_cuda(a) for a in args)
        if "device" in kwargs:
            kwargs = dict(kwargs, device=_int_as_cuda(kwargs["device"]))
        return args, kwargs, None
    if name == "cuda" and tensor is not None:
        index = placement.cuda_index(args[1] if len(args) > 1 else kwargs.get("device")) or 0
        return args, kwargs, lambda: placement.move(tensor, index)
    host_copy = name == "cpu" or (name == "to" and (any(_is_device(a, "cpu") for a in args[1:])
                                                    or _is_device(kwargs.get("device"), "cpu")))
    if host_copy and tensor is not None and tensor.device.type == "meta":
        return args, kwargs, lambda: tensor.detach()
    if name == "to" and tensor is not None and func is not None:
        moved = placement.to_arguments(args, kwargs)
        if moved is not None:
            index, args, kwargs = moved
            return args, kwargs, lambda: placement.placed_to(func, tensor, args, kwargs, index)
        if placement.is_scalar_to_meta(tensor, args, kwargs):
            return args, kwargs, lambda: placement.floating_scalar(func, tensor, args, kwargs)
    if "device" in kwargs and placement.cuda_index(kwargs["device"]) is not None:
        index = placement.cuda_index(kwargs["device"])
        kwargs = dict(kwargs, device="meta")
        if func is not None:
            return args, kwargs, lambda: placement.call_on(index, func, args, kwargs)
    if func is not None and placement.placing() and _is_device(kwargs.get("device"), "meta"):
        # device=t.device of a traced tensor: its device is learnt when it meets a placed tensor
        return args, kwargs, lambda: placement.call_on(placement.FLOATING, func, args, kwargs)
    if name == "to":
        args = tuple("meta" if _is_device(a, "cuda") else a for a in args)
    return args, kwargs, None


def make_cuda_to_meta_mode(ledger=None):
    """A TorchFunctionMode that applies :func:`map_cuda_to_meta`; host copies are reported to ``ledger``."""
    from torch.overrides import TorchFunctionMode  # noqa: PLC0415

    class CudaToMetaMode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", "")
            args, kwargs, replacement = map_cuda_to_meta(name, tuple(args), kwargs or {}, func)
            if replacement is None:
                return func(*args, **kwargs)
            if ledger is not None and (name == "cpu" or (name == "to" and _is_host_copy(args, kwargs))):
                ledger.report_unsupported(f"Tensor.{name}() to the host",
                                          "host copy: no device memory (traced as an alias)")
            return replacement()

    return CudaToMetaMode()


def _int_as_cuda(value):
    import torch  # noqa: PLC0415

    if isinstance(value, int) and not isinstance(value, bool):
        return torch.device("cuda", value)
    return value


def _is_host_copy(args: tuple, kwargs: dict) -> bool:
    return any(_is_device(a, "cpu") for a in args[1:]) or _is_device(kwargs.get("device"), "cpu")


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
