"""Statements that store values into a container, and whether the container
outlives the iteration: the shared question of MEM102 (graph-attached
tensors collected), MEM103 (device tensors collected) and the rules that
look at what a loop or a per-batch hook keeps.

A store is ``c.append(v)``, ``c.extend(vs)``, ``c.insert(i, v)``,
``c.add(v)``, ``c.appendleft(v)``, ``c.put(v)``, ``c.update({...})``,
``c.setdefault(k, v)``, ``c[k].append(v)`` (a dict of lists), ``c += [v]``,
``d[k] = v`` into a dict or into a list of empty slots (``c = [None] * n``)
with a key that may change between runs (``d["loss"] = v`` overwrites one
slot and is no store), a call of a method of the file that stores its
argument into its object's state (``buffer.add(logits)`` where ``add``
appends to ``self.items``), or a list/set/dict comprehension that gathers
values while iterating a stream of batches.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from memlint.lint.names import root_name
from memlint.lint.semantic.constants import UNKNOWN as UNFOLDED
from memlint.lint.semantic.values import Kind, Tri, Value
from memlint.lint.signatures import arguments_bound
from memlint.lint.syntax import call_arguments

#: Methods that store their arguments in the container they are called on.
STORING_METHODS = frozenset({"append", "extend", "insert", "add", "appendleft", "put", "update", "setdefault"})
#: Methods whose first argument is a key, not a stored value.
_KEYED = frozenset({"setdefault"})
#: A comprehension of these gathers its elements into a container.
GATHERING_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp)
#: Mapping methods that read the item at a key: ``d.get(key, default)`` and
#: ``d.setdefault(key, default)`` return ``d[key]`` when the key is there, else
#: the default (Python 3.11 ``Objects/dictobject.c`` ``dict_get_impl`` and
#: ``dict_setdefault_impl``, CPython 3.11.7; the same for ``collections.defaultdict``,
#: which subclasses ``dict`` and does not override either).
ITEM_READING_METHODS = frozenset({"get", "setdefault"})


@dataclass(frozen=True)
class Store:
    """One store: ``root`` is the storage written (``outs``, ``self.history``),
    ``values`` the stored expressions (for a comprehension, its element),
    ``node`` the statement or call reported, and ``via`` the in-file
    method that does the storing for a call (None when the store is direct)."""

    root: str
    values: tuple[ast.expr, ...]
    node: ast.AST
    via: str | None = None


def store_of(model, node: ast.AST) -> Store | None:
    """The store ``node`` makes, or None (syntactic, then the container's value)."""
    if isinstance(node, ast.Call):
        return _method_store(model, node)
    if isinstance(node, ast.AugAssign):
        if isinstance(node.op, ast.Add) and isinstance(node.value, (ast.List, ast.Tuple)):
            root = root_name(node.target)
            return Store(root, tuple(_unstarred(e) for e in node.value.elts), node) if root else None
        return None
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript):
        target = node.targets[0]
        root = root_name(target)
        if root is None or not (_is_mapping(model, target.value) or _placeholder_list(model, target.value)):
            return None  # `t[i] = v` writes into a tensor (or a list slot) in place
        if _adds_into_total(model, target, node.value):
            return None  # `d[k] = d.get(k, 0) + v` adds into a total: an accumulation (MEM101's), not an item kept
        if _fixed_key(model, target.slice):
            return None  # `d["loss"] = v`: each store replaces the last, the container holds one value
        return Store(root, (node.value,), node)
    return None


def accumulated_value(model, target: ast.expr, value: ast.expr) -> ast.expr | None:
    """What ``target = value`` adds to the running total held at ``target``:
    ``loss`` in ``total = total + loss``, ``total = loss + total``,
    ``total = total - loss``, and, for an item of a mapping,
    ``d[k] = d.get(k, 0.0) + loss`` or ``d[k] = loss + d.setdefault(k, 0)``
    (:data:`ITEM_READING_METHODS`). None when ``value`` does not read the
    total it replaces."""
    if not isinstance(value, ast.BinOp) or not isinstance(value.op, (ast.Add, ast.Sub)):
        return None
    if _reads_total(model, target, value.left):
        return value.right
    if isinstance(value.op, ast.Add) and _reads_total(model, target, value.right):
        return value.left
    return None


def _adds_into_total(model, target: ast.expr, value: ast.expr) -> bool:
    """``target = value`` adds one value (not a list of them: ``d[k] = d.get(k, []) + [out]``
    collects) into the total held at ``target``."""
    added = accumulated_value(model, target, value)
    return added is not None and not isinstance(added, _LITERAL_COLLECTIONS) and model.value(added).kind is not Kind.CONTAINER


#: Displays and comprehensions: added to a list, they extend it.
_LITERAL_COLLECTIONS = (ast.List, ast.Tuple, ast.Set, ast.ListComp, ast.SetComp, ast.Dict, ast.DictComp, ast.GeneratorExp)


def _reads_total(model, target: ast.expr, expr: ast.expr) -> bool:
    """``expr`` reads what ``target`` holds before the assignment: the same
    expression, or an item-reading method of the same mapping at the same key."""
    written = ast.unparse(target)
    if ast.unparse(expr) == written:
        return True
    if not (isinstance(target, ast.Subscript) and isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute)):
        return False
    if expr.func.attr not in ITEM_READING_METHODS or not expr.args or expr.keywords or len(expr.args) > 2:
        return False
    return (ast.unparse(expr.func.value) == ast.unparse(target.value)
            and ast.unparse(expr.args[0]) == ast.unparse(target.slice)
            and _is_mapping(model, target.value))


def _fixed_key(model, key: ast.expr) -> bool:
    """The key of ``d[key] = v`` is the same value at every run of the store
    (a literal, or a name that provably folds to one where it stands, see
    :mod:`memlint.lint.semantic.constants`): the store overwrites one slot
    and nothing grows. A key that may change per iteration (a loop
    variable, a counter, ``len(d)``) does not fold."""
    if isinstance(key, ast.Slice):
        return False
    return model.constants.value(key) is not UNFOLDED


def _placeholder_list(model, expr: ast.expr) -> bool:
    """``expr`` names a list of empty slots made to be filled
    (``cache = [None] * n``, or one branch of a conditional that is): each
    ``cache[i] = v`` adds a value it keeps, as ``append`` would."""
    if not isinstance(expr, ast.Name):
        return False
    assignment = model.assignment_before(expr)
    if assignment is None:
        return False
    value = assignment.value
    branches = (value.body, value.orelse) if isinstance(value, ast.IfExp) else (value,)
    return any(isinstance(b, ast.BinOp) and isinstance(b.op, ast.Mult) and any(_none_list(side) for side in (b.left, b.right))
               for b in branches)


def _none_list(node: ast.expr) -> bool:
    """``[None]``: a list display of ``None`` slots."""
    return isinstance(node, ast.List) and bool(node.elts) and all(
        isinstance(e, ast.Constant) and e.value is None for e in node.elts)


def _method_store(model, call: ast.Call) -> Store | None:
    func = call.func
    if not isinstance(func, ast.Attribute):
        return None
    if func.attr in STORING_METHODS:
        root = root_name(func.value)
        if root is None or not _may_be_container(model, func.value, func.attr):
            return None
        values = call_arguments(call)
        if func.attr in ("insert", "setdefault") and len(values) >= 2:
            values = values[1:]
        return Store(root, tuple(values), call) if values else None
    return None


def effect_store(model, call: ast.Call) -> Store | None:
    """A call of a function of this file whose callee collects an argument
    into persistent state: the store it makes, rooted in the caller."""
    if not model.may_call_local(call):
        return None
    for effect in model.call_effects(call):
        if effect.kind == "collect" and effect.value.graph is not Tri.NO:
            root = model.effect_root(call, effect)
            arguments = _arguments_stored(model, call, effect)
            if root is not None and arguments:
                return Store(root, arguments, call, via=effect.target)
    return None


def _arguments_stored(model, call: ast.Call, effect) -> tuple[ast.expr, ...]:
    """The arguments of ``call`` whose parameters the collected value comes
    from (its sources); every argument when the callee or the sources are
    not known. None of them when the value comes from no parameter
    (``self.stats["beta"].append(self.beta)``): the call stores its own
    state, not what it is given."""
    arguments = tuple(call_arguments(call))
    callee = model.callee(call)
    if callee is None or not isinstance(callee, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return arguments
    on_object = isinstance(call.func, ast.Attribute) and model.class_of_method(callee) is not None
    bound = arguments_bound(call, callee, skip_receiver=on_object)
    if not bound or len(bound) < len(arguments):
        return arguments  # `*args`/`**kwargs` or a starred argument: which one flows is not known
    return tuple(argument for name, argument in bound.items() if name in effect.value.sources)


def comprehension_store(model, node: ast.AST) -> Store | None:
    """A list/set/dict comprehension that gathers values while iterating a
    stream of batches (``preds = [model(x) for x in loader]``)."""
    if not isinstance(node, GATHERING_COMPREHENSIONS) or not model.is_run_comprehension(node):
        return None
    element = node.value if isinstance(node, ast.DictComp) else node.elt
    return Store("<comprehension>", (element,), node)


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


def _unstarred(node: ast.expr) -> ast.expr:
    return node.value if isinstance(node, ast.Starred) else node


def _container_value(model, expr: ast.expr) -> Value:
    return model.value(expr)


#: Storing methods that many non-container objects also have (meters' and EMAs' ``update``,
#: tqdm's ``update``, hashlib's ``update``, queues' ``put``, sets' ``add`` beside loggers' ``add``):
#: their receiver must be known to be a container.
_AMBIGUOUS_STORING = frozenset({"update", "add", "put", "push"})


def _may_be_container(model, expr: ast.expr, method: str = "append") -> bool:
    """The receiver of a storing method is (or may be) a Python container,
    not a tensor, module or library object with a method of that name."""
    value = model.value(expr)
    if method in _AMBIGUOUS_STORING:
        return value.kind is Kind.CONTAINER
    if value.kind in (Kind.CONTAINER, Kind.UNKNOWN):
        return value.type_name in (None, "dict", "collections.deque") or value.kind is Kind.CONTAINER
    return False


def _is_mapping(model, expr: ast.expr) -> bool:
    """``expr`` is a dict (``{}``, ``dict()``, a dict comprehension, a ``defaultdict``)."""
    value = model.value(expr)
    return value.kind is Kind.CONTAINER and value.type_name == "dict"
