"""Small syntactic helpers shared by rules (the semantic ones are in
:mod:`memlint.lint.semantic`)."""

from __future__ import annotations

import re

import ast

from memlint.lint.names import dotted_name
from memlint.lint.syntax import FUNCTION_TYPES, call_arguments
from memlint.lint.walk import Visitor, file_memo, visit as walk_visit


#: Expressions whose value may be a tensor in one case and not in another
#: (``loss if flag else 0``, ``loss or 0``): a method call on the whole can fail.
_EITHER_VALUE = (ast.IfExp, ast.BoolOp)


def method_call_plan(rule, node: ast.expr, method: str):
    """The fix plan turning ``node`` into ``node.method()`` (libcst adds the
    parentheses an operation needs: ``(a + b).detach()``); None for a
    conditional or ``and``/``or`` expression, whose other branch may be no
    tensor (``(loss if flag else 0).detach()`` fails when ``flag`` is false)."""
    if isinstance(node, _EITHER_VALUE):
        return None
    return rule.plan("call_method", node, method=method)


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


def module_spelling(ctx, module: str) -> str | None:
    """How the file names the imported module ``module`` (``torch``,
    ``tensorflow``): the name itself when imported plainly, else an alias
    (``import torch as T`` gives ``T``); None when it is not imported whole."""
    aliases = sorted(alias for alias, target in ctx.imports.aliases.items() if target == module)
    return module if module in aliases else next(iter(aliases), None)
