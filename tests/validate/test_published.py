"""Published measurements (fixtures/validation/published), re-estimated from configs against their bounds."""

import json

import pytest
from memlint.estimate.api import EstimateOptions, estimate
from memlint.estimate.workload import load_workload
from memlint.validate.accuracy import bound_for, load_bounds, record_files, relative_error
from memlint.validate.record import check_record

PUBLISHED = [p for p in record_files() if "published" in p.parts]


pytestmark = pytest.mark.usefixtures("at_repo_root")


def test_the_hugging_face_table_is_recorded_in_full():
    names = {json.loads(p.read_text())["note"] for p in PUBLISHED}
    assert {f"published measurement: {row}" for row in (
        "vanilla", "gradient-accumulation", "gradient-checkpointing", "fp16", "accumulation-checkpointing-fp16",
        "adafactor", "all-together")} <= names


@pytest.mark.parametrize("path", PUBLISHED, ids=[p.stem for p in PUBLISHED])
def test_record_names_its_source(path):
    record = json.loads(path.read_text())
    check_record(record)
    source = record["source"]
    assert source["url"].startswith("https://") and source["gpu"] and source["cuda"]
    assert "torch" in source and (source["torch"] or "torch version not stated" in source["notes"])
    assert source["quote"].startswith("GPU memory occupied:")


@pytest.mark.slow
@pytest.mark.parametrize("path", PUBLISHED, ids=[p.stem for p in PUBLISHED])
def test_published_measurement_within_its_bound(path):
    record = json.loads(path.read_text())
    workload = record["workload"]
    options = EstimateOptions(**workload["options"])
    result = estimate(load_workload(workload["target"], workload["inputs"], options.batch_size), options)
    bounds = load_bounds()
    for number, measured in record["measured"].items():
        if number not in bounds["published"] or measured is None:
            continue
        bound, _ = bound_for(bounds, "published", number, workload["target"], options.precision)
        error = relative_error(getattr(result, number), measured)
        assert abs(error) <= bound, f"{number}: estimated {getattr(result, number)}, measured {measured} ({error:+.2%})"
