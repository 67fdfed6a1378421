"""--parallel ddp|fsdp: rank 0 traced through the real engines on torch's fake process group."""

from pathlib import Path

import pytest

from memlint.errors import UsageError
from memlint.estimate.api import EstimateOptions, estimate
from memlint.estimate.workload import load_workload

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "fixtures/models/validation_tiny.py")


def _estimate(name, **options):
    workload = load_workload(f"{TINY}:{name}", [], None)
    return estimate(workload, EstimateOptions(device="cpu", optimizer="adam", **options))


def _param_bytes(name):
    module = load_workload(f"{TINY}:{name}", [], None).module
    return sum(p.numel() * p.element_size() for p in module.parameters())


def test_ddp_keeps_buckets_the_size_of_the_gradients():
    result = _estimate("mlp", parallel="ddp", world_size=2)
    params = _param_bytes("mlp")
    assert result.by_category["communication"] == params  # one flat bucket holds every gradient
    assert result.by_category["gradient"] == params
    assert result.communication["buffer_bytes"] == {"all_reduce": params}
    assert result.communication["sent_bytes"]["all_reduce"] == params  # ring all-reduce: 2(n-1)/n = 1 at n = 2


def test_gradient_as_bucket_view_folds_the_buckets_into_the_gradients():
    plain = _estimate("mlp", parallel="ddp", world_size=2)
    view = _estimate("mlp", parallel="ddp", world_size=2, gradient_as_bucket_view=True)
    assert view.by_category.get("communication", 0) == 0
    assert plain.peak_allocated - view.peak_allocated == _param_bytes("mlp")


def test_fsdp_shards_state_and_falls_with_world_size():
    two = _estimate("gpt_decoder", parallel="fsdp", world_size=2)
    eight = _estimate("gpt_decoder", parallel="fsdp", world_size=8)
    ddp = _estimate("gpt_decoder", parallel="ddp", world_size=8)
    assert ddp.peak_allocated > two.peak_allocated > eight.peak_allocated
    params = _param_bytes("gpt_decoder")
    # Adam's two moments per parameter, sharded over 8 ranks (FSDP2 pads each parameter to a multiple of 8 rows)
    assert 2 * params / 8 <= eight.by_category["optimizer_state"] < 2 * params / 8 * 1.05
    # every parameter all-gathered for forward and again for backward (reshard_after_forward=True)
    assert eight.communication["buffer_bytes"]["all_gather"] >= 2 * params


def test_no_reshard_after_forward_gathers_once():
    result = _estimate("gpt_decoder", parallel="fsdp", world_size=4, reshard_after_forward=False)
    params = _param_bytes("gpt_decoder")
    assert params <= result.communication["buffer_bytes"]["all_gather"] < 1.1 * params


def test_fake_process_group_is_gone_after_the_estimate():
    import torch.distributed as dist

    _estimate("mlp", parallel="fsdp", world_size=4)
    assert not dist.is_initialized()


@pytest.mark.parametrize("options, needle", [
    ({"parallel": "pp", "world_size": 2}, "--parallel"),
    ({"parallel": "fsdp", "world_size": 2, "zero_stage": 3}, "--zero-stage"),
    ({"parallel": "ddp", "world_size": 0}, "--world-size"),
    ({"parallel": "ddp", "world_size": 2, "step_in_backward": True}, "step-in-backward"),
])
def test_bad_parallel_options_are_one_line_errors(options, needle):
    with pytest.raises(UsageError, match=needle):
        EstimateOptions(**options).validate()


def test_advisor_sharding_rows_come_from_the_engine_traces():
    from memlint.estimate.advisor import FSDP_ADVISOR_WORLDS, advise

    workload = load_workload(f"{TINY}:mlp", [], None)
    base = estimate(workload, EstimateOptions(device="cpu", optimizer="adam"))
    rows = {row.key: row for row in advise(workload, base, world_size=8, full=True, run=estimate)}
    ddp, fsdp = rows["ddp"], [rows[f"fsdp-{n}"] for n in FSDP_ADVISOR_WORLDS]
    assert ddp.options.parallel == "ddp" and ddp.options.world_size == 8
    assert "1 all-reduce" in ddp.cost and "per rank per step" in ddp.cost
    assert all("all-gather" in row.cost and "reduce-scatter" in row.cost for row in fsdp)
    peaks = [row.device_used for row in fsdp]
    assert peaks == sorted(peaks, reverse=True) and ddp.device_used > rows["fsdp-8"].device_used


def test_settings_key_parallel_takes_the_engines_of_the_estimator():
    from memlint.estimate.distributed import PARALLEL_MODES
    from memlint.integrate.settings import KEYS

    assert [KEYS["parallel"]("parallel", mode.upper()) for mode in PARALLEL_MODES] == list(PARALLEL_MODES)
    with pytest.raises(ValueError, match="must be one of ddp, fsdp"):
        KEYS["parallel"]("parallel", "pp")
