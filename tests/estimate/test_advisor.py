"""The advisor: remedies traced for real, offered only where the GPU supports them, costed in FLOPs, ranked."""

import pytest
import torch

from memlint.estimate.advisor import advise, candidate_remedies, not_offered, with_flops
from memlint.estimate.api import EstimateOptions, estimate, fits
from memlint.estimate.workload import Workload

DIM, BATCH = 64, 32


def _blocks():
    """Four identical blocks (Linear + ReLU), all the FLOPs in the blocks' linears."""
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(DIM, DIM), torch.nn.ReLU()) for _ in range(4)])
    return Workload(module=model.to("meta"), make_inputs=lambda b: (torch.randn(b, DIM),),
                    loss_fn=lambda out, inputs: out.pow(2).mean(), name="blocks")


def _keys(options):
    return {key for key, *_ in candidate_remedies(estimate(_blocks(), options))}


def test_without_full_the_remedies_of_memlint_0_1_ranked_by_saving():
    """What memlint check calls until it passes full=True: no new remedies, ranking by memory saved."""
    base = estimate(_blocks(), EstimateOptions(batch_size=4096, optimizer="adam", gpu="A100-80GB"))
    rows = advise(_blocks(), base, base.device_used - 2**20, reserve=0.0)
    assert {row.key for row in rows} == {"amp-bf16", "amp-fp16", "checkpointing", "grad-accum", "sgd-momentum",
                                         "sgd", "zero-1", "zero-2", "zero-3"}
    assert [row.saved for row in rows] == sorted((row.saved for row in rows), reverse=True)


def test_bf16_is_offered_only_from_sm80():
    assert "amp-bf16" in _keys(EstimateOptions(batch_size=BATCH, gpu="A100-80GB"))
    t4 = estimate(_blocks(), EstimateOptions(batch_size=BATCH, gpu="T4"))
    assert "amp-bf16" not in {key for key, *_ in candidate_remedies(t4)}
    assert "sm75 has no bf16" in not_offered(t4, [])["autocast bf16"]


def test_checkpointing_costs_the_recomputed_forward_in_flops():
    """A linear's forward is 2*B*D*D FLOPs, its backward twice that, except the first (no input gradient):
    one step = 4 forwards + 7 backward matmuls = 11 units; checkpointing recomputes the 4 forwards: +4/11."""
    base = with_flops(_blocks(), EstimateOptions(batch_size=BATCH, optimizer="sgd"))
    assert base.flops == 11 * 2 * BATCH * DIM * DIM
    rows = {row.key: row for row in advise(_blocks(), base, full=True)}
    assert rows["checkpointing"].checkpointed == ["0", "1", "2", "3"]
    assert rows["checkpointing"].flops_change == pytest.approx(4 / 11)
    assert rows["amp-bf16"].flops_change == 0.0


def test_ranked_by_the_memory_needed_when_the_baseline_does_not_fit():
    workload = _blocks()
    base = estimate(workload, EstimateOptions(batch_size=4096, optimizer="adam", gpu="A100-80GB"))
    capacity = base.device_used - 2**20  # the baseline misses by 1 MiB
    assert not fits(base, capacity, reserve=0.0).fits
    rows = advise(workload, base, capacity, reserve=0.0, full=True)
    verdicts = [row.fits for row in rows]
    assert verdicts == sorted(verdicts, reverse=True)  # every remedy that fits first
    fitting = [row.required_bytes for row in rows if row.fits]
    assert fitting == sorted(fitting)


def test_ranked_by_memory_saved_when_the_baseline_fits():
    base = estimate(_blocks(), EstimateOptions(batch_size=BATCH, optimizer="adam", gpu="A100-80GB"))
    rows = advise(_blocks(), base, 80 * 2**30, full=True)
    saved = [row.saved for row in rows]
    assert saved == sorted(saved, reverse=True)


def test_adafactor_is_transformers_real_class():
    base = estimate(_blocks(), EstimateOptions(batch_size=BATCH, optimizer="adam"))
    rows = {row.key: row for row in advise(_blocks(), base, full=True)}
    adafactor = estimate(_blocks(), rows["adafactor"].options)
    assert adafactor.optimizer == "Adafactor"
    # factored second moments: a row and a column vector per weight matrix, a full one per bias,
    # and the RMS scalar Adafactor keeps per parameter (a 0-dim fp32 tensor)
    expected = 4 * (DIM + DIM + DIM) * 4 + 8 * 4
    assert adafactor.timeline.by_category["optimizer_state"][-1] == expected


def test_step_in_backward_and_offload_are_traced():
    big = 64 * BATCH  # activations, not the optimizer step, make the peak
    base = estimate(_blocks(), EstimateOptions(batch_size=big, optimizer="adam", gpu="A100-80GB"))
    rows = {row.key: row for row in advise(_blocks(), base, full=True)}
    fused = estimate(_blocks(), rows["step-in-backward"].options)
    assert fused.optimizer == "Adam per parameter, stepped in backward"
    assert max(fused.timeline.by_category["gradient"]) == DIM * DIM * 4 + DIM * 4
    offload = estimate(_blocks(), rows["offload"].options)
    # every tensor saved for the backward went to the host: what stays is the output and the loss
    assert offload.activation_bytes == big * DIM * 4 + 4 < base.activation_bytes
    assert offload.peak_allocated < base.peak_allocated


def test_nothing_to_checkpoint_is_said():
    flat = Workload(module=torch.nn.Linear(DIM, DIM).to("meta"), make_inputs=lambda b: (torch.randn(b, DIM),),
                    name="flat")
    base = estimate(flat, EstimateOptions(batch_size=BATCH))
    rows = advise(flat, base, full=True)
    assert "checkpointing" not in {row.key for row in rows}
    assert "no repeated blocks" in not_offered(base, rows)["activation checkpointing"]
