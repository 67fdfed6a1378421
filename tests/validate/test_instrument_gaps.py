"""An FSDP2 gloo run gates the tensor ledger, and records the profiler's peak as a known gap.

The measurement is stubbed (no processes): what is checked is how a measured run with an
instrument gap becomes rows and a record, not the measurement itself (that is the live
tests' and the replayed records' job).
"""

import pytest
from validate_helpers import TINY

from memlint.estimate.api import EstimateOptions
from memlint.validate import distributed, session
from memlint.validate.cpu import CpuMeasurement
from memlint.validate.record import check_record

pytestmark = pytest.mark.usefixtures("at_repo_root")


def _stub(gaps):
    def measure(target, inputs, options, warmup, steps):
        return CpuMeasurement(peak_allocator_bytes=9_000_000, peak_tensor_bytes=5_000_000, step_peaks=[9_000_000],
                              baseline_bytes=1_000, memory_events=10, seconds=0.1, unmeasured=gaps)
    return measure


def _validate(monkeypatch, parallel, gaps):
    monkeypatch.setattr(distributed, "measure_distributed", _stub(gaps))
    options = EstimateOptions(device="cpu", optimizer="adam", parallel=parallel, world_size=2, steps=2)
    return session.validate(f"{TINY}:mlp", [], options, "cpu", warmup=1, steps=1)


def test_a_profiler_gap_gates_the_tensor_ledger_and_records_null(monkeypatch):
    outcome = _validate(monkeypatch, "fsdp", {"cpu_peak": distributed.PROFILER_GAP})
    gated = {row.name: row.gated for row in outcome.rows}
    assert gated == {"cpu_peak": False, "cpu_tensor_peak": True}
    measured = outcome.record["measured"]
    assert measured["cpu_peak"] is None
    assert measured["cpu_peak_profiler"] == 9_000_000
    assert measured["unmeasured"] == {"cpu_peak": distributed.PROFILER_GAP}
    check_record(outcome.record)


def test_without_a_gap_the_allocator_peak_is_gated(monkeypatch):
    outcome = _validate(monkeypatch, "ddp", {})  # the stub reports no gap, whatever the engine
    gated = {row.name: row.gated for row in outcome.rows}
    assert gated == {"cpu_peak": True, "cpu_tensor_peak": False}
    assert outcome.record["measured"]["cpu_peak"] == 9_000_000
    assert "unmeasured" not in outcome.record["measured"]

