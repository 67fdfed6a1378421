"""Every registered rule: unique code and name, kebab-case name, documentation
sections, and enough examples. Iterates over whatever rules/ holds."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from memlint.lint.diagnostic import Severity
from memlint.lint.registry import all_rules, expand_selector, resolve_selection, rule_index
from memlint.lint.rule import REQUIRED_SECTIONS, sections_of

RULES = all_rules()
KEBAB = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
CODE = re.compile(r"^MEM[0-9]{3}$")
MIN_EXAMPLES = 3


def _id(rule) -> str:
    return rule.CODE


def test_rules_are_registered():
    assert {"MEM001", "MEM303"} <= {rule.CODE for rule in RULES}


def test_codes_are_unique():
    duplicates = [code for code, n in Counter(rule.CODE for rule in RULES).items() if n > 1]
    assert not duplicates, f"duplicate rule codes: {duplicates}"


def test_names_are_unique():
    duplicates = [name for name, n in Counter(rule.NAME for rule in RULES).items() if n > 1]
    assert not duplicates, f"duplicate rule names: {duplicates}"


def test_static_index_agrees_with_imported_rules():
    index = rule_index()
    assert sorted(index) == [rule.CODE for rule in RULES]
    for rule in RULES:
        info = index[rule.CODE]
        assert info.default_enabled == rule.DEFAULT_ENABLED, rule.CODE
        assert info.triggers == tuple(rule.TRIGGERS), rule.CODE
        assert info.needs_names == tuple(rule.NEEDS_NAMES), rule.CODE
        assert info.needs_graph_source == rule.NEEDS_GRAPH_SOURCE, rule.CODE
        assert info.notebook_only == rule.NOTEBOOK_ONLY, rule.CODE


@pytest.mark.parametrize("rule", RULES, ids=_id)
def test_metadata(rule):
    assert CODE.match(rule.CODE), f"{rule.CODE}: codes look like MEM123"
    assert KEBAB.match(rule.NAME), f"{rule.CODE}: name {rule.NAME!r} is not kebab-case"
    assert isinstance(rule.SEVERITY, Severity)
    assert rule.MESSAGE.strip(), f"{rule.CODE}: empty MESSAGE"
    assert isinstance(rule.TRIGGERS, tuple) and all(isinstance(t, str) and t for t in rule.TRIGGERS)
    module = rule.__module__.rsplit(".", 1)[1]
    assert module.startswith(rule.CODE.lower() + "_"), f"{rule.CODE}: module {module} should be memNNN_<name>.py"


@pytest.mark.parametrize("rule", RULES, ids=_id)
def test_documentation_sections(rule):
    sections = sections_of(rule.doc())
    required = list(REQUIRED_SECTIONS)
    missing = [s for s in required if s not in sections]
    assert not missing, f"{rule.CODE}: docstring lacks sections {missing}"
    if rule.FIX_TITLE:
        assert "Fix safety" in sections, f"{rule.CODE}: has FIX_TITLE but no '## Fix safety' section"
    else:
        assert "Fix safety" not in sections, f"{rule.CODE}: '## Fix safety' without a FIX_TITLE"
    order = [s for s in sections if s in required]
    assert order == required, f"{rule.CODE}: sections out of order: {order}"
    from memlint.docs_gen import section

    for title in required:
        assert section(rule.doc(), title), f"{rule.CODE}: section '{title}' is empty"


@pytest.mark.parametrize("rule", RULES, ids=_id)
def test_examples(rule):
    assert len(rule.VALID) >= MIN_EXAMPLES, f"{rule.CODE}: needs at least {MIN_EXAMPLES} VALID examples"
    assert len(rule.INVALID) >= MIN_EXAMPLES, f"{rule.CODE}: needs at least {MIN_EXAMPLES} INVALID examples"
    assert not set(rule.VALID) & set(rule.INVALID), f"{rule.CODE}: an example is both VALID and INVALID"


def test_selector_prefix_expansion_and_unknown_selector():
    codes = {rule.CODE for rule in RULES}
    assert expand_selector("MEM3") == {c for c in codes if c.startswith("MEM3")}
    assert expand_selector("all") == codes
    from memlint.errors import UsageError

    with pytest.raises(UsageError, match="--select: unknown rule selector 'MEM9'"):
        expand_selector("MEM9")
    defaults = resolve_selection(None, [], [])
    assert defaults == {rule.CODE for rule in RULES if rule.DEFAULT_ENABLED}
