"""Kernel emulation for a trace: the target device's autocast, SDPA, dropout and RNN kernels at the dispatch level.

:class:`KernelEmulation` is a context manager that, for the duration of one
trace, registers Python kernels in a ``torch.library.Library("aten", "IMPL")``
and removes them on exit (torch's own kernels come back):

* the autocast kernels of the target's op lists at ``AutocastCPU``
  (:mod:`memlint.estimate.autocast`), with ``AutocastCPU`` added to every
  dispatch (meta tensors lack it) and ``torch.clear_autocast_cache`` extended
  to clear the emulation's cast cache too;
* ``aten::scaled_dot_product_attention`` at ``AutogradMeta``
  (:mod:`memlint.estimate.sdpa`);
* CUDA target: ``aten::dropout`` at ``AutogradMeta`` -- CUDA's fused
  ``native_dropout`` (bool mask) where ``is_fused_kernel_acceptable`` holds
  (``aten/src/ATen/native/Dropout.cpp``); ``aten::lstm/gru/rnn_tanh/rnn_relu``
  through the cuDNN model (:mod:`memlint.estimate.rnn`);
* CPU target: ``aten::lstm`` through oneDNN's ``mkldnn_rnn_layer``; dropout is
  the meta kernel's own path, which is the CPU's (float mask);
* an older ``torch_version``: its known differences (``aten::_softmax`` and
  ``_log_softmax`` saving their input before torch 1.11), see
  :mod:`memlint.estimate.torch_versions`.

Kernel choices are counted in :attr:`KernelEmulation.choices`; kernels whose
memory is only partly modelled are passed to ``note_unmodelled(what)`` (the
ledger records them with the module FQN that ran them).
"""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Callable

AUTOCAST_KEY = "AutocastCPU"
RNN_MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")


class KernelEmulation:
    """Emulate ``target``'s kernels while active (see module docstring).

    target: a :class:`memlint.estimate.target.Target`; note_unmodelled:
    ``callable(what)`` told about kernels whose memory is not (fully) modelled.
    """

    def __init__(self, target, note_unmodelled: Callable[[str], None] = lambda what: None):
        from memlint.estimate.autocast import CastState  # noqa: PLC0415

        self.target = target
        self.note_unmodelled = note_unmodelled
        self.choices: Counter = Counter()
        self.casts = CastState()
        self._library = None
        self._include = None
        self._saved_clear = None

    def __enter__(self):
        import torch  # noqa: PLC0415

        from memlint.estimate.autocast import register_autocast  # noqa: PLC0415

        self._library = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Overriding a previously registered kernel" is the point
            register_autocast(self._library, "cuda" if self.target.is_cuda else "cpu", self.casts, AUTOCAST_KEY)
            self._register_kernels()
        self._include = torch._C._IncludeDispatchKeyGuard(getattr(torch._C.DispatchKey, AUTOCAST_KEY))
        self._include.__enter__()
        self._saved_clear = torch.clear_autocast_cache
        casts, original = self.casts, self._saved_clear

        def clear_autocast_cache():
            original()
            casts.clear()

        torch.clear_autocast_cache = clear_autocast_cache
        return self

    def __exit__(self, *exc):
        import torch  # noqa: PLC0415

        torch.clear_autocast_cache = self._saved_clear
        self._include.__exit__(None, None, None)
        self._library._destroy()
        self._library = None
        self.casts.clear()
        return False

    def _register_kernels(self) -> None:
        from memlint.estimate import rnn, sdpa  # noqa: PLC0415

        impl = self._library.impl
        impl("scaled_dot_product_attention", sdpa.make_sdpa_kernel(self.target, self.choices, self.note_unmodelled),
             "AutogradMeta")
        if self.target.is_cuda:
            impl("dropout", make_cuda_dropout_kernel(self.choices), "AutogradMeta")
            for mode in RNN_MODES:
                impl(f"{mode}.input", rnn.make_cudnn_rnn_kernel(mode, self.choices, self.note_unmodelled),
                     "AutogradMeta")
        else:
            impl("lstm.input", rnn.make_onednn_lstm_kernel(self.choices), "AutogradMeta")
        if "softmax_saves_input" in self.target.version_facts:
            from memlint.estimate.torch_versions import make_softmax_saving_input  # noqa: PLC0415

            for op_name in ("_softmax", "_log_softmax"):
                impl(op_name, make_softmax_saving_input(op_name), "AutogradMeta")


def make_cuda_dropout_kernel(choices):
    """``aten::dropout`` as CUDA runs it: ``native_dropout`` (output + bool mask) when the fused kernel applies.

    ``is_fused_kernel_acceptable`` (Dropout.cpp): a CUDA tensor, 0 < p < 1, at
    least one element; otherwise the composite (identity for p = 0 or eval,
    zeros for p = 1).
    """
    import torch  # noqa: PLC0415

    op = torch.ops.aten.dropout.default

    def kernel(input, p, train):
        if train and 0.0 < p < 1.0 and input.numel() > 0:
            choices["dropout:native_dropout (bool mask)"] += 1
            return torch.ops.aten.native_dropout(input, p, train)[0]
        return op.decompose(input, p, train)

    return kernel
