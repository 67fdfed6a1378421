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


def test_gloo_reduce_scatter_scratch_is_a_tensor_all_gather_scratch_is_not():
    """On the CPU target the mlp (one FSDP unit) peaks inside the gradients' reduce-scatter: its
    input (all gradients, full size) and gloo's full-size copy of it, which aten's split returns
    as tensors (tests/benchmarks/gloo_scratch.py), so both count as tensor bytes."""
    result = _estimate("mlp", parallel="fsdp", world_size=2)
    params = _param_bytes("mlp")
    assert result.by_category["communication"] == 2 * params
    assert result.peak_tensor_bytes == result.peak_allocated
    gathered = [r for r in result.ledger.records.values() if r.op == "gloo all_gather scratch"]
    assert gathered and all(r.category == "workspace" for r in gathered)


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
    ({"parallel": "ddp", "world_size": 2, "fsdp_param_dtype": "bf16"}, "--fsdp-param-dtype bf16 applies to"),
    ({"parallel": "fsdp", "world_size": 2, "gradient_as_bucket_view": True}, "--gradient-as-bucket-view applies"),
    ({"reshard_after_forward": False}, "--no-reshard-after-forward applies to"),
    ({"bucket_cap_mb": 10.0}, "--bucket-cap-mb 10.0 applies to --parallel ddp only"),
    ({"parallel": "ddp", "world_size": 2, "bucket_cap_mb": float("inf")}, "--bucket-cap-mb must be > 0 and at most"),
    ({"parallel": "ddp", "world_size": 2, "bucket_cap_mb": float("nan")}, "--bucket-cap-mb must be > 0 and at most"),
    ({"parallel": "fsdp", "world_size": 2, "fsdp_cpu_offload": True}, "--fsdp-cpu-offload is not modelled"),
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


@pytest.mark.parametrize(("param_dtype", "stats_dtype", "training"), [
    ("bfloat16", "bfloat16", True), ("float32", "float32", True), ("float32", "float32", False),
    (None, "float32", True), (None, None, True), ("float32", None, True)])
def test_fake_batch_norm_statistics_take_the_real_cpu_kernels_dtype(param_dtype, stats_dtype, training):
    """bf16 input: the traced saved statistics have the dtype the real CPU kernel returns."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from memlint.estimate.distributed import _mixed_batch_norm_mode

    def arguments():
        weight = torch.ones(4, dtype=getattr(torch, param_dtype)) if param_dtype else None
        bias = torch.zeros(4, dtype=getattr(torch, param_dtype)) if param_dtype else None
        mean = torch.zeros(4, dtype=getattr(torch, stats_dtype)) if stats_dtype else None
        var = torch.ones(4, dtype=getattr(torch, stats_dtype)) if stats_dtype else None
        return torch.randn(2, 4, 8, 8, dtype=torch.bfloat16), weight, bias, mean, var, training, 0.1, 1e-5

    real = torch.ops.aten.native_batch_norm(*arguments())
    with FakeTensorMode(allow_non_fake_inputs=True), _mixed_batch_norm_mode():
        traced = torch.ops.aten.native_batch_norm(*arguments())
    assert [(t.dtype, t.shape) for t in traced] == [(t.dtype, t.shape) for t in real]


def test_engine_trace_of_a_transformers_model_keeps_sdpas_is_causal():
    """transformers takes FakeTensors for graph tracing and would build a 4-D mask per layer; the
    engines' trace must give the activations of the single-GPU (meta) trace."""
    pytest.importorskip("transformers")
    workload = f"{TINY}:hf_gpt2"
    single = estimate(load_workload(workload, [], None), EstimateOptions(gpu="H100-80GB", optimizer="adam"))
    ddp = estimate(load_workload(workload, [], None),
                   EstimateOptions(gpu="H100-80GB", optimizer="adam", parallel="ddp", world_size=2))
    assert ddp.by_category["activation"] == single.by_category["activation"]


def test_the_advisor_runs_under_an_engine_and_keeps_each_remedys_own_cost():
    """Under --parallel the advisor offers what the engines can trace (no activation offload, no
    step in backward) and a non-sharding row keeps its own cost, not the engine's collectives."""
    from memlint.estimate.advisor import COSTS, advise

    workload = load_workload(f"{TINY}:mlp", [], None)
    base = estimate(workload, EstimateOptions(gpu="T4", optimizer="adam", parallel="ddp", world_size=2))
    rows = advise(workload, base, capacity_bytes=16 * 2**30, reserve=0.1)
    keys = {row.key for row in rows}
    assert "offload" not in keys and "step-in-backward" not in keys
    sgd = next(row for row in rows if row.key == "sgd")
    assert sgd.cost == COSTS["sgd"]


def test_ddp_communication_counts_the_steady_state_buckets_of_bucket_cap_mb():
    """DDP rebuilds its buckets by bucket_cap_mb after the first iteration: a cap below every
    parameter's size gives one all-reduce per parameter; the bytes sent do not change."""
    module = load_workload(f"{TINY}:mlp", [], None).module
    sizes = [p.numel() * p.element_size() for p in module.parameters()]
    tiny = _estimate("mlp", parallel="ddp", world_size=2, bucket_cap_mb=1e-6)  # 1 byte
    default = _estimate("mlp", parallel="ddp", world_size=2)
    assert tiny.communication["calls"]["all_reduce"] == len(sizes)
    assert tiny.communication["largest_buffer_bytes"] == max(sizes)
    assert default.communication["calls"]["all_reduce"] == 1  # the mlp's 1.34 MB fits one 25 MiB bucket
    assert tiny.communication["sent_bytes_total"] == default.communication["sent_bytes_total"]
