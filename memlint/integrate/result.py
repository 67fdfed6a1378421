"""One script's estimate as ``memlint check`` reports it, and its JSON form.

The estimate runs in a child process (:mod:`memlint.integrate.isolation`);
what comes back is the JSON of :meth:`ScriptEstimate.to_transfer`, read back
by :meth:`ScriptEstimate.from_transfer` into validated :class:`Record` views
that carry the same attribute names as the estimator's own ``Estimate``,
``Verdict`` and ``Remedy``, so the reports read either (and the parent never
imports torch to read them). The same JSON is what the estimate cache stores. All
sizes are bytes (GiB = 2**30).
"""

from __future__ import annotations

from dataclasses import dataclass, field
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


_NUMBER = (int, float)
_NONE = type(None)
#: The estimator's documents that come back from the child, field -> allowed
#: JSON types (an ``int`` field never takes a boolean): the numbers of
#: ``ScriptEstimate.to_json()["estimate"]``, ``Verdict.to_json()`` and
#: ``Remedy.to_json()`` (memlint.estimate.api and .advisor).
NUMBERS_FIELDS = {
    "peak_allocated": int, "peak_reserved": int, "device_used": int, "peak_tensor_bytes": int,
    "by_category": dict, "batch_size": int, "micro_batch": int, "optimizer": (str, _NONE),
    "checkpointed_blocks": list, "unsupported_ops": list, "trace_seconds": _NUMBER,
    "devices": (list, _NONE),
}
#: One entry of ``devices`` (memlint.estimate.placement.DeviceEstimate.to_json()).
DEVICE_FIELDS = {"device": str, "index": int, "peak_allocated": int, "peak_reserved": int, "device_used": int,
                 "by_category": dict}
VERDICT_FIELDS = {
    "fits": bool, "required_bytes": int, "capacity_bytes": int, "usable_bytes": int, "reserve": _NUMBER,
    "headroom_bytes": int, "headroom_fraction": _NUMBER, "cache_released": bool,
}
REMEDY_FIELDS = {
    "remedy": str, "title": str, "device_used": int, "saved": int, "saved_allocated": int, "fits": (bool, _NONE),
    "cost": str,
}


def _is_a(value: Any, kinds) -> bool:
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if isinstance(value, bool):
        return bool in kinds
    return isinstance(value, kinds)


class Record:
    """A validated JSON object read back from the estimate child, with the
    attribute names of the estimator's object it stands for (``aliases``:
    attribute -> JSON key, where the two differ)."""

    def __init__(self, data: Any, fields: dict, aliases: dict[str, str] | None = None) -> None:
        if not isinstance(data, dict):
            raise MalformedResult("not an object")
        for key, kinds in fields.items():
            if not _is_a(data.get(key), kinds):
                raise MalformedResult(f"{key} is not {kinds}")
        self._data = {key: data[key] for key in fields if key in data}  # a missing key passed: its kinds allow None
        self._aliases = aliases or {}

    def __getattr__(self, name: str) -> Any:
        try:
            return self._data[self._aliases.get(name, name)]
        except KeyError:
            raise AttributeError(name) from None

    def to_json(self) -> dict:
        """The validated JSON object (a copy)."""
        return dict(self._data)


def numbers_record(data: Any) -> Record:
    """The estimate numbers (``Estimate``'s attribute names); raises MalformedResult."""
    record = Record(data, NUMBERS_FIELDS, {"checkpointed": "checkpointed_blocks"})
    if not all(type(v) is int for v in record.by_category.values()):
        raise MalformedResult("by_category is not a map of byte counts")
    for device in getattr(record, "devices", None) or []:
        Record(device, DEVICE_FIELDS)
    return record


#: Largest batch the fit search tries (samples); the search stops there (memlint.integrate uses it).
MAX_BATCH_LIMIT = 1 << 16


def search_limit(batch: int | None, accum: int | None) -> int:
    """Largest micro-batch the fit search tries: :data:`MAX_BATCH_LIMIT` samples per step, or the
    configured micro-batch when that is larger (so a batch that does not fit is searched below it)."""
    return max(MAX_BATCH_LIMIT // max(1, accum or 1), batch or 0)


def largest_batch_text(outcome) -> str:
    """"N", or "at least N (the search stops there)" when N is the search's limit."""
    recipe = outcome.recipe
    batch = recipe["batch-size"].value if "batch-size" in recipe else None
    accum = recipe["grad-accum"].value if "grad-accum" in recipe else 1
    if outcome.max_batch is not None and outcome.max_batch >= search_limit(batch, accum):
        return f"at least {outcome.max_batch} (the search stops there)"
    return str(outcome.max_batch)


def deciding_device(estimate) -> tuple[str | None, int]:
    """(label, device_used bytes) of the device that needs the most when the workload is placed on
    several devices (``estimate.devices``); (None, ``estimate.device_used``) otherwise."""
    devices = getattr(estimate, "devices", None) or []
    if len(devices) < 2:
        return None, estimate.device_used
    largest = max(devices, key=lambda d: d["device_used"])
    return largest["device"], largest["device_used"]


def verdict_record(data: Any) -> Record:
    """The fit verdict (``Verdict``'s attribute names); raises MalformedResult."""
    return Record(data, VERDICT_FIELDS)


def remedy_record(data: Any) -> Record:
    """One advisor row (``Remedy``'s attribute names); raises MalformedResult."""
    return Record(data, REMEDY_FIELDS, {"key": "remedy"})


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
            if getattr(est, "devices", None):  # placed on several devices (memlint.estimate.placement)
                numbers["devices"] = list(est.devices)
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
            estimate=numbers_record(estimate) if estimate is not None else None,
            verdict=verdict_record(verdict) if verdict is not None else None,
            gpu=_optional(data, "gpu", str), capacity_bytes=_optional(data, "capacity_bytes", int),
            max_batch=_optional(data, "max_batch_size", int),
            advice=[remedy_record(row) for row in data.get("advice", [])],
            notes=list(notes), error=_optional(data, "error", str),
            batch_span=tuple(span) if span else None)


def _optional(data: dict, key: str, kind: type):
    value = data.get(key)
    if value is not None and not _is_a(value, kind):
        raise MalformedResult(f"{key} is not {kind.__name__}")
    return value
