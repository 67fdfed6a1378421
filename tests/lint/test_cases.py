"""The real-world cases (fixtures/cases, a copy of ../shared/cases).

Every ``# expect: CODE`` line must be reported with that code (skipped, with
the reason, while no rule with that code is registered), ``# expect-none``
lines get no finding, and ``ok_*.py`` files get no warning or error finding.
Linting uses the default selection plus any default-off code a file expects.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memlint.lint.registry import resolve_selection, rule_index

from .expectations import describe, lint_text, parse_expectations, reported_on
from .helpers import FIXTURE_CASES, SHARED_CASES, cases_dir

CASES = cases_dir()
FILES = sorted(CASES.glob("*.py")) if CASES else []
REGISTERED = frozenset(rule_index())


def _diagnostics(path: Path):
    source = path.read_text(encoding="utf-8")
    marks = parse_expectations(source)
    enabled = resolve_selection(None, [], []) | (marks.codes() & REGISTERED)
    return marks, lint_text(path, source, enabled)


EXPECTED = []
for _path in FILES:
    for _line, _code in parse_expectations(_path.read_text(encoding="utf-8")).pairs():
        EXPECTED.append((_path, _line, _code))


def test_cases_are_present():
    if CASES is None:
        pytest.skip("neither fixtures/cases nor ../shared/cases exists")
    assert FILES


def test_fixture_copy_matches_shared_cases():
    if not SHARED_CASES.is_dir() or not FIXTURE_CASES.is_dir():
        pytest.skip("../shared/cases not beside the repository")
    shared = {p.name: p.read_bytes() for p in SHARED_CASES.glob("*.py")}
    copied = {p.name: p.read_bytes() for p in FIXTURE_CASES.glob("*.py")}
    missing = sorted(set(shared) - set(copied))
    differing = sorted(name for name in set(shared) & set(copied) if shared[name] != copied[name])
    assert not missing and not differing, f"refresh fixtures/cases from ../shared/cases: missing {missing}, differing {differing}"


@pytest.mark.parametrize(("path", "line", "code"), EXPECTED, ids=[f"{p.name}:{l}:{c}" for p, l, c in EXPECTED])
def test_expected_finding(path, line, code):
    if code not in REGISTERED:
        pytest.skip(f"rule {code} is not registered yet")
    _, diagnostics = _diagnostics(path)
    assert reported_on(diagnostics, line, code), (
        f"{path.name}:{line}: {code} expected; reported there: {describe(reported_on(diagnostics, line))}"
    )


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_expect_none_lines_and_ok_files(path):
    marks, diagnostics = _diagnostics(path)
    for line in sorted(marks.none_lines):
        assert not reported_on(diagnostics, line), f"{path.name}:{line} is expect-none: {describe(reported_on(diagnostics, line))}"
    if path.name.startswith("ok_"):
        serious = [d for d in diagnostics if d.severity.value in ("error", "warning")]
        assert not serious, f"{path.name} is correct code: {describe(serious)}"
