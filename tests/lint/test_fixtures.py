"""Fixture harness over fixtures/lint/<CODE>/.

- ``*.py`` (not the ``.in.py``/``.out.py`` fix pairs): every ``# expect: CODE`` line is reported with
  that code, ``# expect-none`` lines get no finding, and no finding of the
  folder's code appears on an unmarked line;
- ``X.in.py`` / ``X.out.py`` pairs (not checked for markers; ``.out`` keeps
  ``.in``'s comments): applying every fix (unsafe ones too) to
  ``.in`` gives exactly ``.out``; the result parses, re-linting reports the
  folder's code on none of the changed lines, and fixing again changes nothing.

Lint runs with every registered rule enabled; markers of codes with no
registered rule yet are skipped.
"""

from __future__ import annotations

import ast
import difflib
from pathlib import Path

import pytest

from memlint.lint.engine import LintOptions, lint_source
from memlint.lint.fixes import fix_text
from memlint.lint.registry import rule_index

from .expectations import describe, lint_text, parse_expectations, reported_on

ROOT = Path(__file__).resolve().parents[2] / "fixtures" / "lint"
ALL = frozenset(rule_index())
FILES = sorted(p for p in ROOT.glob("*/*.py") if not p.name.endswith((".in.py", ".out.py")))
PAIRS = sorted(p for p in ROOT.glob("*/*.in.py"))


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def _folder_code(path: Path) -> str:
    return path.parent.name.upper()


@pytest.mark.parametrize("path", FILES, ids=_id)
def test_fixture_expectations(path):
    code = _folder_code(path)
    if code not in ALL:
        pytest.skip(f"no rule {code} registered yet")
    source = path.read_text(encoding="utf-8")
    marks = parse_expectations(source)
    diagnostics = lint_text(path, source, ALL)
    problems = []
    for line, expected in marks.pairs():
        if expected in ALL and not reported_on(diagnostics, line, expected):
            problems.append(f"line {line}: {expected} expected, got {describe(reported_on(diagnostics, line))}")
    for line in sorted(marks.none_lines):
        if reported_on(diagnostics, line):
            problems.append(f"line {line}: expect-none, got {describe(reported_on(diagnostics, line))}")
    marked = {line for line, c in marks.pairs() if c == code}
    for d in diagnostics:
        if d.code == code and not any(d.line <= line <= d.end_line for line in marked):
            problems.append(f"line {d.line}: unexpected {describe([d])}")
    assert not problems, f"{_id(path)}:\n" + "\n".join(problems)


def _fix_all(path: str, text: str) -> str:
    options = LintOptions(enabled=ALL)
    diagnostics = lint_source(path, text.encode("utf-8"), options).diagnostics
    return fix_text(path, text, options, unsafe=True, diagnostics=diagnostics).fixed


@pytest.mark.parametrize("path", PAIRS, ids=_id)
def test_fix_pair(path):
    code = _folder_code(path)
    if code not in ALL:
        pytest.skip(f"no rule {code} registered yet")
    out_path = path.with_name(path.name[: -len(".in.py")] + ".out.py")
    assert out_path.is_file(), f"{_id(path)} has no {out_path.name}"
    before = path.read_text(encoding="utf-8")
    expected = out_path.read_text(encoding="utf-8")
    fixed = _fix_all(str(path), before)
    assert fixed == expected, "".join(difflib.unified_diff(expected.splitlines(True), fixed.splitlines(True), "expected", "got"))
    ast.parse(fixed)
    changed = _changed_lines(before, fixed)
    left = [d for d in lint_text(out_path, fixed, ALL) if d.code == code and d.line in changed]
    assert not left, f"{code} still reported on fixed lines: {describe(left)}"
    assert _fix_all(str(path), fixed) == fixed, "fixing twice changed the file again"


def _changed_lines(before: str, after: str) -> set[int]:
    matcher = difflib.SequenceMatcher(a=before.splitlines(), b=after.splitlines(), autojunk=False)
    lines: set[int] = set()
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            lines.update(range(j1 + 1, j2 + 1))
    return lines


def test_fixture_folders_are_rule_codes():
    for folder in ROOT.iterdir() if ROOT.is_dir() else ():
        if folder.is_dir():
            assert folder.name.upper().startswith("MEM"), f"fixtures/lint/{folder.name}: folders are named by rule code"


NOTEBOOKS = sorted(ROOT.glob("*/*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_id)
def test_notebook_fixture_expectations(path):
    """The markers inside a fixture notebook's code cells hold, cell by cell:
    ``# expect: CODE`` lines are reported (in that cell, on that line),
    ``# expect-none`` lines get no finding of the folder's code, and that code
    appears nowhere else."""
    import json

    code = _folder_code(path)
    if code not in ALL:
        pytest.skip(f"no rule {code} registered yet")
    result = lint_source(str(path), path.read_bytes(), LintOptions(enabled=ALL))
    assert result.error is None, result.error
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    problems = []
    marked: set[tuple[int, int]] = set()
    for number, cell in enumerate(cells, start=1):
        if cell["cell_type"] != "code":
            continue
        marks = parse_expectations("".join(cell["source"]))
        here = [d for d in result.diagnostics if d.cell == number]
        for line, expected in marks.pairs():
            if expected in ALL and not reported_on(here, line, expected):
                problems.append(f"cell {number}:{line}: {expected} expected, got {describe(reported_on(here, line))}")
            if expected == code:
                marked.add((number, line))
        for line in sorted(marks.none_lines):
            if reported_on(here, line, code):
                problems.append(f"cell {number}:{line}: expect-none, got {describe(reported_on(here, line, code))}")
    for d in result.diagnostics:
        if d.code == code and (d.cell, d.line) not in marked:
            problems.append(f"cell {d.cell}:{d.line}: unexpected {describe([d])}")
    assert not problems, f"{_id(path)}:\n" + "\n".join(problems)
