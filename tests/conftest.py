"""Fixtures shared by the test suite.

- ``memlint_cli``: run ``python -m memlint`` in a subprocess (see tests/lint/helpers.py);
- ``register_rule``: make a fake rule class visible to the engine for one test;
- every test runs with ``XDG_CACHE_HOME`` in a temporary directory, so the
  results cache's signing key (memlint/lint/cache.py) is never the user's.

Helper functions (expectation markers, subprocess runner, working-tree copy)
live in tests/lint/expectations.py and tests/lint/helpers.py.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_user_cache(tmp_path_factory):
    """Point the user cache directory (the cache signing key) into the test
    session's temporary tree, for this process and the ones it starts."""
    import os

    previous = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("user-cache"))
    yield
    if previous is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = previous


@pytest.fixture
def memlint_cli():
    """:func:`tests.lint.helpers.run_memlint` as a fixture."""
    from lint.helpers import run_memlint

    return run_memlint


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
