"""Discover the rules in :mod:`memlint.rules` (the top-level ``rules/`` folder).

Adding a rule means adding one module to ``rules/`` that defines one
:class:`~memlint.lint.rule.Rule` subclass; nothing else changes.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from memlint.errors import UsageError
from memlint.lint.rule import Rule


@lru_cache(maxsize=1)
def all_rules() -> tuple[type[Rule], ...]:
    """Every rule class, sorted by code."""
    import memlint.rules as package

    found: list[type[Rule]] = []
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Rule) and value is not Rule and value.CODE:
                if value.__module__ == module.__name__:
                    found.append(value)
    return tuple(sorted(found, key=lambda rule: rule.CODE))


def rules_by_code() -> dict[str, type[Rule]]:
    return {rule.CODE: rule for rule in all_rules()}


def expand_selector(selector: str, option: str = "--select") -> set[str]:
    """Codes matched by ``selector``: a code, a prefix (``MEM1``), or ``ALL``.

    Raises:
        UsageError: the selector matches no rule (names the option).
    """
    codes = [rule.CODE for rule in all_rules()]
    wanted = selector.strip().upper()
    if wanted == "ALL":
        return set(codes)
    matched = {code for code in codes if code.startswith(wanted)}
    if not wanted or not matched:
        raise UsageError(f"{option}: unknown rule selector {selector!r} (see `memlint rules`)")
    return matched


def resolve_selection(
    select: list[str] | None,
    ignore: list[str],
    extend_select: list[str],
    option_names: tuple[str, str, str] = ("select", "ignore", "extend-select"),
) -> frozenset[str]:
    """The enabled codes: (select, or the defaults) + extend-select - ignore."""
    sel_opt, ign_opt, ext_opt = option_names
    if select is None:
        enabled = {rule.CODE for rule in all_rules() if rule.DEFAULT_ENABLED}
    else:
        enabled = set()
        for selector in select:
            enabled |= expand_selector(selector, sel_opt)
    for selector in extend_select:
        enabled |= expand_selector(selector, ext_opt)
    for selector in ignore:
        enabled -= expand_selector(selector, ign_opt)
    return frozenset(enabled)
