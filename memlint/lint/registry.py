"""Discover the rules in :mod:`memlint.rules` (the top-level ``rules/`` folder).

Adding a rule means adding one module to ``rules/`` that defines one
:class:`~memlint.lint.rule.Rule` subclass; nothing else changes.

Two views of the rules exist. :func:`all_rules` imports every rule module.
:func:`rule_index` reads each module's source with :mod:`ast` instead and
extracts ``CODE``, ``DEFAULT_ENABLED``, ``TRIGGERS`` and the pre-parse
requirements ``NEEDS_NAMES``/``NEEDS_GRAPH_SOURCE`` when they are
literals, so that selecting rules, the trigger pre-filter, the pre-parse
gate and cache hits import no rule module (and the parent process of a
parallel run none at all). A module whose metadata is not plain literals (computed
triggers, an overridden ``is_triggered_by``, a rule base class other than
``Rule``) is imported instead, so the index is never wrong, only slower.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
from dataclasses import dataclass
from functools import lru_cache

from memlint.errors import UsageError

_RULES_PACKAGE = "memlint.rules"
#: A top-level class statement naming a base that ends in ``Rule``.
_RULE_CLASS_LINE = re.compile(rb"^class\s+\w+\s*\([^)]*Rule\b", re.MULTILINE)
#: A class-level assignment of the metadata the index reads.
_METADATA_LINE = re.compile(rb"^    (?:CODE|TRIGGERS|DEFAULT_ENABLED|NEEDS_NAMES|NEEDS_GRAPH_SOURCE|FRAMEWORK|NOTEBOOK_ONLY)\s*[:=]", re.MULTILINE)
_METADATA_NAMES = ("CODE", "DEFAULT_ENABLED", "TRIGGERS", "NEEDS_NAMES", "NEEDS_GRAPH_SOURCE", "FRAMEWORK",
                   "NOTEBOOK_ONLY")


@dataclass(frozen=True)
class RuleInfo:
    """What the lint path needs to know about a rule without importing it.

    ``triggers`` is None when the rule decides itself whether a file
    triggers it (an overridden ``is_triggered_by``): such a rule is always a
    candidate and its own check runs after the import. ``needs_names`` and
    ``needs_graph_source`` are the rule's pre-parse requirements
    (:mod:`memlint.lint.facts`); ``notebook_only`` rules run on Jupyter
    notebooks only.
    """

    code: str
    module: str
    default_enabled: bool
    triggers: tuple[str, ...] | None
    needs_names: tuple[str, ...] = ()
    needs_graph_source: bool = False
    framework: str | None = None
    notebook_only: bool = False

    def applies_to(self, facts) -> bool:
        """False when :class:`~memlint.lint.facts.CodeFacts` show the rule cannot report."""
        if self.framework is not None and not facts.is_framework_code(self.framework):
            return False
        if self.needs_names and not facts.uses_any(self.needs_names):
            return False
        return not self.needs_graph_source or facts.has_graph_source


@lru_cache(maxsize=1)
def all_rules() -> tuple[type, ...]:
    """Every rule class, sorted by code (imports every rule module)."""
    from memlint.lint.rule import Rule

    found: list[type] = []
    for name in _module_names():
        module = importlib.import_module(f"{_RULES_PACKAGE}.{name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Rule) and value is not Rule and value.CODE:
                if value.__module__ == module.__name__:
                    found.append(value)
    return tuple(sorted(found, key=lambda rule: rule.CODE))


def rules_by_code() -> dict[str, type]:
    """Every rule class by its code (imports every rule module)."""
    return {rule.CODE: rule for rule in all_rules()}


@lru_cache(maxsize=1)
def rule_index() -> dict[str, RuleInfo]:
    """Every rule's :class:`RuleInfo` by code, read statically where possible."""
    package_dir = _package_dir()
    index: dict[str, RuleInfo] = {}
    for name in _module_names():
        module_name = f"{_RULES_PACKAGE}.{name}"
        infos = _static_infos(os.path.join(package_dir, name + ".py"), module_name)
        if infos is None:
            infos = _imported_infos(module_name)
        for info in infos:
            index[info.code] = info
    return dict(sorted(index.items()))


def rule_classes(codes) -> dict[str, type]:
    """The rule classes of ``codes`` (unknown codes are skipped), importing
    only the modules that define them (each class found once per process:
    the engine asks for every file)."""
    index = rule_index()
    classes: dict[str, type] = {}
    for code in sorted(codes):
        found = _CLASSES.get(code)
        if found is None:
            info = index.get(code)
            if info is None:
                continue
            found = _CLASSES[code] = _class_of(code, info.module)
        if found is not None:
            classes[code] = found
    return classes


#: code -> its rule class, as :func:`rule_classes` found it
_CLASSES: dict[str, type | None] = {}


def _class_of(code: str, module_name: str) -> type | None:
    module = importlib.import_module(module_name)
    for value in vars(module).values():
        if isinstance(value, type) and getattr(value, "CODE", None) == code and value.__module__ == module_name:
            return value
    return None


def _package_dir() -> str:
    import memlint.rules as package

    return list(package.__path__)[0]


def _module_names() -> list[str]:
    names = set()
    for entry in os.listdir(_package_dir()):
        stem, dot, suffix = entry.partition(".")
        if suffix == "py" and stem.isidentifier() and not stem.startswith("_"):
            names.add(stem)
    return sorted(names)


def _imported_infos(module_name: str) -> list[RuleInfo]:
    from memlint.lint.rule import Rule

    module = importlib.import_module(module_name)
    infos = []
    for value in vars(module).values():
        if isinstance(value, type) and issubclass(value, Rule) and value is not Rule and value.CODE:
            if value.__module__ == module_name:
                overridden = value.is_triggered_by.__func__ is not Rule.is_triggered_by.__func__
                triggers = None if overridden else tuple(value.TRIGGERS)
                infos.append(RuleInfo(value.CODE, module_name, bool(value.DEFAULT_ENABLED), triggers,
                                      tuple(value.NEEDS_NAMES), bool(value.NEEDS_GRAPH_SOURCE), value.FRAMEWORK,
                                      bool(getattr(value, "NOTEBOOK_ONLY", False))))
    return infos


def _static_infos(path: str, module_name: str) -> list[RuleInfo] | None:
    """RuleInfos read from the module source, or None when not plain literals."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    # The metadata sits above the first method; parsing only that head
    # takes a fifth of the time of the whole module (docstrings and hooks).
    # A head that does not parse (the cut fell inside a string) or that
    # shows fewer rule classes than the whole text declares means: parse it all.
    cut = data.find(b"\n    def ")
    if cut != -1 and b"is_triggered_by" not in data and not _METADATA_LINE.search(data, cut):
        head = _infos_from_source(data[:cut + 1], path, module_name)
        if head is not None and len(head) == len(_RULE_CLASS_LINE.findall(data)):
            return head
    return _infos_from_source(data, path, module_name)


def _infos_from_source(data: bytes, path: str, module_name: str) -> list[RuleInfo] | None:
    try:
        tree = ast.parse(data, path)
    except (SyntaxError, ValueError):
        return None
    infos = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        bases = [_base_name(base) or "" for base in node.bases]
        if "Rule" not in bases:
            if any(base.endswith("Rule") for base in bases):
                return None  # a rule built on another rule base: let the import decide
            continue  # a helper class (a visitor, a dataclass)
        info = _class_info(node, module_name)
        if info is None:
            return None
        infos.append(info)
    # memNNN_name.py defines MEMNNN: if the source did not show it, import.
    expected = module_name.rsplit(".", 1)[1].split("_", 1)[0].upper()
    if not any(info.code == expected for info in infos):
        return None
    return infos


def _base_name(base: ast.expr) -> str | None:
    if isinstance(base, ast.Name):
        return base.id
    if isinstance(base, ast.Attribute):
        return base.attr
    return None


def _class_info(node: ast.ClassDef, module_name: str) -> RuleInfo | None:
    values: dict[str, object] = {}
    for statement in node.body:
        if isinstance(statement, ast.FunctionDef) and statement.name == "is_triggered_by":
            return None
        targets = []
        if isinstance(statement, ast.Assign):
            targets = [t.id for t in statement.targets if isinstance(t, ast.Name)]
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) and statement.value:
            targets = [statement.target.id]
        for target in targets:
            if target in _METADATA_NAMES:
                try:
                    values[target] = ast.literal_eval(statement.value)
                except ValueError:
                    return None
    code, enabled, triggers = values.get("CODE"), values.get("DEFAULT_ENABLED", True), values.get("TRIGGERS", ())
    if not isinstance(code, str) or not code or not isinstance(enabled, bool):
        return None
    needs, needs_graph = values.get("NEEDS_NAMES", ()), values.get("NEEDS_GRAPH_SOURCE", False)
    framework = values.get("FRAMEWORK")
    notebook_only = values.get("NOTEBOOK_ONLY", False)
    if not isinstance(notebook_only, bool):
        return None
    if not _strings(triggers) or not _strings(needs) or not isinstance(needs_graph, bool):
        return None
    if framework is not None and framework not in ("torch", "tensorflow"):
        return None
    return RuleInfo(code, module_name, enabled, tuple(triggers), tuple(needs), needs_graph, framework, notebook_only)


def _strings(value: object) -> bool:
    return isinstance(value, (tuple, list)) and all(isinstance(item, str) for item in value)


def expand_selector(selector: str, option: str = "--select") -> set[str]:
    """Codes matched by ``selector``: a code, a prefix (``MEM1``), or ``ALL``.

    Raises:
        UsageError: the selector matches no rule (names the option).
    """
    codes = list(rule_index())
    wanted = selector.strip().upper()
    if wanted == "ALL":
        return set(codes)
    matched = {code for code in codes if code.startswith(wanted)}
    if not wanted or not matched:
        hint = selector_suggestion(selector)
        raise UsageError(f"{option}: unknown rule selector {selector!r}{'; ' + hint if hint else ''} "
                         "(see `memlint rules`)")
    return matched


def selector_suggestion(selector: str) -> str:
    """``"did you mean 'MEM303'?"`` for a mistyped rule selector: the codes
    closest to it, or the code of a rule whose name it resembles
    (``load-without-map-location``); empty when nothing is close."""
    from memlint.suggest import close_matches, did_you_mean

    index = rule_index()
    codes = close_matches(selector.strip(), index)
    if not codes:  # the error path only: the rule modules are imported for their names
        by_name = {rule.NAME: rule.CODE for rule in all_rules()}
        codes = [by_name[name] for name in close_matches(selector.strip(), by_name)]
    return did_you_mean(codes)


def resolve_selection(
    select: list[str] | None,
    ignore: list[str],
    extend_select: list[str],
    option_names: tuple[str, str, str] = ("select", "ignore", "extend-select"),
) -> frozenset[str]:
    """The enabled codes: (select, or the defaults) + extend-select - ignore."""
    sel_opt, ign_opt, ext_opt = option_names
    if select is None:
        enabled = {info.code for info in rule_index().values() if info.default_enabled}
    else:
        enabled = set()
        for selector in select:
            enabled |= expand_selector(selector, sel_opt)
    for selector in extend_select:
        enabled |= expand_selector(selector, ext_opt)
    for selector in ignore:
        enabled -= expand_selector(selector, ign_opt)
    return frozenset(enabled)
