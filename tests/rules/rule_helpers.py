"""Helpers for the rule tests: lint a snippet with some codes, fix a fixture pair."""

from __future__ import annotations

import textwrap
from pathlib import Path

from memlint.lint.engine import LintOptions, lint_source
from memlint.lint.fixes import fix_text

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "lint"


def lines(code: str, source: str) -> list[int]:
    """The lines where ``code`` reports in the dedented ``source``."""
    text = textwrap.dedent(source)
    result = lint_source("snippet.py", text.encode(), LintOptions(frozenset({code})))
    assert not result.internal_errors, result.internal_errors
    return [d.line for d in result.diagnostics if d.code == code]


def fixed(code: str, path: Path, unsafe: bool) -> str:
    """The text of ``path`` after applying ``code``'s fixes (as ``--fix [--unsafe-fixes]`` would)."""
    text = path.read_text()
    options = LintOptions(frozenset({code}))
    diagnostics = lint_source(str(path), text.encode(), options).diagnostics
    return fix_text(str(path), text, options, unsafe, diagnostics).fixed


def fix_pairs(code: str) -> list[tuple[Path, Path]]:
    """``(X.in.py, X.out.py)`` pairs of the code's fixture folder."""
    folder = FIXTURES / code
    return [(p, p.with_name(p.name.replace(".in.py", ".out.py"))) for p in sorted(folder.glob("*.in.py"))]
