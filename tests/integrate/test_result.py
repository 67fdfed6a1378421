"""What comes back from the estimate child (or the cache) is validated before it is rendered."""

from __future__ import annotations

import copy

import pytest

from memlint.integrate.result import MalformedResult, ScriptEstimate

GOOD = {
    "path": "train.py", "target": "m.py:build",
    "recipe": {"batch-size": {"value": 8, "source": "script line 3"}},
    "gpu": "T4", "capacity_bytes": 16 * 2**30,
    "estimate": {"peak_allocated": 10, "peak_reserved": 20, "device_used": 30, "peak_tensor_bytes": 9,
                 "by_category": {"parameter": 5}, "batch_size": 8, "micro_batch": 8, "optimizer": "sgd",
                 "checkpointed_blocks": [], "unsupported_ops": [], "trace_seconds": 0.5},
    "verdict": {"fits": False, "required_bytes": 30, "capacity_bytes": 16, "usable_bytes": 14, "reserve": 0.1,
                "headroom_bytes": -16, "headroom_fraction": -1.0, "cache_released": False},
    "max_batch_size": 4,
    "advice": [{"remedy": "sgd", "title": "plain SGD", "device_used": 20, "saved": 10, "saved_allocated": 5,
                "fits": None, "cost": "none"}],
    "notes": [], "error": None, "batch_span": [3, 14, 3, 15],
}


def test_a_good_document_reads_back_with_the_estimators_names():
    outcome = ScriptEstimate.from_transfer(GOOD)
    assert outcome.estimate.device_used == 30 and outcome.estimate.checkpointed == []
    assert outcome.verdict.fits is False and outcome.fits is False
    assert outcome.advice[0].key == "sgd" and outcome.batch_span == (3, 14, 3, 15)
    assert outcome.to_transfer() == GOOD


@pytest.mark.parametrize(("where", "value"), [
    (("estimate", "device_used"), True),
    (("estimate", "device_used"), "30"),
    (("estimate", "by_category"), {"parameter": 1.5}),
    (("verdict", "fits"), 1),
    (("advice", 0, "title"), None),
    (("recipe", "batch-size", "source"), 3),
    (("notes",), "one note"),
    (("batch_span",), [3, 14, 3]),
    (("batch_span",), [0, 1, 1, 2]),
    (("max_batch_size",), False),
    (("estimate",), []),
    (("estimate", "devices"), {"cuda:0": 1}),
    (("estimate", "devices"), [{"device": "cuda:0", "index": 0, "peak_allocated": "1"}]),
])
def test_malformed_documents_are_refused(where, value):
    document = copy.deepcopy(GOOD)
    parent = document
    for key in where[:-1]:
        parent = parent[key]
    parent[where[-1]] = value
    with pytest.raises(MalformedResult):
        ScriptEstimate.from_transfer(document)
    with pytest.raises(MalformedResult):
        ScriptEstimate.from_transfer("not a document")


def test_the_largest_batch_says_at_least_only_at_the_search_limit():
    from types import SimpleNamespace

    from memlint.integrate.result import MAX_BATCH_LIMIT, Value, largest_batch_text, search_limit

    def outcome(batch, accum, found):
        return SimpleNamespace(recipe={"batch-size": Value(batch, "script line 1"), "grad-accum": Value(accum, "default")},
                               max_batch=found)

    assert search_limit(16, 1) == MAX_BATCH_LIMIT and search_limit(16, 4) == MAX_BATCH_LIMIT // 4
    assert search_limit(3_000_000, 1) == 3_000_000  # a configured batch above the limit is searched below it
    assert largest_batch_text(outcome(16, 1, 14)) == "14"
    assert largest_batch_text(outcome(16, 1, MAX_BATCH_LIMIT)) == f"at least {MAX_BATCH_LIMIT} (the search stops there)"
    assert largest_batch_text(outcome(16, 4, MAX_BATCH_LIMIT // 4)).startswith("at least")
    assert largest_batch_text(outcome(3_000_000, 1, 1_697_792)) == "1697792"
