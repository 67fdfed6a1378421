"""Fixtures shared by the test suite: the CLI in a subprocess, a temporary
copy of the working tree, and registering a fake rule for one test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
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


@pytest.fixture
def memlint_cli():
    """The :func:`run_memlint` helper as a fixture."""
    return run_memlint


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


@pytest.fixture
def register_rule(monkeypatch):
    """Make extra rule classes visible to the engine for one test.

    Usage: ``register_rule(FakeRule)``; the registry's lookups used by the
    engine and by selector expansion see the fake rule as if it lived in rules/.
    """
    import memlint.lint.engine as engine
    import memlint.lint.registry as registry

    extra: dict[str, type] = {}
    real_index = registry.rule_index
    real_classes = registry.rule_classes

    def rule_index():
        index = dict(real_index())
        for code, rule in extra.items():
            index[code] = registry.RuleInfo(code, rule.__module__, rule.DEFAULT_ENABLED, tuple(rule.TRIGGERS))
        return index

    def rule_classes(codes):
        found = real_classes([c for c in codes if c not in extra])
        found.update({c: extra[c] for c in codes if c in extra})
        return dict(sorted(found.items()))

    for module in (engine, registry):
        if hasattr(module, "rule_index"):
            monkeypatch.setattr(module, "rule_index", rule_index)
        if hasattr(module, "rule_classes"):
            monkeypatch.setattr(module, "rule_classes", rule_classes)

    def register(rule: type) -> type:
        extra[rule.CODE] = rule
        return rule

    return register
