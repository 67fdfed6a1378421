"""A safe fix keeps the program's results: each script of fixtures/fixsafety
is run on small CPU tensors before and after `memlint --fix` (safe fixes
only) and must print the same; the scripts whose fix would change results
(or crash) must come out of `--fix` unchanged."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "fixsafety"
#: script -> (whether the safe fix changes it, the codes reported on it)
EXPECTED = {
    "style_loss_backpropagated.py": (False, set()),
    "split_outputs_collected.py": (False, {"MEM102"}),
    "grad_added_in_place.py": (False, {"MEM203"}),
    "running_total_detached.py": (True, {"MEM101"}),
    "outputs_collected_detached.py": (True, {"MEM102"}),
}


def _run(script: Path) -> str:
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _memlint(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memlint", *args], capture_output=True, text=True, timeout=120)


def test_every_fixture_is_listed():
    assert sorted(p.name for p in FIXTURES.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_safe_fix_keeps_the_results(tmp_path, name):
    script = tmp_path / name
    shutil.copy(FIXTURES / name, script)
    changes, codes = EXPECTED[name]
    found = _memlint("check", "--no-cache", "--format", "concise", "--select", "MEM1,MEM2", str(script))
    assert {line.split()[1] for line in found.stdout.splitlines() if line.strip()} == codes, found.stdout
    before_text, before_output = script.read_text(), _run(script)
    _memlint("check", "--no-cache", "--fix", "--select", "MEM1,MEM2", str(script))
    assert (script.read_text() != before_text) is changes
    assert _run(script) == before_output


def test_the_unsafe_set_to_none_fix_is_withheld_where_it_would_fail(tmp_path):
    """Why MEM203's fix is unsafe: code that adds into `.grad` fails on None.
    The rule sees the in-place update and offers no fix, even with --unsafe-fixes;
    the same edit made by hand makes the program fail."""
    script = tmp_path / "grad_added_in_place.py"
    shutil.copy(FIXTURES / script.name, script)
    before = script.read_text()
    _memlint("check", "--no-cache", "--fix", "--unsafe-fixes", "--select", "MEM203", str(script))
    assert script.read_text() == before
    script.write_text(before.replace("opt.zero_grad(set_to_none=False)", "opt.zero_grad()"))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "NoneType" in done.stderr
