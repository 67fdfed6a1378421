"""Notebook facts shared by the notebook rules (MEM113, MEM114, MEM404).

Not a rule module (the leading underscore keeps the registry away). In a
notebook, ``ctx.notebook`` is the :class:`~memlint.lint.notebook.NotebookLayout`
of the module the linter built from the code cells; these helpers answer
which cell a statement is in, which statement ends a cell, whether a cell's
output is silenced with ``;``, and which top-level names hold tensor memory
(as the semantic model knows values, never from names).
"""

from __future__ import annotations

import ast
import io
import tokenize

from memlint.lint.semantic import torch_ops as ops
from memlint.lint.semantic.values import Kind, Value

#: Scopes whose names are not the kernel's top-level names.
_OWN_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
               ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def cell_statements(ctx) -> dict[int, list[ast.stmt]]:
    """The module's top-level statements grouped by cell number, in order."""
    layout = ctx.notebook
    grouped: dict[int, list[ast.stmt]] = {}
    for statement in ctx.module.body:
        cell = layout.cell_of(statement.lineno)
        if cell is not None:
            grouped.setdefault(cell.number, []).append(statement)
    return grouped


def cell_span(ctx, number: int):
    """The :class:`~memlint.lint.notebook.CellSpan` of cell ``number``."""
    return next(cell for cell in ctx.notebook.cells if cell.number == number)


def last_token(ctx, cell) -> tuple[str, int, int] | None:
    """The cell's last token, comments and line ends aside: its text and the
    module (line, 1-based column) just after it; None for an empty cell."""
    text = "".join(ctx.line(number) + "\n" for number in range(cell.start, cell.end + 1))
    last = None
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                                  tokenize.DEDENT, tokenize.ENDMARKER):
                last = token
    except (tokenize.TokenError, SyntaxError):
        return None
    if last is None:
        return None
    return last.string, cell.start + last.end[0] - 1, last.end[1] + 1


def ends_with_semicolon(ctx, cell) -> bool:
    """True when the cell's last token (comments aside) is ``;``: IPython then
    neither displays nor caches its last expression's value."""
    last = last_token(ctx, cell)
    return last is not None and last[0] == ";"


#: Kinds that may be tensor memory: a tensor, a container of tensors, and a
#: value of unknown structure whose elements the model knows to be tensors
#: (the output of a module whose output type is not known).
_TENSOR_KINDS = (Kind.TENSOR, Kind.CONTAINER, Kind.UNKNOWN)


def holds_tensor_memory(value: Value) -> bool:
    """A tensor, or a container of tensors (a model output), known to keep an
    autograd graph or to be on the accelerator. Modules, optimizers, objects,
    plain values, and values of which neither is known are not (the model
    cannot decide: stay silent)."""
    if value.kind not in _TENSOR_KINDS:
        return False
    if value.kind is Kind.UNKNOWN and not _of_tensors(value.element):
        # a library method's result (`model.save_pretrained(...)`, `results.print()`) takes
        # its graph and device from its receiver: it is not known to be tensors
        return False
    return keeps_graph(value) or value.on_accelerator


def keeps_graph(value: Value) -> bool:
    """``value`` holds an autograd graph: a tensor with history, or a
    container with such a tensor among its known elements. A leaf (a
    parameter) keeps none, so neither does a tuple or list of leaves and
    Python values (``(param, param.shape)``, ``list(model.parameters())``);
    a container whose elements are not kept (nested too deep) is judged
    by its own graph."""
    if value.kind is Kind.CONTAINER:
        parts = value.items if value.items is not None else (None if value.element is None else (value.element,))
        if parts is not None:
            return any(keeps_graph(part) for part in parts)
    return value.attached


#: Builtins that copy an iterable's items into a new container (the items themselves are not copied).
_COPYING_BUILTINS = frozenset({"list", "tuple", "dict", "sorted", "collections.OrderedDict"})


def module_storage(ctx, expr: ast.expr) -> bool:
    """``expr`` is a module's own storage: ``model.state_dict()``,
    ``model.parameters()``, ``named_parameters()``, ``buffers()`` (of a value
    the semantic model knows to be a module), optionally copied into a
    ``list``/``dict``/``tuple``. Like the module itself, it holds no graph
    and no memory the module does not already hold."""
    while isinstance(expr, ast.Call) and len(expr.args) == 1 and not expr.keywords and \
            ctx.qualified(expr.func) in _COPYING_BUILTINS:
        expr = expr.args[0]
    if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute)
            and expr.func.attr in ops.MODULE_STORAGE_METHODS):
        return False
    return ctx.semantic.value(expr.func.value).kind is Kind.MODULE


def _of_tensors(element: Value | None) -> bool:
    return element is not None and element.kind in (Kind.TENSOR, Kind.CONTAINER)


def method_result_known(ctx, expr: ast.expr) -> bool:
    """False for a method call whose result is not known to be tensors:
    on a receiver that is not a tensor (``results.print()`` on a model
    output of unknown structure), or a library model's method whose result
    has no known structure (``model.add_weighted_adapter(...)``): the model
    gives such results the receiver's graph and device. True for everything
    else (a tensor's method, ``model.generate(...)``, a plain call, a name)."""
    if not isinstance(expr, ast.Call) or not isinstance(expr.func, ast.Attribute):
        return True
    if ctx.qualified(expr.func) is not None:
        return True  # a library function (`torch.exp(x)`, `F.softmax(x)`), not a method of a value
    semantic = ctx.semantic
    receiver = semantic.value(expr.func.value)
    if receiver.kind is Kind.TENSOR:
        return True
    if receiver.kind is Kind.MODULE:
        return semantic.value(expr).kind in (Kind.TENSOR, Kind.CONTAINER)
    return False


def what_it_keeps(value: Value) -> str:
    """``"its autograd graph"`` or ``"GPU memory"``: the cost, for messages."""
    return "its autograd graph" if value.attached else "GPU memory"


def top_level_names(nodes) -> list[ast.Name]:
    """The ``Name`` nodes bound or deleted at the kernel's top level in
    ``nodes`` (statements or one node), in source order: not inside
    functions, classes, lambdas or comprehensions."""
    found: list[ast.Name] = []
    stack = list(reversed(nodes if isinstance(nodes, list) else [nodes]))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            found.append(node)
            continue
        if isinstance(node, _OWN_SCOPES):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))
    return found


def names_held(ctx, nodes, device_only: bool = False) -> dict[str, ast.Name]:
    """The top-level names that ``nodes`` leave holding tensor memory: for
    each name bound there, its last binding or ``del`` decides; the
    ``Name`` node of the binding that holds it. ``device_only``: only
    tensors known to be on the accelerator count (a CPU tensor's graph
    holds no accelerator memory)."""
    held: dict[str, ast.Name] = {}
    for name in top_level_names(nodes):
        if isinstance(name.ctx, ast.Del) or not _binds_tensor_memory(ctx, name, device_only):
            held.pop(name.id, None)
        else:
            held[name.id] = name
    return held


def _binds_tensor_memory(ctx, name: ast.Name, device_only: bool = False) -> bool:
    """The binding ``name`` holds tensor memory (a method result of unknown
    structure assigned to it directly does not count: :func:`method_result_known`);
    with ``device_only``, memory known to be on the accelerator."""
    value = ctx.semantic.value(name)
    if not holds_tensor_memory(value) or device_only and not value.on_accelerator:
        return False
    statement = ctx.semantic.parents.get(name)
    if isinstance(statement, ast.Assign) and name in statement.targets:
        return method_result_known(ctx, statement.value)
    return True


def released_after(ctx, names: set[str], statements: list[ast.stmt], device_only: bool = False) -> set[str]:
    """The ``names`` that ``statements`` delete or rebind to a value holding
    no tensor memory (``del loss``, ``loss = None``; with ``device_only``, no
    accelerator memory)."""
    released: set[str] = set()
    for name in top_level_names(statements):
        if name.id not in names:
            continue
        if isinstance(name.ctx, ast.Del) or not _binds_tensor_memory(ctx, name, device_only):
            released.add(name.id)
        else:
            released.discard(name.id)
    return released


def quoted(names) -> str:
    """```a`, `b` and `c``` for messages; past five names, ``... and N more``."""
    items = [f"`{name}`" for name in sorted(names)]
    if len(items) > 5:
        items = items[:4] + [f"{len(items) - 4} more"]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
