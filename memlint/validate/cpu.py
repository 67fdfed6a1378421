"""CPU ground truth: live tensor bytes of a real training step, from the PyTorch profiler.

Method.  With ``torch.profiler.profile(profile_memory=True)`` the CPU allocator
reports every allocation and free (c10/core/CPUAllocator.cpp,
``ProfiledCPUMemoryReporter``) as a ``[memory]`` event whose ``nbytes`` is the
requested size (positive) or minus it (a free).  The CPU allocator neither
rounds nor caches, so the running sum of these events is the exact live tensor
bytes.  The profiler is started *before* the workload is built: a block
allocated before profiling would be freed without an event (the profiler
warns "Memory block of unknown size was allocated before the profiling
started").  Warm-up steps run first (so optimizer state exists); each measured
step is wrapped in a ``record_function`` range and its peak is the largest
running sum inside the range (or at its start).

The comparable estimate is the estimate for the CPU target (``--device cpu``:
CPU kernel choices and the CPU allocator), whose peak_allocated is compared
with the allocator peak and peak_tensor_bytes with the tensor peak.
"""

from __future__ import annotations

import bisect
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from memlint.estimate.messages import one_line

MEASURED_RANGE = "memlint::measured_step"


@dataclass
class CpuMeasurement:
    """What one CPU validation measured (bytes).

    peak_allocator_bytes: the profiler's peak live bytes of the CPU allocator over the
        measured steps -- everything allocated, kernel-internal scratch included.
    peak_tensor_bytes: the peak of the storages of tensors that aten ops returned
        (a TorchDispatchMode ledger on the real run) -- what the estimator's ledger models.
    kernel_scratch_bytes: peak_allocator_bytes - peak_tensor_bytes: memory CPU kernels
        allocate internally (e.g. oneDNN reorders), invisible to the tensor ledger.
    step_peaks: allocator peak of each measured step; baseline_bytes: live at the first one's start.
    unmeasured: number name -> why the instrument cannot measure it in this run (the number is
        then recorded as null and not compared; see memlint.validate.distributed.PROFILER_GAP).
    """

    peak_allocator_bytes: int
    peak_tensor_bytes: int
    step_peaks: list[int]
    baseline_bytes: int
    memory_events: int
    seconds: float
    unmeasured: dict[str, str] = field(default_factory=dict)

    @property
    def kernel_scratch_bytes(self) -> int:
        return self.peak_allocator_bytes - self.peak_tensor_bytes


class MemoryProfile:
    """The CPU allocator's running total during one profiler session, and its labelled ranges.

    timeline: [(time_ns, live bytes)] from the profiler's ``[memory]`` events, time-ordered;
    ranges: {label: (start_ns, end_ns)} of every ``record_function`` range opened inside it.
    Both are filled when the ``memory_profile()`` block exits.
    """

    def __init__(self) -> None:
        self.timeline: list[tuple[int, int]] = []
        self.ranges: dict[str, tuple[int, int]] = {}

    def window_peak(self, start_ns: int, end_ns: int) -> tuple[int, int]:
        """(peak, baseline) bytes of the running total over [start_ns, end_ns]; baseline = value at start."""
        times = [t for t, _ in self.timeline]
        first = bisect.bisect_left(times, start_ns)
        last = bisect.bisect_right(times, end_ns)
        baseline = self.timeline[first - 1][1] if first > 0 else 0
        inside = [live for _, live in self.timeline[first:last]]
        return max([baseline, *inside]), baseline

    def total_at(self, when_ns: int) -> int:
        """Bytes live just after ``when_ns``."""
        index = bisect.bisect_right([t for t, _ in self.timeline], when_ns)
        return self.timeline[index - 1][1] if index else 0


@contextmanager
def memory_profile() -> Iterator[MemoryProfile]:
    """Profile the CPU allocator (torch.profiler, ``profile_memory=True``) around the block, quietly."""
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

    result = MemoryProfile()
    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=False)
    with _without_profiler_banner():
        prof.start()
    try:
        yield result
    finally:
        with _without_profiler_banner():
            prof.stop()
    events = prof.profiler.kineto_results.events()
    memory = sorted(((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]"), key=lambda t: t[0])
    live = 0
    for when, nbytes in memory:
        live += nbytes
        result.timeline.append((when, live))
    result.ranges = {e.name(): (e.start_ns(), e.end_ns()) for e in events if e.name() != "[memory]"}


def measure_cpu(target: str, inputs, options, warmup: int = 1, steps: int = 1) -> CpuMeasurement:
    """Build ``target`` on CPU, run ``warmup`` + ``steps`` training steps; peak live tensor bytes.

    ``options``: an EstimateOptions (precision amp-* runs under ``torch.autocast("cpu")``);
    PyTorch's own CPU kernels run.  Raises TargetError / UsageError (one line).
    """
    import torch  # noqa: PLC0415
    from torch.profiler import record_function  # noqa: PLC0415

    from memlint.validate.runner import load_real_workload, prepare_step  # noqa: PLC0415

    if steps < 1:
        from memlint.errors import UsageError  # noqa: PLC0415

        raise UsageError(f"--steps must be >= 1 (got {steps})")
    started = time.perf_counter()
    torch.manual_seed(0)
    tensor_peak = 0
    with memory_profile() as profiled:
        workload = load_real_workload(target, inputs, options.batch_size, "cpu")
        step = prepare_step(workload, options, "cpu")
        for _ in range(max(1, warmup)):
            _run_step(step)
        for index in range(steps):
            ledger = StorageLedger()
            ledger.track_state(step)
            with record_function(f"{MEASURED_RANGE}_{index}"):
                _run_step(step, ledger)
            tensor_peak = max(tensor_peak, ledger.peak)
        del step, workload
    windows = [profiled.window_peak(*profiled.ranges[f"{MEASURED_RANGE}_{index}"]) for index in range(steps)]
    peaks = [peak for peak, _ in windows]
    return CpuMeasurement(peak_allocator_bytes=max(peaks), peak_tensor_bytes=tensor_peak, step_peaks=peaks,
                          baseline_bytes=windows[0][1], memory_events=len(profiled.timeline),
                          seconds=time.perf_counter() - started)


@contextmanager
def _without_profiler_banner() -> Iterator[None]:
    """Drop the ``USDT: ... profiler_start`` / ``profiler_stop`` lines that
    torch 2.13's kineto writes from C++ to file descriptor 2 when the
    profiler starts and stops (seen with torch 2.13.0+cpu; no setting turns
    them off). Everything else written to stderr meanwhile is passed on."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            for line in capture.read().decode("utf-8", errors="replace").splitlines(keepends=True):
                if not line.startswith("USDT:"):
                    sys.stderr.write(line)


def _run_step(step, ledger=None) -> None:
    """Run one step; a kernel failure of the real run becomes a one-line TargetError."""
    import contextlib  # noqa: PLC0415

    from memlint.errors import TargetError  # noqa: PLC0415

    try:
        with ledger.mode() if ledger is not None else contextlib.nullcontext():
            step.run()
    except RuntimeError as exc:
        raise TargetError(f"CPU run of {step.workload.name!r} failed: {one_line(exc)}") from None


class StorageLedger:
    """Live bytes of the storages of real tensors returned by aten ops (bytes, unrounded).

    A storage is counted once (views share it) from the op that returns it until its
    Python storage object is finalized -- the same bookkeeping as the estimator's
    ledger (memlint/estimate/tracer.py), applied to a real run.
    """

    def __init__(self):
        self.live: dict[int, int] = {}
        self.total = 0
        self.peak = 0

    def track(self, tensor) -> None:
        import weakref  # noqa: PLC0415

        storage = tensor.untyped_storage()
        key = storage._cdata
        if key in self.live or storage.nbytes() == 0:
            return
        self.live[key] = storage.nbytes()
        self.total += storage.nbytes()
        self.peak = max(self.peak, self.total)
        weakref.finalize(storage, self._free, key)

    def _free(self, key: int) -> None:
        self.total -= self.live.pop(key, 0)

    def track_state(self, step) -> None:
        """Count what is alive between steps: parameters, gradients, buffers, optimizer state.

        Optimizer state is that of every live ``torch.optim.Optimizer`` (found by
        ``gc``) that steps one of the module's parameters: the step's own and any
        a workload's hooks own (optimizer step in backward).
        """
        import torch  # noqa: PLC0415

        for param in step.module.parameters():
            self.track(param)
            if param.grad is not None:
                self.track(param.grad)
        for buffer in step.module.buffers():
            self.track(buffer)
        own = {id(p) for p in step.module.parameters()}
        for optimizer in _live_optimizers(own):
            for state in optimizer.state.values():
                for value in state.values():
                    if isinstance(value, torch.Tensor) and value.device.type == "cpu":
                        self.track(value)

    def mode(self):
        """A TorchDispatchMode that tracks every tensor output."""
        import torch  # noqa: PLC0415
        from torch.utils._python_dispatch import TorchDispatchMode  # noqa: PLC0415
        from torch.utils._pytree import tree_flatten  # noqa: PLC0415

        ledger = self

        class StorageMode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for value in tree_flatten(out)[0]:
                    if isinstance(value, torch.Tensor) and value.device.type == "cpu":
                        ledger.track(value)
                return out

        return StorageMode()


def _live_optimizers(param_ids: set[int]):
    """Every live ``torch.optim.Optimizer`` stepping a parameter whose id is in ``param_ids``.

    A gc scan: the validator's instrument only, not a hot path.
    """
    import gc  # noqa: PLC0415
    import warnings  # noqa: PLC0415

    import torch  # noqa: PLC0415

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # isinstance on deprecated module proxies warns
        found = [obj for obj in gc.get_objects() if isinstance(obj, torch.optim.Optimizer)]
    return [opt for opt in found if any(id(p) in param_ids for g in opt.param_groups for p in g["params"])]
