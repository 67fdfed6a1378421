"""Abstract interpretation of one unit (a function body, a lambda, or the
module's top level) under one calling context.

The interpreter walks the statements in order with an environment
``name -> Value`` (names and ``self.x``-style attribute paths) and the
current grad mode, records the value of every expression it evaluates, and
notes what the rules need: forward passes, backward passes, calls into
functions of the same file with their arguments, writes into persistent
state (``self.*``, globals, ``nonlocal`` names), and what is returned.

Loops are handled with global passes, which keeps the work linear in the
size of the unit however deeply loops nest: each pass interprets every
statement once, a loop's head sees the join of the state entering it and
the state its body ended with in the previous pass, and passes repeat until
no loop's back edge changes (the lattice is shallow: at most
:data:`MAX_PASSES`). A later pass starts at the top-level statement whose
loop changed, from the state the previous pass had there: the statements
before it would see the same state again.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from memlint.lint.names import dotted_name
from memlint.lint.semantic import frameworks as fw
from memlint.lint.semantic import torch_ops as ops
from memlint.lint.semantic.values import (
    PLAIN,
    UNKNOWN,
    Kind,
    Tri,
    Value,
    combine,
    container,
    join_all,
    module,
    obj,
    tensor,
)
from memlint.lint.syntax import FUNCTION_TYPES, is_constant, string_value
from memlint.lint.signatures import positional_parameters

#: Passes over a unit before its loops' back edges are taken as settled.
#: Values only grow (NO < MAYBE < YES, kinds towards UNKNOWN); three passes
#: settle every nest seen in the real-code corpus, the fourth is a margin.
MAX_PASSES = 4
#: Methods that store their arguments into the container they are called on.
STORING_METHODS = frozenset({"append", "extend", "insert", "add", "appendleft", "put", "update", "setdefault", "push"})
#: Builtins whose result is a Python value, whatever their arguments.
PLAIN_BUILTINS = frozenset({
    "float", "int", "bool", "len", "str", "repr", "isinstance", "issubclass", "print", "format", "hash", "id",
    "type", "hasattr", "callable", "ord", "chr", "open", "input", "vars", "dir", "any", "all", "divmod", "bin", "hex",
})
#: Builtins returning a container of their argument's elements.
CONTAINER_BUILTINS = frozenset({"list", "tuple", "sorted", "reversed", "set", "frozenset"})
#: Comparisons whose result is a Python ``bool`` whatever the operands:
#: identity (the language's ``is``/``is not``) and membership, which calls
#: ``__contains__`` and converts its result with ``bool`` (CPython
#: Objects/abstract.c ``PySequence_Contains``; torch 2.13.0 torch/_tensor.py
#: ``Tensor.__contains__`` returns ``(element == self).any().item()``).
_BOOL_COMPARISONS = (ast.Is, ast.IsNot, ast.In, ast.NotIn)


@dataclass(frozen=True)
class Context:
    """How a unit is entered: its parameters' values (None: no call site
    says) and the grad mode at entry."""

    params: tuple[tuple[str, Value | None], ...] = ()
    grad: Tri = Tri.YES

    def param(self, name: str) -> Value | None:
        for key, value in self.params:
            if key == name:
                return value
        return None


@dataclass(frozen=True)
class Effect:
    """A write into state that outlives the call: ``kind`` is "accumulate"
    (``self.total += v``, ``self.ema = a * v + (1 - a) * self.ema``),
    "collect" (``self.outs.append(v)``, ``self.hist[k].append(v)``,
    ``self.d[k] = v``) or "store" (``self.last = v``); ``target`` the root
    written (``self.total``, or a global / ``nonlocal`` name)."""

    kind: str
    target: str
    value: Value
    node: ast.AST


@dataclass(frozen=True)
class CallSite:
    """A call of an in-file function seen during interpretation."""

    call: ast.Call
    callee: ast.AST
    bound: tuple[tuple[str, Value], ...]
    grad: Tri


@dataclass
class Analysis:
    """What interpreting one unit under one context found."""

    unit: ast.AST
    context: Context
    values: dict[ast.AST, Value] = field(default_factory=dict)
    #: grad mode at each statement and call
    grad_at: dict[ast.AST, Tri] = field(default_factory=dict)
    forward_calls: dict[ast.Call, Tri] = field(default_factory=dict)
    #: backward calls and the value they differentiate
    backward_calls: dict[ast.Call, Value] = field(default_factory=dict)
    optimizer_steps: set[ast.Call] = field(default_factory=set)
    #: calls of in-file functions that run a forward pass
    forwarding_calls: set[ast.Call] = field(default_factory=set)
    call_sites: dict[ast.Call, CallSite] = field(default_factory=dict)
    #: effects of this unit's own statements, and of the in-file calls it makes
    effects: list[Effect] = field(default_factory=list)
    call_effects: dict[ast.Call, tuple[Effect, ...]] = field(default_factory=dict)
    returns: Value | None = None
    env: dict[str, Value] = field(default_factory=dict)
    #: names bound before each loop
    bound_before: dict[ast.AST, frozenset[str]] = field(default_factory=dict)
    #: names whose values flow into a backward pass of this unit (``sources``)
    backpropagated: frozenset[str] = frozenset()
    trains: bool = False
    #: the unit runs a forward pass, itself or through a function it calls
    runs_forward: bool = False

    def value(self, node: ast.AST) -> Value:
        return self.values.get(node, UNKNOWN)


@dataclass
class _State:
    env: dict[str, Value]
    grad: Tri
    #: No path reaches here: a branch that the values decide (``isinstance``)
    #: was taken and ended in ``return``/``raise``; joins ignore this state.
    dead: bool = False

    def copy(self) -> "_State":
        return _State(dict(self.env), self.grad, self.dead)

    def join(self, other: "_State") -> "_State":
        if self.dead != other.dead:
            return (other if self.dead else self).copy()
        merged = dict(self.env)
        for name, value in other.env.items():
            merged[name] = merged[name].join(value) if name in merged else value
        return _State(merged, self.grad.join(other.grad), self.dead)


def _derived(element: Value, whole: Value) -> Value:
    """An element taken out of ``whole``: it depends on what ``whole`` depends on."""
    if element.may_hold_tensor and whole.sources:
        return element.with_sources(element.sources | whole.sources)
    return element


def _grows(head: _State, end: _State) -> bool:
    """Whether an iteration ending in ``end`` changes what the loop's head
    knows of the names bound before it (or the grad mode)."""
    if end.dead:
        return False  # the iteration left the function: nothing flows back to the head
    if end.grad.join(head.grad) is not head.grad:
        return True
    for name, value in head.env.items():
        after = end.env.get(name)
        if after is not None and after is not value and value.join(after) != value:
            return True
    return False


class Interpreter:
    """Interprets ``unit`` under ``context`` for the file's
    :class:`~memlint.lint.semantic.model.SemanticModel` ``model``."""

    def __init__(self, model, unit: ast.AST, context: Context) -> None:
        self.model = model
        self.unit = unit
        self.context = context
        self.analysis = Analysis(unit, context)
        self.state = _State({}, context.grad)
        self.scope = model.scopes.own_scope(unit) if not isinstance(unit, ast.Module) else model.scopes.module_scope
        self.klass = model.class_of_method(unit) if isinstance(unit, FUNCTION_TYPES) else None
        self._back_edges: dict[ast.AST, _State] = {}
        self._changed = False
        self._backpropagated: set[str] = set()
        self.statements = 0

    # -- driver -------------------------------------------------------------------
    def run(self) -> Analysis:
        body = self._body()
        resume = None
        for _ in range(MAX_PASSES):
            self._changed = False
            if resume is None:
                start = 0
                self.state = _State(self._initial_env(), self.context.grad)
                self.analysis.returns = None
                self.analysis.effects = []
            else:
                start, state, effects, returns = resume
                self.state = state.copy()
                del self.analysis.effects[effects:]
                self.analysis.returns = returns
            resume = self._pass(body, start)
            if not self._changed:
                break
        self.analysis.env = self.state.env
        self.analysis.backpropagated = frozenset(self._backpropagated)
        return self.analysis

    def _pass(self, body: list[ast.stmt], start: int):
        """Interpret ``body[start:]``; the state before the first top-level
        statement in which a loop's back edge grew (where the next pass
        resumes: the statements before it see the same state again), or None."""
        resume = None
        for index in range(start, len(body)):
            if self._changed:
                self.statement(body[index])
                continue
            before = (index, self.state.copy(), len(self.analysis.effects), self.analysis.returns)
            self.statement(body[index])
            if self._changed:
                resume = before
        return resume

    def _body(self) -> list[ast.AST]:
        unit = self.unit
        if isinstance(unit, ast.Lambda):
            return [ast.Return(value=unit.body)]
        return unit.body

    def _initial_env(self) -> dict[str, Value]:
        env: dict[str, Value] = {}
        unit = self.unit
        if isinstance(unit, (*FUNCTION_TYPES, ast.Lambda)):
            arguments = unit.args
            names = [a.arg for a in (*positional_parameters(arguments), *arguments.kwonlyargs)]
            for index, name in enumerate(names):
                given = self.context.param(name)
                default = self.model.parameter_default(unit, name, index)
                value = given if given is not None else default
                value = self.model.with_module_evidence(unit, name, value)
                env[name] = value.with_sources(frozenset({name})) if value.may_hold_tensor else value
            for extra in (arguments.vararg, arguments.kwarg):
                if extra is not None:
                    given = self.context.param(extra.arg)  # what a call of the file passed in `*args`/`**kwargs`
                    value = given if given is not None else (container(None) if extra is arguments.vararg else UNKNOWN)
                    env[extra.arg] = value.with_sources(frozenset({extra.arg})) if value.may_hold_tensor else value
        return env

    # -- statements ---------------------------------------------------------------------
    def block(self, body: list[ast.stmt]) -> None:
        for statement in body:
            self.statement(statement)

    def statement(self, node: ast.stmt) -> None:
        if self.state.dead:
            return
        self.statements += 1
        self.analysis.grad_at[node] = self.state.grad
        handler = _STATEMENT_HANDLERS.get(node.__class__)
        if handler is not None:
            handler(self, node)
        else:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.expr(child)

    def stmt_Expr(self, node: ast.Expr) -> None:
        self.expr(node.value)

    def stmt_Assign(self, node: ast.Assign) -> None:
        value = self.expr(node.value)
        for target in node.targets:
            self.assign(target, value, node.value, node)

    def stmt_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.assign(node.target, self.expr(node.value), node.value, node)

    def stmt_AugAssign(self, node: ast.AugAssign) -> None:
        added = self.expr(node.value)
        previous = self.expr(node.target)
        if isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)) and previous.kind is Kind.CONTAINER and added.kind is Kind.CONTAINER:
            result = previous.join(added)  # `history += [loss]` extends a list
        else:
            result = self._computed(combine([previous, added]))
        self._record_persistent_write(node.target, result, node, "accumulate")
        self.bind(node.target, result, node)

    def stmt_Return(self, node: ast.Return) -> None:
        if node.value is not None:
            value = self.expr(node.value)
            self.analysis.returns = value if self.analysis.returns is None else _join_returns(self.analysis.returns, value)

    def stmt_If(self, node: ast.If) -> None:
        self.expr(node.test)
        verdict = isinstance_verdict(self.model, node.test, self.state.env)
        if verdict is not None:  # `if isinstance(obj, torch.Tensor):` on a value known to be (or not be) one
            taken = node.body if verdict else node.orelse
            self.block(taken)
            if _terminates(taken):
                self.state.dead = True
            return
        before = self.state.copy()
        self.block(node.body)
        after_body = self.state
        self.state = before
        self.block(node.orelse)
        self.state = after_body.join(self.state)

    def stmt_For(self, node: ast.For | ast.AsyncFor) -> None:
        iterable = self.expr(node.iter)
        element = self.model.element_of(iterable)
        if iterable.sources and element.may_hold_tensor:
            element = element.with_sources(element.sources | iterable.sources)

        def header() -> None:
            self.assign(node.target, element, None, node)

        self._loop(node, header, node.body, node.orelse)
        frozen = _frozen_module(node)
        if frozen is not None:
            owner = self.expr(frozen)  # `.parameters()`: a module, whatever else is known of it
            kind = owner.kind if owner.kind is Kind.MODULE else Kind.MODULE
            self.refine(frozen, owner.evolve(kind=kind, frozen=True, framework=owner.framework or "torch"))

    stmt_AsyncFor = stmt_For

    def stmt_While(self, node: ast.While) -> None:
        self._loop(node, lambda: self.expr(node.test), node.body, node.orelse)

    def _loop(self, node: ast.AST, header, body: list[ast.stmt], orelse: list[ast.stmt]) -> None:
        self.analysis.bound_before[node] = frozenset(self.state.env)
        entry = self.state.copy()
        previous = self._back_edges.get(node)
        head = entry if previous is None else entry.join(previous)
        self.state = head.copy()
        header()
        self.block(body)
        end = self.state
        self._back_edges[node] = end if previous is None else previous.join(end)
        if _grows(head, end):
            self._changed = True  # the next iteration starts from more than this pass assumed
        self.state = head.join(end)
        self.block(orelse)

    def stmt_With(self, node: ast.With | ast.AsyncWith) -> None:
        grad = self.state.grad
        for item in node.items:
            value = self.expr(item.context_expr)
            mode = self.model.grad_mode_of_context(item.context_expr)
            if mode is not None:
                grad = mode
            if item.optional_vars is not None:
                self.assign(item.optional_vars, value, None, node)
        saved = self.state.grad
        self.state.grad = grad
        self.block(node.body)
        self.state.grad = saved  # leaving the block restores the mode it was entered with

    stmt_AsyncWith = stmt_With

    def stmt_Try(self, node: ast.Try) -> None:
        before = self.state.copy()
        self.block(node.body)
        merged = self.state
        for handler in node.handlers:
            self.state = before.join(merged)
            if handler.type is not None:
                self.expr(handler.type)
            if handler.name:
                self.state.env[handler.name] = obj("BaseException")
            self.block(handler.body)
            merged = merged.join(self.state)
        self.state = merged
        self.block(node.orelse)
        self.block(node.finalbody)

    stmt_TryStar = stmt_Try

    def stmt_Match(self, node: ast.Match) -> None:
        self.expr(node.subject)
        before = self.state.copy()
        merged = before.copy()
        for case in node.cases:
            self.state = before.copy()
            if case.guard is not None:
                self.expr(case.guard)
            self.block(case.body)
            merged = merged.join(self.state)
        self.state = merged

    def stmt_FunctionDef(self, node: ast.FunctionDef) -> None:
        for decorator in node.decorator_list:
            self.expr(decorator)
        self.state.env[node.name] = Value(Kind.FUNCTION, Tri.NO, Tri.NO)

    stmt_AsyncFunctionDef = stmt_FunctionDef

    def stmt_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            self.expr(base)
        info = self.model.classes.of(node)
        self.state.env[node.name] = Value(Kind.FUNCTION, Tri.NO, Tri.NO, klass=info.qualname if info else None)

    def stmt_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            name = self.model.scopes.dotted.of(target)
            if name is not None:
                self.state.env.pop(name, None)

    def stmt_Raise(self, node: ast.Raise) -> None:
        if node.exc is not None:
            self.expr(node.exc)

    def stmt_Import(self, node: ast.Import) -> None:
        return None

    stmt_ImportFrom = stmt_Global = stmt_Nonlocal = stmt_Pass = stmt_Break = stmt_Continue = stmt_Import

    # -- binding ---------------------------------------------------------------------
    def assign(self, target: ast.expr, value: Value, source: ast.expr | None, statement: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            self._assign_elements(target, value, source, statement)
            return
        if isinstance(target, ast.Starred):
            self.assign(target.value, container(self.model.element_of(value)), None, statement)
            return
        if isinstance(target, ast.Subscript):
            self.expr(target.value)
            self.expr(target.slice)
            self._record_persistent_write(target, value, statement, "collect")
            self._store_into(target.value, value)
            return
        name = self.model.scopes.dotted.of(target)
        if name is None:
            self.expr(target)
            return
        if isinstance(target, ast.Attribute):
            self.expr(target.value)
            kind = "accumulate" if name in value.sources or _sums_into(statement, name) else "store"
            self._record_persistent_write(target, value, statement, kind)
        self.bind(target, value, statement)

    def bind(self, target: ast.expr, value: Value, statement: ast.AST) -> None:
        name = self.model.scopes.dotted.of(target)
        if name is None:
            return
        if self._differentiated_name(name) and value.graph is Tri.MAYBE and self.state.grad is not Tri.NO:
            value = value.evolve(graph=Tri.YES, kind=Kind.TENSOR if value.kind is Kind.UNKNOWN else value.kind)
        elif (value.graph is Tri.MAYBE and value.kind is Kind.TENSOR and self.state.grad is not Tri.NO
              and name in self.model.summed_backward_evidence(self.unit)):
            value = value.evolve(graph=Tri.YES)  # a tensor term of a backpropagated sum is a loss term
        value = self.model.with_module_evidence(self.unit, name, value)
        if value.may_hold_tensor and value.kind is not Kind.OBJECT:
            value = value.with_sources(value.sources | {name})
        self.state.env[name] = value
        self.analysis.values[target] = value

    def _differentiated_name(self, name: str) -> bool:
        """``name`` is in the unit's backward evidence, and not only as an
        argument of ``obj.backward(...)`` where ``obj`` is, in the current
        environment, an instance of a class of the file that defines its
        own ``backward`` method: that call runs the method (hand-written
        gradients of a from-scratch network, ``model.backward(x, a, y)``),
        not ``Tensor.backward`` or an engine's, so it differentiates nothing."""
        if name not in self.model.backward_evidence(self.unit):
            return False
        sites = [expr for expr in self.model.differentiated_in(self.unit) if dotted_name(expr) == name]
        return not sites or not all(self._argument_of_own_backward(expr) for expr in sites)

    def _argument_of_own_backward(self, expr: ast.expr) -> bool:
        call = self.model.parents.get(expr)
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and expr in call.args):
            return False
        receiver = dotted_name(call.func.value)
        owner = self.state.env.get(receiver) if receiver is not None else None
        klass = self.model.classes.get(owner.klass) if owner is not None and owner.klass else None
        return klass is not None and klass.method(call.func.attr) is not None

    def _assign_elements(self, target: ast.Tuple | ast.List, value: Value, source: ast.expr | None, statement: ast.AST) -> None:
        literal = [e.value if isinstance(e, ast.Starred) else e for e in source.elts] if isinstance(source, (ast.Tuple, ast.List)) else None
        element = self.model.element_of(value)
        others = element
        if value.kind is Kind.UNKNOWN and value.items is None and literal is None and element.graph is Tri.YES:
            # `loss, logged = loss_fn(...)` with `loss.backward()`: the one differentiated
            # is the attached part; the others of an unknown structure may be detached copies
            evidence = self.model.backward_evidence(self.unit)
            names = [dotted_name(item) for item in target.elts]
            if any(name in evidence for name in names) and not all(name in evidence for name in names):
                others = element.evolve(graph=Tri.MAYBE)
        for index, item in enumerate(target.elts):
            if literal is not None and index < len(literal) and not isinstance(item, ast.Starred):
                item_value = self.analysis.values.get(literal[index], element)
            elif value.items is not None and index < len(value.items) and not isinstance(item, ast.Starred):
                item_value = value.items[index]
            else:
                item_value = element if dotted_name(item) in self.model.backward_evidence(self.unit) else others
            self.assign(item, item_value, None, statement)

    def _store_into(self, container_expr: ast.expr, value: Value) -> None:
        """``d[k] = v`` / ``lst.append(v)``: the container now holds ``value`` too."""
        name = dotted_name(container_expr)
        if name is None:
            return
        current = self.state.env.get(name) or self.analysis.values.get(container_expr, UNKNOWN)
        element = value if current.element is None else current.element.join(value)
        if current.kind is Kind.TENSOR:
            return  # `t[i] = v` writes into a tensor in place
        updated = (container(element, stream=current.stream, type_name=current.type_name)).evolve(
                          sources=current.sources | value.sources)
        self.state.env[name] = updated

    def _record_persistent_write(self, target: ast.expr, value: Value, statement: ast.AST, kind: str) -> None:
        root = self.model.persistent_root(target, self.unit)
        if root is not None:
            self.analysis.effects.append(Effect(kind, root, value, statement))

    # -- expressions ---------------------------------------------------------------------
    def expr(self, node: ast.expr) -> Value:
        handler = _EXPRESSION_HANDLERS.get(node.__class__)
        if handler is None:
            value = combine([self.expr(child) for child in ast.iter_child_nodes(node) if isinstance(child, ast.expr)])
        else:
            value = handler(self, node)
        self.analysis.values[node] = value
        return value

    def _computed(self, value: Value) -> Value:
        """A newly computed value under the current grad mode: no graph with grad off."""
        if self.state.grad is Tri.NO and value.graph is not Tri.NO and value.kind is not Kind.MODULE:
            return value.detached()
        if self.state.grad is Tri.MAYBE and value.graph is Tri.YES and not value.leaf:
            return value.evolve(graph=Tri.MAYBE)
        return value

    def expr_Name(self, node: ast.Name) -> Value:
        found = self.state.env.get(node.id)
        if found is not None:
            return found
        return self.model.with_module_evidence(self.unit, node.id, self.model.name_value(node, self))

    def expr_Attribute(self, node: ast.Attribute) -> Value:
        dotted = self.model.scopes.dotted.of(node)
        if dotted is not None and dotted in self.state.env:
            return self.state.env[dotted]
        qualified = self.model.scopes.qualified(node) if dotted is not None else None
        if qualified is not None and "." in qualified and qualified.split(".")[0] in self.model.library_roots:
            return self.model.library_attribute(qualified)
        base = self.expr(node.value)
        value = self.model.attribute_of(base, node.attr, node, self)
        return value if dotted is None else self.model.with_module_evidence(self.unit, dotted, value)

    def expr_Subscript(self, node: ast.Subscript) -> Value:
        base = self.expr(node.value)
        self.expr(node.slice)
        if base.kind is Kind.CONTAINER:
            index = node.slice
            if base.items is not None and isinstance(index, ast.Constant) and type(index.value) is int and -len(base.items) <= index.value < len(base.items):
                return _derived(base.items[index.value], base)
            if isinstance(index, ast.Slice):
                return base
            if base.element is not None:
                return _derived(base.element, base)
            return base.evolve(kind=Kind.UNKNOWN, element=None, items=None)
        if base.kind is Kind.MODULE and base.type_name in ops.PARAMETER_CONTAINERS:
            # the Parameter stored at that index or key; a slice of a ParameterList is one too
            return base if isinstance(node.slice, ast.Slice) else tensor(Tri.YES, base.device, leaf=True)
        if base.kind is Kind.MODULE:
            return module(base.framework or "torch", device=base.device)
        if base.kind is Kind.TENSOR:
            if base.scalar and ops.ZERO_DIM_INTEGER_INDEX_IS_NO_TENSOR and _integer_index(node.slice):
                return PLAIN  # `loss.data[0]`: a number in torch <= 0.3, an IndexError since 0.4
            return self._computed(base.evolve(leaf=False))
        if base.kind is Kind.PLAIN:
            return PLAIN
        if base.kind is Kind.UNKNOWN and _keyed_by_name(node.slice) and base.element is not None and base.element.kind is Kind.TENSOR:
            return _derived(base.element, base)  # a tensor is never indexed by a str: a dict (or ModelOutput) of tensors
        return base.evolve(kind=Kind.UNKNOWN, leaf=False, element=None, items=None, klass=None, type_name=None)

    def expr_Slice(self, node: ast.Slice) -> Value:
        for part in (node.lower, node.upper, node.step):
            if part is not None:
                self.expr(part)
        return PLAIN

    def expr_BinOp(self, node: ast.BinOp) -> Value:
        left, right = self.expr(node.left), self.expr(node.right)
        if left.kind is Kind.CONTAINER and right.kind is Kind.CONTAINER and isinstance(node.op, ast.Add):
            return left.join(right)
        if isinstance(node.op, ast.Mod) and left.kind is Kind.PLAIN:
            return PLAIN  # string formatting
        if isinstance(node.op, ast.Div) and left.type_name in fw.PATH_TYPES:
            return left  # a path joined with a part is a path (Lib/pathlib.py ``PurePath.__truediv__``)
        if left.kind is Kind.PLAIN and right.kind is Kind.PLAIN:
            return PLAIN
        return self._computed(combine([left, right]))

    def expr_UnaryOp(self, node: ast.UnaryOp) -> Value:
        operand = self.expr(node.operand)
        if isinstance(node.op, ast.Not):
            return PLAIN
        return self._computed(operand.evolve(leaf=False)) if operand.kind is not Kind.PLAIN else PLAIN

    def expr_BoolOp(self, node: ast.BoolOp) -> Value:
        return join_all(self.expr(value) for value in node.values)

    def expr_Compare(self, node: ast.Compare) -> Value:
        values = [self.expr(node.left), *(self.expr(c) for c in node.comparators)]
        if all(isinstance(op, _BOOL_COMPARISONS) for op in node.ops):
            return PLAIN  # `a is b`, `x in t`: a Python bool, also for tensors
        if any(v.kind is Kind.TENSOR for v in values):
            return tensor(Tri.NO, combine(values).device)
        return PLAIN if all(v.kind is Kind.PLAIN for v in values) else Value(Kind.UNKNOWN, Tri.NO, combine(values).device)

    def expr_IfExp(self, node: ast.IfExp) -> Value:
        self.expr(node.test)
        return self.expr(node.body).join(self.expr(node.orelse))

    def expr_Constant(self, node: ast.Constant) -> Value:
        return constant_value(node)

    def expr_JoinedStr(self, node: ast.JoinedStr) -> Value:
        for part in node.values:
            if isinstance(part, ast.FormattedValue):
                self.expr(part.value)
        return PLAIN

    def expr_Tuple(self, node: ast.Tuple | ast.List | ast.Set) -> Value:
        elements = [self.expr(e.value if isinstance(e, ast.Starred) else e) for e in node.elts]
        if any(isinstance(e, ast.Starred) for e in node.elts):
            return container(join_all(self.model.element_of(v) for v in elements))
        return container(join_all(elements), items=tuple(elements) if isinstance(node, ast.Tuple) else None)

    expr_List = expr_Set = expr_Tuple

    def expr_Dict(self, node: ast.Dict) -> Value:
        values = []
        for key, value in zip(node.keys, node.values):
            if key is not None:
                self.expr(key)
            evaluated = self.expr(value)
            values.append(evaluated if key is not None else self.model.element_of(evaluated))
        return container(join_all(values), type_name="dict")

    def expr_Lambda(self, node: ast.Lambda) -> Value:
        return Value(Kind.FUNCTION, Tri.NO, Tri.NO)

    def expr_NamedExpr(self, node: ast.NamedExpr) -> Value:
        value = self.expr(node.value)
        self.bind(node.target, value, node)
        return value

    def expr_Await(self, node: ast.Await) -> Value:
        return self.expr(node.value)

    def expr_Yield(self, node: ast.Yield) -> Value:
        if node.value is not None:
            value = self.expr(node.value)
            stream = container(value, stream=Tri.YES)
            self.analysis.returns = stream if self.analysis.returns is None else self.analysis.returns.join(stream)
        return UNKNOWN

    def expr_YieldFrom(self, node: ast.YieldFrom) -> Value:
        self.expr(node.value)
        return UNKNOWN

    def expr_Starred(self, node: ast.Starred) -> Value:
        return self.expr(node.value)

    def expr_GeneratorExp(self, node) -> Value:
        return self._comprehension(node, [node.elt])

    expr_ListComp = expr_SetComp = expr_GeneratorExp

    def expr_DictComp(self, node: ast.DictComp) -> Value:
        return self._comprehension(node, [node.key, node.value])

    def _comprehension(self, node, elements: list[ast.expr]) -> Value:
        saved = self.state.copy()
        stream = Tri.NO
        for clause in node.generators:
            iterable = self.expr(clause.iter)
            stream = stream.join(iterable.stream)
            self.assign(clause.target, self.model.element_of(iterable), None, clause)
            for condition in clause.ifs:
                self.expr(condition)
        values = [self.expr(element) for element in elements]
        self.state = _State(saved.env, saved.grad)
        result = container(values[-1], type_name="dict" if isinstance(node, ast.DictComp) else None)
        return result.evolve(stream=Tri.YES if isinstance(node, ast.GeneratorExp) and stream is Tri.YES else Tri.NO)

    # -- calls ----------------------------------------------------------------------------
    def expr_Call(self, node: ast.Call) -> Value:
        self.analysis.grad_at[node] = self.state.grad
        positional = [self.expr(a.value if isinstance(a, ast.Starred) else a) for a in node.args]
        keywords = {k.arg: self.expr(k.value) for k in node.keywords if k.arg is not None}
        spread = [self.model.element_of(self.expr(k.value)) for k in node.keywords if k.arg is None]
        call = CallInfo(node, positional, keywords, spread)
        return self.model.evaluate_call(call, self)

    # -- recorded facts -------------------------------------------------------------------
    def record_forward(self, node: ast.Call, grad: Tri | None = None) -> None:
        """A forward pass at ``node``, run with the caller's grad mode or ``grad``
        when the module sets its own (a forward decorated ``@torch.no_grad()``)."""
        self.analysis.forward_calls[node] = self.state.grad if grad is None else grad
        self.analysis.runs_forward = True

    def record_backward(self, node: ast.Call, value: Value) -> None:
        self.analysis.backward_calls[node] = value
        self.analysis.trains = True
        self._backpropagated |= value.sources

    def record_optimizer_step(self, node: ast.Call) -> None:
        self.analysis.optimizer_steps.add(node)
        self.analysis.trains = True

    def record_call_site(self, site: CallSite, effects: tuple[Effect, ...], trains: bool, backpropagated: frozenset[str],
                         runs_forward: bool = False) -> None:
        self.analysis.call_sites[site.call] = site
        if runs_forward:
            self.analysis.runs_forward = True
            self.analysis.forwarding_calls.add(site.call)
        if effects:
            self.analysis.call_effects[site.call] = effects
        if trains:
            self.analysis.trains = True
        self._backpropagated |= backpropagated

    def refine(self, expr: ast.expr, value: Value) -> None:
        """What a call showed about the object ``expr`` names (a module moved in place)."""
        name = dotted_name(expr)
        if name is not None and (name in self.state.env or "." not in name):
            self.state.env[name] = value

    def update_container(self, receiver: ast.expr, value: Value) -> None:
        self._store_into(receiver, value)

    def record_collect(self, receiver: ast.expr, value: Value, node: ast.AST) -> None:
        self._record_persistent_write(receiver, value, node, "collect")


def _join_returns(previous: Value, value: Value) -> Value:
    """What a function returns over two of its ``return`` statements. Where
    one returns a fixed-length tuple and the other a plain value (``return
    None`` on an early exit, ``return losses, report, n, state`` otherwise),
    a caller that unpacks the result (``a, b, n, s = result``) gets the
    tuple's elements -- a plain value cannot be unpacked -- so the join keeps
    the tuple's items, each position its own value, instead of dropping them
    and giving every name the join of all positions."""
    joined = previous.join(value)
    for whole, other in ((previous, value), (value, previous)):
        if whole.items is not None and other.kind is Kind.PLAIN and other.items is None and other.element is None:
            return joined.evolve(kind=whole.kind, items=whole.items, element=whole.element)
    return joined


def _terminates(body: list[ast.stmt]) -> bool:
    """Whether ``body`` always leaves the function (its last statement returns or raises)."""
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise))


#: What ``isinstance(value, T)`` is for the kinds of value that decide it:
#: qualified type name -> (kinds for which it is True, kinds for which it is False).
_DECIDED_KINDS = {
    "torch.Tensor": (frozenset({Kind.TENSOR}),
                     frozenset({Kind.CONTAINER, Kind.PLAIN, Kind.MODULE, Kind.OPTIMIZER, Kind.FUNCTION})),
    "dict": (frozenset(), frozenset({Kind.TENSOR, Kind.PLAIN, Kind.MODULE, Kind.OPTIMIZER, Kind.FUNCTION})),
    "list": (frozenset(), frozenset({Kind.TENSOR, Kind.PLAIN, Kind.MODULE, Kind.OPTIMIZER, Kind.FUNCTION})),
    "tuple": (frozenset(), frozenset({Kind.TENSOR, Kind.PLAIN, Kind.MODULE, Kind.OPTIMIZER, Kind.FUNCTION})),
}


def isinstance_verdict(model, test: ast.expr, env: dict[str, Value]) -> bool | None:
    """``isinstance(name, T)`` (``T`` one type or a tuple of them) decided by
    what the model knows of ``name``'s value; None where it cannot tell."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = isinstance_verdict(model, test.operand, env)
        return None if inner is None else not inner
    if not (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance"
            and model.qualified(test.func) == "isinstance" and len(test.args) == 2 and not test.keywords
            and isinstance(test.args[0], ast.Name)):
        return None
    value = env.get(test.args[0].id)
    if value is None:
        return None
    types = test.args[1].elts if isinstance(test.args[1], ast.Tuple) else [test.args[1]]
    verdicts = []
    for node in types:
        qualified = model.qualified(node)
        decided = _DECIDED_KINDS.get(qualified)
        if decided is None:
            return None
        if qualified == "torch.Tensor" and value.framework in ("tensorflow", "keras"):
            verdicts.append(False if value.kind is Kind.TENSOR else None)  # a TensorFlow tensor is no torch.Tensor
        elif value.kind in decided[0] or (qualified == "dict" and value.kind is Kind.CONTAINER and value.type_name == "dict"):
            verdicts.append(True)
        elif value.kind in decided[1]:
            verdicts.append(False)
        else:
            verdicts.append(None)
    if any(v is True for v in verdicts):
        return True
    return False if all(v is False for v in verdicts) else None


def _sums_into(statement: ast.AST, name: str) -> bool:
    """``self.total = self.total + v`` (or ``- v``, ``v + self.total``): the
    statement adds into ``name``, whatever the old value's kind (a Python
    ``0.0`` keeps no sources)."""
    value = statement.value if isinstance(statement, ast.Assign) else None
    return (isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Add, ast.Sub))
            and any(dotted_name(operand) == name for operand in (value.left, value.right)))


def _integer_index(index: ast.expr) -> bool:
    """``x[0]``, ``x[-1]``: a subscript by an integer literal."""
    if isinstance(index, ast.UnaryOp) and isinstance(index.op, ast.USub):
        index = index.operand
    return isinstance(index, ast.Constant) and type(index.value) is int


def _keyed_by_name(index: ast.expr) -> bool:
    """``x["logits"]``: a subscript by a string literal, which only mappings take."""
    return isinstance(index, ast.Constant) and isinstance(index.value, str)


def _frozen_module(loop: ast.For | ast.AsyncFor) -> ast.expr | None:
    """``for p in model.parameters(): p.requires_grad = False`` (or
    ``p.requires_grad_(False)``; ``named_parameters`` with ``(name, p)``):
    the module whose every parameter the loop freezes, else None."""
    call = loop.iter
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in ("parameters", "named_parameters")
            and not call.args and not call.keywords):
        return None
    target = loop.target.elts[-1] if isinstance(loop.target, ast.Tuple) and loop.target.elts else loop.target
    if not isinstance(target, ast.Name) or len(loop.body) != 1:
        return None  # a condition or a selection in the body: only some parameters
    statement = loop.body[0]
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        assigned = statement.targets[0]
        if (isinstance(assigned, ast.Attribute) and assigned.attr == "requires_grad" and isinstance(assigned.value, ast.Name)
                and assigned.value.id == target.id and literal_flag(statement.value) is Tri.NO):
            return call.func.value
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        inner = statement.value
        if (isinstance(inner.func, ast.Attribute) and inner.func.attr == "requires_grad_" and isinstance(inner.func.value, ast.Name)
                and inner.func.value.id == target.id and inner.args and literal_flag(inner.args[0]) is Tri.NO):
            return call.func.value
    return None


def _handlers(prefix: str) -> dict[type, object]:
    """``ast`` class -> the Interpreter method named ``<prefix><class name>``."""
    found = {}
    for name in dir(Interpreter):
        if name.startswith(prefix):
            node_class = getattr(ast, name[len(prefix):], None)
            if isinstance(node_class, type):
                found[node_class] = getattr(Interpreter, name)
    return found


_STATEMENT_HANDLERS = _handlers("stmt_")
_EXPRESSION_HANDLERS = _handlers("expr_")


@dataclass
class CallInfo:
    """One call being evaluated: the node and its argument values."""

    node: ast.Call
    positional: list[Value]
    keywords: dict[str, Value]
    #: elements of ``**mapping`` arguments
    spread: list[Value] = field(default_factory=list)

    @property
    def arguments(self) -> list[Value]:
        return [*self.positional, *self.keywords.values(), *self.spread]

    def argument(self, index: int, name: str | None = None) -> Value | None:
        if name is not None and name in self.keywords:
            return self.keywords[name]
        if index < len(self.positional) and not any(isinstance(a, ast.Starred) for a in self.node.args[: index + 1]):
            return self.positional[index]
        return None

    def argument_node(self, index: int, name: str | None = None) -> ast.expr | None:
        if name is not None:
            for keyword in self.node.keywords:
                if keyword.arg == name:
                    return keyword.value
        args = self.node.args
        if index < len(args) and not any(isinstance(a, ast.Starred) for a in args[: index + 1]):
            return args[index]
        return None


#: A device string: ``"cuda"``/``"cuda:1"`` names the accelerator, ``"cpu"`` the host.
CUDA_STRING = PLAIN.evolve(device=Tri.YES, type_name="device:accelerator")
CPU_STRING = PLAIN.evolve(type_name="device:cpu")


def constant_value(node: ast.Constant) -> Value:
    """A literal's value; a device string says which device it names."""
    if isinstance(node.value, str):
        device = device_of_literal(node)
        if device is Tri.YES:
            return CUDA_STRING
        if device is Tri.NO and node.value.startswith(("cpu", "meta")):
            return CPU_STRING
    return PLAIN


def literal_flag(node: ast.AST | None) -> Tri:
    """YES/NO for a ``True``/``False`` literal, MAYBE for anything else."""
    if is_constant(node, True):
        return Tri.YES
    if is_constant(node, False):
        return Tri.NO
    return Tri.MAYBE


def device_of_literal(node: ast.AST | None) -> Tri:
    """YES for ``"cuda"``/``"cuda:0"``/``torch.device("cuda")``, NO for ``"cpu"``/``"meta"``, else MAYBE."""
    text = string_value(node)
    if text is not None:
        if text.startswith(("cuda", "mps", "xpu", "hpu", "npu")):
            return Tri.YES
        if text.startswith("cpu") or text == "meta":
            return Tri.NO
        return Tri.MAYBE
    if isinstance(node, ast.Call) and node.args:
        return device_of_literal(node.args[0])
    if is_constant(node, None):
        return Tri.NO
    return Tri.MAYBE

