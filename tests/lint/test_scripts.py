"""The realistic training scripts of fixtures/scripts/: the exact findings.

Every finding of the default rule selection must be marked `# expect: CODE`
on its line and every marker must be reported — nothing more, nothing less.
The scripts with an estimate configuration are checked in tests/integrate/.
"""

from pathlib import Path

import pytest

from memlint.lint.engine import LintOptions, lint_source
from memlint.lint.registry import resolve_selection
from tests.lint.expectations import describe, parse_expectations

SCRIPTS = Path(__file__).resolve().parents[2] / "fixtures" / "scripts"
LINT_ONLY = sorted(p for p in SCRIPTS.glob("*.py") if "# memlint: estimate" not in p.read_text(encoding="utf-8"))


def _findings(path: Path):
    data = path.read_bytes()
    result = lint_source(str(path), data, LintOptions(enabled=resolve_selection(None, [], [])))
    assert not result.internal_errors
    return result.diagnostics


def test_there_are_buggy_and_clean_scripts():
    marked = [p for p in LINT_ONLY if parse_expectations(p.read_text(encoding="utf-8")).expected]
    clean = [p for p in LINT_ONLY if p not in marked]
    assert len(marked) >= 2 and len(clean) >= 2


@pytest.mark.parametrize("path", LINT_ONLY, ids=lambda p: p.name)
def test_exact_findings(path: Path):
    expected = parse_expectations(path.read_text(encoding="utf-8"))
    diagnostics = _findings(path)
    got = sorted((d.line, d.code) for d in diagnostics)
    assert got == expected.pairs(), describe(diagnostics)
    assert not [d for d in diagnostics if d.line in expected.none_lines]
