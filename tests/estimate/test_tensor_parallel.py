"""--parallel tp | fsdp+tp: plans (the model's own, or derived from the dataflow) and the traced per-rank step."""

import re
from pathlib import Path

import pytest
import torch
from torch import nn

from memlint.errors import TargetError, UsageError
from memlint.estimate.api import EstimateOptions, estimate
from memlint.estimate.tensor_parallel import derive_plan, find_plan, model_plan
from memlint.estimate.workload import load_workload

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "fixtures/models/validation_tiny.py")


def _estimate(name, **options):
    return estimate(load_workload(f"{TINY}:{name}", [], None), EstimateOptions(device="cpu", optimizer="adam",
                                                                               **options))


def _meta(factory, *shape, dtype=torch.float32):
    with torch.device("meta"):
        module = factory()
        return module, (torch.empty(*shape, dtype=dtype),)


class _Blocks(nn.Module):
    """Two blocks of ``block()``: repeated blocks, as FSDP2 and --checkpointing find them."""

    def __init__(self, block):
        super().__init__()
        self.blocks = nn.ModuleList([block(), block()])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


class _Swiglu(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        # declared in an order unlike the call order, with names that say nothing: the plan follows the data
        self.a, self.b, self.c = nn.Linear(4 * dim, dim), nn.Linear(dim, 4 * dim), nn.Linear(dim, 4 * dim)

    def forward(self, x):
        return x + self.a(nn.functional.silu(self.b(x)) * self.c(x))


class _ThroughNorm(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.first, self.norm, self.second = nn.Linear(dim, dim), nn.LayerNorm(dim), nn.Linear(dim, dim)

    def forward(self, x):
        return x + self.second(self.norm(self.first(x)))


class _ThroughResidual(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.first, self.second = nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, x):
        return self.second(x + self.first(x))


def test_derived_plan_pairs_the_mlp_linears_in_call_order():
    workload = load_workload(f"{TINY}:mlp", [], None)
    with torch.device("meta"):
        inputs = workload.make_inputs(2)
    styles = derive_plan(workload.module.to("meta"), inputs).styles
    linears = [name for name, m in workload.module.named_modules() if isinstance(m, nn.Linear)]
    assert styles == {name: ("colwise", "rowwise")[i % 2] for i, name in enumerate(linears)}


def test_derived_plan_of_the_gpt_decoder_shards_attention_and_mlp_of_each_block():
    workload = load_workload(f"{TINY}:gpt_decoder", [], None)
    with torch.device("meta"):
        inputs = workload.make_inputs(2)
    module = workload.module.to("meta")
    styles = derive_plan(module, inputs).styles
    expected = {}
    for i in range(len(module.blocks)):
        expected.update({f"blocks.{i}.qkv": "colwise", f"blocks.{i}.proj": "rowwise",
                         f"blocks.{i}.mlp.0": "colwise", f"blocks.{i}.mlp.2": "rowwise"})
    assert styles == expected  # the head (outside the blocks) stays replicated


def test_swiglu_gate_and_up_are_colwise_and_down_rowwise_whatever_their_names():
    module, inputs = _meta(lambda: _Blocks(_Swiglu), 2, 16)
    styles = derive_plan(module, inputs).styles
    for i in (0, 1):
        assert styles == {**styles, f"blocks.{i}.b": "colwise", f"blocks.{i}.c": "colwise", f"blocks.{i}.a": "rowwise"}
    assert len(styles) == 6


@pytest.mark.parametrize("block", [_ThroughNorm, _ThroughResidual])
def test_a_norm_or_the_residual_between_two_linears_is_no_pair(block):
    module, inputs = _meta(lambda: _Blocks(block), 2, 16)
    assert derive_plan(module, inputs) is None
    with pytest.raises(TargetError, match="has no tensor parallel plan"):
        find_plan(module, inputs, "toy")


def test_the_model_plan_of_a_transformers_llama_is_translated():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=64)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    plan = model_plan(model)
    assert plan.source == "model"
    for pattern, style in config.base_model_tp_plan.items():
        for layer in range(2):
            assert plan.styles[f"model.{pattern.replace('*', str(layer))}"] == style
    assert len(plan.styles) == 2 * len(config.base_model_tp_plan)
    assert "lm_head: colwise_gather_output" in plan.skipped  # a style not translated is said


def _shard_bytes(module, styles, ranks):
    """Bytes rank 0 holds of each parameter under ``styles``: Colwise shards weight and bias on dim 0,
    Rowwise the weight on dim 1 (its bias is replicated); the rest is replicated."""
    total = 0
    for name, sub in module.named_modules():
        for key, param in sub.named_parameters(recurse=False):
            size = param.numel() * param.element_size()
            sharded = styles.get(name) == "colwise" or (styles.get(name) == "rowwise" and key == "weight")
            total += size // ranks if sharded else size
    return total


def test_tp_estimate_shards_the_planned_parameters_and_all_reduces_the_rowwise_outputs():
    one, two = _estimate("mlp"), _estimate("mlp", parallel="tp", world_size=2)
    module = load_workload(f"{TINY}:mlp", [], None).module
    styles = two.tensor_parallel["styles"]
    assert two.by_category["parameter"] == _shard_bytes(module, styles, 2)
    assert two.by_category["optimizer_state"] >= 2 * _shard_bytes(module, styles, 2)
    assert two.peak_allocated < one.peak_allocated
    batch, width = two.batch_size, module[2].out_features
    # forward: the two Rowwise outputs; backward: the input gradient of the second Colwise (the first's
    # input, the batch, needs none); fp32
    expected = 4 * (batch * width + batch * module[6].out_features + batch * module[4].in_features)
    assert two.communication["calls"] == {"all_reduce": 3}
    assert two.communication["buffer_bytes"]["all_reduce"] == expected
    assert two.communication["sent_bytes"]["all_reduce"] == expected  # ring all-reduce: 2(n-1)/n = 1 at n = 2


class _TiedLM(nn.Module):
    """Embedding and output head sharing one weight (not in the plan: replicated), MLP blocks between."""

    def __init__(self, vocab=64, dim=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
                                    for _ in range(2))
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids):
        x = self.emb(ids)
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


def _unique_shard_bytes(module, styles, ranks):
    seen, total = set(), 0
    for name, sub in module.named_modules():
        for key, param in sub.named_parameters(recurse=False):
            if id(param) in seen:
                continue
            seen.add(id(param))
            sharded = styles.get(name) == "colwise" or (styles.get(name) == "rowwise" and key == "weight")
            total += param.numel() * param.element_size() // (ranks if sharded else 1)
    return total


def test_tied_replicated_parameters_stay_one_tensor():
    from memlint import Workload

    with torch.device("meta"):
        module = _TiedLM()
    workload = Workload(module=module, make_inputs=lambda b: (torch.zeros(b, 8, dtype=torch.long),),
                        loss_fn=lambda out, inputs: out.float().pow(2).mean(), default_batch_size=2, name="tied")
    result = estimate(workload, EstimateOptions(device="cpu", optimizer="adam", parallel="tp", world_size=2))
    styles = result.tensor_parallel["styles"]
    assert styles == {f"blocks.{i}.{j}": style for i in (0, 1) for j, style in (("0", "colwise"), ("2", "rowwise"))}
    assert result.by_category["parameter"] == _unique_shard_bytes(_TiedLM(), styles, 2)


def test_a_vit_with_root_parameters_and_multihead_attention_traces_with_its_mlps_sharded():
    result = _estimate("vit_encoder", parallel="tp", world_size=2)
    module = load_workload(f"{TINY}:vit_encoder", [], None).module
    styles = result.tensor_parallel["styles"]
    # nn.MultiheadAttention projects with its own in_proj_weight (F.multi_head_attention_forward), not
    # through nn.Linear calls: the derived plan shards each layer's MLP only
    assert sorted(styles) == sorted(f"encoder.layers.{i}.linear{j}" for i in range(4) for j in (1, 2))
    assert result.by_category["parameter"] == _shard_bytes(module, styles, 2)


def test_a_functional_collective_output_is_counted_once():
    """wait_tensor returns its input for real; its fake kernel's fresh copy is not counted."""
    result = _estimate("mlp", parallel="tp", world_size=2)
    assert result.communication["calls"]["all_reduce"] == 3
    assert not [r for r in result.ledger.records.values() if r.op == "wait_tensor"]


def test_fsdp_tp_shards_over_the_2d_mesh():
    tp = _estimate("mlp", parallel="tp", world_size=2)
    both = _estimate("mlp", parallel="fsdp+tp", world_size=4, tp_size=2)
    # FSDP2 over the 2 "dp" ranks halves each TP shard again (dim 0 padded to a multiple of 2: exact here)
    assert both.by_category["parameter"] < tp.by_category["parameter"]
    assert both.by_category["optimizer_state"] * 2 == pytest.approx(tp.by_category["optimizer_state"], rel=0.01)
    assert set(both.communication["calls"]) == {"all_reduce", "all_gather", "reduce_scatter"}
    # the all-reduces run in the 2-rank "tp" group, not over the world of 4: ring factor 2(n-1)/n = 1
    assert both.communication["sent_bytes"]["all_reduce"] == both.communication["buffer_bytes"]["all_reduce"]


def test_a_forward_with_a_fixed_head_count_is_not_tp_ready():
    with pytest.raises(TargetError, match=r"not tensor-parallel-ready: RuntimeError: shape '\[2, 32, 3, 4, 32\]' is invalid") as caught:
        _estimate("gpt_decoder", parallel="tp", world_size=2)
    assert "\n" not in str(caught.value)


def test_the_fake_process_group_is_gone_after_a_failed_trace():
    import torch.distributed as dist

    with pytest.raises(TargetError):
        _estimate("gpt_decoder", parallel="tp", world_size=2)
    assert not dist.is_initialized()


@pytest.mark.parametrize("options, needle", [
    ({"parallel": "tp", "world_size": 4, "tp_size": 2}, "--tp-size 2 needs --parallel fsdp+tp"),
    ({"parallel": "fsdp+tp", "world_size": 6, "tp_size": 4}, "--tp-size 4 must be >= 1 and divide --world-size 6"),
    ({"parallel": "fsdp+tp", "world_size": 4}, "needs --tp-size"),
    ({"tp_size": 2}, "--tp-size 2 needs --parallel fsdp+tp"),
])
def test_bad_tp_options_are_one_line_errors(options, needle):
    with pytest.raises(UsageError, match=re.escape(needle)):
        EstimateOptions(**options).validate()


def test_cli_tp_size_error_names_the_option(capsys):
    from memlint.cli import main

    assert main(["estimate", f"{TINY}:mlp", "--device", "cpu", "--parallel", "fsdp+tp", "--world-size", "6",
                 "--tp-size", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--tp-size 4" in err and len(err.splitlines()) == 1


def test_advisor_tp_rows_fall_with_the_degree_and_say_their_all_reduce_bytes():
    from memlint.estimate.advisor import TP_ADVISOR_DEGREES, advise

    workload = load_workload(f"{TINY}:mlp", [], None)
    base = estimate(workload, EstimateOptions(device="cpu", optimizer="adam"))
    wanted = {f"tp-{n}" for n in TP_ADVISOR_DEGREES}

    def run(w, options):  # only the TP rows are traced; the others answer the baseline
        return estimate(w, options) if options.parallel == "tp" else base

    rows = {row.key: row for row in advise(workload, base, world_size=8, full=True, run=run) if row.key in wanted}
    assert set(rows) == wanted
    peaks = [rows[f"tp-{n}"].device_used for n in TP_ADVISOR_DEGREES]
    assert peaks == sorted(peaks, reverse=True) and peaks[0] < base.device_used
    assert all("all-reduce" in row.cost and "per rank per step" in row.cost for row in rows.values())


def test_advisor_skips_tp_degrees_the_model_cannot_run_and_says_why():
    from memlint.estimate.advisor import advise

    workload = load_workload(f"{TINY}:mlp", [], None)
    base = estimate(workload, EstimateOptions(device="cpu", optimizer="adam"))
    tried = []

    def run(w, options):
        if options.parallel == "tp":
            tried.append(options.world_size)
            raise TargetError("--parallel tp: the forward of 'mlp' is not tensor-parallel-ready: x")
        return base

    skipped = {}
    rows = advise(workload, base, world_size=8, full=True, run=run, skipped=skipped)
    assert tried == [2]  # a failed degree stops the larger ones
    assert not any(row.key.startswith("tp-") for row in rows)
    assert list(skipped.values()) == ["--parallel tp: the forward of 'mlp' is not tensor-parallel-ready: x"]


def test_settings_keys_take_tp():
    from memlint.integrate.settings import KEYS

    assert KEYS["parallel"]("parallel", "fsdp+tp") == "fsdp+tp"
    assert KEYS["tp-size"]("tp-size", 2) == 2
    with pytest.raises(ValueError):
        KEYS["tp-size"]("tp-size", 0)


@pytest.mark.slow
def test_two_process_gloo_tp_run_matches_the_estimate(monkeypatch):
    """A real 2-process tensor parallel run (gloo, 127.0.0.1, bounded): rank 0's tensor peak within 1%."""
    from memlint.validate.distributed import measure_distributed

    monkeypatch.chdir(ROOT)
    options = EstimateOptions(device="cpu", optimizer="adam", parallel="tp", world_size=2, steps=2)
    target = "fixtures/models/validation_tiny.py:mlp"
    measured = measure_distributed(target, [], options, warmup=1, steps=1, timeout=60)
    estimated = estimate(load_workload(target, [], None), options).peak_tensor_bytes
    assert abs(estimated - measured.peak_tensor_bytes) / measured.peak_tensor_bytes < 0.01
