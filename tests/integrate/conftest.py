"""Helpers: run `memlint` in-process on scripts written to a temporary directory."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MLP = f"{REPO / 'fixtures/models/mlp.py'}:build"
#: The MLP factory as a configured target of a project made by ``project``.
PROJECT_MLP = "models/mlp.py:build"


def make_project(root: Path) -> Path:
    """A project at ``root`` (a pyproject.toml marks its root) holding a copy
    of the MLP fixture at models/mlp.py, the target PROJECT_MLP names."""
    (root / "models").mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "fixtures" / "models" / "mlp.py", root / "models" / "mlp.py")
    if not (root / "pyproject.toml").exists():
        (root / "pyproject.toml").write_text("[project]\nname = 'scratch'\n")
    return root


@pytest.fixture
def project(tmp_path) -> Path:
    """``tmp_path`` made a project with the MLP fixture (see make_project)."""
    return make_project(tmp_path)


@pytest.fixture
def memlint_run(capsys, monkeypatch):
    """Call memlint.cli.main(args) from the repository root; returns (exit code, stdout, stderr)."""
    from memlint.cli import main

    monkeypatch.chdir(REPO)

    def run(*args: str):
        code = main([*args, "--no-cache", "--jobs", "1"] if args and args[0] not in ("estimate",) else list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run


def json_document(out: str) -> dict:
    return json.loads(out)
