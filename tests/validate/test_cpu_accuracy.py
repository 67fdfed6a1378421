"""CPU ground truth measured now: the CPU-target estimate against the profiler on a real CPU step.

A representative subset of the CPU records' workloads is measured live (the
replay test re-estimates all of them against their recorded measurements):
convolutions with oneDNN scratch (bf16), the 2-layer LSTM with its oneDNN
workspace, T5 and the ViT encoder with dropout (float masks on the CPU), the
optimizer step in backward and user hooks.  Bounds: fixtures/validation/bounds.json.
"""

import os

import pytest
from validate_helpers import ROOT, TINY

from memlint.estimate.api import EstimateOptions, estimate
from memlint.estimate.workload import load_workload
from memlint.validate.accuracy import bound_for, load_bounds, relative_error
from memlint.validate.cpu import measure_cpu

LIVE = [("mlp", "fp32", "adam"), ("cnn_bn", "amp-bf16", "sgd-momentum"), ("lstm_lm_2layer", "fp32", "adam"),
        ("hf_t5", "fp32", "adam"), ("vit_encoder", "amp-bf16", "sgd-momentum"), ("step_in_backward", "fp32", "adam"),
        ("hooked", "amp-bf16", "sgd-momentum")]


@pytest.fixture(scope="module", autouse=True)
def _cwd():
    old = os.getcwd()
    os.chdir(ROOT)
    yield
    os.chdir(old)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "precision", "optimizer"), LIVE, ids=[f"{n}-{p}" for n, p, _ in LIVE])
def test_cpu_target_matches_the_profiler(name, precision, optimizer):
    target = f"{TINY}:{name}"
    options = EstimateOptions(precision=precision, optimizer=optimizer, device="cpu", steps=2)
    measured = measure_cpu(target, [], options, warmup=1, steps=1)
    result = estimate(load_workload(target), options)
    bounds = load_bounds()
    for number, value, estimated in (("cpu_peak", measured.peak_allocator_bytes, result.peak_allocated),
                                     ("cpu_tensor_peak", measured.peak_tensor_bytes, result.peak_tensor_bytes)):
        bound, _ = bound_for(bounds, "cpu", number, target, precision)
        error = relative_error(estimated, value)
        assert abs(error) <= bound, f"{number}: estimated {estimated} vs measured {value} ({error:+.2%}, bound {bound:.0%})"
    assert measured.peak_allocator_bytes >= measured.peak_tensor_bytes


def test_no_bound_is_widened_for_a_named_workload():
    assert load_bounds()["known_deviations"] == []
