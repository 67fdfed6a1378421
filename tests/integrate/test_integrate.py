"""`memlint --estimate train.py`: provenance, MEM302 at the limit, advisor, JSON/SARIF, no torch without it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .conftest import MLP, PROJECT_MLP, REPO, make_project

CAPACITY = "600MiB"


def script_text(batch: int, capacity: str = CAPACITY, extra: str = "", target: str = PROJECT_MLP) -> str:
    return textwrap.dedent(f"""\
        # memlint: estimate target={target} capacity={capacity} reserve=0%
        import torch
        from torch.utils.data import DataLoader

        BATCH_SIZE = {batch}
        {extra}
        def train(model, data):
            loader = DataLoader(data, batch_size=BATCH_SIZE)
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
            for x, y in loader:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
        """)


@pytest.fixture(scope="module")
def limit():
    """The largest batch that fits CAPACITY, by the estimator's own search, and the options used."""
    from memlint.estimate.api import EstimateOptions, max_batch_size
    from memlint.estimate.units import parse_bytes
    from memlint.estimate.workload import load_workload

    workload = load_workload(MLP)
    options = EstimateOptions(optimizer="adam")
    return max_batch_size(workload, options, parse_bytes(CAPACITY), reserve=0.0)


def _mem302(out: str):
    return [d for d in json.loads(out)["diagnostics"] if d["code"] == "MEM302"]


def test_mem302_just_below_and_above_the_limit(project, memlint_run, limit):
    assert limit > 1
    ok = project / "ok.py"
    ok.write_text(script_text(limit))
    code, out, err = memlint_run("--estimate", str(ok), "--format", "json", "--select", "MEM302")
    assert code == 0 and not _mem302(out), err
    document = json.loads(out)
    assert document["estimates"][0]["verdict"]["fits"] is True

    bad = project / "bad.py"
    bad.write_text(script_text(limit + 1).replace("reserve=0%", "reserve=0% advise=false"))
    code, out, err = memlint_run("--estimate", str(bad), "--format", "json", "--select", "MEM302")
    assert code == 1, err
    [diagnostic] = _mem302(out)
    assert (diagnostic["start_line"], diagnostic["start_col"]) == (5, 14)  # the literal of BATCH_SIZE
    estimate = json.loads(out)["estimates"][0]
    assert estimate["max_batch_size"] == limit
    used = estimate["estimate"]["device_used"] / 2**30
    assert f"{used:.2f} GiB" in diagnostic["message"] and f"{600 / 1024:.2f} GiB" in diagnostic["message"]
    assert f"largest batch that fits is {limit}" in diagnostic["message"]


def test_noqa_suppresses_mem302(project, memlint_run, limit):
    bad = project / "bad.py"
    bad.write_text(script_text(limit + 1).replace(f"= {limit + 1}", f"= {limit + 1}  # noqa: MEM302")
                   .replace("reserve=0%", "reserve=0% advise=false"))
    code, out, err = memlint_run("--estimate", str(bad), "--format", "json", "--select", "MEM302")
    assert code == 0 and not _mem302(out)


def test_provenance_and_json(project, memlint_run):
    script = project / "train.py"
    script.write_text(script_text(8).replace("reserve=0%", "reserve=0% precision=amp-bf16"))
    code, out, err = memlint_run("--estimate", str(script), "--format", "json")
    [entry] = json.loads(out)["estimates"]
    recipe = entry["recipe"]
    assert recipe["batch-size"] == {"value": 8, "source": "script line 5", "detail": "DataLoader(batch_size=...) <- constant BATCH_SIZE"}
    assert recipe["optimizer"]["value"] == "adam" and recipe["optimizer"]["source"] == "script line 9"
    assert recipe["precision"] == {"value": "amp-bf16", "source": "config: comment line 1"}
    assert recipe["grad-accum"] == {"value": 1, "source": "default"}
    assert recipe["set-to-none"]["source"] == "script line 11"
    assert entry["path"] == str(script) and entry["target"] == PROJECT_MLP
    assert entry["estimate"]["device_used"] > entry["estimate"]["peak_reserved"] >= entry["estimate"]["peak_allocated"] > 0
    assert entry["verdict"]["capacity_bytes"] == 600 * 2**20


def test_pyproject_table_and_precedence(project, memlint_run):
    (project / "pyproject.toml").write_text(textwrap.dedent(f"""\
        [tool.memlint]
        target-gpu = "A100-40GB"
        [tool.memlint.estimate]
        target = "{PROJECT_MLP}"
        optimizer = "sgd"
        grad-accum = 2
        files = ["train*.py"]
        """))
    script = project / "train_a.py"
    script.write_text(script_text(8).splitlines(keepends=True)[1:] and "".join(script_text(8).splitlines(keepends=True)[1:]))
    other = project / "model.py"
    other.write_text("import torch\nBATCH_SIZE = 4\nloss.backward()\n")
    code, out, err = memlint_run("--estimate", str(project), "--format", "json")
    [entry] = json.loads(out)["estimates"]
    assert entry["path"].endswith("train_a.py")
    assert entry["recipe"]["optimizer"] == {"value": "sgd", "source": "config: pyproject.toml"}
    assert entry["recipe"]["grad-accum"]["value"] == 2
    assert entry["recipe"]["gpu"] == {"value": "A100-40GB", "source": "config: pyproject.toml (target-gpu)"}
    assert entry["estimate"]["batch_size"] == 16 and entry["estimate"]["micro_batch"] == 8


def test_advisor_ranking_matches_estimates_by_hand(project, memlint_run, limit):
    from dataclasses import replace

    from memlint.estimate.api import EstimateOptions, estimate, fits
    from memlint.estimate.advisor import FSDP_ADVISOR_WORLDS, TP_ADVISOR_DEGREES
    from memlint.estimate.units import parse_bytes
    from memlint.estimate.workload import load_workload

    batch = 2 * limit
    script = project / "train.py"
    script.write_text(script_text(batch).replace("reserve=0%", "reserve=0% advise-world-size=4"))
    code, out, err = memlint_run("--estimate", str(script), "--format", "json")
    advice = json.loads(out)["estimates"][0]["advice"]
    workload = load_workload(MLP)
    base_options = EstimateOptions(batch_size=batch, optimizer="adam")
    base = estimate(workload, base_options).device_used
    capacity = parse_bytes(CAPACITY)
    by_hand = {
        "amp-bf16": replace(base_options, precision="amp-bf16"),
        "amp-fp16": replace(base_options, precision="amp-fp16"),
        "step-in-backward": replace(base_options, step_in_backward=True),
        "offload": replace(base_options, offload_activations=True),
        "sgd-momentum": replace(base_options, optimizer="sgd-momentum"),
        "sgd": replace(base_options, optimizer="sgd"),
        "adafactor": replace(base_options, optimizer="adafactor"),
        "ddp": replace(base_options, parallel="ddp", world_size=4),
        **{f"fsdp-{n}": replace(base_options, parallel="fsdp", world_size=n) for n in FSDP_ADVISOR_WORLDS},
        **{f"tp-{n}": replace(base_options, parallel="tp", world_size=n) for n in TP_ADVISOR_DEGREES},
    }
    expected = {}
    allocated = {}
    base_allocated = estimate(workload, base_options).peak_allocated
    for key, options in by_hand.items():
        result = estimate(workload, options)
        expected[key] = (result.device_used, fits(result, capacity, 0.0).fits)
        allocated[key] = result.peak_allocated
    accum = next(row for row in advice if row["remedy"] == "grad-accum")
    for k in (2, 4, 8, 16, 32, 64):
        if batch % k == 0:
            result = estimate(workload, replace(base_options, grad_accum=k))
            verdict = fits(result, capacity, 0.0).fits
            if verdict or k * 2 > batch or batch % (k * 2):
                break
    expected["grad-accum"] = (result.device_used, verdict)
    allocated["grad-accum"] = result.peak_allocated
    got = {row["remedy"]: (row["device_used"], row["fits"]) for row in advice}
    assert got == expected
    assert all(row["saved"] == base - row["device_used"] for row in advice)
    assert all(row["saved_allocated"] == base_allocated - allocated[row["remedy"]] for row in advice)
    # The MLP has no repeated blocks: checkpointing is not offered. The baseline
    # does not fit, so the rows that fit come first, then by the memory needed.
    assert estimate(workload, replace(base_options, checkpointing=True)).checkpointed == []
    assert not fits(estimate(workload, base_options), capacity, 0.0).fits
    ranking = sorted(expected, key=lambda key: (not expected[key][1], expected[key][0], key))
    assert [row["remedy"] for row in advice] == ranking


def test_reports_show_the_estimate(project, memlint_run, limit, monkeypatch):
    import io
    from argparse import Namespace

    import memlint.report

    script = project / "train.py"
    script.write_text(script_text(limit + 1))
    runs = []
    original = memlint.report.render
    monkeypatch.setattr(memlint.report, "render", lambda run, args, stream=None: runs.append(run) or original(run, args))
    code, out, err = memlint_run("--estimate", str(script), "--format", "concise", "--select", "MEM302")
    lines = out.splitlines()
    assert lines[0].startswith(f"{script}:5:14: MEM302 ")
    assert lines[1].startswith(f"memory: {script}: batch {limit + 1}: device_used") and "does NOT fit" in lines[1]
    assert any(line.startswith("  remedy 1: ") for line in lines)
    [run] = runs  # the same run in the other formats (no second estimate)
    for fmt in ("full", "sarif"):
        stream = io.StringIO()
        original(run, Namespace(format=fmt, statistics=False, unsafe_fixes=False, fix=False), stream)
        out = stream.getvalue()
        if fmt == "full":
            assert "MEM302" in out and "Advisor" in out and "Training recipe" in out and "script line 5" in out
        else:
            sarif = json.loads(out)["runs"][0]
            assert [r["ruleId"] for r in sarif["results"]] == ["MEM302"]
            assert sarif["properties"]["estimates"][0]["max_batch_size"] == limit


def test_silent_without_configuration_and_verbose_says_why(project, memlint_run):
    script = project / "train.py"
    script.write_text("".join(script_text(10**6).splitlines(keepends=True)[1:]))
    code, out, err = memlint_run("--estimate", str(script), "--format", "json", "--select", "MEM302", "--verbose")
    assert code == 0 and not json.loads(out)["estimates"]
    assert "MEM302 skipped: no estimate configured" in err


def test_a_script_with_a_bom_or_a_coding_cookie_is_estimated(project, memlint_run, limit):
    """The estimate reads the script decoded as the linter decodes it: a UTF-8
    BOM is dropped and a PEP 263 cookie honoured (a BOM used to crash the run)."""
    batch = limit + 1
    bom = project / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbf" + script_text(batch).encode("utf-8"))
    latin = project / "latin.py"
    latin.write_bytes(("# -*- coding: latin-1 -*-\n" + script_text(batch) + "NAME = 'caf\xe9'\n").encode("latin-1"))
    code, out, err = memlint_run("--estimate", str(bom), str(latin), "--format", "json", "--select", "MEM302")
    assert "Traceback" not in err
    assert sorted(Path(d["path"]).name for d in _mem302(out)) == ["bom.py", "latin.py"]


def test_plain_lint_does_not_import_torch(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("".join(script_text(64).splitlines(keepends=True)[1:]))
    probe = ("import sys\nfrom memlint.cli import main\ncode = main([sys.argv[1], '--no-cache', '--format', 'concise'])\n"
             "print('torch' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", probe, str(script)], capture_output=True, text=True, cwd=tmp_path,
                            timeout=60)
    assert result.stdout.strip().splitlines()[-1] == "False", result.stdout + result.stderr


def _example_cases():
    from memlint.lint.registry import all_rules

    for rule in all_rules():
        if getattr(rule, "NEEDS_ESTIMATE", False):
            for i, source in enumerate(rule.INVALID):
                yield pytest.param(rule.CODE, source, True, id=f"{rule.CODE}-invalid-{i}")
            for i, source in enumerate(rule.VALID):
                yield pytest.param(rule.CODE, source, False, id=f"{rule.CODE}-valid-{i}")


@pytest.mark.parametrize(("code", "source", "invalid"), list(_example_cases()))
def test_needs_estimate_rule_examples(project, memlint_run, code, source, invalid):
    """The examples of rules with NEEDS_ESTIMATE, through the full `memlint check --estimate` path
    (their target, fixtures/models/mlp.py, is copied into the scratch project)."""
    make_project(project / "fixtures")
    script = project / "example.py"
    script.write_text(source)
    status, out, err = memlint_run("--estimate", str(script), "--format", "json", "--select", code)
    found = [d for d in json.loads(out)["diagnostics"] if d["code"] == code]
    marked = [n for n, line in enumerate(source.splitlines(), 1) if f"# expect: {code}" in line]
    if invalid:
        assert [d["start_line"] for d in found] == marked, (out, err)
    else:
        assert not found, out


def test_a_step_that_does_not_fit_is_a_finding_even_without_a_batch_size_in_the_script(project, memlint_run):
    """No batch-size literal in the script: MEM302 goes on the estimate comment and the exit code is 1."""
    script = project / "train.py"
    script.write_text(textwrap.dedent(f"""\
        import torch
        # memlint: estimate target={PROJECT_MLP} capacity=1MiB reserve=0% advise=false
        def train(model, loader, optimizer):
            for x, y in loader:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
        """))
    code, out, err = memlint_run("--estimate", str(script), "--format", "json", "--select", "MEM302")
    assert code == 1, err
    [diagnostic] = _mem302(out)
    assert diagnostic["start_line"] == 2
    assert "does not fit" in diagnostic["message"]


def test_a_placed_model_is_judged_and_reported_by_the_device_that_needs_the_most(project, memlint_run):
    """Two halves on cuda:0 and cuda:1: MEM302 and the memory line quote cuda:0's device_used, not both devices'."""
    shutil.copy(REPO / "fixtures" / "models" / "placement_split.py", project / "models" / "placement_split.py")
    script = project / "train.py"
    script.write_text("# memlint: estimate target=models/placement_split.py:build capacity=200MiB reserve=0% "
                      "advise=false\n")
    code, out, err = memlint_run("--estimate", str(script), "--format", "json", "--select", "MEM302")
    assert code == 1, err
    [diagnostic] = _mem302(out)
    [estimate] = json.loads(out)["estimates"]
    devices = {d["device"]: d["device_used"] for d in estimate["estimate"]["devices"]}
    assert devices["cuda:0"] > devices["cuda:1"]
    assert f"needs {devices['cuda:0'] / 2**30:.2f} GiB on cuda:0 of" in diagnostic["message"]
    assert estimate["verdict"]["required_bytes"] == devices["cuda:0"]


def test_a_memory_line_says_when_even_batch_one_does_not_fit(project, memlint_run):
    script = project / "train.py"
    script.write_text(f"# memlint: estimate target={PROJECT_MLP} capacity=1MiB reserve=0% advise=false\n")
    code, out, err = memlint_run("--estimate", str(script))
    assert code == 1, err
    [line] = [text for text in out.splitlines() if text.startswith("memory:")]
    assert line.endswith("; even batch size 1 does not fit"), line
    assert "largest batch that fits: 0" not in line
