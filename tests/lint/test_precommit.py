"""The pre-commit hook, run for real with ``pre-commit try-repo``.

The working tree (uncommitted work included) is copied into a temporary git
repository and committed there, because try-repo installs the hook from that
repository's HEAD. pre-commit then builds a virtualenv and pip-installs
memlint with its dependencies from the package index: slow, needs the index.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import yaml

from .helpers import REPO, copy_worktree

pytestmark = pytest.mark.slow


def test_hook_definition():
    (hook,) = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    assert hook == {
        "id": "memlint", "name": "memlint", "description": hook["description"], "entry": "memlint check",
        "language": "python", "types_or": ["python", "pyi", "jupyter"], "require_serial": True,
    }


def _git(*args: str, cwd) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=_git_env())


def _git_env() -> dict:
    return {
        **os.environ,
        "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_pre_commit_try_repo_fails_on_buggy_file_only(tmp_path):
    env = _git_env()
    hook_repo = copy_worktree(tmp_path / "hook-repo")
    _git("init", "-q", cwd=hook_repo)
    _git("add", "-A", cwd=hook_repo)
    _git("commit", "-q", "--no-verify", "-m", "snapshot", cwd=hook_repo)

    project = tmp_path / "project"
    project.mkdir()
    (project / "clean.py").write_text("import torch\nstate = torch.load('a.pt', map_location='cpu')\n")
    (project / "buggy.py").write_text("import torch; torch.cuda.init()\nstate = torch.load('a.pt')\n")
    _git("init", "-q", cwd=project)
    _git("add", "clean.py", "buggy.py", cwd=project)

    proc = subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(hook_repo), "memlint", "--files", "clean.py", "buggy.py"],
        cwd=project, capture_output=True, text=True, timeout=900,
        env={**env, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"), "NO_COLOR": "1"},
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    assert "buggy.py:2:9: MEM303" in output
    assert "clean.py" not in output
    assert "Failed" in output
