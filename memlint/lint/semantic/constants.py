"""Constant folding of the literals a file binds: what a name provably is
when the file runs as shipped.

``MAX_BATCH = 16`` at module level, ``steps = 1`` in a function, a
parameter that every call of the file passes the same literal (or a dict
literal's item), and the arithmetic, comparisons and ``int()``/``float()``
of such values fold to a Python value; everything else is
:data:`UNKNOWN`. A binding inside an ``if`` whose test folds against its
branch never runs and is ignored, so::

    steps = 1
    if batch_size > MAX_BATCH and accelerator.distributed_type != XLA:
        steps = batch_size // MAX_BATCH

gives ``steps == 1`` when ``batch_size`` folds to 16 and ``MAX_BATCH`` to
16 (one falsy operand makes an ``and`` false, whatever the other is).

The answer is sound or unknown: a name folds only when every binding that
can reach the use is a plain ``name = value`` whose value folds to the same
constant; a use in a loop that rebinds the name, a ``global`` rebinding, a
dict mutated with an unknown key or handed to code the file does not show,
or a function used other than by calling it, gives :data:`UNKNOWN`.
"As the file runs" means as a program run from this file: a caller of
its functions in another module is not seen (the analysis is per file).
"""

from __future__ import annotations

import ast
import operator

from memlint.lint.semantic.scopes import BindingKind, ScopeKind
from memlint.lint.syntax import FUNCTION_TYPES, LOOP_TYPES
from memlint.lint.signatures import arguments_bound, default_of, parameter_names, positional_parameters

#: The answer when a value does not fold.
UNKNOWN = object()
#: Folding stops this deep (names through names, calls through callers).
MAX_DEPTH = 32
#: Results larger than this are not folded (``10 ** 10 ** 10``).
MAX_MAGNITUDE = 2 ** 63

_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod, ast.Div: operator.truediv,
}
_COMPARE = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
#: Builtins folded when their arguments fold.
_BUILTINS = {"int": int, "float": float, "bool": bool, "abs": abs, "min": min, "max": max}
#: Methods of a dict that only read it.
_READING_METHODS = frozenset({"get", "items", "keys", "values", "copy"})
#: Builtins that read a dict handed to them and never change it.
_READING_CALLS = frozenset({"print", "len", "str", "repr", "sorted", "list", "tuple", "json.dumps", "pprint.pprint"})


class Constants:
    """The folding of one file (built lazily by the semantic model).

    :meth:`value` gives the Python value of an expression (an ``int``,
    ``float``, ``str``, ``bool``, ``None``, or a ``dict``/``tuple`` of them)
    or :data:`UNKNOWN`; :meth:`truth` the truth of a test or None."""

    def __init__(self, model) -> None:
        self.model = model
        self._active: set[int] = set()

    # -- public --------------------------------------------------------------------
    def value(self, expr: ast.expr, depth: int = 0) -> object:
        """What ``expr`` provably evaluates to where it stands, or :data:`UNKNOWN`."""
        if depth > MAX_DEPTH or id(expr) in self._active:
            return UNKNOWN
        self._active.add(id(expr))
        try:
            return self._fold(expr, depth + 1)
        finally:
            self._active.discard(id(expr))

    def truth(self, test: ast.expr, depth: int = 0) -> bool | None:
        """The truth of ``test`` (``x > 16 and flag``: False when one operand
        is false, True when all are true), or None when unknown."""
        if isinstance(test, ast.BoolOp):
            answers = [self.truth(v, depth + 1) for v in test.values]
            if isinstance(test.op, ast.And):
                return False if False in answers else True if all(a is True for a in answers) else None
            return True if True in answers else False if all(a is False for a in answers) else None
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self.truth(test.operand, depth + 1)
            return None if inner is None else not inner
        found = self.value(test, depth)
        if found is UNKNOWN:
            return None
        try:
            return bool(found)
        except Exception:  # noqa: BLE001 - a folded value with an odd __bool__ cannot occur, but stay safe
            return None

    def expression(self, expr: ast.expr, depth: int = 0) -> ast.expr:
        """The expression of the file that ``expr`` provably evaluates: a
        name bound once in the file, by a plain ``name = value``, is
        ``value``; an item of a dict display whose key folds
        (``{"float16": torch.float16, ...}[dtype]`` with ``dtype =
        "float16"``) is that item; a conditional expression whose test folds
        is the branch it takes; followed until none applies. Anything else
        is ``expr`` itself (also when a step is unknown)."""
        while depth < MAX_DEPTH:
            depth += 1
            if isinstance(expr, ast.Name):
                value = self._bound_once(expr)
                if value is None:
                    return expr
                expr = value
            elif isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Dict) and not isinstance(expr.slice, ast.Slice):
                key = self.value(expr.slice, depth)
                if key is UNKNOWN or not isinstance(key, (int, str, bool, type(None))):
                    return expr
                chosen = None
                for item_key, item in zip(expr.value.keys, expr.value.values):
                    folded = UNKNOWN if item_key is None else self.value(item_key, depth)
                    if folded is UNKNOWN:
                        return expr  # a `**other` or an unknown key may hold it
                    if folded == key and type(folded) is type(key):
                        chosen = item  # the last equal key wins, as in a dict display
                if chosen is None:
                    return expr
                expr = chosen
            elif isinstance(expr, ast.IfExp):
                test = self.truth(expr.test, depth)
                if test is None:
                    return expr
                expr = expr.body if test else expr.orelse
            else:
                return expr
        return expr

    def _bound_once(self, name: ast.Name) -> ast.expr | None:
        """The value of the one plain ``name = value`` that binds ``name``
        (in a module or function scope, never rebound with ``global``), or None."""
        scopes = self.model.scopes
        home = scopes.binding_scope(name.id, scopes.scope_for(name))
        if home is None or home.kind not in (ScopeKind.MODULE, ScopeKind.FUNCTION):
            return None
        if home.kind is ScopeKind.MODULE and any(name.id in s.global_names for s in scopes.scopes.values()):
            return None
        bindings = home.bindings[name.id]
        if len(bindings) != 1:
            return None
        statement = self._binding_statement(bindings[0])
        return statement.value if isinstance(statement, ast.Assign) else None

    # -- expressions ---------------------------------------------------------------
    def _fold(self, expr: ast.expr, depth: int) -> object:
        if isinstance(expr, ast.Constant):
            return expr.value if isinstance(expr.value, (int, float, str, bool, type(None))) else UNKNOWN
        if isinstance(expr, ast.Name):
            return self._name(expr, depth)
        if isinstance(expr, (ast.Tuple, ast.List)):
            items = tuple(self.value(e, depth) for e in expr.elts)
            return UNKNOWN if UNKNOWN in items or any(isinstance(e, ast.Starred) for e in expr.elts) else items
        if isinstance(expr, ast.Dict):
            return self._dict(expr, depth)
        if isinstance(expr, ast.Subscript):
            return self._item(expr, depth)
        if isinstance(expr, ast.BinOp):
            return self._binary(expr, depth)
        if isinstance(expr, ast.UnaryOp):
            operand = self.value(expr.operand, depth)
            if operand is UNKNOWN:
                return UNKNOWN
            if isinstance(expr.op, ast.Not):
                return not operand
            if isinstance(expr.op, ast.USub) and _is_number(operand):
                return -operand
            return operand if isinstance(expr.op, ast.UAdd) and _is_number(operand) else UNKNOWN
        if isinstance(expr, ast.Compare):
            return self._compare(expr, depth)
        if isinstance(expr, ast.BoolOp):
            found = self.truth(expr, depth)
            values = [self.value(v, depth) for v in expr.values]
            return UNKNOWN if found is None or UNKNOWN in values else _bool_op(expr.op, values)
        if isinstance(expr, ast.IfExp):
            test = self.truth(expr.test, depth)
            return UNKNOWN if test is None else self.value(expr.body if test else expr.orelse, depth)
        if isinstance(expr, ast.Call):
            return self._call(expr, depth)
        return UNKNOWN

    def _dict(self, expr: ast.Dict, depth: int) -> object:
        found = {}
        for key, item in zip(expr.keys, expr.values):
            if key is None:
                return UNKNOWN  # `{**other}`
            folded_key = self.value(key, depth)
            if folded_key is UNKNOWN or not isinstance(folded_key, (int, str, bool, type(None))):
                return UNKNOWN
            found[folded_key] = self.value(item, depth)  # an unknown item stays unknown; the others fold
        return found

    def _item(self, expr: ast.Subscript, depth: int) -> object:
        if isinstance(expr.slice, ast.Slice):
            return UNKNOWN
        base = self.value(expr.value, depth)
        key = self.value(expr.slice, depth)
        if base is UNKNOWN or key is UNKNOWN:
            return UNKNOWN
        try:
            found = base[key]
        except (KeyError, IndexError, TypeError):
            return UNKNOWN
        return found

    def _binary(self, expr: ast.BinOp, depth: int) -> object:
        apply = _BINARY.get(type(expr.op))
        if apply is None:
            return UNKNOWN
        left, right = self.value(expr.left, depth), self.value(expr.right, depth)
        if not (_is_number(left) and _is_number(right)):
            return UNKNOWN
        try:
            found = apply(left, right)
        except (ZeroDivisionError, OverflowError):
            return UNKNOWN
        return found if abs(found) < MAX_MAGNITUDE else UNKNOWN

    def _compare(self, expr: ast.Compare, depth: int) -> object:
        left = self.value(expr.left, depth)
        for op, right_expr in zip(expr.ops, expr.comparators):
            compare = _COMPARE.get(type(op))
            right = self.value(right_expr, depth)
            if compare is None or left is UNKNOWN or right is UNKNOWN:
                return UNKNOWN
            try:
                holds = compare(left, right)
            except TypeError:
                return UNKNOWN
            if not holds:
                return False
            left = right
        return True

    def _call(self, expr: ast.Call, depth: int) -> object:
        qualified = self.model.qualified(expr.func)
        apply = _BUILTINS.get(qualified or "")
        if apply is None or expr.keywords or not expr.args:
            return UNKNOWN
        arguments = [self.value(a, depth) for a in expr.args]
        if UNKNOWN in arguments or any(isinstance(a, ast.Starred) for a in expr.args):
            return UNKNOWN
        try:
            found = apply(*arguments)
        except (TypeError, ValueError, OverflowError):
            return UNKNOWN
        return found if not _is_number(found) or abs(found) < MAX_MAGNITUDE else UNKNOWN

    # -- names ---------------------------------------------------------------------
    def _name(self, name: ast.Name, depth: int) -> object:
        scopes = self.model.scopes
        scope = scopes.scope_for(name)
        home = scopes.binding_scope(name.id, scope)
        if home is None or home.kind not in (ScopeKind.MODULE, ScopeKind.FUNCTION):
            return UNKNOWN
        if home.kind is ScopeKind.MODULE and any(name.id in s.global_names for s in scopes.scopes.values()):
            return UNKNOWN  # a function rebinds it with `global`
        same_scope = home is scope
        values = []
        for binding in home.bindings[name.id]:
            statement = self._binding_statement(binding)
            if statement is UNKNOWN:
                return UNKNOWN
            if statement is not None and self._dead(statement, home.node, depth):
                continue
            if same_scope and statement is not None and not _before(statement, name):
                if _in_loop_around(self.model, name, statement, home.node):
                    return UNKNOWN  # a later iteration sees the later binding
                continue
            if binding.kind is BindingKind.PARAMETER:
                found = self._parameter(home.node, binding.node, depth)
            else:
                found = self.value(statement.value, depth)
            if found is UNKNOWN:
                return UNKNOWN
            values.append(found)
        if not values or any(v != values[0] or type(v) is not type(values[0]) for v in values):
            return UNKNOWN
        found = values[0]
        if isinstance(found, dict):
            found = self._unchanged_items(found, name.id, home, depth)
        return found

    def _binding_statement(self, binding) -> ast.Assign | None | object:
        """The ``name = value`` statement of ``binding``; None for a parameter;
        :data:`UNKNOWN` for any other kind of binding."""
        if binding.kind is BindingKind.PARAMETER:
            return None
        if binding.kind is not BindingKind.ASSIGNMENT:
            return UNKNOWN
        statement = self.model.parents.get(binding.node)
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and statement.targets[0] is binding.node:
            return statement
        return UNKNOWN

    def _dead(self, statement: ast.stmt, scope_node: ast.AST, depth: int) -> bool:
        """``statement`` sits in a branch of an ``if`` (or a ``while``) whose test folds against it."""
        child: ast.AST = statement
        for ancestor in self.model.ancestors(statement):
            if ancestor is scope_node:
                return False
            if isinstance(ancestor, (ast.If, ast.While)):
                test = self.truth(ancestor.test, depth + 1)
                if test is not None and ((child in ancestor.body and not test) or (child in ancestor.orelse and test)):
                    return True
            child = ancestor
        return False

    def _parameter(self, function: ast.AST, argument: ast.arg, depth: int) -> object:
        """A parameter's value: the same folded argument at every call of the
        file (its default where a call leaves it out), when the function is
        only ever called (never passed on, decorated or a method)."""
        if not isinstance(function, FUNCTION_TYPES) or function.decorator_list:
            return UNKNOWN
        if self.model.scopes.scope_for(function).kind is ScopeKind.CLASS:
            return UNKNOWN
        calls = self._only_calls_of(function)
        if not calls:
            return UNKNOWN
        values = [self._argument_of(call, function, argument, depth) for call in calls]
        if UNKNOWN in values or any(v != values[0] or type(v) is not type(values[0]) for v in values):
            return UNKNOWN
        return values[0]

    def _only_calls_of(self, function: ast.AST) -> list[ast.Call]:
        scopes = self.model.scopes
        home = scopes.scope_for(function)
        calls = []
        for node in self.model.index.of_type(ast.Name):
            if node.id != function.name or scopes.binding_scope(node.id, scopes.scope_for(node)) is not home:
                continue
            parent = self.model.parents.get(node)
            if not (isinstance(parent, ast.Call) and parent.func is node):
                return []  # passed on, stored or rebound: other callers may exist
            calls.append(parent)
        return calls

    def _argument_of(self, call: ast.Call, function: ast.AST, argument: ast.arg, depth: int) -> object:
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            return UNKNOWN
        passed = arguments_bound(call, function, skip_receiver=False).get(argument.arg)
        if passed is not None:
            return self.value(passed, depth)
        default = default_of(function, argument.arg)
        return UNKNOWN if default is None else self.value(default, depth)

    # -- dicts that the file changes ---------------------------------------------
    def _unchanged_items(self, found: dict, name: str, home, depth: int) -> object:
        """``found`` without the items that code of ``name``'s scope may change
        (``config["epochs"] = 2`` drops ``"epochs"``); :data:`UNKNOWN` when the
        dict may change in ways the file does not show."""
        kept = dict(found)
        if not self._drop_changed(kept, name, home, depth, hops=2):
            return UNKNOWN
        return kept

    def _drop_changed(self, kept: dict, name: str, home, depth: int, hops: int) -> bool:
        scopes = self.model.scopes
        for node in self.model.index.of_type(ast.Name):
            if node.id != name or scopes.binding_scope(name, scopes.scope_for(node)) is not home:
                continue
            if isinstance(node.ctx, ast.Store):
                continue  # a binding, judged by `_name`
            if not self._reading_use(node, kept, depth, hops):
                return False
        return True

    def _reading_use(self, node: ast.Name, kept: dict, depth: int, hops: int) -> bool:
        parent = self.model.parents.get(node)
        if isinstance(parent, ast.Subscript) and parent.value is node:
            key = self.value(parent.slice, depth) if not isinstance(parent.slice, ast.Slice) else UNKNOWN
            above = self.model.parents.get(parent)
            changed = not isinstance(parent.ctx, ast.Load) or (
                isinstance(above, (ast.Subscript, ast.Attribute)) and not isinstance(above.ctx, ast.Load))
            if changed or isinstance(above, ast.AugAssign):
                if key is UNKNOWN:
                    return False
                kept.pop(key, None)
            return True
        if isinstance(parent, ast.Attribute) and parent.value is node:
            return parent.attr in _READING_METHODS
        if isinstance(parent, ast.Compare) and node is not parent.left:
            return True  # `key in config`
        if isinstance(parent, ast.keyword):
            parent = self.model.parents.get(parent)
        if isinstance(parent, ast.Call) and parent.func is not node:
            return self._reading_call(parent, node, kept, depth, hops)
        return False

    def _reading_call(self, call: ast.Call, node: ast.Name, kept: dict, depth: int, hops: int) -> bool:
        """A call handed the dict: a reading builtin, or a function of the file
        whose changes to its parameter are dropped in turn."""
        if self.model.qualified(call.func) in _READING_CALLS:
            return True
        callee = self.model.callee(call) if hops > 0 else None
        if not isinstance(callee, FUNCTION_TYPES):
            return False
        positional = positional_parameters(callee)
        parameter = None
        if node in call.args and call.args.index(node) < len(positional):
            parameter = positional[call.args.index(node)]
        for keyword in call.keywords:
            if keyword.value is node:
                parameter = next((a for a in (*positional, *callee.args.kwonlyargs) if a.arg == keyword.arg), None)
        inner = self.model.scopes.own_scope(callee)
        if parameter is None or inner is None:
            return False
        return self._drop_changed(kept, parameter.arg, inner, depth, hops - 1)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float))


def _bool_op(op: ast.boolop, values: list[object]) -> object:
    if isinstance(op, ast.And):
        return next((v for v in values if not v), values[-1])
    return next((v for v in values if v), values[-1])


def _before(statement: ast.stmt, use: ast.AST) -> bool:
    return (statement.end_lineno, statement.end_col_offset) <= (use.lineno, use.col_offset)


def _in_loop_around(model, use: ast.AST, statement: ast.stmt, scope_node: ast.AST) -> bool:
    """A loop of the scope contains both the use and the binding."""
    around = set()
    for ancestor in model.ancestors(use):
        if ancestor is scope_node:
            break
        if isinstance(ancestor, LOOP_TYPES):
            around.add(ancestor)
    if not around:
        return False
    for ancestor in model.ancestors(statement):
        if ancestor is scope_node:
            return False
        if ancestor in around:
            return True
    return False


# -- one call's literal arguments ------------------------------------------------------
# What a function does for one call of the file that passes literals
# (``run_epoch(model, loader, "val")``): the branches those literals rule out.


def literal_arguments(semantic, call: ast.Call, callee: ast.AST) -> dict[str, object]:
    """The parameters of ``callee`` that ``call`` passes a literal to
    (``None``, a bool, a number, a string), with those values."""
    if not isinstance(callee, (ast.FunctionDef, ast.AsyncFunctionDef)) or any(
            isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return {}
    params = [a.arg for a in positional_parameters(callee)]
    if isinstance(call.func, ast.Attribute) and semantic.class_of_method(callee) is not None:
        params = params[1:]
    found = {}
    for name, argument in [*zip(params, call.args), *((k.arg, k.value) for k in call.keywords)]:
        if isinstance(argument, ast.Constant):
            found[name] = argument.value
    return found


def _fold_given(semantic, expr: ast.expr, env: dict[str, object], callee: ast.AST, depth: int = 0) -> object:
    """The value of ``expr`` inside ``callee`` given the literal parameters
    ``env``: constants, those parameters, locals the callee assigns once
    from such an expression, ``==``/``!=``/``is``/``is not``, ``not``,
    ``and``/``or``; :data:`UNKNOWN` otherwise."""
    if depth > 6:
        return UNKNOWN
    if isinstance(expr, ast.Constant):
        return expr.value
    if isinstance(expr, ast.Name):
        if expr.id in env:
            return env[expr.id]
        assigned = [a for a in semantic.own_nodes(callee, (ast.Assign,))
                    if any(isinstance(t, ast.Name) and t.id == expr.id for t in a.targets)]
        if len(assigned) == 1 and len(assigned[0].targets) == 1 and expr.id not in parameter_names(callee):
            return _fold_given(semantic, assigned[0].value, env, callee, depth + 1)
        return UNKNOWN
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        inner = _fold_given(semantic, expr.operand, env, callee, depth + 1)
        return UNKNOWN if inner is UNKNOWN else not inner
    if isinstance(expr, ast.BoolOp):
        values = [_fold_given(semantic, v, env, callee, depth + 1) for v in expr.values]
        if isinstance(expr.op, ast.And):
            if any(v is not UNKNOWN and not v for v in values):
                return False
            return True if all(v is not UNKNOWN and v for v in values) else UNKNOWN
        if any(v is not UNKNOWN and v for v in values):
            return True
        return False if all(v is not UNKNOWN for v in values) else UNKNOWN
    if isinstance(expr, ast.Compare) and len(expr.ops) == 1:
        left = _fold_given(semantic, expr.left, env, callee, depth + 1)
        right = _fold_given(semantic, expr.comparators[0], env, callee, depth + 1)
        if left is UNKNOWN or right is UNKNOWN:
            return UNKNOWN
        op = expr.ops[0]
        if isinstance(op, ast.Eq):
            return left == right
        if isinstance(op, ast.NotEq):
            return left != right
        if isinstance(op, ast.Is):
            return left is right
        if isinstance(op, ast.IsNot):
            return left is not right
    return UNKNOWN


def ruled_out_by_arguments(semantic, node: ast.AST, callee: ast.AST, env: dict[str, object]) -> bool:
    """``node`` sits in a branch of an ``if`` of ``callee`` whose test folds
    (:func:`_fold_given`) to the other branch."""
    child = node
    for ancestor in semantic.ancestors(node):
        if ancestor is callee:
            return False
        if isinstance(ancestor, ast.If) and child is not ancestor.test:
            taken = _fold_given(semantic, ancestor.test, env, callee)
            if taken is not UNKNOWN and (child in ancestor.body) != bool(taken):
                return True
        child = ancestor
    return False


def unreachable_for_arguments(semantic, node: ast.AST, callee: ast.AST, env: dict[str, object]) -> bool:
    """``node`` does not run for a call with the literal parameters ``env``:
    it is in a branch they rule out (:func:`ruled_out_by_arguments`), or
    it follows, in a block of ``callee``, an ``if`` whose selected branch
    always leaves the function (``if as_number: return acc.item()`` makes
    the ``return acc`` after it unreachable when ``as_number`` is true)."""
    if ruled_out_by_arguments(semantic, node, callee, env):
        return True
    child = node
    for ancestor in semantic.ancestors(node):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(ancestor, field, None)
            if isinstance(block, list) and child in block:
                for earlier in block[:block.index(child)]:
                    if isinstance(earlier, ast.If) and _leaves_when_taken(semantic, earlier, callee, env):
                        return True
        if ancestor is callee:
            return False
        child = ancestor
    return False


def _leaves_when_taken(semantic, statement: ast.If, callee: ast.AST, env: dict[str, object]) -> bool:
    """The branch of ``statement`` that ``env`` selects ends in ``return`` or ``raise``."""
    taken = _fold_given(semantic, statement.test, env, callee)
    if taken is UNKNOWN:
        return False
    branch = statement.body if taken else statement.orelse
    return bool(branch) and isinstance(branch[-1], (ast.Return, ast.Raise))
