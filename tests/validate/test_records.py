"""Records: schema validation, unknown versions, atomic writing, the accuracy tables."""

import copy
import json

import pytest

from memlint.validate import accuracy
from memlint.validate.record import SCHEMA_VERSION, check_record, load_schema, make_record, write_record


def _cuda_record():
    env = {"memlint_version": "0.1.0", "torch_version": "2.13.0", "cuda_version": "12.8", "python_version": "3.11.0",
           "device": "cuda", "gpu_name": "NVIDIA H200", "total_memory": 150 * 2**30, "compute_capability": [9, 0],
           "driver_version": "570.1", "host": "x86_64"}
    workload = {"target": "fixtures/models/mlp.py:build", "inputs": [], "input_shapes": [
        {"name": "0", "dtype": "float32", "shape": [64, 784]}], "options": {
        "batch_size": 64, "optimizer": "adam", "precision": "fp32", "checkpointing": False, "grad_accum": 1,
        "set_to_none": True, "world_size": 1, "zero_stage": 0, "gpu": "auto"}, "warmup": 2, "steps": 3}
    estimated = {"peak_allocated": 100, "peak_reserved": 2 * 2**20, "device_used": 500 * 2**20,
                 "peak_tensor_bytes": 99, "gpu": "H200-141GB", "compute_capability": [9, 0]}
    measured = {"peak_allocated": 110, "peak_reserved": 2 * 2**20, "device_used": 510 * 2**20,
                "nvml_used_peak": 520 * 2**20, "active_bytes_peak": 110, "inactive_split_bytes_peak": 0,
                "nvml_used_before": 10 * 2**20, "nvml_samples": 12, "oom": None, "seconds": 1.0}
    return make_record(env, workload, estimated, measured, "measured")


def test_schema_is_a_valid_json_schema():
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(load_schema())


def test_cuda_record_validates():
    check_record(_cuda_record())


def test_unknown_schema_version_is_rejected_by_name():
    record = _cuda_record()
    record["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(ValueError, match="unknown record schema_version"):
        check_record(record)


@pytest.mark.parametrize(("path", "value"), [
    (("measured", "peak_allocated"), -1),
    (("environment", "device"), "tpu"),
    (("workload", "options", "precision"), "fp8"),
    (("outcome",), "dry-run"),  # a dry run must have measured = null
])
def test_malformed_records_are_rejected(path, value):
    record = copy.deepcopy(_cuda_record())
    node = record
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(ValueError, match="does not match the schema"):
        check_record(record)


def test_write_record_is_atomic_and_readable(tmp_path):
    target = tmp_path / "sub" / "r.json"
    write_record(_cuda_record(), target)
    assert json.loads(target.read_text())["outcome"] == "measured"
    assert [p.name for p in target.parent.iterdir()] == ["r.json"]


def test_accuracy_rows_and_markdown_from_records():
    record = _cuda_record()
    rows = accuracy.rows([record])
    by_number = {r["number"]: r for r in rows}
    assert by_number["peak_allocated"]["error"] == pytest.approx((100 - 110) / 110)
    assert by_number["peak_reserved"]["error"] == 0
    text = accuracy.render_markdown([record], accuracy.load_bounds())
    assert "| mlp:build | fp32 | adam | 64 | no | peak_allocated |" in text
    assert "No records yet." in text  # no CPU record in this list


def test_markdown_says_cuda_records_await_a_gpu():
    text = accuracy.render_markdown([], accuracy.load_bounds())
    assert accuracy.CAMPAIGN_COMMAND in text


def test_bound_for_uses_known_deviations():
    bounds = accuracy.load_bounds()
    assert accuracy.bound_for(bounds, "cpu", "cpu_peak", "x/mlp.py:build", "fp32") == (bounds["cpu"]["cpu_peak"], None)
    bounds["known_deviations"] = [{"device": "cpu", "number": "*", "targets": ["unet_like"], "precisions": ["amp-bf16"],
                                   "bound": 0.2, "mechanism": "a stated mechanism"}]
    assert accuracy.bound_for(bounds, "cpu", "cpu_peak", "x/validation_tiny.py:unet_like", "amp-bf16") == (
        0.2, "a stated mechanism")
    assert accuracy.bound_for(bounds, "cpu", "cpu_peak", "x/validation_tiny.py:unet_like", "fp32")[0] == 0.01


def test_doc_generated_block_matches_records(tmp_path):
    """docs/accuracy.md's generated block is what the records produce (regenerate when this fails)."""
    expected = accuracy.generated_block()
    text = accuracy.DOC_PATH.read_text()
    block = text.split(accuracy.BEGIN, 1)[1].split(accuracy.END, 1)[0]
    assert block.strip() == expected.strip(), "run: python -m memlint.validate.accuracy"
