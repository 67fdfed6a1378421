"""Training-step facts shared by the MEM2xx/MEM3xx/MEM4xx rules.

Not a rule module (the leading underscore keeps the registry away): small
recognisers of the calls that make up a training step (``.backward()``,
``optimizer.step()``, ``zero_grad()``), and walks that stay inside one
function body or follow the file's own functions (resolved by the
semantic model, never by name).

The walks take a node or a list of statements (a function's or a loop's
``body``).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

from memlint.lint.names import dotted_name
from memlint.lint.syntax import FUNCTION_TYPES, LOOP_TYPES
from memlint.lint.walk import children as syntactic_children, indexed_descendants

#: Nodes whose bodies run at another time (a nested function, a class body).
SCOPE_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


#: A node, or a list of statements (a ``body``).
Code = ast.AST | list[ast.stmt]
Function = ast.FunctionDef | ast.AsyncFunctionDef


def _roots(code: Code) -> list[ast.AST]:
    """Where a walk of ``code`` starts: the node itself, or the statements
    of a body that are not nested functions or classes."""
    if isinstance(code, list):
        return [statement for statement in code if not isinstance(statement, SCOPE_TYPES)]
    return [code]


def walk(code: Code) -> Iterator[ast.AST]:
    """Every node of ``code`` in source order, not entering nested functions or classes."""
    stack = list(reversed(_roots(code)))
    while stack:
        current = stack.pop()
        yield current
        children = [child for child in syntactic_children(current) if not isinstance(child, SCOPE_TYPES)]
        stack.extend(reversed(children))


def calls_in(code: Code) -> list[ast.Call]:
    """The calls in ``code`` (same function body), in source order."""
    found = indexed_descendants(code, (ast.Call,), SCOPE_TYPES)
    if found is None:
        found = [node for node in walk(code) if isinstance(node, ast.Call)]
    return found


def method_name(call: ast.Call) -> str | None:
    """``"step"`` for ``x.step(...)``; None for a plain function call."""
    return call.func.attr if isinstance(call.func, ast.Attribute) else None


def receiver_name(expr: ast.expr) -> str | None:
    """Dotted name of a call receiver, looking through subscripts and calls:
    ``self.optimizers`` for ``self.optimizers[0]`` and ``self.optimizers()``."""
    while isinstance(expr, (ast.Subscript, ast.Call)):
        expr = expr.value if isinstance(expr, ast.Subscript) else expr.func
    return dotted_name(expr)


def positional_args(call: ast.Call) -> list[ast.expr]:
    return [arg for arg in call.args if not isinstance(arg, ast.Starred)]


def arguments_in_order(call: ast.Call) -> list[ast.expr | ast.keyword]:
    """The arguments of ``call`` as written: positional ones (``*xs`` as an
    ``ast.Starred``) and keyword ones (``**kw`` as a keyword without a name)."""
    return sorted([*call.args, *call.keywords], key=lambda node: (node.lineno, node.col_offset))


def is_backward(call: ast.Call, ctx) -> bool:
    """``loss.backward()``, ``scaler.scale(loss).backward()``, ``accelerator.backward(loss)``,
    ``self.manual_backward(loss)``, ``torch.autograd.backward(loss)``."""
    method = method_name(call)
    if method in ("backward", "manual_backward"):
        return True
    return ctx.qualified(call.func) == "torch.autograd.backward"


def backward_loss(call: ast.Call, semantic) -> ast.expr | None:
    """The expression a backward call differentiates (``loss`` for
    ``scaler.scale(loss).backward()`` and ``accelerator.backward(loss)``); None if unknown."""
    return semantic.differentiated(call)


def is_delegated_backward(call: ast.Call, semantic) -> bool:
    """``accelerator.backward(loss)``-style: a framework object runs the backward of its argument."""
    differentiated = semantic.differentiated(call)
    return (method_name(call) == "backward" and differentiated is not None
            and any(differentiated is argument for argument in call.args))


def is_optimizer_step(call: ast.Call, semantic) -> bool:
    """``optimizer.step()``, ``scaler.step(optimizer)``, ``self.optimizers()[0].step()``:
    a step of an optimizer (by construction, or a ``.step()`` without data
    arguments in a function that runs a backward pass), as the semantic model decides."""
    return isinstance(call.func, ast.Attribute) and call.func.attr == "step" and semantic.is_optimizer_step(call)


def clears_grads(node: ast.AST) -> bool:
    """``zero_grad()``/``clear_grad()`` of anything, ``p.grad = None``, ``p.grad.zero_()``, ``del p.grad``."""
    if isinstance(node, ast.Call):
        method = method_name(node) or dotted_name(node.func) or ""
        last = method.split(".")[-1]
        if "zero_grad" in last or last in ("clear_grad", "clear_gradients", "cleargrads", "zerograd", "zero_gradients"):
            return True
        if last in ("zero_", "detach_", "fill_") and isinstance(node.func, ast.Attribute):
            chain = dotted_name(node.func.value) or ""
            return chain.endswith((".grad", ".grad.data"))
        return False
    if isinstance(node, (ast.Assign, ast.Delete)):
        return any(_is_grad_attribute(target) for target in node.targets)
    return False


def _is_grad_attribute(target: ast.expr) -> bool:
    return isinstance(target, ast.Attribute) and target.attr == "grad"


def local_callees(code: Code, semantic) -> list[Function]:
    """Functions of this file that calls in ``code`` run (resolved by scope and receiver)."""
    found = []
    for call in calls_in(code):
        callee = semantic.callee(call)
        if callee is not None and isinstance(callee, FUNCTION_TYPES):
            found.append(callee)
    return found


def reaches(code: Code, predicate: Callable[[ast.AST], bool], semantic, depth: int = 2) -> bool:
    """True when ``predicate`` holds for a node in ``code`` or in a function
    of this file that it calls (followed ``depth`` calls deep)."""
    seen: set[int] = set()
    frontier: list[Code] = [code]
    for level in range(depth + 1):
        following: list[Code] = []
        for current in frontier:
            if id(current) in seen:
                continue
            seen.add(id(current))
            body = current.body if isinstance(current, FUNCTION_TYPES) else current
            if any(predicate(child) for child in walk(body)):
                return True
            if level < depth:
                following.extend(local_callees(body, semantic))
        frontier = following
    return False


def loops_in(code: Code) -> list[ast.For | ast.AsyncFor | ast.While]:
    """``for``/``while`` loops in ``code`` in the same body, outermost first."""
    return [node for node in walk(code) if isinstance(node, LOOP_TYPES)]


def has_modulo(expr: ast.AST) -> bool:
    """True when ``expr`` contains ``a % b`` (a periodic condition)."""
    return any(isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) for node in walk(expr))
