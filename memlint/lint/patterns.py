"""Small syntactic helpers shared by rules (the semantic ones are in dataflow)."""

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


def returned_names(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Names that appear in the function's ``return``/``yield`` values."""
    collector = _ReturnedNames()
    walk_visit(function.body, collector)
    return collector.names


class _ReturnedNames(Visitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> bool:
        return False

    def visit_Return(self, node: ast.Return) -> None:
        if node.value is not None:
            self.names |= names_in(node.value)

    def visit_Yield(self, node: ast.Yield) -> None:
        if node.value is not None:
            self.names |= names_in(node.value)


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


#: Method calls that make a training step: ``loss.backward()``, ``opt.step()``...
TRAINING_STEP_METHODS = frozenset({"backward", "step", "manual_backward"})


def is_training_step_call(node: ast.AST) -> bool:
    """True for a ``.backward(...)``, ``.step(...)`` or ``.manual_backward(...)`` call."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in TRAINING_STEP_METHODS


def contains_training_step(node: ast.AST | list[ast.stmt]) -> bool:
    """True when ``node`` contains a ``.backward(...)`` or ``.step(...)`` call."""
    def find() -> bool:
        finder = _TrainingStepFinder()
        walk_visit(node, finder)
        return finder.found

    return file_memo(("training_step", id(node)), find)


class _TrainingStepFinder(Visitor):
    def __init__(self) -> None:
        self.found = False

    def visit_Call(self, node: ast.Call) -> bool:
        if is_training_step_call(node):
            self.found = True
        return not self.found


#: Container methods that store their argument(s) in the container.
STORING_METHODS = frozenset({"append", "extend", "insert", "add", "appendleft", "put", "update", "setdefault"})


def collection_target(node: ast.AST) -> tuple[str, list[ast.expr]] | None:
    """The container a statement stores values into, and the stored values.

    - ``lst.append(v)`` / ``self.outs.extend(v)`` / ``buf.add(logits=v)`` /
      ``q.insert(0, v)`` -> (``"lst"``/``"self.outs"``/..., [v...]);
    - ``d[k] = v`` (an ``Assign`` whose single target is a subscript) ->
      (``"d"``, [v]);
    - ``lst += [v, w]`` -> (``"lst"``, [v, w]).

    Returns None for anything else. The container name is the root as
    :func:`memlint.lint.dataflow.root_name` computes it.
    """
    from memlint.lint.dataflow import root_name

    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr not in STORING_METHODS:
            return None
        container = root_name(node.func.value)
        if container is None:
            return None
        values = call_arguments(node)
        if node.func.attr == "insert" and len(values) >= 2:
            values = values[1:]
        return container, values
    if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and isinstance(node.value, (ast.List, ast.Tuple)):
        container = root_name(node.target)  # `hist += [x]` extends `hist`
        return (container, [_unstarred(element) for element in node.value.elts]) if container is not None else None
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript):
        container = root_name(node.targets[0])
        return (container, [node.value]) if container is not None else None
    return None


def _unstarred(node: ast.expr) -> ast.expr:
    return node.value if isinstance(node, ast.Starred) else node


#: Lightning-style hooks run once per batch: a ``self.<list>`` they store into
#: outlives the "iteration" even though no loop is visible.
PER_BATCH_HOOK_NAMES = frozenset(
    {"training_step", "validation_step", "test_step", "predict_step",
     "on_train_batch_end", "on_validation_batch_end", "on_test_batch_end", "on_predict_batch_end"}
)


def outlives_iteration(flow, container: str, node: ast.AST) -> bool:
    """True when ``container`` (a :func:`collection_target` root) survives the
    iteration that runs ``node``: it is bound before the innermost enclosing
    loop, or it is a ``self.`` attribute stored into from a per-batch hook.
    ``flow`` is the file's :class:`memlint.lint.dataflow.Dataflow`."""
    loops = flow.enclosing_loops(node)
    if loops:
        return flow.defined_outside(container, loops[0])
    if not container.startswith("self."):
        return False
    function = flow.scope_node(node)
    return isinstance(function, FUNCTION_TYPES) and function.name in PER_BATCH_HOOK_NAMES


def leaf_values(values) -> list[ast.expr]:
    """The expressions stored by ``values``, looking through dict, tuple,
    list and set literals (``{"a": x, "b": (y, z)}`` -> ``[x, y, z]``)."""
    leaves: list[ast.expr] = []
    pending = list(values)
    while pending:
        value = pending.pop(0)
        if isinstance(value, (ast.Tuple, ast.List, ast.Set)):
            pending.extend(_unstarred(element) for element in value.elts)
        elif isinstance(value, ast.Dict):
            pending.extend(value.values)
        else:
            leaves.append(value)
    return leaves


#: Base classes that make a class a PyTorch map-style or iterable dataset.
DATASET_BASES = frozenset(
    {"torch.utils.data.Dataset", "torch.utils.data.IterableDataset",
     "torch.utils.data.dataset.Dataset", "torch.utils.data.dataset.IterableDataset"}
)


def is_dataset_class(klass: ast.ClassDef, ctx) -> bool:
    """True for a class deriving (through its imports) from
    ``torch.utils.data.Dataset``/``IterableDataset``, or whose name or a
    base's name ends in ``Dataset``."""
    if klass.name.endswith("Dataset"):
        return True
    for base in klass.bases:
        qualified = ctx.qualified(base)
        if qualified is not None and (qualified in DATASET_BASES or qualified.endswith("Dataset")):
            return True
    return False


DICT_FACTORIES = frozenset({"dict", "collections.defaultdict", "collections.OrderedDict", "collections.Counter"})


def bound_to_dict(container: str, function: ast.AST, ctx) -> bool:
    """``container`` is visibly a dict: bound to ``{}``/``dict()``/``defaultdict(...)``
    in the function (or, for ``self.x``, anywhere in the file)."""
    finder = _DictBinding(container, ctx)
    walk_visit(ctx.module if container.startswith("self.") else function, finder)
    return finder.found


class _DictBinding(Visitor):
    def __init__(self, container: str, ctx) -> None:
        self.container = container
        self.ctx = ctx
        self.found = False

    def visit_Assign(self, node: ast.Assign) -> None:
        from memlint.lint.dataflow import targets_of

        if not any(self.container in targets_of(target) for target in node.targets):
            return
        value = node.value
        if isinstance(value, (ast.Dict, ast.DictComp)):
            self.found = True
        elif isinstance(value, ast.Call) and self.ctx.qualified(value.func) in DICT_FACTORIES:
            self.found = True


ITERATION_NAME = re.compile(r"(?:loader|batches|dataset|data|iterator|stream|episodes?|steps|iters|iterations|epochs)$", re.IGNORECASE)


def iteration_loop(loop: ast.For | ast.AsyncFor | ast.While) -> bool:
    """A loop whose iteration count grows with the run: a `while`, a loop with
    a training step, or one over a loader/steps-like iterable. Loops over a
    model's layers, a batch's items or a fixed structure are not: what they
    collect is bounded, and inside a forward pass it is the graph itself."""
    if isinstance(loop, ast.While) or contains_training_step(loop.body):
        return True
    iterable = loop.iter
    while isinstance(iterable, ast.Call) and dotted_name(iterable.func) in ("enumerate", "tqdm", "tqdm.tqdm", "iter", "range", "zip"):
        arguments = call_arguments(iterable)
        if not arguments:
            break
        iterable = arguments[-1] if dotted_name(iterable.func) == "range" else arguments[0]
    name = dotted_name(iterable)
    return name is not None and bool(ITERATION_NAME.search(name))


def carried_across_iterations(flow, name: str, node: ast.AST) -> ast.AST | None:
    """The loop across whose iterations ``name`` (bound outside it) keeps what
    ``node`` adds: the innermost enclosing :func:`iteration_loop` that ``name``
    is bound outside of; None when ``name`` is re-created inside every such
    loop (``flow`` is the file's :class:`memlint.lint.dataflow.Dataflow`)."""
    for loop in flow.enclosing_loops(node):
        if not flow.defined_outside(name, loop):
            return None
        if iteration_loop(loop):
            return loop
    return None
