"""The CPU target's tensor ledger against the storages a real CPU run creates (the validator's instrument)."""

import torch

from memlint.estimate.api import EstimateOptions, estimate
from memlint.estimate.workload import Workload
from memlint.validate.cpu import StorageLedger


def _model():
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Dropout(0.5),
                               torch.nn.Linear(128, 8))


def _real_peak(batch: int) -> int:
    """Peak live storage bytes of the second of two real CPU SGD-momentum steps."""
    torch.manual_seed(0)
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=True)
    ledger = None
    for step in range(2):
        ledger = StorageLedger()
        ledger.track_state(type("Step", (), {"module": model, "optimizer": optimizer})())
        with ledger.mode():
            optimizer.zero_grad()
            x = torch.randn(batch, 64)
            model(x).pow(2).mean().backward()
            del x
            optimizer.step()
    return ledger.peak


def test_cpu_target_matches_a_real_cpu_step_to_the_byte():
    """Dropout keeps a float mask on the CPU (no fused kernel): the CPU target models exactly that."""
    workload = Workload(module=_model().to("meta"), make_inputs=lambda b: (torch.randn(b, 64),),
                        loss_fn=lambda out, inputs: out.pow(2).mean(),
                        optimizer_factory=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), name="tiny")
    cpu = estimate(workload, EstimateOptions(batch_size=32, device="cpu", steps=2))
    assert cpu.peak_tensor_bytes == _real_peak(32)
    cuda = estimate(workload, EstimateOptions(batch_size=32, steps=2))
    assert cuda.kernel_choices == {"dropout:native_dropout (bool mask)": 2}
    assert cuda.peak_tensor_bytes < cpu.peak_tensor_bytes  # a bool mask instead of a float one
