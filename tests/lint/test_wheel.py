"""The built wheel works on its own: built from a copy of the working tree,
installed into a fresh virtualenv (no system site-packages; rich
come from the package index), it lists every rule in rules/ and finds a bug."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .helpers import REPO, copy_worktree

pytestmark = pytest.mark.slow


def _run(*cmd, cwd=None, timeout=600):
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    return proc


def test_wheel_installs_and_lists_every_rule(tmp_path):
    source = copy_worktree(tmp_path / "src")
    dist = tmp_path / "dist"
    _run(sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", dist, source)
    (wheel,) = dist.glob("memlint-*.whl")

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    _run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel)

    listed = json.loads(_run(venv / "bin" / "memlint", "rules", "--format", "json", cwd=tmp_path).stdout)
    expected = sorted(p.name.split("_", 1)[0].upper() for p in (REPO / "rules").glob("mem[0-9]*.py"))
    assert sorted(r["code"] for r in listed) == expected

    buggy = tmp_path / "buggy.py"
    buggy.write_text("import torch; torch.cuda.init()\nstate = torch.load('a.pt')\n")
    proc = subprocess.run([venv / "bin" / "memlint", "check", str(buggy)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert f"{buggy}:2:9: MEM303" in proc.stdout
    imported = _run(python, "-c", "import memlint.rules, memlint.report.sarif; print(memlint.rules.__file__)", cwd=tmp_path).stdout
    assert str(venv) in imported  # the installed copy, not the source tree
