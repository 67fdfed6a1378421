"""Resolve names through a file's imports to dotted qualified names.

``import torch as T`` makes ``T.cuda.empty_cache`` resolve to
``torch.cuda.empty_cache``; ``from torch.cuda import empty_cache as ec`` makes
``ec`` resolve to it too; ``import torch.nn.functional as F`` makes
``F.cross_entropy`` resolve to ``torch.nn.functional.cross_entropy``.

This is deliberately cheaper than a full scope analysis: imports
anywhere in the file are collected into one flat alias map. A name that is
not imported resolves to itself, so a local ``load`` never becomes
``torch.load``.
"""

from __future__ import annotations

import ast


_NAME, _ATTRIBUTE = ast.Name, ast.Attribute


def dotted_name(node: ast.AST) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None (calls, subscripts...)."""
    kind = node.__class__
    if kind is _NAME:  # most calls: a plain name
        return node.id
    if kind is not _ATTRIBUTE:
        return None
    parts = [node.attr]
    node = node.value
    while node.__class__ is _ATTRIBUTE:
        parts.append(node.attr)
        node = node.value
    if node.__class__ is not _NAME:
        return None
    parts.append(node.id)
    parts.reverse()
    return ".".join(parts)


class DottedNames:
    """:func:`dotted_name` of the nodes of one tree, memoized along each
    chain: the ``n`` attributes of ``a.b. ... .z`` cost O(n) together, not
    O(n²) (a rule asking about every attribute of a long chain)."""

    def __init__(self) -> None:
        self._memo: dict[ast.AST, str | None] = {}

    def of(self, node: ast.AST) -> str | None:
        kind = node.__class__
        if kind is _NAME:
            return node.id
        if kind is not _ATTRIBUTE:
            return None  # a call, subscript, constant...: no dotted name (as below, without the memo)
        memo = self._memo
        found = memo.get(node, memo)
        if found is not memo:
            return found
        chain = []
        current = node
        while isinstance(current, ast.Attribute) and current not in memo:
            chain.append(current)
            current = current.value
        if isinstance(current, ast.Attribute):
            base = memo[current]
        else:
            base = current.id if isinstance(current, ast.Name) else None
        for attribute in reversed(chain):
            base = None if base is None else f"{base}.{attribute.attr}"
            memo[attribute] = base
        return base if chain else None


class ImportMap:
    """Alias map of one module: local name -> fully qualified dotted name."""

    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}

    @classmethod
    def from_statements(cls, statements) -> "ImportMap":
        """The map of these ``Import``/``ImportFrom`` nodes, in source order."""
        imports = cls()
        for statement in statements:
            if isinstance(statement, ast.Import):
                imports._add_import(statement)
            else:
                imports._add_import_from(statement)
        return imports

    def _add_import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname is not None:
                self.aliases[alias.asname] = alias.name
            else:
                head = alias.name.split(".")[0]
                self.aliases.setdefault(head, head)

    def _add_import_from(self, node: ast.ImportFrom) -> None:
        if node.level or node.module is None:
            return
        for alias in node.names:
            if alias.name == "*":
                return
            self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def qualify(self, dotted: str) -> str:
        """Map the first component of ``dotted`` through the aliases."""
        head, _, rest = dotted.partition(".")
        target = self.aliases.get(head)
        if target is None:
            return dotted
        return f"{target}.{rest}" if rest else target

    def qualified(self, node: ast.AST) -> str | None:
        """Qualified name of a Name/Attribute expression, or None."""
        dotted = dotted_name(node)
        return None if dotted is None else self.qualify(dotted)

    def imports_module(self, prefix: str) -> bool:
        """True when something under ``prefix`` (e.g. ``"tensorflow"``) is imported."""
        return any(t == prefix or t.startswith(prefix + ".") for t in self.aliases.values())


def targets_of(node: ast.AST) -> list[str]:
    """Dotted names bound by an assignment target (``a``, ``a, (b, c)``, ``*rest``, ``self.x``)."""
    if isinstance(node, (ast.Tuple, ast.List)):
        return [name for element in node.elts for name in targets_of(element)]
    if isinstance(node, ast.Starred):
        return targets_of(node.value)
    dotted = dotted_name(node)
    return [dotted] if dotted is not None else []


def root_name(node: ast.AST) -> str | None:
    """The storage a target writes into: ``acc`` for ``acc``, ``acc[k]``,
    ``acc.x[k]``; ``self.acc`` for ``self.acc[k]`` and ``self.acc.x``."""
    while isinstance(node, ast.Subscript):
        node = node.value
    dotted = dotted_name(node)
    if dotted is None:
        return None
    if dotted.startswith("self."):
        return ".".join(dotted.split(".")[:2])
    return dotted.split(".")[0]
