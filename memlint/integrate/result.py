"""The per-script estimate result attached to a ``memlint check`` run (``run.estimates``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GiB = 2**30


@dataclass
class Value:
    """A setting used by the estimate and where it came from: "config (...)", "script line N" or "default"."""

    value: Any
    source: str
    detail: str = ""

    def to_json(self) -> dict:
        out = {"value": self.value, "source": self.source}
        if self.detail:
            out["detail"] = self.detail
        return out


@dataclass
class ScriptEstimate:
    """One script's estimate: the recipe with provenance, the numbers (bytes), verdict, max batch, advice.

    ``batch_size`` is the script's batch per step (the DataLoader's); with
    gradient accumulation N the traced global batch is N times that.
    ``max_batch``: the largest such batch that fits (None when not searched).
    """

    path: str
    target: str
    recipe: dict[str, Value] = field(default_factory=dict)
    estimate: Any = None
    verdict: Any = None
    gpu: str | None = None
    capacity_bytes: int | None = None
    max_batch: int | None = None
    advice: list = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    #: (line, col, end_line, end_col) of the batch-size literal (or comment line) that MEM302 points at
    batch_span: tuple[int, int, int, int] | None = None

    @property
    def fits(self) -> bool | None:
        return None if self.verdict is None else self.verdict.fits

    def to_json(self) -> dict:
        """JSON-ready dict: path, target, recipe (value + source each), estimate numbers, verdict, max batch, advice."""
        est = self.estimate
        numbers = None
        if est is not None:
            numbers = {
                "peak_allocated": est.peak_allocated, "peak_reserved": est.peak_reserved,
                "device_used": est.device_used, "peak_tensor_bytes": est.peak_tensor_bytes,
                "by_category": dict(est.by_category), "batch_size": est.batch_size, "micro_batch": est.micro_batch,
                "optimizer": est.optimizer, "checkpointed_blocks": list(est.checkpointed),
                "unsupported_ops": est.unsupported_ops, "trace_seconds": round(est.trace_seconds, 3),
            }
        return {
            "path": self.path,
            "target": self.target,
            "recipe": {key: value.to_json() for key, value in self.recipe.items()},
            "gpu": self.gpu,
            "capacity_bytes": self.capacity_bytes,
            "estimate": numbers,
            "verdict": self.verdict.to_json() if self.verdict is not None else None,
            "max_batch_size": self.max_batch,
            "advice": [row.to_json() for row in self.advice],
            "notes": list(self.notes),
            "error": self.error,
        }
