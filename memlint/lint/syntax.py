"""Groups of CPython ``ast`` node classes and small predicates the rules share.

The linter's rules read the ``ast.Module`` that the syntax check builds
(``ast.parse``); these names keep the async variants and the literal checks
in one place, so that no rule forgets ``async def`` or ``async for``.
"""

from __future__ import annotations

import ast

#: ``def`` and ``async def``.
FUNCTION_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef)
#: ``for`` and ``async for``.
FOR_TYPES = (ast.For, ast.AsyncFor)
#: Every loop statement.
LOOP_TYPES = (ast.For, ast.AsyncFor, ast.While)
#: ``with`` and ``async with``.
WITH_TYPES = (ast.With, ast.AsyncWith)
#: Comprehensions and generator expressions (each is its own scope).
COMPREHENSION_TYPES = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
#: Hook names of the async statement classes: a rule's ``visit_FunctionDef``
#: also receives ``async def`` (one hook for both, as most rules want).
HOOK_ALIASES = {"AsyncFunctionDef": "FunctionDef", "AsyncFor": "For", "AsyncWith": "With"}


def ends_in_break(loop: ast.AST) -> bool:
    """``loop`` is a loop statement whose body ends in an unconditional
    ``break``: it runs one iteration (a smoke test of one step)."""
    return isinstance(loop, LOOP_TYPES) and bool(loop.body) and isinstance(loop.body[-1], ast.Break)


def is_constant(node: ast.AST | None, value: object) -> bool:
    """True when ``node`` is the literal ``value`` (compared with ``is``:
    ``is_constant(n, False)`` is not true for ``0``)."""
    return isinstance(node, ast.Constant) and node.value is value


def string_value(node: ast.AST | None) -> str | None:
    """The text of a plain string literal (``"cuda"``), else None (f-strings too)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def keyword_arg(call: ast.Call, name: str) -> ast.keyword | None:
    """The ``name=...`` keyword argument of ``call`` (its ``.value`` is the expression), or None."""
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword
    return None


def call_arguments(call: ast.Call) -> list[ast.expr]:
    """The argument expressions of ``call`` in source order (``*xs`` as
    ``xs``, ``**kw`` as ``kw``, ``name=v`` as ``v``)."""
    positional = [arg.value if isinstance(arg, ast.Starred) else arg for arg in call.args]
    if not call.keywords:
        return positional
    values = positional + [keyword.value for keyword in call.keywords]
    if positional and _starts(call.keywords[0].value) < _starts(positional[-1]):
        values.sort(key=_starts)  # `f(a=1, *rest)`
    return values


def _starts(node: ast.AST) -> tuple[int, int]:
    return node.lineno, node.col_offset
