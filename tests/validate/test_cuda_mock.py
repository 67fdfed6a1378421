"""The CUDA path without a GPU: torch.cuda and pynvml replaced by fakes."""

import sys
import types

import pytest
import torch

from memlint.validate import cuda as cuda_mod
from memlint.validate import runner


class FakeNvml(types.ModuleType):
    """pynvml stand-in: memory used grows by 1 MiB per query."""

    def __init__(self):
        super().__init__("pynvml")
        self.used = 100 * 2**20

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, index):
        return ("handle", index)

    def nvmlDeviceGetMemoryInfo(self, handle):
        self.used += 2**20
        return types.SimpleNamespace(used=self.used)

    def nvmlSystemGetDriverVersion(self):
        return "570.00"


class FakeStep:
    """A prepared step that raises OOM at a chosen call."""

    def __init__(self, oom_at=None):
        self.calls = 0
        self.oom_at = oom_at

    def run(self, on_phase=None):
        self.calls += 1
        on_phase("forward")
        if self.calls == self.oom_at:
            on_phase("backward")
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        on_phase("optimizer")


@pytest.fixture
def fake_cuda(monkeypatch):
    nvml = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    state = {"allocated": 3 * 2**30, "reset": 0}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda: state.__setitem__("reset", state["reset"] + 1))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: 5 * 2**30)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda: 6 * 2**30)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda: state["allocated"])
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda: 4 * 2**30)
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda: {"active_bytes.all.peak": 5 * 2**30,
                                                            "inactive_split_bytes.all.peak": 2**20})
    monkeypatch.setattr(runner, "load_real_workload", lambda *a, **k: object())
    return nvml, state


def test_measure_cuda_reads_allocator_and_nvml(fake_cuda, monkeypatch):
    nvml, state = fake_cuda
    step = FakeStep()
    monkeypatch.setattr(runner, "prepare_step", lambda *a, **k: step)
    from memlint.estimate.api import EstimateOptions

    measured = cuda_mod.measure_cuda("t.py:f", [], EstimateOptions(), warmup=2, steps=3, interval=0.001)
    assert step.calls == 5 and state["reset"] == 1
    assert measured.oom is None
    assert (measured.peak_allocated, measured.peak_reserved) == (5 * 2**30, 6 * 2**30)
    assert measured.active_bytes_peak == 5 * 2**30 and measured.inactive_split_bytes_peak == 2**20
    assert measured.nvml_used_before == 101 * 2**20
    assert measured.nvml_samples >= 1
    assert measured.device_used == measured.nvml_used_peak - measured.nvml_used_before > 0


def test_oom_in_measured_steps_is_a_result(fake_cuda, monkeypatch):
    monkeypatch.setattr(runner, "prepare_step", lambda *a, **k: FakeStep(oom_at=4))
    from memlint.estimate.api import EstimateOptions

    measured = cuda_mod.measure_cuda("t.py:f", [], EstimateOptions(), warmup=2, steps=3, interval=0.001)
    assert measured.oom["phase"] == "backward" and measured.oom["step"] == 3
    assert measured.oom["measured_phase"] is True
    assert measured.oom["allocated_bytes"] == 3 * 2**30
    assert "out of memory" in measured.oom["message"]


def test_nvml_sampler_without_pynvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    sampler = cuda_mod.NvmlSampler()
    assert not sampler.available and sampler.used() is None
    with sampler:
        pass
    assert sampler.peak is None and sampler.samples == 0


def test_cuda_session_builds_a_valid_record(fake_cuda, monkeypatch):
    """validate(device='cuda') with faked torch.cuda gives rows, a record that passes the schema, and OOM -> outcome oom."""
    import os

    from validate_helpers import ROOT

    from memlint.validate import record as records
    from memlint.validate import session

    props = types.SimpleNamespace(name="NVIDIA H200", total_memory=150 * 2**30, major=9, minor=0)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    monkeypatch.setattr(runner, "prepare_step", lambda *a, **k: FakeStep(oom_at=3))
    from memlint.estimate.api import EstimateOptions

    monkeypatch.chdir(ROOT)
    outcome = session.validate("fixtures/models/mlp.py:build", [], EstimateOptions(batch_size=8, gpu="H200-141GB"),
                               "cuda", 2, 3)
    records.check_record(outcome.record)
    assert outcome.record["outcome"] == "oom" and not outcome.within(10.0)
    assert outcome.record["environment"]["gpu_name"] == "NVIDIA H200"
    assert outcome.record["environment"]["driver_version"] == "570.00"
    assert [r.name for r in outcome.rows] == ["peak_allocated", "peak_reserved", "device_used"]
    assert os.path.basename(outcome.record["workload"]["target"]) == "mlp.py:build"
