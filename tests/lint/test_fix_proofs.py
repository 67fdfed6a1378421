"""Proof that each rule's fix keeps the program working.

For every rule with a fix there is a fixture in ``fixtures/fixes/<CODE>/``
that has the bug and runs in milliseconds on small, seeded CPU tensors,
printing its results. Each fixture is copied to a temporary directory and
fixed with ``memlint check --fix`` (``--unsafe-fixes`` too when the rule's
fix is unsafe, ``--select CODE``); then:

- the fix changed the file, the fixed file parses and the rule no longer
  reports on it, and fixing it again changes nothing (idempotence);
- the original and the fixed script are run (one interpreter for all,
  :mod:`fix_proof_runner`): a safe fix must print exactly what the
  original printed; an unsafe fix must still run to the end (exit without
  an exception);
- MEM501 and MEM502 (TensorFlow): TensorFlow is not installed where the
  tests run, so their fixtures are not run; the test checks re-parse,
  idempotence and the expected insertion instead
  (:func:`test_tensorflow_fix_inserts_the_expected_statement`).
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memlint.cli import main
from memlint.lint.diagnostic import Applicability
from memlint.lint.registry import all_rules

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures" / "fixes"
RUNNER = Path(__file__).with_name("fix_proof_runner.py")
RULES = {rule.CODE: rule for rule in all_rules()}
FIXABLE = sorted(code for code, rule in RULES.items() if rule.FIX_TITLE is not None)
#: TensorFlow is not installed in the test environment: these are checked without running them.
NOT_RUN = {"MEM501", "MEM502"}
SCRIPTS = sorted(p for p in FIXTURES.glob("*/*") if p.suffix in (".py", ".ipynb"))


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def _memlint(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["check", "--no-cache", *args])
    return code, out.getvalue(), err.getvalue()


def _fix(path: Path) -> None:
    code = path.parent.name
    unsafe = RULES[code].FIX_APPLICABILITY is Applicability.UNSAFE
    _memlint("--fix", *(["--unsafe-fixes"] if unsafe else []), "--select", code, str(path))


def _codes(path: Path) -> list[str]:
    _, out, _ = _memlint("--format", "concise", "--select", path.parent.name, str(path))
    return re.findall(r": (MEM\d{3}) ", out)


def _parses(path: Path) -> None:
    if path.suffix == ".ipynb":
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "code":
                source = cell["source"]
                ast.parse("".join(source) if isinstance(source, list) else source)
    else:
        ast.parse(path.read_bytes())


@pytest.fixture(scope="module")
def proofs(tmp_path_factory) -> dict:
    """path -> (original copy, fixed copy, text before, text after one fix,
    text after a second fix), and the runs of every original and fixed copy."""
    root = tmp_path_factory.mktemp("fix-proofs")
    done = {}
    for script in SCRIPTS:
        before_dir, after_dir = root / "before" / script.parent.name, root / "after" / script.parent.name
        before_dir.mkdir(parents=True, exist_ok=True)
        after_dir.mkdir(parents=True, exist_ok=True)
        before, after = before_dir / script.name, after_dir / script.name
        shutil.copy(script, before)
        shutil.copy(script, after)
        _fix(after)
        once = after.read_text(encoding="utf-8")
        _fix(after)
        done[_id(script)] = (before, after, script.read_text(encoding="utf-8"), once, after.read_text(encoding="utf-8"))
    runnable = [str(p) for key, (before, after, *_) in done.items() if key.split("/")[0] not in NOT_RUN
                for p in (before, after)]
    completed = subprocess.run([sys.executable, str(RUNNER), *runnable], capture_output=True, text=True,
                               timeout=300, cwd=root)
    assert completed.returncode == 0, completed.stderr
    return {"files": done, "runs": json.loads(completed.stdout)}


def test_every_fixable_rule_has_a_proof_fixture():
    assert sorted({p.parent.name for p in SCRIPTS}) == FIXABLE


@pytest.mark.parametrize("script", SCRIPTS, ids=_id)
def test_the_fix_applies_reparses_and_is_idempotent(proofs, script):
    before, after, original, once, twice = proofs["files"][_id(script)]
    code = script.parent.name
    assert code in _codes(before), f"the fixture does not show the {code} bug"
    assert once != original, f"no {code} fix was applied"
    _parses(after)
    assert twice == once, "a second --fix changed the file again"
    assert code not in _codes(after), f"{code} is still reported after the fix"


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s.parent.name not in NOT_RUN], ids=_id)
def test_the_fixed_program_still_runs_and_a_safe_fix_keeps_its_results(proofs, script):
    before, after, *_ = proofs["files"][_id(script)]
    ran_before, ran_after = proofs["runs"][str(before)], proofs["runs"][str(after)]
    assert ran_before["ok"], ran_before["error"]
    assert ran_before["stdout"].strip(), "the fixture prints nothing to compare"
    assert ran_after["ok"], f"the fixed program fails:\n{ran_after['error']}"
    if RULES[script.parent.name].FIX_APPLICABILITY is Applicability.SAFE:
        assert ran_after["stdout"] == ran_before["stdout"]


def test_tensorflow_fix_inserts_the_expected_statement(proofs):
    """TensorFlow is not installed: the MEM501/MEM502 fixtures are checked by
    what the fix inserts (re-parse and idempotence are checked above)."""
    _, _, original, once, _ = proofs["files"]["MEM501/keras_fit.py"]
    assert once == original.replace(
        "import tensorflow as tf\n",
        'import tensorflow as tf\nfor _gpu in tf.config.list_physical_devices("GPU"):\n'
        "    tf.config.experimental.set_memory_growth(_gpu, True)\n", 1)
    _, _, original, once, _ = proofs["files"]["MEM501/tf1_session.py"]
    assert once == original.replace(
        "with tf.Session() as sess:",
        "with tf.Session(config=tf.ConfigProto(gpu_options=tf.GPUOptions(allow_growth=True))) as sess:", 1)
    _, _, original, once, _ = proofs["files"]["MEM502/model_per_trial.py"]
    assert once == original.replace(
        "for units in (4, 8, 16):\n", "for units in (4, 8, 16):\n    tf.keras.backend.clear_session()\n", 1)


def test_block_fixes_insert_what_they_say(proofs):
    """The block-level fixes' text, comments kept and the block re-indented."""
    once = proofs["files"]["MEM104/validation_loop.py"][3]
    assert ("# validation\nlosses = []\nwith torch.no_grad():\n    for x, y in val:\n        out = net(x)  # forward pass\n"
            "        losses.append(nn.functional.cross_entropy(out, y).item())\n") in once
    once = proofs["files"]["MEM104/evaluate_function.py"][3]
    assert "\n\n@torch.no_grad()\ndef evaluate(model: nn.Module, batches):\n" in once
    once = proofs["files"]["MEM105/lstm_state.py"][3]
    assert ("for x, y in batches:\n    if hidden is not None:\n        hidden = tuple(s.detach() for s in hidden)\n"
            "    out, hidden = lstm(x, hidden)\n") in once
    once = proofs["files"]["MEM105/lstm_given_state.py"][3]
    assert "for x in stream:\n    state = tuple(s.detach() for s in state)\n    out, state = lstm(x, state)\n" in once
    once = proofs["files"]["MEM303/resume_entries.py"][3]
    assert '    checkpoint = torch.load(checkpoint_path, map_location="cpu")\n' in once
    once = proofs["files"]["MEM201/no_zero_grad.py"][3]
    assert "for step in range(5):\n    opt.zero_grad()\n    x, y = torch.randn(8, 4), torch.randn(8, 1)\n" in once
    once = proofs["files"]["MEM206/deprecated_amp.py"][3]
    assert "from torch.cuda.amp import autocast" not in once and "import torch.nn as nn\n\nwarnings" in once
    assert 'with torch.amp.autocast("cuda", enabled=torch.cuda.is_available()):' in once
    assert 'scaler = torch.amp.GradScaler("cuda", enabled=torch.cuda.is_available())' in once
    once = proofs["files"]["MEM401/empty_cache_per_batch.py"][3]
    assert "    opt.step()\n    # give the cached blocks back after every batch\nprint(" in once
