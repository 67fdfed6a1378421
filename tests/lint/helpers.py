"""Helpers for the linter tests: the CLI in a subprocess, the real-world
cases' folder, and a copy of the working tree for packaging tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: The real-world cases: the shared folder beside the repository, or the copy in fixtures/.
SHARED_CASES = REPO.parent / "shared" / "cases"
FIXTURE_CASES = REPO / "fixtures" / "cases"


def cases_dir() -> Path | None:
    """fixtures/cases (preferred, always in the repo) or ../shared/cases; None if neither."""
    for candidate in (FIXTURE_CASES, SHARED_CASES):
        if candidate.is_dir() and any(candidate.glob("*.py")):
            return candidate
    return None


def run_memlint(*args: str, cwd: str | Path | None = None, stdin: bytes | None = None, timeout: float = 120):
    """Run ``python -m memlint ARGS`` in a subprocess; the CompletedProcess (text output)."""
    env = {**os.environ, "NO_COLOR": "1"}
    completed = subprocess.run(
        [sys.executable, "-m", "memlint", *args],
        cwd=cwd,
        input=stdin if stdin is not None else b"",
        capture_output=True,
        timeout=timeout,
        env=env,
    )
    completed.stdout = completed.stdout.decode("utf-8", errors="replace")
    completed.stderr = completed.stderr.decode("utf-8", errors="replace")
    return completed


def tracked_files(repo: Path = REPO) -> list[str]:
    """Files of the working tree that git would commit (tracked + untracked, not ignored)."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo, capture_output=True, check=True,
    ).stdout.decode()
    return [name for name in out.split("\0") if name and (repo / name).is_file()]


def copy_worktree(dest: Path) -> Path:
    """Copy the working tree (uncommitted work included, ignored files not) to ``dest``."""
    for name in tracked_files():
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    return dest
