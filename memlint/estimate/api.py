"""Public API of the estimator: ``estimate(workload, options) -> Estimate`` and friends.

All sizes are bytes (GiB = 2**30).  See docs/estimator.md for the method and
the JSON schema of :meth:`Estimate.to_json`.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from memlint.errors import UsageError
from memlint.estimate import placement
from memlint.estimate.allocator import AllocatorOOM, CachingAllocatorModel, CpuAllocatorModel
from memlint.estimate.overheads import CUDNN_LIBRARY
from memlint.estimate.search import Probe, largest_fitting
from memlint.estimate.step import OPTIMIZER_NAMES, PRECISIONS, TRANSFORMERS_OPTIMIZERS
from memlint.estimate.target import DEFAULT_CC, Target, resolve_gpu, resolve_target
from memlint.estimate.tracer import CATEGORIES, Ledger
from memlint.estimate.units import parse_bytes

SCHEMA_VERSION = 2
#: Steps traced by default: one warm-up step and two measured ones.  With the
#: allocator model the peaks of all 40 configurations of the fixtures and the
#: transformers models settle after step 1 and do not change over steps 1-5
#: (measured: tests/benchmarks/settle_steps.py, docs/estimator.md "Steady state");
#: the second measured step is margin.
DEFAULT_STEPS = 3
__all__ = ["DEFAULT_CC", "DEFAULT_STEPS", "Estimate", "EstimateOptions", "Verdict", "estimate", "fits",
           "max_batch_size", "resolve_capacity", "resolve_gpu", "Probe", "largest_fitting"]


@dataclass
class EstimateOptions:
    """Training configuration of the traced step.

    batch_size: global batch per rank (None -> the workload's default_batch_size).
    optimizer: one of sgd, sgd-momentum, adam, adamw, adagrad, rmsprop, adafactor
        (transformers' class), or None (the workload's own optimizer_factory,
        traced through its real step()).
    precision: fp32, amp-fp16, amp-bf16 (CUDA autocast emulated during the trace),
        bf16, fp16 (model and floating inputs cast).
    checkpointing: activation checkpointing of repeated blocks (non-reentrant).
    grad_accum: N micro-batches of batch_size // N, then one optimizer step.
    set_to_none: ``zero_grad(set_to_none=...)``; False keeps gradients allocated between steps.
    world_size, zero_stage: ZeRO sharding per rank -- stage >= 1 divides optimizer
        state, >= 2 gradients, 3 parameters by world_size.
    gpu: catalog name or "auto"; its compute capability drives kernel choices
        (SDPA backend, cuBLAS workspace) and device overheads.
    device: "cuda" (a GPU) or "cpu" (CPU kernels, the CPU allocator: no rounding, no cache).
    cuda: the modelled CUDA version "MAJOR.MINOR" (None: the installed torch's, else the newest known).
    cuda_context: bytes of a measured CUDA context, replacing the modelled one (None: modelled).
    steps: training steps traced (None: :data:`DEFAULT_STEPS`); the first is a
        warm-up, peaks are over the rest.
    step_in_backward: one optimizer per parameter stepped in a post-accumulate-grad hook.
    offload_activations: ``torch.autograd.graph.save_on_cpu`` around the forward.
    torch_version: replay an older torch's known memory differences (None: the modelled torch;
        :mod:`memlint.estimate.torch_versions`), for published measurements.
    parallel: None, or "ddp" / "fsdp": rank 0 of ``world_size`` ranks traced through the real
        engine on a fake process group (:mod:`memlint.estimate.distributed`); then
        bucket_cap_mb, gradient_as_bucket_view (DDP) and reshard_after_forward,
        fsdp_param_dtype (MixedPrecisionPolicy param_dtype: bf16/fp16), fsdp_cpu_offload (FSDP2) apply.
        "tp": tensor parallel over ``world_size`` ranks; "fsdp+tp": a (world_size / tp_size, tp_size)
        mesh, tensor parallel on "tp", FSDP2 on "dp" (:mod:`memlint.estimate.tensor_parallel`).
    """

    batch_size: int | None = None
    optimizer: str | None = None
    precision: str = "fp32"
    checkpointing: bool = False
    grad_accum: int = 1
    set_to_none: bool = True
    world_size: int = 1
    zero_stage: int = 0
    gpu: str | None = None
    device: str = "cuda"
    cuda: str | None = None
    cuda_context: int | None = None
    steps: int | None = None
    step_in_backward: bool = False
    offload_activations: bool = False
    torch_version: str | None = None
    parallel: str | None = None
    bucket_cap_mb: float | None = None
    gradient_as_bucket_view: bool = False
    reshard_after_forward: bool = True
    fsdp_param_dtype: str | None = None
    fsdp_cpu_offload: bool = False
    tp_size: int | None = None

    @property
    def trace_steps(self) -> int:
        """Steps the trace runs (``steps`` or :data:`DEFAULT_STEPS`)."""
        return self.steps if self.steps is not None else DEFAULT_STEPS

    def validate(self) -> None:
        """Raise UsageError (one line) for an invalid option."""
        names = OPTIMIZER_NAMES + TRANSFORMERS_OPTIMIZERS
        if self.optimizer is not None and self.optimizer not in names:
            raise UsageError(f"unknown optimizer {self.optimizer!r}; choose from {', '.join(names)}")
        if self.precision not in PRECISIONS:
            raise UsageError(f"unknown precision {self.precision!r}; choose from {', '.join(PRECISIONS)}")
        if self.batch_size is not None and self.batch_size < 1:
            raise UsageError(f"--batch-size must be >= 1 (got {self.batch_size})")
        if self.grad_accum < 1:
            raise UsageError(f"--grad-accum must be >= 1 (got {self.grad_accum})")
        if self.world_size < 1:
            raise UsageError(f"--world-size must be >= 1 (got {self.world_size})")
        if self.zero_stage not in (0, 1, 2, 3):
            raise UsageError(f"--zero-stage must be 0, 1, 2 or 3 (got {self.zero_stage})")
        if self.steps is not None and self.steps < 2:
            raise UsageError(f"--steps must be >= 2: one warm-up step and at least one measured (got {self.steps})")
        if self.device not in ("cuda", "cpu"):
            raise UsageError(f"--device {self.device!r}: choose cuda or cpu")
        if self.tp_size is not None and self.parallel != "fsdp+tp":
            raise UsageError(f"--tp-size {self.tp_size} needs --parallel fsdp+tp")
        from memlint.estimate.distributed import check_parallel_options  # noqa: PLC0415

        check_parallel_options(self)  # also refuses an engine option given without its engine

    def target(self) -> Target:
        """The :class:`memlint.estimate.target.Target` these options describe (UsageError for a bad one)."""
        import torch  # noqa: PLC0415

        return resolve_target(self.device, self.gpu, self.cuda, self.cuda_context, torch.version.cuda,
                              self.torch_version)


@dataclass
class Timeline:
    """Live bytes after each alloc/free event of the trace.

    op_index[i]: index of the aten op at event i; phase[i]/step[i]: its phase and step;
    by_category[c][i]: unrounded live bytes of category c; allocated[i]/reserved[i]:
    the allocator model's counters (bytes).  ``phases``: (op_index, phase, step) changes.
    """

    op_index: list[int] = field(default_factory=list)
    phase: list[str] = field(default_factory=list)
    step: list[int] = field(default_factory=list)
    by_category: dict[str, list[int]] = field(default_factory=lambda: {c: [] for c in CATEGORIES})
    allocated: list[int] = field(default_factory=list)
    reserved: list[int] = field(default_factory=list)
    phases: list[tuple[int, str, int]] = field(default_factory=list)

    def downsample(self, max_points: int = 2000) -> dict:
        """JSON-ready dict with at most ``max_points`` points (keeps each window's maximum)."""
        n = len(self.op_index)
        stride = max(1, math.ceil(n / max_points))
        picks = []
        for start in range(0, n, stride):
            window = range(start, min(n, start + stride))
            picks.append(max(window, key=lambda i: self.allocated[i]))
        return {
            "op_index": [self.op_index[i] for i in picks],
            "phase": [self.phase[i] for i in picks],
            "step": [self.step[i] for i in picks],
            "by_category": {c: [v[i] for i in picks] for c, v in self.by_category.items()},
            "allocated": [self.allocated[i] for i in picks],
            "reserved": [self.reserved[i] for i in picks],
            "phases": [list(p) for p in self.phases],
        }


@dataclass
class Estimate:
    """Result of :func:`estimate` (bytes throughout; per rank when world_size > 1).

    peak_allocated: ``torch.cuda.max_memory_allocated()`` over the measured steps
        (on the CPU target: the CPU allocator's peak, every byte asked for).
    peak_reserved: ``torch.cuda.max_memory_reserved()`` (allocator model; = peak_allocated on the CPU).
    device_used: what NVML / nvidia-smi shows: peak_reserved + overheads (= peak_allocated on the CPU).
    peak_tensor_bytes: peak of the unrounded bytes of live tensor storages (library
        workspaces and kernel scratch excluded): what the tensors themselves hold.
    by_category: unrounded bytes per category at the peak_allocated instant.
    by_module: activation bytes per module FQN (first micro-batch of the first measured step).
    overheads: the non-allocator parts of device_used, each {bytes, source, modelled}.
    memory_stats: the allocator model's counters under ``torch.cuda.memory_stats()`` names.
    fragmentation_bytes: reserved - allocated at the peak_allocated instant.
    unsupported_ops: [{op, module, fallback, count}] -- ops traced with a fallback.
    unmodelled: [{kernel, module, count}] -- kernels whose memory is not (fully) modelled.
    communication: with ``options.parallel``, rank 0's collectives of one measured step
        (:meth:`memlint.estimate.distributed.Communication.to_json`); None otherwise.
    tensor_parallel: with ``--parallel tp|fsdp+tp``, the plan traced ({source, styles, skipped},
        :meth:`memlint.estimate.tensor_parallel.TPPlan.to_json`); None otherwise.
    devices: when the workload places tensors on more than one CUDA device
        (:mod:`memlint.estimate.placement`), each device's
        :meth:`~memlint.estimate.placement.DeviceMemory.to_json`, from its own
        allocator replay plus its own CUDA context; the verdict uses the largest
        device_used. Then the top-level numbers count every device in one ledger
        (one allocator, one context). [] for one device.
    ledger: the raw tracer.Ledger (storage records and alloc/free events).
    """

    peak_allocated: int
    peak_reserved: int
    device_used: int
    peak_tensor_bytes: int
    by_category: dict[str, int]
    by_module: dict[str, int]
    timeline: Timeline
    unsupported_ops: list[dict]
    gpu: str | None
    compute_capability: tuple[int, int]
    options: EstimateOptions
    overheads: dict[str, dict] = field(default_factory=dict)
    workload: str = ""
    batch_size: int = 1
    micro_batch: int = 1
    checkpointed: list[str] = field(default_factory=list)
    optimizer: str = ""
    num_ops: int = 0
    trace_seconds: float = 0.0
    kernel_choices: dict[str, int] = field(default_factory=dict)
    unmodelled: list[dict] = field(default_factory=list)
    memory_stats: dict[str, int] = field(default_factory=dict)
    fragmentation_bytes: int = 0
    target: str = ""
    step_peaks: list[dict] = field(default_factory=list)
    flops: int | None = None
    communication: dict | None = None
    tensor_parallel: dict | None = None
    devices: list[dict] = field(default_factory=list)
    ledger: Any = field(default=None, repr=False, compare=False)

    @property
    def activation_bytes(self) -> int:
        """Total activation bytes of one micro-batch's forward (sum of ``by_module``)."""
        return sum(self.by_module.values())

    def to_json(self, max_points: int = 2000) -> dict:
        """The documented JSON document (schema_version 2, see docs/estimator.md); ``devices`` only when
        more than one device is used."""
        top = sorted(self.by_module.items(), key=lambda kv: -kv[1])
        document = {
            "schema_version": SCHEMA_VERSION,
            "workload": self.workload,
            "target": self.target,
            "gpu": self.gpu,
            "compute_capability": list(self.compute_capability),
            "options": asdict(self.options),
            "batch_size": self.batch_size,
            "micro_batch": self.micro_batch,
            "optimizer": self.optimizer,
            "checkpointed_blocks": self.checkpointed,
            "peak_allocated": self.peak_allocated,
            "peak_reserved": self.peak_reserved,
            "device_used": self.device_used,
            "peak_tensor_bytes": self.peak_tensor_bytes,
            "fragmentation_bytes": self.fragmentation_bytes,
            "memory_stats": self.memory_stats,
            "by_category": dict(self.by_category),
            "by_module": [{"module": m, "activation_bytes": b} for m, b in top],
            "overheads": self.overheads,
            "unsupported_ops": self.unsupported_ops,
            "unmodelled": self.unmodelled,
            "activation_bytes": self.activation_bytes,
            "kernel_choices": self.kernel_choices,
            "step_peaks": self.step_peaks,
            "flops": self.flops,
            "communication": self.communication,
            "tensor_parallel": self.tensor_parallel,
            "num_ops": self.num_ops,
            "trace_seconds": round(self.trace_seconds, 3),
            "timeline": self.timeline.downsample(max_points),
        }
        if self.devices:
            document["devices"] = self.devices
        return document


@dataclass
class Verdict:
    """Fit verdict: required vs usable = capacity * (1 - reserve); bytes.

    required_bytes is ``device_used``, except when that exceeds the usable memory
    but the step still runs once the caching allocator releases its fully free
    cached segments (as it does before raising out-of-memory): then it is the
    device memory of that constrained replay and ``cache_released`` is True.
    headroom_bytes may be negative; headroom_fraction = headroom_bytes / capacity_bytes.
    """

    fits: bool
    required_bytes: int
    capacity_bytes: int
    usable_bytes: int
    reserve: float
    headroom_bytes: int
    headroom_fraction: float
    cache_released: bool = False

    def to_json(self) -> dict:
        return asdict(self)


#: Largest device capacity accepted: 2**50 bytes (1 PiB, thousands of times the
#: largest GPU; the bound of memlint.estimate.cli.MAX_INPUT_BYTES).
MAX_CAPACITY_BYTES = 2**50


def resolve_capacity(gpu: str | None = None, capacity: str | int | None = None) -> tuple[str | None, int | None]:
    """(name, bytes) of the target: ``capacity`` ("24GiB") wins over ``gpu`` (catalog name or "auto").

    Returns (None, None) when neither is given.  Raises UsageError.
    """
    spec = resolve_gpu(gpu)
    if capacity is not None:
        size = parse_bytes(capacity)
        if size > MAX_CAPACITY_BYTES:
            raise UsageError(f"capacity {capacity!r}: more than 2**50 bytes (1 PiB), beyond any device")
        return (spec.name if spec else "custom", size)
    if spec is None:
        return (None, None)
    return (spec.name, spec.memory_total)


def _shard_factor(category: str, options: EstimateOptions) -> int:
    stage = options.zero_stage
    if options.world_size <= 1 or stage == 0:
        return 1
    if category == "optimizer_state" and stage >= 1:
        return options.world_size
    if category == "gradient" and stage >= 2:
        return options.world_size
    if category == "parameter" and stage >= 3:
        return options.world_size
    return 1


@dataclass
class Replay:
    """What replaying the ledger's events through an allocator model gives (bytes).

    allocator: the model after the replay; peak_tensor: unrounded peak of tensor
    storages (workspace category excluded); snapshot: unrounded bytes per
    category at the peak_allocated instant; fragmentation: reserved - allocated
    at that instant; step_peaks: per step {step, allocated, reserved} peaks.
    """

    allocator: Any
    peak_tensor: int
    snapshot: dict[str, int]
    fragmentation: int
    timeline: Timeline
    step_peaks: list[dict]


def _replay(ledger: Ledger, options: EstimateOptions, limit: int | None = None, cpu: bool = False) -> Replay:
    """Replay the ledger's events through the allocator model, peaks reset when step 1 begins.

    limit: bytes the allocator may reserve (raises AllocatorOOM beyond it), None = unbounded.
    cpu: the CPU allocator model instead of the CUDA caching allocator.
    """
    allocator = CpuAllocatorModel(limit=limit) if cpu else CachingAllocatorModel(limit=limit)
    steady_start = next((op for op, phase, step in ledger.phases if step == 1), 0)
    live = {c: 0 for c in CATEGORIES}
    blocks: dict[int, Any] = {}
    timeline = Timeline(phases=list(ledger.phases))
    phase_at = _phase_lookup(ledger.phases)
    result = Replay(allocator, 0, dict(live), 0, timeline, [])
    per_step: dict[int, dict] = {}
    reset_done = False
    for op_index, sid, is_alloc in ledger.events:
        if not reset_done and op_index >= steady_start:
            allocator.reset_peaks()
            result.peak_tensor = sum(live.values()) - live["workspace"]
            result.snapshot = dict(live)
            result.fragmentation = allocator.reserved - allocator.allocated
            reset_done = True
        record = ledger.records[sid]
        nbytes = -(-record.nbytes // _shard_factor(record.category, options))
        if is_alloc:
            blocks[sid] = allocator.malloc(nbytes)
            live[record.category] += nbytes
        else:
            allocator.free(blocks.pop(sid, None))
            live[record.category] -= nbytes
        phase, step = phase_at(op_index)
        _note_step(per_step, step, allocator)
        if reset_done:
            result.peak_tensor = max(result.peak_tensor, sum(live.values()) - live["workspace"])
            if allocator.allocated >= allocator.peak_allocated:
                result.snapshot = dict(live)
                result.fragmentation = allocator.reserved - allocator.allocated
        _add_point(timeline, op_index, phase, step, live, allocator)
    result.step_peaks = [per_step[s] for s in sorted(per_step)]
    return result


def _note_step(per_step: dict, step: int, allocator) -> None:
    entry = per_step.setdefault(step, {"step": step, "allocated": 0, "reserved": 0})
    entry["allocated"] = max(entry["allocated"], allocator.allocated)
    entry["reserved"] = max(entry["reserved"], allocator.reserved)


def _add_point(timeline: Timeline, op_index: int, phase: str, step: int, live: dict, allocator) -> None:
    timeline.op_index.append(op_index)
    timeline.phase.append(phase)
    timeline.step.append(step)
    for category in CATEGORIES:
        timeline.by_category[category].append(live[category])
    timeline.allocated.append(allocator.allocated)
    timeline.reserved.append(allocator.reserved)


def _phase_lookup(phases):
    import bisect  # noqa: PLC0415

    starts = [p[0] for p in phases]

    def lookup(op_index: int):
        i = bisect.bisect_right(starts, op_index) - 1
        return (phases[i][1], phases[i][2]) if i >= 0 else ("setup", 0)

    return lookup


def _by_module(ledger: Ledger) -> dict[str, int]:
    totals: dict[str, int] = {}
    for record in ledger.records.values():
        if record.category == "activation" and record.step == 1 and record.micro == 0:
            totals[record.module or "<root>"] = totals.get(record.module or "<root>", 0) + record.nbytes
    return totals


def _overheads(target: Target, ledger: Ledger, choices: dict) -> dict[str, dict]:
    """The parts of device_used outside the caching allocator (CUDA targets), each with its source."""
    if not target.is_cuda:
        return {}
    overheads = {"cuda_context": target.context.to_json()}
    uses_cudnn = any(key.startswith(("rnn:cudnn", "sdpa:cudnn")) for key in choices) or any(
        "cuDNN convolution" in what for what, _ in ledger.unmodelled)
    if uses_cudnn:
        overheads["cudnn"] = CUDNN_LIBRARY.to_json()
    workspace = target.cublas_workspace * len(ledger.workspace_threads)
    overheads["cublas_workspace"] = {
        "bytes": 0, "included_in_reserved": workspace, "modelled": True,
        "source": "aten/src/ATen/cuda/CublasHandlePool.cpp: allocated through the caching allocator"}
    return overheads


def estimate(workload, options: EstimateOptions | None = None, count_flops: bool = False) -> "Estimate":
    """Trace ``options.trace_steps`` training steps of ``workload`` on meta and predict its memory (bytes).

    The workload is traced as it is, hooks included (a fresh build from
    ``workload.factory`` when it has one).  count_flops: count the FLOPs of the
    trace with the formulas of ``torch.utils.flop_counter`` (``Estimate.flops``, per step).
    Raises UsageError for invalid options, TargetError when the workload cannot be traced.
    """
    from memlint.estimate.step import trace_training  # noqa: PLC0415

    options = options or EstimateOptions()
    options.validate()
    target = options.target()
    workload = workload.fresh()
    ledger = Ledger(count_flops=count_flops)
    if options.parallel is not None:
        from memlint.estimate.distributed import trace_distributed as trace_training  # noqa: PLC0415
    placement.check_not_distributed(workload.module, options)
    started = time.perf_counter()
    facts = trace_training(workload, options, ledger, target)
    elapsed = time.perf_counter() - started
    replay = _replay(ledger, options, cpu=not target.is_cuda)
    allocator = replay.allocator
    overheads = _overheads(target, ledger, facts["kernel_choices"])
    overhead_bytes = sum(o["bytes"] for o in overheads.values())
    device_used = allocator.peak_reserved + overhead_bytes
    devices = placement.per_device(ledger, options, overhead_bytes, cpu=not target.is_cuda)
    flops = ledger.flops // options.trace_steps if count_flops else None
    return Estimate(
        peak_allocated=allocator.peak_allocated,
        peak_reserved=allocator.peak_reserved,
        device_used=device_used,
        peak_tensor_bytes=replay.peak_tensor,
        by_category=replay.snapshot,
        by_module=_by_module(ledger),
        timeline=replay.timeline,
        unsupported_ops=[asdict(u) for u in ledger.unsupported.values()],
        gpu=target.gpu.name if target.gpu else None,
        compute_capability=target.compute_capability,
        options=options,
        overheads=overheads,
        workload=workload.name,
        batch_size=facts["batch_size"],
        micro_batch=facts["micro_batch"],
        checkpointed=facts["checkpointed"],
        optimizer=facts["optimizer"],
        num_ops=ledger.op_index,
        kernel_choices=facts["kernel_choices"],
        unmodelled=facts["unmodelled"],
        memory_stats=allocator.memory_stats(),
        fragmentation_bytes=replay.fragmentation,
        target=target.describe(),
        step_peaks=replay.step_peaks,
        flops=flops,
        communication=facts.get("communication"),
        tensor_parallel=facts.get("tp_plan"),
        devices=[d.to_json() for d in devices],
        ledger=ledger,
        trace_seconds=elapsed,
    )


def fits(result: Estimate, capacity_bytes: int, reserve: float = 0.10) -> Verdict:
    """Does the step fit in ``capacity_bytes * (1 - reserve)``? (see :class:`Verdict`)"""
    usable = int(capacity_bytes * (1.0 - reserve))
    required = result.device_used
    released = False
    cpu = result.options.device == "cpu"
    if result.devices:  # placed on several devices: the one that needs the most decides
        required, released, _ = placement.largest_requirement(result, usable)
    elif required > usable and result.ledger is not None and not cpu:
        overhead = result.device_used - result.peak_reserved
        if usable - overhead > 0:
            try:
                allocator = _replay(result.ledger, result.options, limit=usable - overhead).allocator
            except AllocatorOOM:
                pass
            else:
                required, released = allocator.peak_reserved + overhead, True
    headroom = usable - required
    return Verdict(
        fits=headroom >= 0,
        cache_released=released,
        required_bytes=required,
        capacity_bytes=int(capacity_bytes),
        usable_bytes=usable,
        reserve=reserve,
        headroom_bytes=headroom,
        headroom_fraction=headroom / capacity_bytes if capacity_bytes else 0.0,
    )


#: Where the largest-batch search stops; an answer equal to it means "at least".
MAX_BATCH_SEARCH_LIMIT = 1 << 16


def max_batch_size(workload, options: EstimateOptions, capacity_bytes: int, reserve: float = 0.10,
                   limit: int = MAX_BATCH_SEARCH_LIMIT, progress=None) -> int:
    """Largest batch size b (a multiple of grad_accum) whose estimate fits; 0 if even the smallest does not.

    :func:`memlint.estimate.search.largest_fitting` over the number of
    micro-batches, each candidate traced (never extrapolated).  ``limit``: upper
    bound on b; progress: optional ``callable(batch)`` told of each candidate.
    """
    from dataclasses import replace  # noqa: PLC0415

    unit = options.grad_accum

    def probe(micro_batches: int) -> Probe:
        if progress:
            progress(micro_batches * unit)
        verdict = fits(estimate(workload, replace(options, batch_size=micro_batches * unit)), capacity_bytes, reserve)
        return Probe(verdict.fits, verdict.required_bytes, verdict.usable_bytes)

    return largest_fitting(probe, max(1, limit // unit)) * unit
