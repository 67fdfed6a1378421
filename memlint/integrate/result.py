"""One script's estimate as ``memlint check`` reports it, and its JSON form.

The estimate runs in a child process (:mod:`memlint.integrate.isolation`);
what comes back is the JSON of :meth:`ScriptEstimate.to_json`, read back by
:meth:`ScriptEstimate.from_json` into plain values (:class:`Numbers`,
:class:`VerdictNumbers`, :class:`Remedy`) that carry the same attribute names
as the estimator's own ``Estimate``, ``Verdict`` and ``Remedy``, so the
reports read either. The same JSON is what the estimate cache stores. All
sizes are bytes (GiB = 2**30).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

GiB = 2**30


class MalformedResult(ValueError):
    """A result document that does not have the documented shape."""


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


def _int(data: dict, key: str) -> int:
    value = data.get(key)
    if type(value) is not int:
        raise MalformedResult(f"{key} is not an integer")
    return value


def _optional(data: dict, key: str, kind: type):
    value = data.get(key)
    if value is not None and not isinstance(value, kind):
        raise MalformedResult(f"{key} is not {kind.__name__}")
    return value


@dataclass
class Numbers:
    """The estimate's numbers that the report shows (bytes; see ``Estimate``)."""

    peak_allocated: int
    peak_reserved: int
    device_used: int
    peak_tensor_bytes: int
    by_category: dict[str, int]
    batch_size: int
    micro_batch: int
    optimizer: str
    checkpointed: list[str]
    unsupported_ops: list
    trace_seconds: float

    @classmethod
    def from_json(cls, data: dict) -> "Numbers":
        """Raises MalformedResult."""
        by_category = data.get("by_category")
        if not isinstance(by_category, dict) or not all(type(v) is int for v in by_category.values()):
            raise MalformedResult("by_category is not a map of byte counts")
        checkpointed = data.get("checkpointed_blocks")
        if not isinstance(checkpointed, list) or not all(isinstance(name, str) for name in checkpointed):
            raise MalformedResult("checkpointed_blocks is not a list of names")
        unsupported = data.get("unsupported_ops")
        if not isinstance(unsupported, list):
            raise MalformedResult("unsupported_ops is not a list")
        seconds = data.get("trace_seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise MalformedResult("trace_seconds is not a number")
        return cls(
            peak_allocated=_int(data, "peak_allocated"), peak_reserved=_int(data, "peak_reserved"),
            device_used=_int(data, "device_used"), peak_tensor_bytes=_int(data, "peak_tensor_bytes"),
            by_category=dict(by_category), batch_size=_int(data, "batch_size"),
            micro_batch=_int(data, "micro_batch"), optimizer=str(_optional(data, "optimizer", str) or ""),
            checkpointed=list(checkpointed), unsupported_ops=list(unsupported), trace_seconds=float(seconds))


@dataclass
class VerdictNumbers:
    """The fit verdict (bytes; see ``memlint.estimate.api.Verdict``)."""

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

    @classmethod
    def from_json(cls, data: dict) -> "VerdictNumbers":
        """Raises MalformedResult."""
        for key in ("fits", "cache_released"):
            if not isinstance(data.get(key, False), bool):
                raise MalformedResult(f"{key} is not a boolean")
        fractions = [data.get(key) for key in ("reserve", "headroom_fraction")]
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in fractions):
            raise MalformedResult("reserve or headroom_fraction is not a number")
        return cls(fits=data["fits"], required_bytes=_int(data, "required_bytes"),
                   capacity_bytes=_int(data, "capacity_bytes"), usable_bytes=_int(data, "usable_bytes"),
                   reserve=float(fractions[0]), headroom_bytes=_int(data, "headroom_bytes"),
                   headroom_fraction=float(fractions[1]), cache_released=data.get("cache_released", False))


@dataclass
class Remedy:
    """One advisor row (bytes; see ``memlint.estimate.advisor.Remedy``)."""

    key: str
    title: str
    device_used: int
    saved: int
    fits: bool | None
    cost: str
    saved_allocated: int = 0

    def to_json(self) -> dict:
        return {"remedy": self.key, "title": self.title, "device_used": self.device_used, "saved": self.saved,
                "saved_allocated": self.saved_allocated, "fits": self.fits, "cost": self.cost}

    @classmethod
    def from_json(cls, data: dict) -> "Remedy":
        """Raises MalformedResult."""
        texts = [data.get(key) for key in ("remedy", "title", "cost")]
        if not all(isinstance(text, str) for text in texts):
            raise MalformedResult("remedy, title and cost must be strings")
        return cls(key=texts[0], title=texts[1], device_used=_int(data, "device_used"), saved=_int(data, "saved"),
                   fits=_optional(data, "fits", bool), cost=texts[2], saved_allocated=_int(data, "saved_allocated"))


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

    def to_transfer(self) -> dict:
        """:meth:`to_json` plus the batch span: what the estimate child sends back."""
        return {**self.to_json(), "batch_span": list(self.batch_span) if self.batch_span else None}

    @classmethod
    def from_transfer(cls, data: Any) -> "ScriptEstimate":
        """Read back :meth:`to_transfer` (from the child or the cache).

        Raises:
            MalformedResult: anything that does not have the shape it documents.
        """
        try:
            return cls._from_transfer(data)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise MalformedResult(str(exc) or type(exc).__name__) from None

    @classmethod
    def _from_transfer(cls, data: dict) -> "ScriptEstimate":
        if not isinstance(data, dict):
            raise MalformedResult("not an object")
        recipe = {}
        for key, item in data["recipe"].items():
            if not isinstance(item.get("source"), str) or not isinstance(item.get("detail", ""), str):
                raise MalformedResult(f"recipe {key} has no source")
            recipe[str(key)] = Value(item.get("value"), item["source"], item.get("detail", ""))
        notes = data.get("notes", [])
        if not isinstance(notes, list) or not all(isinstance(note, str) for note in notes):
            raise MalformedResult("notes is not a list of strings")
        span = data.get("batch_span")
        if span is not None and (len(span) != 4 or not all(type(n) is int and n >= 1 for n in span)):
            raise MalformedResult("batch_span is not four positions")
        estimate, verdict = data.get("estimate"), data.get("verdict")
        return cls(
            path=str(data["path"]), target=str(data["target"]), recipe=recipe,
            estimate=Numbers.from_json(estimate) if estimate is not None else None,
            verdict=VerdictNumbers.from_json(verdict) if verdict is not None else None,
            gpu=_optional(data, "gpu", str), capacity_bytes=_optional(data, "capacity_bytes", int),
            max_batch=_optional(data, "max_batch_size", int),
            advice=[Remedy.from_json(row) for row in data.get("advice", [])],
            notes=list(notes), error=_optional(data, "error", str),
            batch_span=tuple(span) if span else None)
