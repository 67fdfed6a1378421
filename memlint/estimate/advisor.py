"""The advisor: re-estimate a workload under each memory remedy and rank them.

Every remedy is applied for real in the traced step (through
:class:`~memlint.estimate.api.EstimateOptions`), never as a fixed percentage:

* ``amp-bf16`` / ``amp-fp16`` autocast (precision),
* activation checkpointing of repeated blocks,
* a smaller micro-batch with gradient accumulation (same global batch; the
  smallest accumulation factor that fits, else the largest tried),
* ``zero_grad(set_to_none=True)``,
* a lighter optimizer (SGD with momentum: one state tensor per parameter;
  plain SGD: none) -- the estimator models no 8-bit/Adafactor optimizer,
* ZeRO-1 / ZeRO-2 / ZeRO-3 (= FSDP full sharding) over N data-parallel ranks,
  per rank.

Rows are ranked by the memory saved (device_used, bytes), largest first; ties by
the peak_allocated saved.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from memlint.estimate.api import Estimate, EstimateOptions, estimate, fits

#: Cost of each remedy, in words (sources: PyTorch AMP and torch.utils.checkpoint docs,
#: the ZeRO paper, arXiv:1910.02054, section 5, for the communication volumes).
COSTS = {
    "amp-bf16": "bf16 autocast: needs Ampere or newer; bf16 rounding in matmuls, usually faster",
    "amp-fp16": "fp16 autocast: needs a GradScaler (loss scaling, overflow skips); usually faster",
    "checkpointing": "recomputes each block's forward during backward: ~1 extra forward, ~20-35% slower steps",
    "grad-accum": "same global batch in {k} micro-batches of {micro}: more, smaller kernels (lower throughput); "
                  "BatchNorm sees micro-batches",
    "set-to-none": "none (zero_grad(set_to_none=True) is PyTorch's default); code reading .grad must handle None",
    "sgd-momentum": "one state tensor per parameter instead of Adam's two: different dynamics, re-tune the learning rate",
    "sgd": "no optimizer state: slower convergence for transformers, re-tune the learning rate",
    "zero-1": "needs {n} GPUs; optimizer state sharded: same communication as DDP",
    "zero-2": "needs {n} GPUs; optimizer state + gradients sharded: same communication as DDP (reduce-scatter)",
    "zero-3": "needs {n} GPUs; parameters sharded too (FSDP FULL_SHARD): ~1.5x DDP communication, "
              "all-gathers each forward/backward",
}


@dataclass
class Remedy:
    """One advisor row, in bytes: ``device_used`` and ``saved`` (of device_used;
    may be negative), and ``saved_allocated`` (of peak_allocated). The two
    differ when the caching allocator's reserve, set by an earlier peak,
    absorbs the memory a remedy frees: then allocated memory drops and
    reserved memory does not."""

    key: str
    title: str
    options: EstimateOptions
    device_used: int
    saved: int
    fits: bool | None
    cost: str
    saved_allocated: int = 0

    def to_json(self) -> dict:
        return {"remedy": self.key, "title": self.title, "device_used": self.device_used, "saved": self.saved,
                "saved_allocated": self.saved_allocated, "fits": self.fits, "cost": self.cost}


def candidate_remedies(base: Estimate, world_size: int = 8) -> list[tuple[str, str, EstimateOptions | list, str]]:
    """(key, title, options or list of options to try in order, cost) for every remedy that applies to ``base``."""
    opts = base.options
    rows: list[tuple[str, str, EstimateOptions | list, str]] = []
    if opts.precision == "fp32":
        rows.append(("amp-bf16", "autocast bf16", replace(opts, precision="amp-bf16"), COSTS["amp-bf16"]))
        rows.append(("amp-fp16", "autocast fp16 + GradScaler", replace(opts, precision="amp-fp16"), COSTS["amp-fp16"]))
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
    current = (base.optimizer or "").lower()
    if current not in ("sgd",):
        if current != "sgd-momentum":
            rows.append(("sgd-momentum", "SGD with momentum", replace(opts, optimizer="sgd-momentum"),
                         COSTS["sgd-momentum"]))
        rows.append(("sgd", "plain SGD", replace(opts, optimizer="sgd"), COSTS["sgd"]))
    if world_size > 1:
        for stage in (1, 2, 3):
            if opts.world_size >= world_size and opts.zero_stage >= stage:
                continue
            title = f"ZeRO-{stage} over {world_size} ranks" + (" (FSDP full shard)" if stage == 3 else "")
            rows.append((f"zero-{stage}", title, replace(opts, world_size=world_size, zero_stage=stage),
                         COSTS[f"zero-{stage}"].format(n=world_size)))
    return rows


def advise(workload, base: Estimate, capacity_bytes: int | None = None, reserve: float = 0.10,
           world_size: int = 8, run: Callable[[object, EstimateOptions], Estimate] = estimate) -> list[Remedy]:
    """Re-estimate ``workload`` under each remedy of :func:`candidate_remedies`; ranked rows.

    capacity_bytes: target memory (bytes) for the fits column (None: fits is None).
    run: the estimate function (tests pass a counting wrapper).
    """
    rows: list[Remedy] = []
    for key, title, options, cost in candidate_remedies(base, world_size):
        tries = options if isinstance(options, list) else [options]
        result = verdict = None
        for option in tries:
            result = run(workload, option)
            verdict = fits(result, capacity_bytes, reserve) if capacity_bytes else None
            if verdict is None or verdict.fits:
                break
        if key == "grad-accum":
            title = f"micro-batch {result.micro_batch} x {result.options.grad_accum} accumulation steps"
            cost = cost.format(k=result.options.grad_accum, micro=result.micro_batch)
        rows.append(Remedy(key, title, result.options, result.device_used, base.device_used - result.device_used,
                           verdict.fits if verdict else None, cost,
                           saved_allocated=base.peak_allocated - result.peak_allocated))
    rows.sort(key=lambda r: (-r.saved, -r.saved_allocated, r.key))
    return rows
