"""The campaign: dry run on a 2-workload subset, robustness, the GPU batch search logic."""

import json

import pytest
from validate_helpers import ROOT

from memlint.validate import campaign
from memlint.validate.record import check_record

SUBSET = ["mlp-build-b64-fp32-adam", "cnn_bn-build-b64-fp32-sgd-momentum"]


@pytest.fixture(autouse=True)
def _cwd(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_matrix_names_are_unique_and_cover_the_axes():
    cases = campaign.matrix()
    assert len({c.name for c in cases}) == len(cases)
    assert {c.precision for c in cases} == {"fp32", "amp-bf16", "amp-fp16"}
    assert {c.optimizer for c in cases} >= {"adam", "sgd"}
    assert {c.checkpointing for c in cases} == {False, True}
    assert any("hf_models" in c.target for c in cases)
    assert len(campaign.SEARCHES) >= 3


def test_dry_run_on_two_workloads(tmp_path):
    assert campaign.main(["--out", str(tmp_path), "--dry-run", "--no-search", *sum((["--only", s] for s in SUBSET), [])]) == 0
    files = sorted(tmp_path.glob("*.json"))
    assert [f.stem for f in files] == sorted(SUBSET)
    for path in files:
        record = json.loads(path.read_text())
        check_record(record)
        assert record["outcome"] == "dry-run" and record["measured"] is None
        assert record["estimated"]["peak_allocated"] > 0


def test_one_failing_workload_does_not_stop_the_others(tmp_path, monkeypatch):
    from memlint.validate import session

    real = session.estimate_only

    def flaky(target, *args, **kwargs):
        if "cnn_bn" in target:
            raise RuntimeError("boom\nsecond line")
        return real(target, *args, **kwargs)

    monkeypatch.setattr(session, "estimate_only", flaky)
    campaign.main(["--out", str(tmp_path), "--dry-run", "--no-search", *sum((["--only", s] for s in SUBSET), [])])
    outcomes = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}
    assert outcomes["cnn_bn-build-b64-fp32-sgd-momentum"]["outcome"] == "failed"
    assert outcomes["cnn_bn-build-b64-fp32-sgd-momentum"]["note"] == "RuntimeError: boom"
    assert outcomes["mlp-build-b64-fp32-adam"]["outcome"] == "dry-run"
    for record in outcomes.values():
        check_record(record)


@pytest.mark.parametrize("largest", [0, 1, 5, 64, 100, 4096])
def test_largest_batch_search_finds_the_boundary(largest):
    tried = []

    def probe(batch):
        tried.append(batch)
        return batch <= largest

    assert campaign.largest_batch_on_gpu(campaign.SEARCHES[0], limit=4096, probe=probe) == largest
    assert len(tried) <= 2 * 13


def test_campaign_without_gpu_needs_dry_run(tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert campaign.main(["--out", str(tmp_path)]) == 2
    assert "needs a CUDA device" in capsys.readouterr().err
