"""Fused RNNs: oneDNN's LSTM workspace on the CPU (against the installed torch), cuDNN's model on CUDA."""

import pytest
import torch

from memlint.estimate.api import EstimateOptions, estimate
from memlint.estimate.rnn import cudnn_reserve_bytes, good_ld, onednn_lstm_workspace_bytes
from memlint.estimate.workload import Workload


def _real_workspace(batch, time, input_size, hidden, dtype):
    """The workspace tensor the installed torch's mkldnn_rnn_layer returns for one LSTM layer."""
    sizes = []

    class Record(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func is torch.ops.aten.mkldnn_rnn_layer.default:
                sizes.append(out[3].numel())
            return out

    lstm = torch.nn.LSTM(input_size, hidden, 1, batch_first=True)
    x = torch.randn(batch, time, input_size, requires_grad=True)
    with Record(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        lstm(x)
    return sizes[0]


@pytest.mark.parametrize(("batch", "time", "input_size", "hidden", "dtype"), [
    (4, 16, 128, 128, torch.float32), (3, 5, 20, 20, torch.float32), (4, 16, 256, 128, torch.float32),
    (2, 9, 33, 130, torch.float32), (4, 16, 128, 128, torch.bfloat16), (5, 7, 100, 64, torch.bfloat16),
])
def test_onednn_workspace_formula_matches_the_installed_torch(batch, time, input_size, hidden, dtype):
    try:
        real = _real_workspace(batch, time, input_size, hidden, dtype)
    except RuntimeError as exc:  # a CPU without a bf16 LSTM primitive
        pytest.skip(f"no oneDNN {dtype} LSTM here: {exc}")
    size = 2 if dtype == torch.bfloat16 else 4
    assert onednn_lstm_workspace_bytes(time, batch, input_size, hidden, size) == real


def test_good_ld():
    assert good_ld(128) == 128         # 128 elements is not a multiple of 256
    assert good_ld(512) == 528         # a multiple of 256 gets 64 bytes more
    assert good_ld(20) == 32           # 64-byte aligned
    assert good_ld(256, 2) == 288


class LstmLm(torch.nn.Module):
    def __init__(self, dim=64, layers=2, mode="LSTM"):
        super().__init__()
        self.embed = torch.nn.Embedding(100, dim)
        self.rnn = getattr(torch.nn, mode)(dim, dim, layers, batch_first=True)
        self.head = torch.nn.Linear(dim, 100)

    def forward(self, ids):
        out, _ = self.rnn(self.embed(ids))
        return self.head(out)


def _lm(mode="LSTM"):
    return Workload(module=LstmLm(mode=mode).to("meta"),
                    make_inputs=lambda b: (torch.zeros(b, 32, dtype=torch.long),), name=f"{mode}-lm")


def test_cpu_lstm_runs_onednn_and_keeps_its_workspace():
    result = estimate(_lm(), EstimateOptions(batch_size=4, device="cpu"))
    assert result.kernel_choices["rnn:onednn lstm"] == 3  # one per step (3 steps)
    workspaces = [r for r in result.ledger.records.values() if r.op == "mkldnn_rnn_layer" and r.nbytes
                  == onednn_lstm_workspace_bytes(32, 4, 64, 64)]
    assert len(workspaces) == 2 * 3  # two layers, three steps, each kept for the backward
    assert all(r.category == "activation" for r in workspaces)


def test_cpu_gru_takes_the_decomposed_path_as_pytorch_does():
    result = estimate(_lm("GRU"), EstimateOptions(batch_size=4, device="cpu"))
    assert not any(key.startswith("rnn:") for key in result.kernel_choices)


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_cuda_rnn_is_cudnn_with_its_reserve_and_a_warning_naming_the_module(mode):
    result = estimate(_lm(mode), EstimateOptions(batch_size=4, gpu="A100-80GB"))
    assert result.kernel_choices[f"rnn:cudnn {mode.lower()}"] == 3
    reserve = cudnn_reserve_bytes(mode.lower(), 32, 4, 64, 2, 1, 4)
    assert any(r.nbytes == reserve and r.category == "activation" for r in result.ledger.records.values())
    assert {item["module"] for item in result.unmodelled} == {"rnn"}
    assert "workspace not modelled" in result.unmodelled[0]["kernel"]


def test_cudnn_reserve_formula():
    # LSTM: per layer/direction/step 4H gates + H cell state; plus the outputs of every layer but the last
    assert cudnn_reserve_bytes("lstm", 10, 2, 8, 2, 1, 4) == (2 * 1 * 10 * 2 * (4 * 8 + 8) + 1 * 10 * 2 * 8) * 4
    assert cudnn_reserve_bytes("gru", 10, 2, 8, 1, 2, 2) == (1 * 2 * 10 * 2 * 3 * 8) * 2


def test_bf16_lstm_on_cuda_is_not_cudnn():
    """cudnn_is_acceptable takes float16/32/64 only: a bf16 model runs PyTorch's native path."""
    result = estimate(_lm(), EstimateOptions(batch_size=4, gpu="A100-80GB", precision="bf16"))
    assert result.kernel_choices.get("rnn:native (decomposed)") == 3
