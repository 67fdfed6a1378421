"""Small syntactic helpers shared by rules (the semantic ones are in
:mod:`memlint.lint.semantic`)."""

from __future__ import annotations

import re

import ast

from memlint.lint.names import dotted_name
from memlint.lint.syntax import FUNCTION_TYPES, call_arguments
from memlint.lint.walk import Visitor, file_memo, visit as walk_visit


#: Expressions that need parentheses before ``.method()``.
_OPERATIONS = (ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Await, ast.Lambda, ast.NamedExpr)


#: Expressions whose value may be a tensor in one case and not in another
#: (``loss if flag else 0``, ``loss or 0``): a method call on the whole can fail.
_EITHER_VALUE = (ast.IfExp, ast.BoolOp)


def with_method(ctx, node: ast.expr, method: str) -> str | None:
    """The code ``node.method()`` that replaces ``node``'s text (``ctx`` is
    the file's :class:`~memlint.lint.context.FileContext`); None for a
    conditional or ``and``/``or`` expression, whose other branch may be no
    tensor (``(loss if flag else 0).detach()`` fails when ``flag`` is false).
    An operation is parenthesised, also when the source already has
    parentheses around it (they are outside its text): ``x += (a + b)``
    becomes ``x += ((a + b).detach())``, correct with one redundant pair."""
    if isinstance(node, _EITHER_VALUE):
        return None
    code = ctx.code(node)
    if isinstance(node, _OPERATIONS):
        code = f"({code})"
    return f"{code}.{method}()"


def names_in(node: ast.AST) -> frozenset[str]:
    """Every Name and dotted ``self.x`` read inside ``node``."""
    def collect() -> frozenset[str]:
        collector = _NamesIn()
        walk_visit(node, collector)
        return frozenset(collector.names)

    return file_memo(("names_in", id(node)), collect)


class _NamesIn(Visitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: ast.Name) -> None:
        self.names.add(node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = dotted_name(node)
        if dotted is not None and dotted.startswith("self."):
            self.names.add(".".join(dotted.split(".")[:2]))
