"""User code is traced as it runs: hooks, optimizer step in backward, checkpointing, parametrizations."""

import torch

from memlint.estimate.api import EstimateOptions, estimate
from memlint.estimate.workload import Workload, load_workload

from estimate_helpers import ROOT

TINY = str(ROOT / "fixtures" / "models" / "validation_tiny.py")


def _mlp(dim=256, layers=4):
    return torch.nn.Sequential(*[torch.nn.Linear(dim, dim) for _ in range(layers)])


def _param_bytes(module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


def _peak_gradient_bytes(result) -> int:
    return max(result.timeline.by_category["gradient"])


def test_optimizer_step_in_backward_of_the_workload_is_traced():
    """The tutorial pattern from a factory: per-parameter Adam in post-accumulate-grad hooks keeps full Adam
    state (the hooks run) but never all gradients at once (each is freed right after its step)."""
    workload = load_workload(f"{TINY}:step_in_backward")
    result = estimate(workload, EstimateOptions())
    params = _param_bytes(workload.module)
    state = result.timeline.by_category["optimizer_state"][-1]
    assert state == 2 * params  # exp_avg + exp_avg_sq; the CPU step counters are not device memory
    assert _peak_gradient_bytes(result) < params // 2


def test_step_in_backward_option_builds_the_same_pattern():
    workload = Workload(module=_mlp().to("meta"), make_inputs=lambda b: (torch.randn(b, 256),), name="mlp")
    fused = estimate(workload, EstimateOptions(batch_size=8, optimizer="adam", step_in_backward=True))
    plain = estimate(workload, EstimateOptions(batch_size=8, optimizer="adam"))
    assert fused.optimizer == "Adam per parameter, stepped in backward"
    assert _peak_gradient_bytes(plain) == _param_bytes(workload.module)
    assert _peak_gradient_bytes(fused) == 256 * 256 * 4 + 256 * 4  # at most one layer's weight and bias
    assert fused.peak_allocated < plain.peak_allocated


def test_forward_hooks_run_and_what_they_keep_is_counted():
    kept = []
    model = _mlp()
    model[1].register_forward_hook(lambda module, args, output: kept.append(output.detach() * 1))
    workload = Workload(module=model.to("meta"), make_inputs=lambda b: (torch.randn(b, 256),), name="hooked")
    result = estimate(workload, EstimateOptions(batch_size=8, steps=3))
    assert len(kept) == 3  # one call per traced step
    assert sum(t.numel() * t.element_size() for t in kept) == 3 * 8 * 256 * 4
    hooked = [r for r in result.ledger.records.values() if r.module == "1" and r.op == "mul"]
    assert len(hooked) == 3 and all(r.died is None for r in hooked)  # alive until the trace ends


def test_user_checkpointing_and_parametrizations_are_traced():
    """validation_tiny.hooked: weight_norm parametrization, torch.utils.checkpoint in forward, a hook that
    keeps block 0's output.  Checkpointed blocks keep only their inputs: far fewer activations than the
    same model without checkpointing."""
    workload = load_workload(f"{TINY}:hooked")
    result = estimate(workload, EstimateOptions())
    assert result.unsupported_ops == [] and result.unmodelled == []
    assert any(r.op == "_weight_norm_interface" for r in result.ledger.records.values())
    plain = Workload(module=torch.nn.Sequential(*[torch.nn.Sequential(
        torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)) for _ in range(3)]).to("meta"),
        make_inputs=workload.make_inputs, name="plain")
    assert result.activation_bytes < estimate(plain, EstimateOptions(batch_size=4)).activation_bytes


def test_host_copies_are_reported_not_counted():
    class Logs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(64, 64)

        def forward(self, x):
            y = self.lin(x)
            self.last = y.detach().cpu()  # a logging copy to the host
            return y.pow(2).mean()

    workload = Workload(module=Logs().to("meta"), make_inputs=lambda b: (torch.randn(b, 64),), name="logs")
    result = estimate(workload, EstimateOptions(batch_size=4))
    assert [(u["op"], u["module"]) for u in result.unsupported_ops] == [("Tensor.cpu() to the host", "Logs")]


def test_repeated_estimates_of_a_factory_workload_do_not_share_state():
    """Each estimate traces a fresh build: the hook optimizers' state of one trace is not the next one's."""
    workload = load_workload(f"{TINY}:step_in_backward")
    first = estimate(workload, EstimateOptions())
    second = estimate(workload, EstimateOptions())
    assert first.peak_allocated == second.peak_allocated
    assert first.step_peaks == second.step_peaks
