"""Each rule's VALID/INVALID examples, linted with only that rule enabled.

- every INVALID example yields at least one finding of the rule's code; when
  it carries ``# expect: CODE`` markers, exactly the marked lines are reported;
- no VALID example yields a finding of that code.
"""

from __future__ import annotations

import pytest

from memlint.lint.registry import all_rules

from .expectations import describe, lint_text, parse_expectations

# Rules with NEEDS_ESTIMATE (MEM302) report from memlint.integrate after the
# estimate; tests/integrate/test_mem302.py runs their examples through `memlint check`.
_LINT_ONLY = [rule for rule in all_rules() if not getattr(rule, "NEEDS_ESTIMATE", False)]


def _suffix(rule) -> str:
    """Notebook-only rules' examples are percent-format cells, linted as a notebook."""
    return ".ipynb" if getattr(rule, "NOTEBOOK_ONLY", False) else ".py"


CASES_INVALID = [(rule, i) for rule in _LINT_ONLY for i in range(len(rule.INVALID))]
CASES_VALID = [(rule, i) for rule in _LINT_ONLY for i in range(len(rule.VALID))]


@pytest.mark.parametrize(("rule", "index"), CASES_INVALID, ids=[f"{r.CODE}-invalid-{i}" for r, i in CASES_INVALID])
def test_invalid_example_is_reported(rule, index):
    source = rule.INVALID[index]
    found = [d for d in lint_text(f"{rule.CODE}_invalid_{index}{_suffix(rule)}", source, {rule.CODE}) if d.code == rule.CODE]
    assert found, f"{rule.CODE} INVALID[{index}] not reported:\n{source}"
    marks = parse_expectations(source)
    marked = {line for line, code in marks.pairs() if code == rule.CODE}
    if marked:
        reported = {d.line for d in found}
        assert reported == marked, f"{rule.CODE} INVALID[{index}]: reported on {sorted(reported)}, marked {sorted(marked)}"


@pytest.mark.parametrize(("rule", "index"), CASES_VALID, ids=[f"{r.CODE}-valid-{i}" for r, i in CASES_VALID])
def test_valid_example_is_clean(rule, index):
    source = rule.VALID[index]
    found = [d for d in lint_text(f"{rule.CODE}_valid_{index}{_suffix(rule)}", source, {rule.CODE}) if d.code == rule.CODE]
    assert not found, f"{rule.CODE} VALID[{index}] reported: {describe(found)}\n{source}"
