"""Autocast emulated at the dispatch level: the op lists of the modelled torch and their cast policies.

Meta tensors have no autocast dispatch key of their own, and the real
autocast kernels cast only tensors of their device, so the estimator
registers its own kernels for every listed op (a ``torch.library`` Library
that lives only during a trace, see :mod:`memlint.estimate.emulation`).  They
sit at the ``AutocastCPU`` dispatch key, which the trace adds to every
dispatch; the CPU autocast *state* (``torch.is_autocast_enabled("cpu")``,
``torch.get_autocast_dtype("cpu")``, nesting, cache) therefore carries the
emulated autocast of whichever device is the target, and everything that
saves and restores that state -- non-reentrant ``torch.utils.checkpoint``
recomputation, nested ``torch.autocast("cpu", enabled=False)`` blocks --
behaves as it does on the device.  Being a dispatch key, the kernels see
every op, including those reached inside composite modules
(``nn.MultiheadAttention``, ``nn.TransformerEncoderLayer``) and inside C++
composite ops, exactly where the real autocast sees them.

Op lists: :data:`CUDA_POLICIES` and :data:`CPU_POLICIES`, keyed by cast
policy, each op an ``aten`` name with its overload (``"pow.Tensor_Scalar"``;
a bare name is the default overload).  Source:
``aten/src/ATen/autocast_mode.h`` (``AT_FORALL_LOWER_PRECISION_FP``,
``AT_FORALL_FP32``, ``AT_FORALL_FP32_SET_OPT_DTYPE``,
``AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE``, ``AT_FORALL_PROMOTE``) and
``aten/src/ATen/autocast_mode.cpp`` (the ``AutocastCUDA`` and ``AutocastCPU``
registrations) of pytorch/pytorch, restricted to the overloads torch
:data:`MODELLED_TORCH` registers (``torch._C._dispatch_get_registrations_for_dispatch_key``;
tests/estimate/test_autocast.py checks the two agree with the installed torch).

Cast policies (``autocast_mode.h``, ``WrapFunction_`` and ``cached_cast``):

* ``lower_precision_fp`` -- floating tensor arguments (not float64) cast to the
  autocast dtype; a float32 leaf that requires grad (a weight) is cast once and
  the copy cached until the outermost autocast region exits;
* ``fp32`` -- floating arguments cast to float32;
* ``fp32_set_opt_dtype`` -- when the first argument is floating and no
  ``dtype`` was given, ``dtype=float32`` is passed (no copy of the input);
* ``fp32_append_dtype`` -- the overload taking a dtype is called with float32;
* ``promote`` -- floating arguments cast to the widest floating type among them;
* ``banned`` -- raises, as the CUDA kernel does (``binary_cross_entropy``).
"""

from __future__ import annotations

import weakref
from typing import Any

#: The torch release whose op lists and kernel choices the estimator models.
MODELLED_TORCH = "2.13"

POLICY_NAMES = ("lower_precision_fp", "fp32", "fp32_set_opt_dtype", "fp32_append_dtype", "promote", "banned")

_LOWER_COMMON = (
    "_convolution.deprecated", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
    "conv_transpose2d.input", "conv_transpose3d.input", "prelu", "addmm", "matmul", "mm", "linalg_vecdot",
    "linear", "addbmm", "baddbmm", "bmm", "scaled_dot_product_attention",
)
_FP32_LOSSES = (
    "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss",
    "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss",
    "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss", "binary_cross_entropy_with_logits",
    "poisson_nll_loss",
)
_UPSAMPLE = (
    "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d", "_upsample_nearest_exact2d",
    "upsample_nearest3d", "_upsample_nearest_exact3d", "upsample_linear1d", "upsample_bilinear2d",
    "_upsample_bilinear2d_aa", "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bicubic2d_aa",
)

CUDA_POLICIES: dict[str, tuple[str, ...]] = {
    "lower_precision_fp": _LOWER_COMMON + (
        "_convolution", "convolution", "addmv", "addr", "einsum", "mv", "chain_matmul", "linalg_multi_dot",
        "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell",
        "rnn_relu_cell", "_scaled_dot_product_flash_attention", "cudnn_convolution",
        "cudnn_convolution_transpose",
    ),
    "fp32": (
        "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal",
        "rsqrt", "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "softplus",
        "layer_norm", "native_layer_norm", "rms_norm", "group_norm", "frobenius_norm.dim", "nuclear_norm",
        "nuclear_norm.dim", "cosine_similarity", "dist", "pdist", "cdist", "renorm", "logsumexp",
    ) + _FP32_LOSSES + _UPSAMPLE,
    "fp32_set_opt_dtype": (
        "prod", "prod.dim_int", "softmax.int", "log_softmax.int", "cumprod", "cumsum", "linalg_vector_norm",
        "linalg_matrix_norm", "linalg_matrix_norm.str_ord", "sum", "sum.dim_IntList",
    ),
    "fp32_append_dtype": ("norm.Scalar", "norm.ScalarOpt_dim"),
    "promote": (
        "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put",
        "tensordot", "scatter_add",
    ),
    "banned": ("binary_cross_entropy",),
}

CPU_POLICIES: dict[str, tuple[str, ...]] = {
    "lower_precision_fp": _LOWER_COMMON + (
        "conv1d.padding", "conv2d.padding", "conv3d.padding", "_addmm_activation", "mkldnn_rnn_layer",
        "_native_multi_head_attention",
    ),
    "fp32": (
        "avg_pool3d", "binary_cross_entropy", "grid_sampler", "polar", "prod", "prod.dim_int", "quantile",
        "quantile.scalar", "nanquantile", "nanquantile.scalar", "stft", "stft.center", "cdist",
        "grid_sampler_2d", "_grid_sampler_2d_cpu_fallback", "grid_sampler_3d", "trace", "view_as_complex",
        "cholesky", "cholesky_inverse", "cholesky_solve", "inverse", "lu_solve", "orgqr", "ormqr",
        "pinverse", "max_pool3d", "max_unpool2d", "max_unpool3d", "adaptive_avg_pool3d", "reflection_pad1d",
        "reflection_pad2d", "replication_pad1d", "replication_pad2d", "replication_pad3d",
        "cross_entropy_loss", "ctc_loss.IntList", "ctc_loss.Tensor", "multilabel_margin_loss_forward",
        "fft_fft", "fft_ifft", "fft_fft2", "fft_ifft2", "fft_fftn", "fft_ifftn", "fft_rfft", "fft_irfft",
        "fft_rfft2", "fft_irfft2", "fft_rfftn", "fft_irfftn", "fft_hfft", "fft_ihfft", "linalg_cond",
        "linalg_cond.p_str", "linalg_matrix_rank", "linalg_matrix_rank.tol_tensor",
        "linalg_matrix_rank.atol_rtol_tensor", "linalg_matrix_rank.atol_rtol_float", "linalg_solve",
        "linalg_cholesky", "linalg_svdvals", "linalg_eigvals", "linalg_eigvalsh", "linalg_inv",
        "linalg_householder_product", "linalg_tensorinv", "linalg_tensorsolve",
        "fake_quantize_per_tensor_affine", "geqrf", "_lu_with_info", "qr", "svd", "triangular_solve",
        "fractional_max_pool2d", "fractional_max_pool3d", "adaptive_max_pool3d", "linalg_qr",
        "linalg_cholesky_ex", "linalg_svd", "linalg_eig", "linalg_eigh", "linalg_lstsq", "linalg_inv_ex",
    ) + _FP32_LOSSES,
    "fp32_set_opt_dtype": (),
    "fp32_append_dtype": (),
    "promote": ("stack", "cat", "index_copy"),
    "banned": (),
}

#: fp32_append_dtype: the overload that takes the appended dtype.
APPEND_DTYPE_TARGET = {"norm.Scalar": "norm.ScalarOpt_dtype", "norm.ScalarOpt_dim": "norm.ScalarOpt_dim_dtype"}


def policies_for(device: str) -> dict[str, tuple[str, ...]]:
    """The op lists of ``device`` ("cuda" or "cpu"), keyed by policy."""
    return CUDA_POLICIES if device == "cuda" else CPU_POLICIES


def resolve_overload(name: str):
    """``"pow.Tensor_Scalar"`` -> ``torch.ops.aten.pow.Tensor_Scalar`` (a bare name -> ``.default``)."""
    import torch  # noqa: PLC0415

    op, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, op), overload or "default")


class CastState:
    """The emulated autocast's cast cache (``autocast_mode.cpp``'s ``cached_casts``).

    A cached cast is kept until :meth:`clear`, which the emulation calls where
    torch clears its own cache (``torch.clear_autocast_cache``, called when the
    outermost autocast region exits).
    """

    def __init__(self):
        self.cache: dict[int, tuple[Any, Any]] = {}

    def clear(self) -> None:
        self.cache.clear()

    def cast(self, value, dtype, lower):
        """``value`` cast to ``dtype`` under the autocast rules (tensors, lists of tensors, anything else as is).

        lower: the autocast dtype (casts to it of float32 weights are cached).
        """
        import torch  # noqa: PLC0415

        if isinstance(value, torch.Tensor):
            return self._cast_tensor(value, dtype, lower)
        if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
            return type(value)(self.cast(v, dtype, lower) for v in value)
        return value

    def _cast_tensor(self, tensor, dtype, lower):
        import torch  # noqa: PLC0415

        if not eligible(tensor) or tensor.dtype == dtype:
            return tensor
        cacheable = (dtype == lower and tensor.dtype == torch.float32 and tensor.requires_grad
                     and tensor.is_leaf and not tensor._is_view() and torch.is_autocast_cache_enabled())
        if not cacheable:
            return tensor.to(dtype)
        cached = self.cache.get(id(tensor))
        if cached is not None and cached[0]() is tensor:
            return cached[1]
        result = tensor.to(dtype)
        self.cache[id(tensor)] = (weakref.ref(tensor), result)
        return result


def eligible(value) -> bool:
    """A tensor autocast may cast: floating point and not float64 (``is_eligible`` in autocast_mode.h)."""
    import torch  # noqa: PLC0415

    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != torch.float64


def _first_tensor(args):
    import torch  # noqa: PLC0415

    return next((a for a in args if isinstance(a, torch.Tensor)), None)


def _widest(args, lower):
    import torch  # noqa: PLC0415

    widest = lower
    for value in args:
        tensors = value if isinstance(value, (list, tuple)) else [value]
        for tensor in tensors:
            if eligible(tensor):
                widest = torch.promote_types(widest, tensor.dtype)
    return widest


def make_kernel(name: str, policy: str, state: CastState, exclude_key):
    """The Python kernel of one listed op: apply ``policy`` then redispatch with ``exclude_key`` excluded.

    name: ``"op.overload"``; state: the shared cast cache; exclude_key: the
    dispatch key the kernel is registered at (excluded while the op runs, as
    the C++ ``ExcludeDispatchKeyGuard`` of ``WrapFunction_`` does).
    """
    import torch  # noqa: PLC0415

    op = resolve_overload(name)
    target = resolve_overload(APPEND_DTYPE_TARGET[name]) if policy == "fp32_append_dtype" else op
    keyset = torch._C.DispatchKeySet(exclude_key)
    dtype_index = next((i for i, a in enumerate(op._schema.arguments) if a.name == "dtype"), None)

    def kernel(*args, **kwargs):
        lower = torch.get_autocast_dtype("cpu")
        if policy == "banned":
            raise RuntimeError(f"torch.nn.functional.{name} is unsafe to autocast (as on CUDA): "
                               "use binary_cross_entropy_with_logits")
        args, kwargs = _apply(policy, args, kwargs, state, lower, dtype_index)
        with torch._C._ExcludeDispatchKeyGuard(keyset):
            if policy == "fp32_append_dtype":
                first = _first_tensor(args)
                return target(*_with_defaults(op, args), dtype=torch.float32 if eligible(first) else first.dtype,
                              **kwargs)
            return target(*args, **kwargs)

    return kernel


def _with_defaults(op, args: tuple) -> tuple:
    """``args`` completed with the schema defaults of ``op``'s omitted positional arguments."""
    positional = [a for a in op._schema.arguments if not a.kwarg_only]
    filled = list(args)
    for argument in positional[len(args):]:
        if not argument.has_default_value():
            break
        filled.append(argument.default_value)
    return tuple(filled)


def _apply(policy, args, kwargs, state: CastState, lower, dtype_index):
    import torch  # noqa: PLC0415

    if policy in ("lower_precision_fp", "fp32", "promote"):
        dtype = {"lower_precision_fp": lower, "fp32": torch.float32}.get(policy) or _widest(
            list(args) + list(kwargs.values()), lower)
        args = tuple(state.cast(a, dtype, lower) for a in args)
        kwargs = {k: state.cast(v, dtype, lower) for k, v in kwargs.items()}
    elif policy == "fp32_set_opt_dtype" and args and eligible(args[0]):
        if dtype_index is not None and dtype_index < len(args):
            if args[dtype_index] is None:
                args = args[:dtype_index] + (torch.float32,) + args[dtype_index + 1:]
        elif kwargs.get("dtype") is None:
            kwargs = dict(kwargs, dtype=torch.float32)
    return args, kwargs


def register_autocast(library, device: str, state: CastState, key_name: str = "AutocastCPU") -> int:
    """Register the emulated autocast kernels of ``device``'s lists in ``library``; returns how many.

    library: a ``torch.library.Library("aten", "IMPL")`` owned by the caller
    (destroying it removes the kernels and restores torch's own).
    """
    import torch  # noqa: PLC0415

    key = getattr(torch._C.DispatchKey, key_name)
    count = 0
    for policy, names in policies_for(device).items():
        for name in names:
            library.impl(name, make_kernel(name, policy, state, key), key_name)
            count += 1
    return count
