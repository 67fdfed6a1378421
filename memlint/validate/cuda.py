"""CUDA measurement of a training step: allocator statistics and NVML device memory.

Sequence (one process, one device):

1. NVML ``used`` before anything is built (other processes, and this process's
   CUDA context once torch initialises it, are part of what nvidia-smi shows);
2. build the workload on the GPU, run ``warmup`` steps (optimizer state exists);
3. ``torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()``;
4. run ``steps`` measured steps while a thread samples NVML ``used`` every
   ``interval`` seconds (default 5 ms);
5. read ``max_memory_allocated()``, ``max_memory_reserved()`` and
   ``memory_stats()["active_bytes.all.peak"]`` / ``["inactive_split_bytes.all.peak"]``.

A ``torch.cuda.OutOfMemoryError`` during the measured steps is a result: the
measurement says "does not fit" with the phase/step where it happened and the
allocated bytes at that moment.  pynvml (package nvidia-ml-py) is imported
lazily; without it the NVML numbers are null.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass

from memlint.estimate.messages import first_line


@dataclass
class CudaMeasurement:
    """Measured numbers (bytes).

    device_used: NVML peak used during the measured steps minus NVML used before the
    process touched CUDA (so other processes' memory is excluded; this process's CUDA
    context is included, as in the estimator's device_used).  nvml_used_peak: the raw peak.
    ``oom`` is None, or {phase, step, measured_phase, allocated_bytes, reserved_bytes, message}.
    """

    peak_allocated: int | None
    peak_reserved: int | None
    device_used: int | None
    nvml_used_peak: int | None
    active_bytes_peak: int | None
    inactive_split_bytes_peak: int | None
    nvml_used_before: int | None
    nvml_samples: int
    oom: dict | None
    seconds: float

    def to_json(self) -> dict:
        return asdict(self)


class NvmlSampler:
    """Samples NVML ``memory used`` of device ``index`` every ``interval`` s in a thread; keeps the max.

    ``available`` is False when pynvml is missing or NVML fails to initialise.
    """

    def __init__(self, index: int = 0, interval: float = 0.005):
        self.interval = interval
        self.peak: int | None = None
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle = None
        try:
            import pynvml  # noqa: PLC0415

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception:  # noqa: BLE001 - optional dependency / no driver
            self._nvml = None

    @property
    def available(self) -> bool:
        return self._handle is not None

    def used(self) -> int | None:
        """Current NVML memory used (bytes), or None."""
        if not self.available:
            return None
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> None:
        value = self.used()
        if value is not None:
            self.samples += 1
            self.peak = value if self.peak is None else max(self.peak, value)

    def __enter__(self):
        if self.available:
            self._thread = threading.Thread(target=self._loop, name="memlint-nvml", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()
        return False


def cuda_available() -> bool:
    """True when torch sees a CUDA device."""
    import torch  # noqa: PLC0415

    return bool(torch.cuda.is_available())


def measure_cuda(target: str, inputs, options, warmup: int = 2, steps: int = 3, interval: float = 0.005) -> CudaMeasurement:
    """Run the workload on ``cuda:0`` and measure (see the module docstring).

    Raises TargetError / UsageError for a workload that cannot be built or run
    (an OOM while building or warming up is reported as an OOM result too).
    """
    import torch  # noqa: PLC0415

    from memlint.validate.runner import load_real_workload, prepare_step  # noqa: PLC0415

    started = time.perf_counter()
    # NVML before torch creates its CUDA context: the baseline is other processes' memory.
    # Device index 0 = the first visible device, which is the one torch uses as cuda:0.
    sampler = NvmlSampler(_nvml_index(), interval)
    before = sampler.used()
    phase = {"name": "build", "step": -1}

    def on_phase(name: str) -> None:
        phase["name"] = name

    measuring = False
    try:
        workload = load_real_workload(target, inputs, options.batch_size, "cuda")
        step = prepare_step(workload, options, "cuda")
        for index in range(warmup):
            phase["step"] = index
            step.run(on_phase)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        measuring = True
        with sampler:
            for index in range(steps):
                phase["step"] = warmup + index
                step.run(on_phase)
            torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError as exc:
        oom = {"phase": phase["name"], "step": phase["step"], "measured_phase": measuring,
               "allocated_bytes": int(torch.cuda.memory_allocated()),
               "reserved_bytes": int(torch.cuda.memory_reserved()),
               "message": first_line(exc)}
        return _read(sampler, before, oom, started)
    return _read(sampler, before, None, started)


def _nvml_index() -> int:
    """NVML index of cuda:0: the first entry of CUDA_VISIBLE_DEVICES when it is a plain index, else 0."""
    import os  # noqa: PLC0415

    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


def _read(sampler: NvmlSampler, before: int | None, oom: dict | None, started: float) -> CudaMeasurement:
    import torch  # noqa: PLC0415

    stats = torch.cuda.memory_stats()
    return CudaMeasurement(
        peak_allocated=int(torch.cuda.max_memory_allocated()),
        peak_reserved=int(torch.cuda.max_memory_reserved()),
        device_used=None if sampler.peak is None or before is None else sampler.peak - before,
        nvml_used_peak=sampler.peak,
        active_bytes_peak=stats.get("active_bytes.all.peak"),
        inactive_split_bytes_peak=stats.get("inactive_split_bytes.all.peak"),
        nvml_used_before=before,
        nvml_samples=sampler.samples,
        oom=oom,
        seconds=time.perf_counter() - started,
    )
