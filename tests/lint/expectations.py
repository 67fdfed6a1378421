"""Inline expectations in lint fixtures and real cases, shared by the harnesses.

- ``# expect: MEM101`` (or ``# expect: MEM101, MEM102``) at the end of a line:
  a finding with that code must be reported on that line;
- ``# expect-none``: no rule may report that line.

A finding "is on" a line when the line lies between its start and end line,
so a marker works on either end of a multi-line statement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_EXPECT = re.compile(r"#\s*expect:\s*(?P<codes>[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)")
_EXPECT_NONE = re.compile(r"#\s*expect-none\b")


@dataclass
class Expectations:
    """What a file's markers say: line -> expected codes, and the must-be-clean lines."""

    expected: dict[int, set[str]] = field(default_factory=dict)
    none_lines: set[int] = field(default_factory=set)

    def codes(self) -> set[str]:
        return {code for codes in self.expected.values() for code in codes}

    def pairs(self) -> list[tuple[int, str]]:
        """(line, code) for every expected finding, sorted."""
        return sorted((line, code) for line, codes in self.expected.items() for code in codes)


def parse_expectations(source: str) -> Expectations:
    """Read the ``# expect:`` / ``# expect-none`` markers of ``source``."""
    result = Expectations()
    for number, line in enumerate(source.splitlines(), start=1):
        if "expect" not in line:
            continue
        match = _EXPECT.search(line)
        if match:
            result.expected.setdefault(number, set()).update(
                code.strip() for code in match.group("codes").split(",")
            )
        elif _EXPECT_NONE.search(line):
            result.none_lines.add(number)
    return result


def covers(diagnostic, line: int) -> bool:
    """True when ``diagnostic`` spans ``line``."""
    return diagnostic.line <= line <= max(diagnostic.line, diagnostic.end_line)


def reported_on(diagnostics, line: int, code: str | None = None) -> list:
    """The diagnostics (of ``code``, if given) that span ``line``."""
    return [d for d in diagnostics if covers(d, line) and (code is None or d.code == code)]


def describe(diagnostics) -> str:
    """Short text of findings for assertion messages."""
    return "; ".join(f"{d.line}:{d.col} {d.code} {d.message}" for d in diagnostics) or "nothing"


def lint_text(path: str | Path, source: str | bytes, codes) -> list:
    """Lint ``source`` with exactly ``codes`` enabled; the diagnostics.

    A ``.ipynb`` path with percent-format text (cells separated by ``# %%``
    lines, as the notebook rules' examples are written) is linted as the
    notebook of those cells, and its findings' lines are mapped back to
    lines of ``source`` (``cell`` is kept), so ``# expect:`` markers work."""
    from memlint.lint.engine import LintOptions, lint_source

    options = LintOptions(enabled=frozenset(codes))
    if str(path).endswith(".ipynb") and isinstance(source, str) and not source.lstrip().startswith("{"):
        return lint_percent_notebook(str(path), source, options)
    data = source.encode("utf-8") if isinstance(source, str) else source
    return lint_source(str(path), data, options).diagnostics


def lint_percent_notebook(path: str, source: str, options) -> list:
    """Lint the percent-format ``source`` as a notebook; positions mapped to ``source``'s lines."""
    from dataclasses import replace

    from memlint.lint.engine import lint_source
    from memlint.lint.notebook import notebook_from_cells, percent_cells

    cells = percent_cells(source)
    data = notebook_from_cells([text for _, text in cells]).encode("utf-8")
    result = lint_source(path, data, options)
    assert result.error is None, result.error
    mapped = []
    for d in result.diagnostics:
        first = cells[d.cell - 2][0]  # cell 1 is the markdown cell notebook_from_cells puts first
        mapped.append(replace(d, line=first + d.line - 1, end_line=first + d.end_line - 1))
    return mapped
