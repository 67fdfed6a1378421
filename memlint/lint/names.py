"""Resolve names through a file's imports to dotted qualified names.

``import torch as T`` makes ``T.cuda.empty_cache`` resolve to
``torch.cuda.empty_cache``; ``from torch.cuda import empty_cache as ec`` makes
``ec`` resolve to it too; ``import torch.nn.functional as F`` makes
``F.cross_entropy`` resolve to ``torch.nn.functional.cross_entropy``.

This is deliberately cheaper than libcst's full scope analysis: imports
anywhere in the file are collected into one flat alias map. A name that is
not imported resolves to itself, so a local ``load`` never becomes
``torch.load``.
"""

from __future__ import annotations

import libcst as cst
from memlint.lint.walk import visit as walk_visit


def dotted_name(node: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None (calls, subscripts...)."""
    parts: list[str] = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if not isinstance(node, cst.Name):
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


class ImportMap:
    """Alias map of one module: local name -> fully qualified dotted name."""

    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}

    @classmethod
    def from_module(cls, module: cst.Module) -> "ImportMap":
        imports = cls()
        collector = _ImportCollector(imports.aliases)
        walk_visit(module, collector)
        return imports

    @classmethod
    def from_statements(cls, statements) -> "ImportMap":
        """The map of these ``Import``/``ImportFrom`` nodes, in source order."""
        imports = cls()
        collector = _ImportCollector(imports.aliases)
        for statement in statements:
            if isinstance(statement, cst.Import):
                collector.visit_Import(statement)
            else:
                collector.visit_ImportFrom(statement)
        return imports

    def qualify(self, dotted: str) -> str:
        """Map the first component of ``dotted`` through the aliases."""
        head, _, rest = dotted.partition(".")
        target = self.aliases.get(head)
        if target is None:
            return dotted
        return f"{target}.{rest}" if rest else target

    def qualified(self, node: cst.BaseExpression) -> str | None:
        """Qualified name of a Name/Attribute expression, or None."""
        dotted = dotted_name(node)
        return None if dotted is None else self.qualify(dotted)

    def imports_module(self, prefix: str) -> bool:
        """True when something under ``prefix`` (e.g. ``"tensorflow"``) is imported."""
        return any(t == prefix or t.startswith(prefix + ".") for t in self.aliases.values())


class _ImportCollector(cst.CSTVisitor):
    def __init__(self, aliases: dict[str, str]) -> None:
        self.aliases = aliases

    def visit_Import(self, node: cst.Import) -> bool:
        for alias in node.names:
            full = dotted_name(alias.name)
            if full is None:
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self.aliases[alias.asname.name.value] = full
            else:
                head = full.split(".")[0]
                self.aliases.setdefault(head, head)
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return False
        base = dotted_name(node.module)
        if base is None:
            return False
        for alias in node.names:
            name = dotted_name(alias.name)
            if name is None:
                continue
            local = name
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            self.aliases[local] = f"{base}.{name}"
        return False
