from dataclasses import replace

import pytest
import torch

from memlint.errors import TargetError
from memlint.estimate.api import EstimateOptions, estimate, fits, max_batch_size, resolve_capacity
from memlint.estimate.workload import Workload, load_workload

from estimate_helpers import target


@pytest.fixture(scope="module")
def mlp():
    return load_workload(target("mlp.py") + ":build")


@pytest.fixture(scope="module")
def gpt():
    return load_workload(target("gpt_decoder.py") + ":build")


def param_bytes(module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


def activation_bytes(result) -> int:
    return sum(result.by_module.values())


def test_parameters_and_adam_state(mlp):
    result = estimate(mlp, EstimateOptions(optimizer="adam"))
    params = param_bytes(mlp.module)
    assert result.by_category["parameter"] == params
    # Adam keeps exp_avg and exp_avg_sq on the device; `step` is a CPU tensor.
    assert result.by_category["optimizer_state"] == 2 * params
    assert result.peak_allocated >= result.peak_tensor_bytes
    assert result.peak_reserved >= result.peak_allocated
    assert result.device_used > result.peak_reserved


def test_sgd_has_no_state_and_momentum_has_one(mlp):
    params = param_bytes(mlp.module)
    assert estimate(mlp, EstimateOptions(optimizer="sgd")).by_category["optimizer_state"] == 0
    assert estimate(mlp, EstimateOptions(optimizer="sgd-momentum")).by_category["optimizer_state"] == params


def _gradient_bytes_in_steady_forward(result) -> int:
    t = result.timeline
    values = [g for g, ph, st in zip(t.by_category["gradient"], t.phase, t.step) if ph == "forward" and st == 1]
    return values[-1]  # at the end of the steady-state forward


def test_set_to_none_false_keeps_gradients(mlp):
    kept = estimate(mlp, EstimateOptions(set_to_none=False))
    dropped = estimate(mlp, EstimateOptions(set_to_none=True))
    assert _gradient_bytes_in_steady_forward(kept) == param_bytes(mlp.module)
    assert _gradient_bytes_in_steady_forward(dropped) == 0


def test_amp_bf16_reduces_activations(gpt):
    fp32 = estimate(gpt, EstimateOptions())
    amp = estimate(gpt, EstimateOptions(precision="amp-bf16"))
    assert activation_bytes(amp) < activation_bytes(fp32)


def test_bf16_model_halves_parameters(gpt):
    result = estimate(gpt, EstimateOptions(precision="bf16"))
    assert result.by_category["parameter"] == param_bytes(gpt.module) // 2


def test_checkpointing_reduces_activations(gpt):
    plain = estimate(gpt, EstimateOptions())
    ckpt = estimate(gpt, EstimateOptions(checkpointing=True))
    assert ckpt.checkpointed == [f"blocks.{i}" for i in range(len(gpt.module.blocks))]
    assert activation_bytes(ckpt) < activation_bytes(plain)


def test_a_workload_without_factory_is_traced_in_place_and_restored(gpt):
    """No copy: the estimator's own changes (checkpoint wrappers, bf16 cast, gradients) are undone."""
    in_place = Workload(module=gpt.module, make_inputs=gpt.make_inputs, name="in-place")
    estimate(in_place, EstimateOptions(checkpointing=True, precision="bf16", set_to_none=False))
    assert all("forward" not in vars(block) for block in gpt.module.blocks)
    assert {p.dtype for p in gpt.module.parameters()} == {torch.float32}
    assert all(p.grad is None for p in gpt.module.parameters())


def test_checkpointing_puts_back_a_users_instance_forward():
    from memlint.estimate.step import apply_checkpointing, remove_checkpointing

    blocks = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()) for _ in range(2)])

    def own(x):
        return x

    blocks[0].forward = own
    names = apply_checkpointing(blocks)
    assert names == ["0", "1"] and blocks[0].forward is not own
    remove_checkpointing(blocks, names)
    assert vars(blocks[0])["forward"] is own and "forward" not in vars(blocks[1])


def test_grad_accum_reduces_peak(gpt):
    full = estimate(gpt, EstimateOptions(batch_size=8))
    accum = estimate(gpt, EstimateOptions(batch_size=8, grad_accum=4))
    assert accum.micro_batch == 2
    assert accum.peak_allocated < full.peak_allocated


@pytest.mark.parametrize(("stage", "sharded"), [
    (1, {"optimizer_state"}), (2, {"optimizer_state", "gradient"}), (3, {"optimizer_state", "gradient", "parameter"}),
])
def test_zero_sharding_divides_exactly_the_stage_categories(mlp, stage, sharded):
    """Per rank, every storage of a sharded category counts ceil(bytes / world_size); the others are whole."""
    options = EstimateOptions(optimizer="adam", set_to_none=False, world_size=4, zero_stage=stage)
    result = estimate(mlp, options)
    live = [r for r in result.ledger.records.values()
            if r.category in ("parameter", "gradient", "optimizer_state") and r.died is None]
    for category in ("parameter", "gradient", "optimizer_state"):
        whole = [r.nbytes for r in live if r.category == category]
        expected = sum(-(-n // 4) for n in whole) if category in sharded else sum(whole)
        assert result.by_category[category] == expected, category


def test_data_dependent_ops_are_reported():
    class Masked(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(16, 16)

        def forward(self, x):
            y = self.lin(x)
            return y[y > 0].sum() + x.nonzero().shape[0]

    workload = Workload(module=Masked().to("meta"), make_inputs=lambda b: (torch.randn(b, 16),), name="masked")
    result = estimate(workload, EstimateOptions(batch_size=4))
    ops = {u["op"] for u in result.unsupported_ops}
    assert {"aten.nonzero"} <= ops or {"aten.index"} <= ops
    assert all(u["module"] is not None and u["fallback"] for u in result.unsupported_ops)


def test_forward_errors_are_target_errors():
    class Broken(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x.view(3, 7))

    workload = Workload(module=Broken().to("meta"), make_inputs=lambda b: (torch.randn(b, 4),), name="broken")
    with pytest.raises(TargetError, match="forward of 'broken'"):
        estimate(workload, EstimateOptions())


def test_max_batch_size_search(mlp):
    options = EstimateOptions(optimizer="adam")
    probe = estimate(mlp, replace(options, batch_size=64))
    capacity = probe.device_used + 3 * 2**20
    best = max_batch_size(mlp, options, capacity, reserve=0.0)
    assert best >= 1
    assert fits(estimate(mlp, replace(options, batch_size=best)), capacity, 0.0).fits
    assert not fits(estimate(mlp, replace(options, batch_size=best + 1)), capacity, 0.0).fits


def test_resolve_capacity():
    assert resolve_capacity(capacity="24GiB") == ("custom", 24 * 2**30)
    name, total = resolve_capacity(gpu="a100-80gb")
    assert name == "A100-80GB" and total > 80 * 10**9
    assert resolve_capacity() == (None, None)


def test_json_schema(mlp):
    document = estimate(mlp, EstimateOptions()).to_json()
    assert document["schema_version"] == 2
    for key in ("peak_allocated", "peak_reserved", "device_used", "peak_tensor_bytes", "by_category",
                "by_module", "timeline", "unsupported_ops", "unmodelled", "options", "target", "memory_stats",
                "fragmentation_bytes", "step_peaks", "kernel_choices"):
        assert key in document
    assert document["memory_stats"]["reserved_bytes.all.peak"] == document["peak_reserved"]
    assert document["fragmentation_bytes"] >= 0


def _cached_segment_ledger():
    """Step 0 caches a 30 MiB segment; step 1 needs 40 MiB: unbounded, 70 MiB are reserved."""
    from memlint.estimate.tracer import Ledger

    MiB = 2**20
    ledger = Ledger()
    ledger.set_phase("forward", step=0)
    ledger.transient(30 * MiB, "a", "temporary")
    ledger.set_phase("forward", step=1)
    ledger.op_index += 1
    ledger.transient(40 * MiB, "b", "temporary")
    return ledger


def test_fits_when_only_cached_segments_exceed():
    """device_used says 70 MiB + context, but the allocator releases the cached 30 MiB segment before it
    reports out of memory: in 60 MiB + context the step fits, needing 40 MiB + context."""
    from memlint.estimate.api import Estimate, Timeline, _replay

    MiB, context = 2**20, 100 * 2**20
    ledger = _cached_segment_ledger()
    replay = _replay(ledger, EstimateOptions())
    result = Estimate(replay.allocator.peak_allocated, replay.allocator.peak_reserved,
                      replay.allocator.peak_reserved + context, 0, {}, {}, Timeline(), [], None, (8, 0),
                      EstimateOptions(), ledger=ledger)
    assert result.device_used == 70 * MiB + context
    tight = fits(result, 60 * MiB + context, reserve=0.0)
    assert tight.fits and tight.cache_released and tight.required_bytes == 40 * MiB + context
    too_tight = fits(result, 35 * MiB + context, reserve=0.0)
    assert not too_tight.fits and not too_tight.cache_released


def test_fits_at_the_capacity_boundary(gpt):
    result = estimate(gpt, EstimateOptions(batch_size=8))
    assert fits(result, result.device_used, reserve=0.0).fits
    assert not fits(result, result.peak_allocated // 2, reserve=0.0).fits


def test_replay_with_limit_releases_cache():
    from memlint.estimate.api import _replay

    MiB = 2**20
    unbounded = _replay(_cached_segment_ledger(), EstimateOptions()).allocator
    assert unbounded.reserved == 70 * MiB
    limited = _replay(_cached_segment_ledger(), EstimateOptions(), limit=50 * MiB).allocator
    assert limited.reserved == 40 * MiB and limited.peak_reserved == 40 * MiB


def test_cpu_target_has_no_rounding_and_no_cache(mlp):
    cpu = estimate(mlp, EstimateOptions(device="cpu", optimizer="adam"))
    assert cpu.peak_allocated == cpu.peak_reserved == cpu.device_used
    assert cpu.overheads == {} and cpu.target == "CPU"
    assert cpu.peak_allocated == cpu.peak_tensor_bytes  # an MLP's CPU kernels allocate no scratch


def test_checkpointing_without_repeated_blocks_says_so(tmp_path):
    import io

    from memlint.estimate.report import render_table

    workload = Workload(module=torch.nn.Linear(8, 8).to("meta"), make_inputs=lambda b: (torch.randn(b, 8),),
                        name="lin")
    result = estimate(workload, EstimateOptions(batch_size=2, checkpointing=True))
    assert result.checkpointed == []
    out = io.StringIO()
    render_table(result, file=out)
    assert "--checkpointing found no repeated blocks to checkpoint" in out.getvalue()


def test_peaks_settle_after_the_first_step(gpt):
    """The steady state: six traced steps, the allocator model's peaks do not move after step 1."""
    result = estimate(gpt, EstimateOptions(optimizer="adam", steps=6))
    peaks = [(p["allocated"], p["reserved"]) for p in result.step_peaks]
    assert len(peaks) == 6 and len(set(peaks[1:])) == 1
    assert peaks[0][0] < peaks[1][0]  # step 0 has no optimizer state yet
    assert result.memory_stats["allocated_bytes.all.peak"] == peaks[1][0] == result.peak_allocated


def test_grouped_query_attention_on_the_efficient_kernel_is_noted():
    workload = load_workload(target("hf_models.py") + ":llama")
    result = estimate(workload, EstimateOptions(gpu="A100-80GB"))  # fp32: flash does not apply
    assert result.kernel_choices["sdpa:efficient"] > 0
    assert any("grouped-query" in item["kernel"] for item in result.unmodelled)


def test_cuda_dropout_keeps_a_bool_mask_and_the_cpu_a_float_one():
    n = 4096

    class Drop(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(n))
            self.drop = torch.nn.Dropout(0.1)

        def forward(self, x):
            return self.drop(x * self.w)

    workload = Workload(module=Drop().to("meta"), make_inputs=lambda b: (torch.randn(b, n),), name="drop")
    cuda = estimate(workload, EstimateOptions(batch_size=8))
    # native_dropout (CUDA): a bool mask, 1 byte per element, plus the fp32 output
    assert cuda.by_module["drop"] == 8 * n * 1 + 8 * n * 4
    assert cuda.kernel_choices == {"dropout:native_dropout (bool mask)": 3}  # one call in each of the 3 steps
    # the CPU decomposition: a float mask, 4 bytes per element, plus the output
    cpu = estimate(workload, EstimateOptions(batch_size=8, device="cpu"))
    assert cpu.by_module["drop"] == 8 * n * 4 + 8 * n * 4


def test_explicit_cuda_code_traces_on_meta(tmp_path):
    source = tmp_path / "cuda_model.py"
    source.write_text(
        "import torch\n"
        "from memlint import Workload\n\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = torch.nn.Linear(8, 8)\n\n"
        "    def forward(self, x):\n"
        "        return self.lin(x) + torch.zeros(8, device='cuda')\n\n"
        "def build():\n"
        "    model = M().cuda()\n"
        "    return Workload(module=model, make_inputs=lambda b: (torch.randn(b, 8).to('cuda'),), name='cuda')\n")
    result = estimate(load_workload(f"{source}:build"), EstimateOptions(batch_size=2))
    assert result.by_category["parameter"] == (8 * 8 + 8) * 4


@pytest.mark.slow
@pytest.mark.parametrize("factory", ["gpt2", "bert", "llama"])
def test_transformers_models_trace_with_their_parameters(factory):
    workload = load_workload(target("hf_models.py") + f":{factory}")
    plain = estimate(workload, EstimateOptions())
    assert plain.by_category["parameter"] == param_bytes(workload.module)
    ckpt = estimate(workload, EstimateOptions(checkpointing=True, precision="amp-bf16"))
    assert ckpt.checkpointed and ckpt.activation_bytes < plain.activation_bytes
