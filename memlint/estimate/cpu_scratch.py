"""CPU target: kernel scratch of oneDNN kernels, measured by running each distinct kernel once on this CPU.

oneDNN (mkldnn) kernels allocate buffers through PyTorch's CPU allocator while
they run -- reorders of inputs and weights into blocked layouts, the result
before its reorder back, the primitive's scratchpad -- and free them before
returning; no tensor holds them, so a shape-only trace cannot see them.  Their
size depends on the layout oneDNN picks for the instruction set of the CPU,
so instead of a formula the CPU target measures them: during the trace every
call of an op in :data:`PROBED_OPS` is recorded with the shapes, strides and
dtypes of its arguments; afterwards each distinct call runs once for real on
zero-filled tensors inside one ``torch.profiler`` session
(``profile_memory=True``), and its scratch -- the peak of the allocator's
running total during the call minus the total when it returns -- is added to
the ledger as a transient at every recorded call.

Calls whose tensor arguments exceed :data:`PROBE_LIMIT_BYTES` are not run;
they are reported as not modelled.  The ops listed are those found with
scratch above 1 KiB on the fixtures and transformers models of the CPU
records, fp32 and bf16 autocast (``python tests/benchmarks/cpu_scratch_scan.py``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass, field


def _always(args) -> bool:
    return True


def _mixed_dtypes(args) -> bool:
    """Elementwise ops allocate a conversion buffer only when their tensor operands differ in dtype."""
    import torch  # noqa: PLC0415

    dtypes = {a.dtype for a in args if isinstance(a, torch.Tensor)}
    return len(dtypes) > 1


def _reduced_precision(args) -> bool:
    """Reductions of bf16/fp16 tensors accumulate in a float32 buffer."""
    import torch  # noqa: PLC0415

    return isinstance(args[0], torch.Tensor) and args[0].dtype in (torch.bfloat16, torch.float16)


#: aten ops whose CPU kernels allocate scratch through the CPU allocator, and
#: when (the predicate on the op's arguments).  oneDNN: convolutions, matmuls
#: (reorders of bf16 operands), RNN layers; ATen: batch/layer norm backward,
#: the CPU flash attention kernels, embedding backward, mixed-dtype elementwise
#: ops, bf16 mean.
PROBED_OPS: dict[str, object] = {
    "convolution": _always, "convolution_backward": _always,
    "mkldnn_rnn_layer": _always, "mkldnn_rnn_layer_backward": _always,
    "mm": _reduced_precision, "addmm": _reduced_precision, "bmm": _reduced_precision,
    "baddbmm": _reduced_precision,
    "native_batch_norm_backward": _always, "native_layer_norm_backward": _always,
    "_scaled_dot_product_flash_attention_for_cpu": _always,
    "_scaled_dot_product_flash_attention_for_cpu_backward": _always,
    "embedding_dense_backward": _always,
    "add": _mixed_dtypes, "sub": _mixed_dtypes, "mul": _mixed_dtypes, "div": _mixed_dtypes,
    "mean": _reduced_precision,
}
#: Largest total of a probed call's tensor arguments that is run for real (bytes).
PROBE_LIMIT_BYTES = 512 * 2**20
PROBE_RANGE = "memlint::scratch_probe"


def _spec(value):
    import torch  # noqa: PLC0415

    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), tuple(value.stride()), str(value.dtype), value.storage_offset())
    if isinstance(value, (list, tuple)):
        return ("seq", type(value).__name__, tuple(_spec(v) for v in value))
    if isinstance(value, torch.dtype):
        return ("dtype", str(value))
    return ("value", value)


def _build(spec):
    import torch  # noqa: PLC0415

    kind = spec[0]
    if kind == "tensor":
        _, shape, stride, dtype, offset = spec
        extent = offset + sum((s - 1) * st for s, st in zip(shape, stride)) + 1 if all(shape) else 0
        base = torch.zeros(extent, dtype=getattr(torch, dtype.replace("torch.", "")))
        return base.as_strided(shape, stride, offset) if all(shape) else torch.zeros(shape, dtype=base.dtype)
    if kind == "seq":
        values = [_build(v) for v in spec[2]]
        return values if spec[1] == "list" else tuple(values)
    if kind == "dtype":
        return getattr(torch, spec[1].replace("torch.", ""))
    return spec[1]


def _tensor_bytes(spec) -> int:
    if spec[0] == "tensor":
        _, shape, _, dtype, _ = spec
        size = {"torch.float64": 8, "torch.int64": 8, "torch.float32": 4, "torch.int32": 4}.get(dtype, 2)
        return math.prod(shape) * size
    if spec[0] == "seq":
        return sum(_tensor_bytes(v) for v in spec[2])
    return 0


@dataclass
class ScratchProbe:
    """Collects probed calls during a trace and measures their scratch afterwards (bytes).

    threads: intra-op threads the calls are measured with (None: this process's setting).
    oneDNN's scratch depends on it (a convolution's im2col buffers are per thread).
    """

    calls: list[tuple[int, int, tuple, str]] = field(default_factory=list)
    threads: int | None = None

    def collect(self, func, args, kwargs, op_index: int, position: int, module: str) -> None:
        """Remember a call of ``func`` (an OpOverload in :data:`PROBED_OPS`) made at ``op_index``.

        position: index in the ledger's event list right after the call's outputs were recorded.
        """
        signature = (str(func), _spec(tuple(args)), _spec(tuple(sorted(kwargs.items()))))
        self.calls.append((op_index, position, signature, module))

    def measure(self) -> dict[tuple, int | None]:
        """{signature: scratch bytes, or None when not run (over :data:`PROBE_LIMIT_BYTES`)}."""
        distinct = list(dict.fromkeys(sig for _, _, sig, _ in self.calls))
        runnable = [sig for sig in distinct if _tensor_bytes(sig[1]) + _tensor_bytes(sig[2]) <= PROBE_LIMIT_BYTES]
        result: dict[tuple, int | None] = {sig: None for sig in distinct}
        if runnable:
            result.update(_profile(runnable, self.threads))
        return result


def _resolve(name: str):
    import torch  # noqa: PLC0415

    namespace, _, rest = name.partition(".")
    op, _, overload = rest.partition(".")
    return getattr(getattr(getattr(torch.ops, namespace), op), overload or "default")


@contextlib.contextmanager
def _intra_op_threads(threads: int | None) -> Iterator[None]:
    import torch  # noqa: PLC0415

    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _profile(signatures: list[tuple], threads: int | None = None) -> dict[tuple, int]:
    """Run each call twice (the second measured) in one profiler session; scratch = peak - end total."""
    import torch  # noqa: PLC0415
    from torch.profiler import record_function  # noqa: PLC0415

    from memlint.validate.cpu import memory_profile  # noqa: PLC0415

    prepared = []
    for sig in signatures:
        args, kwargs = _build(sig[1]), dict(_build(sig[2]))
        prepared.append((sig, _resolve(sig[0]), args, kwargs))
    with _intra_op_threads(threads), memory_profile() as profiled, torch.no_grad():
        for index, (_, op, args, kwargs) in enumerate(prepared):
            op(*args, **kwargs)
            with record_function(f"{PROBE_RANGE}_{index}"):
                out = op(*args, **kwargs)
            del out
    scratch = {}
    for index, (sig, _, _, _) in enumerate(prepared):
        start, end = profiled.ranges[f"{PROBE_RANGE}_{index}"]
        peak, _ = profiled.window_peak(start, end)
        scratch[sig] = max(0, peak - profiled.total_at(end))
    return scratch


def add_measured_scratch(ledger, probe: ScratchProbe) -> None:
    """Measure ``probe``'s calls and add each one's scratch to ``ledger`` as a transient at its op index.

    Calls not run are noted in the ledger as not modelled, with their module.
    """
    if not probe.calls:
        return
    measured = probe.measure()
    for op_index, position, sig, module in sorted(probe.calls, key=lambda call: -call[1]):
        nbytes = measured[sig]
        op = sig[0].split(".")[1]
        if nbytes is None:
            ledger.note_unmodelled(f"oneDNN scratch of {op} (operands over the probe limit)", module)
        elif nbytes:
            ledger.insert_transient(op_index, position, nbytes, f"kernel scratch ({op}, measured)", module)
