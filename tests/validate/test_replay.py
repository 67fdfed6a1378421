"""Replay every record in fixtures/validation/: re-run the estimator on CPU, check the bounds.

Bounds come from fixtures/validation/bounds.json (rendered in docs/accuracy.md).
A record with an unknown schema_version fails here; it is never skipped.
"""

import json

import pytest
from validate_helpers import ROOT

from memlint.estimate.api import EstimateOptions, estimate
from memlint.estimate.workload import load_workload
from memlint.validate.accuracy import ESTIMATE_OF, NUMBERS, bound_for, load_bounds, record_files, relative_error
from memlint.validate.record import check_record, cpu_kernels

FILES = record_files()


def _records(device):
    """Records measured by memlint on ``device`` (published measurements have their own test)."""
    out = []
    for path in FILES:
        record = json.loads(path.read_text())
        env = record.get("environment") if isinstance(record, dict) else None
        if isinstance(env, dict) and env.get("device") == device and not record.get("source"):
            out.append(pytest.param(path, id=path.relative_to(ROOT).as_posix()))
    return out


pytestmark = pytest.mark.usefixtures("at_repo_root")


@pytest.mark.parametrize("path", [pytest.param(p, id=p.relative_to(ROOT).as_posix()) for p in FILES])
def test_record_is_valid(path):
    record = json.loads(path.read_text())
    check_record(record)  # raises on an unknown schema_version or a malformed record
    assert record["outcome"] in ("measured", "oom"), f"{path.name}: outcome {record['outcome']!r} is not replayable"


def test_cpu_records_exist():
    assert _records("cpu"), "fixtures/validation/ holds no CPU records to replay"


def _options(record) -> EstimateOptions:
    options = dict(record["workload"]["options"])
    return EstimateOptions(**options)


@pytest.mark.parametrize("path", _records("cpu"))
def test_replay_cpu_record(path):
    record = json.loads(path.read_text())
    check_record(record)
    recorded_on = record["environment"].get("cpu_kernels")
    if recorded_on is not None and recorded_on != cpu_kernels():
        # The estimate probes oneDNN's scratch on this CPU: a record of another kernel set is
        # compared on a CPU of its own kind (its twin for this kind is replayed here).
        pytest.skip(f"measured with {recorded_on} kernels, this CPU has {cpu_kernels()}")
    workload = record["workload"]
    options = _options(record)
    assert options.device == "cpu", "CPU records hold a CPU-target estimate"
    result = estimate(load_workload(workload["target"], workload["inputs"], options.batch_size), options)
    bounds = load_bounds()
    gaps = record["measured"].get("unmeasured", {})
    assert set(gaps) < set(NUMBERS["cpu"]), f"{path.name}: no number is measured ({sorted(gaps)})"
    for number in NUMBERS["cpu"]:
        measured = record["measured"][number]
        if number in gaps:
            assert measured is None and gaps[number], f"{number}: an unmeasured number is null and says why"
            continue
        estimated = getattr(result, ESTIMATE_OF[number])
        bound, _ = bound_for(bounds, "cpu", number, workload["target"], options.precision)
        error = relative_error(estimated, measured)
        assert abs(error) <= bound, f"{number}: estimated {estimated}, measured {measured} ({error:+.2%} > {bound:.0%})"


def _cuda_records():
    """CUDA records, or one skipped case that says why there are none."""
    found = _records("cuda")
    reason = "no CUDA records yet: they are measured with `memlint validate --device cuda` on a GPU"
    return found or [pytest.param(None, id="no-cuda-records", marks=pytest.mark.skip(reason=reason))]


@pytest.mark.parametrize("path", _cuda_records())
def test_replay_cuda_record(path):
    record = json.loads(path.read_text())
    check_record(record)
    if record["outcome"] == "oom":
        pytest.skip("out-of-memory record: nothing to compare number by number")
    workload = record["workload"]
    options = _options(record)
    options.gpu = record["estimated"]["gpu"]  # the catalog entry the GPU resolved to when recorded
    result = estimate(load_workload(workload["target"], workload["inputs"], options.batch_size), options)
    bounds = load_bounds()
    for number in NUMBERS["cuda"]:
        measured = record["measured"][number]
        if measured is None:
            continue
        bound, _ = bound_for(bounds, "cuda", number, workload["target"], options.precision)
        error = relative_error(getattr(result, number), measured)
        assert abs(error) <= bound, f"{number}: estimated {getattr(result, number)}, measured {measured} ({error:+.2%})"
