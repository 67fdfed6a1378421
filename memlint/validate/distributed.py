"""Distributed CPU ground truth: a real multi-process gloo run, rank 0's steady-state peak.

``memlint validate --device cpu --parallel ddp|fsdp --world-size N`` starts N
processes (``torch.multiprocessing``, the "spawn" start method) that form a
gloo process group on the loopback interface only (``tcp://127.0.0.1:PORT``,
a port the kernel chose free a moment before), wrap the workload with the
same engine and settings the estimate traces (memlint/estimate/distributed.py)
and run warm-up then measured steps.  Rank 0 measures with the method of
memlint/validate/cpu.py: the profiler's memory timeline (every CPU allocator
allocation and free) started before the workload is built, the peak inside
each measured step's ``record_function`` range, and a TorchDispatchMode
ledger of tensor storages beside it.

Bounds: the whole run is given ``timeout`` seconds (default
:data:`DEFAULT_TIMEOUT_SECONDS`); on a timeout or an error in any rank every
process still alive is killed, and a one-line TargetError says which rank
failed and why.

Differences from the traced engine, all outside the steady state: the real DDP
verifies and broadcasts the parameters at construction (``init_sync=True``)
and rebuilds its buckets after the first step; the measurement starts after
the warm-up steps.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import traceback
from datetime import timedelta

from memlint.errors import TargetError, UsageError
from memlint.estimate.messages import one_line

#: Seconds the whole multi-process run may take (issue 16: a multi-process test is bounded by 60 s).
DEFAULT_TIMEOUT_SECONDS = 60.0
#: Largest world the validator starts on this machine (processes, each a full model replica or shard).
MAX_VALIDATE_WORLD = 8


#: Why the allocator peak (``cpu_peak``) of an FSDP2 gloo run is not a measurement.  The CPU
#: allocator reports a free to the profiler only on a thread where the profiler is on
#: (c10/core/CPUAllocator.cpp ``ProfiledCPUMemoryReporter``, torch 2.13.0); gloo's
#: reduce-scatter temporary (tests/benchmarks/gloo_scratch.py) is freed on whichever thread drops
#: the work last, often gloo's worker thread, so that free is missing and later peaks keep one or
#: two full-size copies too many (mlp, 2 ranks: 5.39, 6.73 and 8.07 MiB in three runs of one
#: command).  DDP runs show it too, less often: a gradient bucket whose last reference gloo's
#: thread drops (lstm_lm, 2 ranks, 2026-12-01: 14,593,432 B in one run of three on a loaded
#: machine, 12,508,664 and 12,508,936 B in the others; the tensor ledger 12,508,652 B in all three).
PROFILER_GAP = ("the profiler misses frees on gloo's worker threads (a reduce-scatter temporary, a "
                "gradient bucket): the tensor ledger (cpu_tensor_peak) is the measurement")
#: The engines whose allocator peak has that gap: both, since both run collectives on gloo's threads.
ENGINES_WITH_PROFILER_GAP = ("ddp", "fsdp")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free when asked (the kernel's choice for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def measure_distributed(target: str, inputs, options, warmup: int = 1, steps: int = 1,
                        timeout: float = DEFAULT_TIMEOUT_SECONDS):
    """Run ``options.world_size`` gloo ranks of ``target``; rank 0's :class:`memlint.validate.cpu.CpuMeasurement`.

    Raises UsageError (bad world size, a precision the engines are not run
    with) or TargetError (a rank failed, or the run passed ``timeout`` seconds).
    """
    import torch.multiprocessing as mp  # noqa: PLC0415

    from memlint.validate.cpu import CpuMeasurement  # noqa: PLC0415

    world = options.world_size
    if not 2 <= world <= MAX_VALIDATE_WORLD:
        raise UsageError(f"--world-size {world}: the distributed validator runs 2 to {MAX_VALIDATE_WORLD} processes")
    if steps < 1:
        raise UsageError(f"--steps must be >= 1 (got {steps})")
    context = mp.get_context("spawn")
    queue = context.SimpleQueue()
    port = free_port()
    job = (target, list(inputs), options, max(1, warmup), steps, port, timeout)
    started = time.perf_counter()
    processes = mp.start_processes(_rank_main, args=(world, job, queue), nprocs=world, join=False,
                                   start_method="spawn")
    try:
        _wait(processes, queue, timeout, started)
    finally:
        _kill_survivors(processes)
    results = {}
    while not queue.empty():
        rank, payload = queue.get()
        results[rank] = payload
    failures = {rank: p for rank, p in results.items() if "error" in p}
    if failures:
        rank = min(failures)
        raise TargetError(f"rank {rank} of the {world}-process gloo run failed: {failures[rank]['error']}")
    if 0 not in results:
        raise TargetError(f"the {world}-process gloo run ended without rank 0's measurement")
    found = results[0]
    gaps = {"cpu_peak": PROFILER_GAP} if options.parallel in ENGINES_WITH_PROFILER_GAP else {}
    return CpuMeasurement(peak_allocator_bytes=found["peak"], peak_tensor_bytes=found["tensor_peak"],
                          step_peaks=found["step_peaks"], baseline_bytes=found["baseline"],
                          memory_events=found["events"], seconds=time.perf_counter() - started,
                          unmeasured=gaps)


def _wait(processes, queue, timeout: float, started: float) -> None:
    """Join every rank until ``timeout`` seconds after ``started``; TargetError when the time is up or a rank dies."""
    while True:
        left = timeout - (time.perf_counter() - started)
        if left <= 0:
            raise TargetError(f"the gloo run passed {timeout:g} s; every rank was stopped")
        try:
            if processes.join(timeout=min(left, 1.0)):
                return
        except Exception as exc:  # noqa: BLE001 - a rank exited with an error (ProcessRaisedException / ProcessExitedException)
            if not queue.empty():
                return  # the rank reported its own error through the queue
            raise TargetError(f"a rank of the gloo run failed: {one_line(exc)}") from None
        if all(not process.is_alive() for process in processes.processes):
            # every rank has exited, but join() waits on their sentinel pipes, which a process the
            # workload forked may still hold open: decide from the exit codes (waitpid) instead
            failed = [(rank, process.exitcode) for rank, process in enumerate(processes.processes) if process.exitcode]
            if failed and queue.empty():
                rank, code = failed[0]
                raise TargetError(f"rank {rank} of the gloo run exited with code {code}")
            return


def _kill_survivors(processes) -> None:
    """Kill every rank still running.  What a rank forked is in the command's process group, which
    ``memlint validate`` kills when it ends (memlint.integrate.isolated_command)."""
    for process in processes.processes:
        if process.is_alive():
            process.kill()
    for process in processes.processes:
        process.join(timeout=5)


def _rank_main(rank: int, world: int, job, queue) -> None:
    """One rank (a spawned process): gloo on 127.0.0.1, the engine-wrapped step, rank 0 measures."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # loopback only
    try:
        payload = _run_rank(rank, world, job)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, one line
        payload = {"error": one_line(exc) if isinstance(exc, Exception) else type(exc).__name__,
                   "where": traceback.format_exc(limit=3)}
    if rank == 0 or "error" in payload:
        queue.put((rank, payload))


def _run_rank(rank: int, world: int, job) -> dict:
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415
    from torch.profiler import record_function  # noqa: PLC0415

    from memlint.estimate.distributed import RANK_INTRA_OP_THREADS, report_resizes  # noqa: PLC0415
    from memlint.validate.cpu import MEASURED_RANGE, _run_step, memory_profile  # noqa: PLC0415

    target, inputs, options, warmup, steps, port, timeout = job
    torch.set_num_threads(RANK_INTRA_OP_THREADS)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=timeout))
    try:
        torch.manual_seed(0)
        tensor_peak = 0
        with memory_profile() as profiled:
            step = _prepare_rank(target, inputs, options)
            for _ in range(warmup):
                _run_step(step)
            for index in range(steps):
                ledger = _ShardLedger()
                ledger.track_state(step)
                with record_function(f"{MEASURED_RANGE}_{index}"), report_resizes(ledger, device_type=None):
                    _run_step(step, ledger)
                tensor_peak = max(tensor_peak, ledger.peak)
            dist.barrier()
            del step
        windows = [profiled.window_peak(*profiled.ranges[f"{MEASURED_RANGE}_{i}"]) for i in range(steps)]
        peaks = [peak for peak, _ in windows]
        return {"peak": max(peaks), "tensor_peak": tensor_peak, "step_peaks": peaks, "baseline": windows[0][1],
                "events": len(profiled.timeline)}
    finally:
        dist.destroy_process_group()


def _prepare_rank(target: str, inputs, options):
    """The real workload on CPU wrapped by the engine of ``options.parallel``; a PreparedStep that calls the engine."""
    import torch  # noqa: PLC0415

    from memlint.estimate.distributed import DDP_DEFAULT_BUCKET_CAP_MB, apply_fully_shard  # noqa: PLC0415
    from memlint.validate.runner import CAST_DTYPES, load_real_workload, prepare_step  # noqa: PLC0415

    workload = load_real_workload(target, inputs, options.batch_size, "cpu")
    module = workload.module
    cast = CAST_DTYPES.get(options.precision)
    if cast:
        module.to(getattr(torch, cast))
    if options.parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel  # noqa: PLC0415

        cap = options.bucket_cap_mb if options.bucket_cap_mb is not None else DDP_DEFAULT_BUCKET_CAP_MB
        engine = DistributedDataParallel(module, bucket_cap_mb=cap,
                                         gradient_as_bucket_view=options.gradient_as_bucket_view)
    elif options.parallel in ("tp", "fsdp+tp"):
        from memlint.estimate import tensor_parallel as tp  # noqa: PLC0415

        micro_batch = (options.batch_size or workload.default_batch_size) // options.grad_accum
        plan = tp.plan_of_real_module(module, workload.make_inputs(micro_batch), workload.name)
        tp.shard_module(module, plan, options, tp.device_mesh(options))
        engine = module
    else:
        from torch.distributed.device_mesh import init_device_mesh  # noqa: PLC0415

        apply_fully_shard(module, options, init_device_mesh("cpu", (options.world_size,)))
        engine = module
    step = prepare_step(workload, options, "cpu")
    step.module = engine
    return step


class _ShardLedger:
    """memlint.validate.cpu.StorageLedger for an engine-wrapped run.

    A DTensor counts by its local shard; a storage resized in place
    (``UntypedStorage.resize_``: FSDP2's unsharded parameters) changes size in the
    ledger; at the step's start every CPU tensor reachable from Python is counted
    (the engines keep buffers across steps: FSDP2's retained reduce-scatter
    inputs).  Its frees come from storage finalizers, which run on whichever
    thread drops the last reference -- unlike the profiler's memory events,
    which miss frees on gloo's worker threads (docs/validator.md).
    """

    def __new__(cls):
        from memlint.validate.cpu import StorageLedger  # noqa: PLC0415

        class ShardLedger(StorageLedger):
            def track(self, tensor) -> None:
                local = getattr(tensor, "_local_tensor", None)
                super().track(local if local is not None else tensor)

            def resized(self, storage) -> None:
                import weakref  # noqa: PLC0415

                key = storage._cdata
                if key not in self.live:
                    if storage.nbytes() == 0:
                        return
                    weakref.finalize(storage, self._free, key)
                    self.live[key] = 0
                self.total += storage.nbytes() - self.live[key]
                self.live[key] = storage.nbytes()
                self.peak = max(self.peak, self.total)

            def track_state(self, step) -> None:
                import gc  # noqa: PLC0415
                import warnings  # noqa: PLC0415

                import torch  # noqa: PLC0415

                super().track_state(step)
                with warnings.catch_warnings():  # isinstance() on every object touches deprecated module attributes
                    warnings.simplefilter("ignore")
                    for obj in gc.get_objects():
                        if isinstance(obj, torch.Tensor) and obj.device.type == "cpu":
                            self.track(obj)

        return ShardLedger()


def check_validate_parallel(options, device: str) -> None:
    """UsageError unless ``--parallel`` is validated where it can be: on the CPU, 2..8 ranks."""
    if options.parallel is None:
        return
    if device != "cpu":
        raise UsageError("--parallel is validated with --device cpu (a real gloo run on this machine)")
    if not 2 <= options.world_size <= MAX_VALIDATE_WORLD:
        raise UsageError(f"--world-size {options.world_size}: the distributed validator runs 2 to "
                         f"{MAX_VALIDATE_WORLD} processes")

