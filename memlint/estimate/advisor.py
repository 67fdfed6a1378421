"""The advisor: re-estimate a workload under each memory remedy, with its compute cost, and rank them.

Every remedy is applied for real in the traced step (through
:class:`~memlint.estimate.api.EstimateOptions`), never as a fixed percentage:

* ``amp-bf16`` / ``amp-fp16`` autocast -- bf16 only where the GPU has it
  (compute capability 8.0 or newer; ``torch.cuda.is_bf16_supported`` is false
  below that on CUDA 11, and below sm80 no SDPA kernel takes bf16);
* activation checkpointing of repeated blocks (the blocks wrapped are named);
* a smaller micro-batch with gradient accumulation (same global batch; the
  smallest accumulation factor that fits, else the largest tried);
* ``zero_grad(set_to_none=True)``;
* the optimizer step in backward (one optimizer per parameter stepped by
  ``register_post_accumulate_grad_hook``; needs no gradient accumulation);
* activation offload to the host (``torch.autograd.graph.save_on_cpu``; CUDA targets);
* a lighter optimizer: SGD with momentum, plain SGD, and transformers' Adafactor
  when transformers is installed (its real class is traced).  8-bit optimizers
  (bitsandbytes) have no kernel that runs on the meta device: not offered;
* ZeRO-1 / ZeRO-2 / ZeRO-3 (= FSDP full sharding) over N data-parallel ranks, per rank;
  with ``full``: DDP, FSDP2 and tensor parallel (TP over 2, 4, 8 ranks, where the model has a
  tensor parallel plan and its forward runs sharded) traced through the real engines.

Compute cost: the FLOPs of one training step, counted on the same trace with
the formulas of ``torch.utils.flop_counter`` (FlopCounterMode's table) under
each option, as a change against the baseline (checkpointing recomputes
forwards: "+X% FLOPs").
Ranking: by the device memory saved, largest first -- unless the baseline does
not fit its capacity, then by the memory each remedy needs, smallest first
(every remedy that fits before any that does not).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field, replace
from typing import Callable

from memlint.errors import TargetError
from memlint.estimate.api import Estimate, EstimateOptions, estimate, fits
from memlint.estimate.placement import largest_device_used

#: Cost of each remedy, in words (sources: PyTorch AMP and torch.utils.checkpoint docs,
#: the ZeRO paper, arXiv:1910.02054, section 5, for the communication volumes).
COSTS = {
    "amp-bf16": "bf16 autocast: bf16 rounding in matmuls, usually faster",
    "amp-fp16": "fp16 autocast: needs a GradScaler (loss scaling, overflow skips); usually faster",
    "checkpointing": "recomputes each checkpointed block's forward during backward",
    "grad-accum": "same global batch in {k} micro-batches of {micro}: more, smaller kernels (lower throughput); "
                  "BatchNorm sees micro-batches",
    "set-to-none": "none (zero_grad(set_to_none=True) is PyTorch's default); code reading .grad must handle None",
    "step-in-backward": "no gradient accumulation or clipping over all gradients; one optimizer per parameter",
    "offload": "every saved activation copied to the host and back: PCIe traffic each step, slower",
    "sgd-momentum": "one state tensor per parameter instead of Adam's two: different dynamics, re-tune the learning rate",
    "sgd": "no optimizer state: slower convergence for transformers, re-tune the learning rate",
    "adafactor": "factored second moments (Adafactor): may converge slower than Adam, re-tune",
    "zero-1": "needs {n} GPUs; optimizer state sharded: same communication as DDP",
    "zero-2": "needs {n} GPUs; optimizer state + gradients sharded: same communication as DDP (reduce-scatter)",
    "zero-3": "needs {n} GPUs; parameters sharded too (FSDP FULL_SHARD): ~1.5x DDP communication, "
              "all-gathers each forward/backward",
}
#: Remedies considered but not offered, with why (shown under the advisor's table).
NOT_OFFERED = {
    "8-bit optimizer": "bitsandbytes' 8-bit optimizers have no kernel that runs on the meta device",
}


@dataclass
class Remedy:
    """One advisor row, in bytes: ``device_used`` and ``saved`` (of device_used; may be negative),
    ``saved_allocated`` (of peak_allocated), ``required_bytes`` (what the fit verdict counts: device_used,
    or less when cached segments can be released), ``flops`` (per step) and ``flops_change`` (fraction
    against the baseline, None when not counted), ``checkpointed`` (blocks wrapped)."""

    key: str
    title: str
    options: EstimateOptions
    device_used: int
    saved: int
    fits: bool | None
    cost: str
    saved_allocated: int = 0
    required_bytes: int = 0
    flops: int | None = None
    flops_change: float | None = None
    checkpointed: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"remedy": self.key, "title": self.title, "device_used": self.device_used, "saved": self.saved,
                "saved_allocated": self.saved_allocated, "required_bytes": self.required_bytes, "fits": self.fits,
                "cost": self.cost, "flops": self.flops, "flops_change": self.flops_change,
                "checkpointed_blocks": self.checkpointed}


def _supports_bf16(base: Estimate) -> bool:
    return base.options.device == "cpu" or base.compute_capability >= (8, 0)


def _precision_rows(base: Estimate) -> list:
    opts = base.options
    if opts.precision != "fp32":
        return []
    rows = []
    if _supports_bf16(base):
        rows.append(("amp-bf16", "autocast bf16", replace(opts, precision="amp-bf16"), COSTS["amp-bf16"]))
    if opts.device == "cuda":
        rows.append(("amp-fp16", "autocast fp16 + GradScaler", replace(opts, precision="amp-fp16"), COSTS["amp-fp16"]))
    return rows


def _memory_layout_rows(base: Estimate, full: bool = True) -> list:
    opts = base.options
    rows = []
    if not opts.checkpointing:
        rows.append(("checkpointing", "activation checkpointing", replace(opts, checkpointing=True),
                     COSTS["checkpointing"]))
    batch = base.batch_size
    factors = [k for k in (2, 4, 8, 16, 32, 64) if opts.grad_accum * k <= batch and batch % (opts.grad_accum * k) == 0]
    if factors:
        tries = [replace(opts, batch_size=batch, grad_accum=opts.grad_accum * k) for k in factors]
        rows.append(("grad-accum", "smaller micro-batch + gradient accumulation", tries, COSTS["grad-accum"]))
    if not opts.set_to_none:
        rows.append(("set-to-none", "zero_grad(set_to_none=True)", replace(opts, set_to_none=True),
                     COSTS["set-to-none"]))
    if not full:
        return rows
    if opts.grad_accum == 1 and not opts.step_in_backward and opts.world_size == 1 and opts.parallel is None:
        rows.append(("step-in-backward", "optimizer step in backward (post-accumulate-grad hooks)",
                     replace(opts, step_in_backward=True), COSTS["step-in-backward"]))
    if opts.device == "cuda" and not opts.offload_activations and opts.parallel is None:  # not with an engine
        rows.append(("offload", "activation offload to the host (save_on_cpu)",
                     replace(opts, offload_activations=True), COSTS["offload"]))
    return rows


def _optimizer_rows(base: Estimate, full: bool = True) -> list:
    opts = base.options
    current = (opts.optimizer or base.optimizer or "").lower()
    rows = []
    if current in ("sgd",):
        return rows
    if current != "sgd-momentum":
        rows.append(("sgd-momentum", "SGD with momentum", replace(opts, optimizer="sgd-momentum"),
                     COSTS["sgd-momentum"]))
    rows.append(("sgd", "plain SGD", replace(opts, optimizer="sgd"), COSTS["sgd"]))
    if full and current != "adafactor" and importlib.util.find_spec("transformers") is not None:
        rows.append(("adafactor", "Adafactor (transformers)", replace(opts, optimizer="adafactor"), COSTS["adafactor"]))
    return rows


def _sharding_rows(base: Estimate, world_size: int) -> list:
    opts = base.options
    rows = []
    if world_size <= 1 or opts.parallel is not None:  # already sharded by an engine: its own rows
        return rows
    for stage in (1, 2, 3):
        if opts.world_size >= world_size and opts.zero_stage >= stage:
            continue
        title = f"ZeRO-{stage} over {world_size} ranks" + (" (FSDP full shard)" if stage == 3 else "")
        rows.append((f"zero-{stage}", title, replace(opts, world_size=world_size, zero_stage=stage),
                     COSTS[f"zero-{stage}"].format(n=world_size)))
    return rows


#: Tensor parallel degrees of the advisor's TP rows (issue 16; TP beyond one node's 8 GPUs is rare).
TP_ADVISOR_DEGREES = (2, 4, 8)
#: World sizes of the advisor's FSDP rows (issue 16: FSDP at 2 to 64 ranks; three traces keep --advise quick).
FSDP_ADVISOR_WORLDS = (2, 8, 64)


def _engine_sharding_rows(base: Estimate, world_size: int) -> list:
    """DDP over ``world_size`` ranks and FSDP2 at 2..64 ranks, each traced through the real engine
    (memlint/estimate/distributed.py); their cost line comes from the trace's collectives."""
    opts = base.options
    if world_size <= 1 or opts.parallel is not None or opts.zero_stage or opts.step_in_backward \
            or opts.offload_activations or base.devices:  # placed on several devices: no engine (placement.py)
        return []
    rows = [("ddp", f"DDP over {world_size} ranks (replicas: the data-parallel baseline)",
             replace(opts, parallel="ddp", world_size=world_size), "")]
    for ranks in FSDP_ADVISOR_WORLDS:
        rows.append((f"fsdp-{ranks}", f"FSDP2 full shard over {ranks} ranks",
                     replace(opts, parallel="fsdp", world_size=ranks), ""))
    for ranks in TP_ADVISOR_DEGREES:
        rows.append((f"tp-{ranks}", f"tensor parallel over {ranks} ranks (parallelize_module)",
                     replace(opts, parallel="tp", world_size=ranks), ""))
    return rows


def candidate_remedies(base: Estimate, world_size: int = 8,
                       full: bool = True) -> list[tuple[str, str, EstimateOptions | list, str]]:
    """(key, title, options or list of options to try in order, cost) for every remedy that applies to ``base``.

    full=False: the remedies of memlint 0.1 only (no step in backward, offload or Adafactor; ZeRO
    sharding as a divisor); full=True: sharding traced through DDP and FSDP2 (:func:`_engine_sharding_rows`).
    """
    sharding = _engine_sharding_rows(base, world_size) if full else _sharding_rows(base, world_size)
    return (_precision_rows(base) + _memory_layout_rows(base, full) + _optimizer_rows(base, full) + sharding)


def with_flops(workload, options: EstimateOptions) -> Estimate:
    """An estimate whose ``flops`` are counted on its own trace (``torch.utils.flop_counter`` formulas)."""
    return estimate(workload, options, count_flops=True)


def _flops_change(result: Estimate, baseline_flops: int | None) -> float | None:
    if not baseline_flops or result.flops is None:
        return None
    return (result.flops - baseline_flops) / baseline_flops


def _try(workload, tries, run, capacity_bytes, reserve):
    result = verdict = None
    for option in tries:
        result = run(workload, option)
        verdict = fits(result, capacity_bytes, reserve) if capacity_bytes else None
        if verdict is None or verdict.fits:
            break
    return result, verdict


def advise(workload, base: Estimate, capacity_bytes: int | None = None, reserve: float = 0.10,
           world_size: int = 8, run: Callable[[object, EstimateOptions], Estimate] | None = None,
           full: bool = False, skipped: dict[str, str] | None = None) -> list[Remedy]:
    """Re-estimate ``workload`` under each remedy of :func:`candidate_remedies`; ranked rows (see module docstring).

    capacity_bytes: target memory (bytes) for the fits column and the ranking (None: fits is None).
    run: the estimate function (default :func:`with_flops` when full, else ``estimate``; tests pass wrappers).
    full: every remedy, the FLOPs of each, checkpointing only where it finds blocks, and the ranking by
        the memory needed when the baseline does not fit (``memlint estimate --advise``).  False keeps
        the remedies and the ranking by memory saved of memlint 0.1 (what ``memlint check`` calls
        until it passes full=True).
    skipped: filled with {title: why} for the rows whose trace failed (a tensor parallel degree the
        model cannot run; the larger degrees are then not tried).
    """
    run = run or (with_flops if full else estimate)
    baseline_flops = base.flops if base.flops is not None else run(workload, base.options).flops
    rows: list[Remedy] = []
    tp_failed = False
    for key, title, options, cost in candidate_remedies(base, world_size, full):
        tries = options if isinstance(options, list) else [options]
        if key.startswith("tp-") and tp_failed:
            continue
        try:
            result, verdict = _try(workload, tries, run, capacity_bytes, reserve)
        except TargetError as exc:  # a remedy this model cannot run: a TP degree without a plan or not
            tp_failed = tp_failed or key.startswith("tp-")  # TP-ready; Adafactor on FSDP2's DTensors
            if skipped is not None:
                skipped[title] = str(exc)
            continue
        if key == "grad-accum":
            title = f"micro-batch {result.micro_batch} x {result.options.grad_accum} accumulation steps"
            cost = cost.format(k=result.options.grad_accum, micro=result.micro_batch)
        if result.communication and result.options.parallel != base.options.parallel:  # a sharding row
            from memlint.estimate.distributed import describe_communication  # noqa: PLC0415

            cost = describe_communication(result.communication)
        if full and key == "checkpointing" and not result.checkpointed:
            continue  # nothing to checkpoint: said under the table (see not_offered)
        change = _flops_change(result, baseline_flops)
        rows.append(Remedy(key, title, result.options, largest_device_used(result),
                           largest_device_used(base) - largest_device_used(result),
                           verdict.fits if verdict else None, cost,
                           saved_allocated=base.peak_allocated - result.peak_allocated,
                           required_bytes=verdict.required_bytes if verdict else result.device_used,
                           flops=result.flops, flops_change=change, checkpointed=list(result.checkpointed)))
    base_fits = fits(base, capacity_bytes, reserve).fits if capacity_bytes else True
    if base_fits or not full:
        rows.sort(key=lambda r: (-r.saved, -r.saved_allocated, r.key))
    else:
        rows.sort(key=lambda r: (not r.fits, r.required_bytes, r.key))
    return rows


def not_offered(base: Estimate, rows: list[Remedy]) -> dict[str, str]:
    """Remedies considered and not offered for ``base``, with the reason (for the table's footer)."""
    notes = dict(NOT_OFFERED)
    if base.options.precision == "fp32" and not _supports_bf16(base):
        cc = base.compute_capability
        notes["autocast bf16"] = f"sm{cc[0]}{cc[1]} has no bf16 support (sm80 or newer needed)"
    if not base.options.checkpointing and not any(row.key == "checkpointing" for row in rows):
        notes["activation checkpointing"] = ("no repeated blocks found (children of an nn.ModuleList/nn.Sequential "
                                             "whose class occurs twice)")
    if importlib.util.find_spec("transformers") is None:
        notes["Adafactor"] = "transformers is not installed"
    if base.devices:
        notes["DDP / FSDP2 sharding"] = ("the model is placed on several devices; --parallel is not combined "
                                         "with model parallel by placement")
    return notes
