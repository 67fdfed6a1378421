"""Helpers for the rule tests: lint a snippet with one rule and compare with its markers."""

from __future__ import annotations

from lint.expectations import lint_text, parse_expectations


def reported_lines(code: str, source: str, path: str = "snippet.py") -> list[int]:
    """Lines where ``code`` is reported when ``source`` is linted with only that rule."""
    return sorted({d.line for d in lint_text(path, source, {code}) if d.code == code})


def marked_lines(code: str, source: str) -> list[int]:
    """Lines carrying ``# expect: <code>`` in ``source``."""
    return sorted(line for line, marked in parse_expectations(source).pairs() if marked == code)


def assert_matches_markers(code: str, source: str) -> None:
    """``code`` is reported exactly on the marked lines of ``source``."""
    assert reported_lines(code, source) == marked_lines(code, source)
