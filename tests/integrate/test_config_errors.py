"""Invalid estimate configuration: one line on stderr naming the key (and file/line), exit 2."""

from __future__ import annotations

import pytest

from memlint.estimate import step
from memlint.integrate import settings

SCRIPT = "import torch\nloader = torch.utils.data.DataLoader(ds, batch_size=8)\n"


def test_choices_agree_with_the_estimator():
    assert settings.OPTIMIZERS == step.OPTIMIZER_NAMES + step.TRANSFORMERS_OPTIMIZERS
    assert settings.PRECISIONS == step.PRECISIONS


@pytest.mark.parametrize(("line", "key"), [
    ("# memlint: estimate target=m.py:f precision=fp8", "precision"),
    ("# memlint: estimate target=m.py:f optimizer=lion", "optimizer"),
    ("# memlint: estimate target=m.py:f batch-size=0", "batch-size"),
    ("# memlint: estimate target=m.py:f gpu=B200-1TB", "gpu"),
    ("# memlint: estimate target=m.py:f capacity=lots", "capacity"),
    ("# memlint: estimate target=m.py:f reserve=150%", "reserve"),
    ("# memlint: estimate target=m.py:f input=float32[B,x]", "input"),
    ("# memlint: estimate target=m.py:f checkpointing=maybe", "checkpointing"),
    ("# memlint: estimate target=m.py:f zero-stage=4", "zero-stage"),
    ("# memlint: estimate target=m.py:f colour=blue", "colour"),
    ("# memlint: estimate target=m.py:f world-size=8", "world-size"),
    ("# memlint: estimate target=m.py:f world-size=100000 parallel=fsdp", "world-size"),
])
def test_comment_block_errors(tmp_path, memlint_run, line, key):
    script = tmp_path / "train.py"
    script.write_text("import torch\n" + line + "\n" + SCRIPT)
    code, out, err = memlint_run(str(script), "--format", "concise")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"{script}:2" in lines[0] and f"'{key}'" in lines[0], err
    assert "Traceback" not in err


@pytest.mark.parametrize(("toml", "key"), [
    ('precision = "fp8"', "tool.memlint.estimate.precision"),
    ('grad-accum = -1', "tool.memlint.estimate.grad-accum"),
    ('input = [3]', "tool.memlint.estimate.input"),
    ('files = "train.py"', "tool.memlint.estimate.files"),
    ('targett = "m.py:f"', "tool.memlint.estimate.targett"),
])
def test_pyproject_errors(tmp_path, memlint_run, toml, key):
    (tmp_path / "pyproject.toml").write_text(f'[tool.memlint.estimate]\ntarget = "m.py:f"\n{toml}\n')
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    code, out, err = memlint_run(str(script), "--format", "concise")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"'{key}'" in lines[0] and "pyproject.toml" in lines[0], err


def test_bad_target_is_one_line_error(tmp_path, memlint_run):
    script = tmp_path / "train.py"
    script.write_text("# memlint: estimate target=missing.py:build capacity=1GiB\n" + SCRIPT)
    code, out, err = memlint_run("--estimate", str(script), "--format", "concise")
    assert code == 2
    assert "missing.py" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_without_estimate_a_configured_target_is_one_note_and_nothing_runs(tmp_path, memlint_run):
    script = tmp_path / "train.py"
    script.write_text("# memlint: estimate target=missing.py:build capacity=1GiB\n" + SCRIPT)
    code, out, err = memlint_run(str(script), "--format", "concise")
    assert code == 0 and out == ""
    [note] = err.strip().splitlines()
    assert note == (f"memlint: an estimate is configured for {script} (target missing.py:build); "
                    f"it runs only on request: memlint --estimate {script}")


def test_verbose_says_an_estimate_is_skipped_when_mem302_is_not_selected(tmp_path, memlint_run):
    script = tmp_path / "train.py"
    script.write_text("# memlint: estimate target=m.py:f capacity=1GiB\n" + SCRIPT)
    code, out, err = memlint_run(str(script), "--select", "MEM303", "--verbose", "--format", "concise")
    assert f"{script}: estimate skipped: MEM302 is not selected" in err and code == 0


def test_absurd_sizes_in_the_comment_block_are_one_line(tmp_path, memlint_run):
    script = tmp_path / "train.py"
    script.write_text(f"# memlint: estimate target=m.py:f batch-size={2**64}\n" + SCRIPT)
    code, out, err = memlint_run(str(script), "--format", "concise")
    [line] = err.strip().splitlines()
    assert code == 2 and f"{script}:1: estimate key 'batch-size' must be at most 2**40" in line


def test_a_key_given_twice_in_the_comment_block_is_one_line(tmp_path, memlint_run):
    script = tmp_path / "train.py"
    script.write_text("# memlint: estimate target=m.py:f target=other.py:g\n" + SCRIPT)
    code, out, err = memlint_run(str(script), "--format", "concise")
    [line] = err.strip().splitlines()
    assert code == 2 and "estimate key 'target' is given twice" in line


def test_an_absurd_input_in_the_comment_block_is_refused_before_the_target_is_imported(tmp_path, memlint_run):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'scratch'\n")
    marker = tmp_path / "IMPORTED"
    (tmp_path / "m.py").write_text(f"open({str(marker)!r}, 'w').close()\ndef f(batch_size=8):\n    pass\n")
    script = tmp_path / "train.py"
    script.write_text("# memlint: estimate target=m.py:f input=float32[B,99999999999999] capacity=1GiB\n" + SCRIPT)
    code, out, err = memlint_run("--estimate", str(script), "--format", "concise")
    assert code == 2 and "a dimension is larger than 2**40" in err, err
    assert not marker.exists()


def test_estimate_asked_for_without_a_configured_estimate_is_one_note(tmp_path, memlint_run):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    code, out, err = memlint_run("--estimate", str(script), "--format", "concise")
    assert code in (0, 1)
    assert err.count("no linted file has an estimate configured") == 1, err
