"""The shared dataflow analysis: is a value graph-attached, on the accelerator,
a model; which calls are forward passes; which code runs with grad disabled.

Every rule that needs these facts asks :class:`Dataflow` (``ctx.dataflow``)
instead of re-deriving them, so all rules agree.

How it works
------------
Each function body (and the module's top level) is interpreted abstractly,
statement by statement, with an environment ``name -> Value``. Loop bodies
are interpreted twice so that values carried from one iteration to the next
are seen; the two branches of an ``if`` are joined. Every expression that is
evaluated gets its :class:`Value` recorded, and rules look values up by node.
The analysis is per file and never imports anything.

A value is **graph-attached** (``Value.graph is YES``) when it is

- the result of a forward pass: calling a model-like object (a name such as
  ``model``, ``net``, ``encoder``, ``self.backbone``, ``criterion``; anything
  built from ``torch.nn.*``; a model moved with ``.cuda()``/``.to()``), or a
  method of it named ``forward``/``loss``/``compute_loss``/``*_step``;
- the result of a loss function (``torch.nn.functional.cross_entropy`` and
  every ``torch.nn.functional.*loss*``);
- anything ``.backward()`` is called on in the same function;
- a tensor created with ``requires_grad=True``;
- a local function's (or ``self`` method's) return value that is attached;
- arithmetic, indexing, attribute access (``out.loss``) or a differentiable
  method/``torch`` function applied to an attached value;

and it is **not attached** (``NO``) when it is the result of

- ``.item()``, ``.tolist()``, ``.numpy()``, ``.detach()``, ``.data``,
  ``float()``, ``int()``, ``bool()``, ``len()``, ``str()``;
- a non-differentiable op: ``argmax``/``argmin``/``argsort``, comparisons
  (``==``, ``<``, ``eq``...), integer/bool casts (``.long()``, ``.int()``,
  ``.bool()``), ``isnan``/``isinf``, ``nonzero``, ``.size()``/``.shape``,
  and reductions (``.sum()``, ``.mean()``) of those;
- anything computed inside ``with torch.no_grad()`` /
  ``torch.inference_mode()`` / ``torch.set_grad_enabled(False)``, or in a
  function decorated with ``@torch.no_grad()`` / ``@torch.inference_mode()``.

Anything else is ``MAYBE`` (unknown); rules report only on ``YES`` — where
the analysis cannot decide, rules stay silent.

A value is **on the accelerator** (``Value.device is YES``) when it comes
from ``.cuda()``, ``.to(<not "cpu">)``, a factory with ``device=<not
"cpu">``, or a forward pass of a model that was moved to the accelerator or
fed an accelerator input; ``.cpu()``, ``.item()``, ``.tolist()``,
``.numpy()`` bring it back (``NO``).
"""

from __future__ import annotations

import ast
import enum
import re
from dataclasses import dataclass, field, replace

from memlint.lint.names import dotted_name
from memlint.lint.syntax import (
    FOR_TYPES,
    FUNCTION_TYPES,
    LOOP_TYPES,
    WITH_TYPES,
    call_arguments,
    is_constant,
    keyword_arg,
    string_value,
)
from memlint.lint.vocabulary import FORWARD_METHODS, MODEL_NAME
from memlint.lint.walk import Visitor, children as syntactic_children, visit as walk_visit


class Tri(enum.Enum):
    """Three-valued truth: the analysis may not know."""

    NO = 0
    MAYBE = 1
    YES = 2

    def join(self, other: "Tri") -> "Tri":
        """Join at a control-flow merge: equal stays, different becomes MAYBE unless one is YES."""
        if self is other:
            return self
        if Tri.YES in (self, other):
            return Tri.YES
        return Tri.MAYBE


@dataclass(frozen=True)
class Value:
    """What the analysis knows about one value."""

    graph: Tri = Tri.MAYBE
    device: Tri = Tri.MAYBE
    is_model: bool = False
    is_tensor_like: bool = False

    def join(self, other: "Value") -> "Value":
        return Value(
            self.graph.join(other.graph),
            self.device.join(other.device),
            self.is_model and other.is_model,
            self.is_tensor_like or other.is_tensor_like,
        )

    @property
    def attached(self) -> bool:
        return self.graph is Tri.YES

    @property
    def on_accelerator(self) -> bool:
        return self.device is Tri.YES


UNKNOWN = Value()
PLAIN = Value(Tri.NO, Tri.NO)  # a Python number, string, numpy array...
DETACHED_ON_CPU = Value(Tri.NO, Tri.NO, is_tensor_like=True)

DETACHING_METHODS = frozenset({"item", "tolist", "numpy", "detach", "detach_"})
NONDIFF_METHODS = frozenset(
    {
        "argmax", "argmin", "argsort", "eq", "ne", "lt", "le", "gt", "ge", "long", "int", "bool", "byte",
        "short", "char", "isnan", "isinf", "isfinite", "nonzero", "size", "dim", "numel", "count_nonzero",
        "logical_and", "logical_or", "logical_not", "sign", "equal", "allclose", "is_cuda", "element_size",
        "nelement", "ndimension", "data_ptr", "get_device", "stride", "storage_offset", "type",
    }
)
NONDIFF_ATTRIBUTES = frozenset({"shape", "device", "dtype", "ndim", "is_cuda", "requires_grad", "grad_fn", "layout"})
PLAIN_BUILTINS = frozenset({"float", "int", "bool", "len", "str", "repr", "round", "isinstance", "print", "range", "format", "hash", "id", "type"})
PASSTHROUGH_BUILTINS = frozenset({"sum", "max", "min", "abs", "list", "tuple", "sorted", "reversed"})
NONDIFF_TORCH = re.compile(
    r"^torch\.(?:argmax|argmin|argsort|eq|ne|lt|le|gt|ge|isnan|isinf|isfinite|nonzero|equal|allclose|"
    r"count_nonzero|numel|is_tensor|logical_\w+|bucketize|searchsorted|randint|randperm|arange|bincount|"
    r"histc|unique|sign)$"
)
TORCH_FACTORIES = re.compile(
    r"^torch\.(?:zeros|ones|empty|full|rand|randn|randint|tensor|as_tensor|from_numpy|arange|linspace|eye|"
    r"zeros_like|ones_like|empty_like|full_like|rand_like|randn_like)$"
)
LOSS_FUNCTION = re.compile(
    r"^torch\.nn\.functional\.(?:\w*loss\w*|cross_entropy|nll_loss|binary_cross_entropy\w*|kl_div|"
    r"mse_loss|l1_loss|smooth_l1_loss|huber_loss|cosine_embedding_loss|ctc_loss)$"
)
MODULE_CONSTRUCTOR = re.compile(r"^torch\.nn\.(?!functional\.)[A-Z]\w*$|^torch\.nn\.parallel\.\w+$|^transformers\.\w+$")
NO_GRAD_CONTEXTS = frozenset({"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad", "torch.autograd.grad_mode.no_grad"})
GRAD_CONTEXT_SETTER = frozenset({"torch.set_grad_enabled", "torch.autograd.set_grad_enabled"})
#: Where the search for loops around a node stops: a loop outside a
#: function (or lambda) does not repeat that function's body.
LOOP_BOUNDARIES = (*FUNCTION_TYPES, ast.Lambda)
#: Statements that compute no value the analysis tracks.
VALUELESS_STATEMENTS = (ast.Delete, ast.Global, ast.Nonlocal, ast.Pass, ast.Break, ast.Continue, ast.Import, ast.ImportFrom)

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


def call_method_name(call: ast.Call) -> str | None:
    """``"backward"`` for ``x.backward(...)``; None when the callee is not an attribute."""
    return call.func.attr if isinstance(call.func, ast.Attribute) else None


def is_false_literal(node: ast.AST | None) -> bool:
    return is_constant(node, False)


def is_true_literal(node: ast.AST | None) -> bool:
    return is_constant(node, True)


def targets_of(node: ast.AST) -> list[str]:
    """Names bound by an assignment target (``a``, ``a, (b, c)``, ``*rest``, ``self.x``)."""
    if isinstance(node, (ast.Tuple, ast.List)):
        return [name for element in node.elts for name in targets_of(element)]
    if isinstance(node, ast.Starred):
        return targets_of(node.value)
    dotted = dotted_name(node)
    return [dotted] if dotted is not None else []


def root_name(node: ast.AST) -> str | None:
    """``acc`` for ``acc``, ``acc[k]``, ``acc.x[k]``; ``self.acc`` for ``self.acc[k]``."""
    while isinstance(node, ast.Subscript):
        node = node.value
    dotted = dotted_name(node)
    if dotted is None:
        return None
    if dotted.startswith("self."):
        return ".".join(dotted.split(".")[:2])
    return dotted.split(".")[0]


def _unstarred(node: ast.expr) -> ast.expr:
    """``xs`` for ``*xs``; any other expression itself."""
    return node.value if isinstance(node, ast.Starred) else node


def _first_argument(call: ast.Call) -> ast.expr | None:
    """The first argument of ``call`` (positional, else the first keyword's value)."""
    arguments = call_arguments(call)
    return arguments[0] if arguments else None


def _unnamed_arguments(call: ast.Call) -> list[ast.expr]:
    """Arguments passed without a keyword, in source order: positional
    ones, ``*xs`` and ``**kw`` (as ``xs`` and ``kw``)."""
    return [_unstarred(arg) for arg in call.args] + [keyword.value for keyword in call.keywords if keyword.arg is None]


def _device_arguments(call: ast.Call) -> list[ast.expr]:
    """The arguments of ``x.to(...)`` that may name a device: the unnamed ones and ``device=``."""
    return [_unstarred(arg) for arg in call.args] + [keyword.value for keyword in call.keywords if keyword.arg in (None, "device")]


def _subscript_indices(index: ast.expr) -> list[ast.expr]:
    """What a subscript evaluates of its index: the index itself (``a[i]``,
    ``a[i, j]``), but no slice: of ``a[1:n]`` nothing, of ``a[:, j]`` ``j``."""
    if isinstance(index, ast.Slice):
        return []
    if isinstance(index, ast.Tuple) and any(isinstance(element, ast.Slice) for element in index.elts):
        return [_unstarred(element) for element in index.elts if not isinstance(element, ast.Slice)]
    return [index]


@dataclass
class Scope:
    """The facts of one analysed function body (or the module's top level)."""

    node: ast.AST
    values: dict[ast.AST, Value] = field(default_factory=dict)
    forward_calls: list[ast.Call] = field(default_factory=list)
    no_grad_nodes: set[ast.AST] = field(default_factory=set)
    backward_names: set[str] = field(default_factory=set)
    returns: Value | None = None
    assigned_before: dict[ast.AST, set[str]] = field(default_factory=dict)


class Dataflow:
    """Lazily analyses each function of one file; rules query by node."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self._scopes: dict[ast.AST, Scope] = {}
        self._functions: dict[str, FunctionNode] | None = None
        self._in_progress: set[ast.AST] = set()
        self._parents: dict[ast.AST, ast.AST] | None = None
        self._bound_names: dict[ast.AST, set[str]] = {}
        self._loops_around: dict[ast.AST, tuple[ast.AST, ...]] = {}
        self._ancestor_verdicts: dict[str, dict[ast.AST, tuple]] = {}

    # -- structure -------------------------------------------------------
    @property
    def parents(self) -> dict[ast.AST, ast.AST]:
        """Child -> parent map of the whole module (built once, on demand)."""
        if self._parents is None:
            self._parents = self.ctx.index.parents
        return self._parents

    def ancestors(self, node: ast.AST):
        """Ancestors of ``node``, innermost first."""
        parent = self.parents.get(node)
        while parent is not None:
            yield parent
            parent = self.parents.get(parent)

    def first_ancestor_verdict(self, node: ast.AST, key: str, decide, default=None):
        """``decide(a)`` for the innermost ancestor ``a`` of ``node`` for which
        it is not None, else ``default``.

        ``decide`` must depend on the ancestor alone: the answers are
        memoized per ancestor under ``key``, so that the ancestors of all the
        nodes of a deep nest are walked once in all rather than once per node
        (a 3,000-branch ``elif`` chain nests 3,000 levels deep).
        """
        memo = self._ancestor_verdicts.setdefault(key, {})
        walked = []
        found = (default,)
        current = self.parents.get(node)
        while current is not None:
            known = memo.get(current)
            if known is not None:
                found = known
                break
            walked.append(current)
            verdict = decide(current)
            if verdict is not None:
                found = (verdict,)
                break
            current = self.parents.get(current)
        for ancestor in walked:
            memo[ancestor] = found
        return found[0]

    def scope_node(self, node: ast.AST) -> ast.AST:
        """The function (or module) whose body contains ``node``."""
        return self.first_ancestor_verdict(node, "scope", _function_or_none, self.ctx.module)

    def enclosing_loops(self, node: ast.AST) -> list[ast.AST]:
        """``for``/``while`` loops around ``node`` within its function,
        innermost first (not a loop whose header holds ``node``); memoized
        per node, each node's answer built from its parent's."""
        memo = self._loops_around
        below: list[ast.AST] = []
        current = node
        while current not in memo:
            parent = self.parents.get(current)
            if parent is None or isinstance(parent, LOOP_BOUNDARIES):
                memo[current] = ()
                break
            below.append(current)
            current = parent
        loops = memo[current]
        for child in reversed(below):
            parent = self.parents[child]
            if isinstance(parent, LOOP_TYPES) and not _is_loop_header(child, parent):
                loops = (parent, *loops)
            memo[child] = loops
        return list(memo[node])

    def in_loop(self, node: ast.AST) -> bool:
        return bool(self.enclosing_loops(node))

    @property
    def functions(self) -> dict[str, FunctionNode]:
        """Functions and methods defined in this file, by name (last wins)."""
        if self._functions is None:
            self._functions = {node.name: node for node in self.ctx.index.of_type(*FUNCTION_TYPES)}
        return self._functions

    # -- queries ---------------------------------------------------------
    def scope(self, node: ast.AST) -> Scope:
        """The analysed scope containing ``node``."""
        owner = node if isinstance(node, (*FUNCTION_TYPES, ast.Module)) else self.scope_node(node)
        found = self._scopes.get(owner)
        if found is None:
            found = self._analyse(owner)
        return found

    def value(self, expr: ast.expr) -> Value:
        """What is known about ``expr`` at the point where it is evaluated."""
        return self.scope(expr).values.get(expr, UNKNOWN)

    def is_attached(self, expr: ast.expr) -> bool:
        return self.value(expr).attached

    def is_on_accelerator(self, expr: ast.expr) -> bool:
        return self.value(expr).on_accelerator

    def is_forward_call(self, call: ast.Call) -> bool:
        return call in self.scope(call).forward_calls

    def grad_disabled(self, node: ast.AST) -> bool:
        """True when ``node`` runs under no_grad/inference_mode (context or decorator)."""
        return self._disables_grad_here(node) or self.first_ancestor_verdict(node, "grad disabled", self._disables_grad_here, False)

    def _disables_grad_here(self, node: ast.AST) -> bool | None:
        """True for a ``with`` that disables grad or a function decorated so; else None."""
        if isinstance(node, WITH_TYPES) and self._disables_grad(node):
            return True
        if isinstance(node, FUNCTION_TYPES) and self.decorated_no_grad(node):
            return True
        return None

    def decorated_no_grad(self, function: FunctionNode) -> bool:
        for decorator in function.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            if self.ctx.qualified(target) in NO_GRAD_CONTEXTS:
                return True
        return False

    def function_returns(self, name: str) -> Value:
        """Joined value of ``return`` statements of the local function ``name``."""
        function = self.functions.get(name)
        if function is None or function in self._in_progress:
            return UNKNOWN
        return self.scope(function).returns or UNKNOWN

    def defined_outside(self, name: str, loop: ast.AST) -> bool:
        """True when ``name`` is bound before ``loop`` (or is an attribute/global)."""
        if "." in name:
            return True
        scope = self.scope(loop)
        return name in scope.assigned_before.get(loop, set()) or name not in self._bound_in(loop)

    def _bound_in(self, loop: ast.AST) -> set[str]:
        """Names bound inside ``loop`` (one walk per loop, however many names are asked about)."""
        found = self._bound_names.get(loop)
        if found is None:
            found = self._bound_names[loop] = _names_bound_in(loop)
        return found

    def _disables_grad(self, with_node: ast.With | ast.AsyncWith) -> bool:
        for item in with_node.items:
            expr = item.context_expr
            target = expr.func if isinstance(expr, ast.Call) else expr
            qualified = self.ctx.qualified(target)
            if qualified in NO_GRAD_CONTEXTS:
                return True
            if qualified in GRAD_CONTEXT_SETTER and isinstance(expr, ast.Call) and is_false_literal(_first_argument(expr)):
                return True
        return False

    def _analyse(self, owner: ast.AST) -> Scope:
        scope = Scope(owner)
        self._scopes[owner] = scope
        self._in_progress.add(owner)
        try:
            _Interpreter(self, scope).run()
        finally:
            self._in_progress.discard(owner)
        return scope


class _BoundNames(Visitor):
    """Names given a fresh value by ``=``, an annotated assignment with a
    value, or a ``for`` target. An augmented assignment (``+=``) reads the
    previous value, so it binds nothing new."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self.names.update(targets_of(target))

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.names.update(targets_of(node.target))

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.names.update(targets_of(node.target))


def _names_bound_in(node: ast.AST) -> set[str]:
    collector = _BoundNames()
    walk_visit(node, collector)
    return collector.names


def _is_loop_header(child: ast.AST, loop: ast.AST) -> bool:
    """True when ``child`` of ``loop`` is its ``for`` target/iterable or ``while`` test."""
    if isinstance(loop, FOR_TYPES):
        return child is loop.target or child is loop.iter
    return child is loop.test


def _function_or_none(node: ast.AST) -> ast.AST | None:
    return node if isinstance(node, FUNCTION_TYPES) else None


class _Interpreter:
    """Abstract interpretation of one scope's statements (see module docstring)."""

    def __init__(self, flow: Dataflow, scope: Scope) -> None:
        self.flow = flow
        self.scope = scope
        self.ctx = flow.ctx
        self.env: dict[str, Value] = {}
        self.no_grad_depth = 0

    # -- driver ----------------------------------------------------------
    def run(self) -> None:
        owner = self.scope.node
        if isinstance(owner, FUNCTION_TYPES):
            self._bind_parameters(owner)
            if self.flow.decorated_no_grad(owner):
                self.no_grad_depth += 1
        self.scope.backward_names = _backward_receivers(owner.body)
        self.block(owner.body)

    def _bind_parameters(self, function: FunctionNode) -> None:
        """Named parameters (not ``*args``/``**kwargs``): a model when the name says so."""
        parameters = function.args
        for parameter in (*parameters.posonlyargs, *parameters.args, *parameters.kwonlyargs):
            self.env[parameter.arg] = Value(is_model=bool(MODEL_NAME.match(parameter.arg)))
        self.env.setdefault("self", UNKNOWN)

    def block(self, body: list[ast.stmt]) -> None:
        for statement in body:
            self.statement(statement)

    def statement(self, statement: ast.stmt) -> None:
        handler = getattr(self, f"stmt_{type(statement).__name__}", None)
        if handler is not None:
            handler(statement)
        elif not isinstance(statement, VALUELESS_STATEMENTS):
            self._evaluate_expressions_in(statement)  # assert, type alias

    # -- compound statements ------------------------------------------------
    def stmt_If(self, node: ast.If) -> None:
        self.expr(node.test)
        before = dict(self.env)
        self.block(node.body)
        after_body = self.env
        self.env = dict(before)
        self.block(node.orelse)  # an ``elif`` is an ``If`` alone in ``orelse``
        self.env = _join_env(after_body, self.env)

    def stmt_For(self, node: ast.For | ast.AsyncFor) -> None:
        iterable = self.expr(node.iter)
        self._loop(node, lambda: self._bind_loop_target(node.target, iterable), node.body, node.orelse)

    stmt_AsyncFor = stmt_For

    def stmt_While(self, node: ast.While) -> None:
        self._loop(node, lambda: self.expr(node.test), node.body, node.orelse)

    def _loop(self, node: ast.AST, header, body: list[ast.stmt], orelse: list[ast.stmt]) -> None:
        self.scope.assigned_before[node] = set(self.env)
        before = dict(self.env)
        for _ in range(2):  # the second pass sees values carried from the first iteration
            header()
            self.block(body)
            self.env = _join_env(before, self.env)
        self.block(orelse)

    def _bind_loop_target(self, target: ast.expr, iterable: Value) -> None:
        element = Value(iterable.graph if iterable.is_tensor_like else Tri.MAYBE, iterable.device)
        for name in targets_of(target):
            self.env[name] = element
        self.expr(target)

    def stmt_With(self, node: ast.With | ast.AsyncWith) -> None:
        disables = self.flow._disables_grad(node)
        for item in node.items:
            value = self.expr(item.context_expr)
            if item.optional_vars is not None:
                for name in targets_of(item.optional_vars):
                    self.env[name] = value
        if disables:
            self.no_grad_depth += 1
            self.scope.no_grad_nodes.add(node)
        self.block(node.body)
        if disables:
            self.no_grad_depth -= 1

    stmt_AsyncWith = stmt_With

    def stmt_Try(self, node: ast.Try | ast.TryStar) -> None:
        before = dict(self.env)
        self.block(node.body)
        merged = self.env
        for handler in node.handlers:
            self.env = dict(before)
            self.block(handler.body)
            merged = _join_env(merged, self.env)
        self.env = merged
        self.block(node.orelse)
        self.block(node.finalbody)

    stmt_TryStar = stmt_Try

    def stmt_Match(self, node: ast.Match) -> None:
        self.expr(node.subject)
        before = dict(self.env)
        merged = dict(before)
        for case in node.cases:
            self.env = dict(before)
            self.block(case.body)
            merged = _join_env(merged, self.env)
        self.env = merged

    def stmt_FunctionDef(self, node: FunctionNode) -> None:
        self.env[node.name] = UNKNOWN  # analysed separately, on demand

    stmt_AsyncFunctionDef = stmt_FunctionDef

    def stmt_ClassDef(self, node: ast.ClassDef) -> None:
        self.env[node.name] = UNKNOWN

    # -- simple statements ----------------------------------------------
    def stmt_Assign(self, node: ast.Assign) -> None:
        value = self.expr(node.value)
        for target in node.targets:
            self._assign(target, value, node.value)

    def stmt_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._assign(node.target, self.expr(node.value), node.value)

    def stmt_AugAssign(self, node: ast.AugAssign) -> None:
        value = self.expr(node.value)
        previous = self.expr(node.target)
        self._assign(node.target, previous.join(value) if previous is not UNKNOWN else value, node.value)

    def stmt_Expr(self, node: ast.Expr) -> None:
        self.expr(node.value)

    def stmt_Return(self, node: ast.Return) -> None:
        if node.value is not None:
            value = self.expr(node.value)
            self.scope.returns = value if self.scope.returns is None else self.scope.returns.join(value)

    def stmt_Raise(self, node: ast.Raise) -> None:
        if node.exc is not None:  # the ``from`` cause is not evaluated
            self.expr(node.exc)

    def _evaluate_expressions_in(self, node: ast.AST) -> None:
        for child in syntactic_children(node):
            if isinstance(child, ast.expr):
                self.expr(child)

    def _assign(self, target: ast.expr, value: Value, source: ast.expr) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            self._assign_elements(target, value, source)
            return
        if isinstance(target, ast.Starred):
            self._assign(target.value, value, source)
            return
        if isinstance(target, ast.Subscript):
            self.expr(target)
            return
        name = dotted_name(target)
        if name is None:
            self.expr(target)
            return
        if name in self.scope.backward_names and value.graph is Tri.MAYBE and self.no_grad_depth == 0:
            value = replace(value, graph=Tri.YES, is_tensor_like=True)
        self.env[name] = value
        self.scope.values[target] = value

    def _assign_elements(self, target: ast.Tuple | ast.List, value: Value, source: ast.expr) -> None:
        """``a, b = ...``: each name gets the matching element of a literal
        tuple/list on the right, else an element of ``value``."""
        element = _element_value(value)
        source_elements = [_unstarred(item) for item in source.elts] if isinstance(source, (ast.Tuple, ast.List)) else None
        for index, item in enumerate(target.elts):
            item_value = element
            if source_elements is not None and index < len(source_elements):
                item_value = self.scope.values.get(source_elements[index], element)
            self._assign(item, item_value, source)

    # -- expressions -------------------------------------------------------
    def expr(self, node: ast.expr) -> Value:
        method = getattr(self, f"expr_{type(node).__name__}", None)
        value = method(node) if method is not None else self._children_join(node)
        if self.no_grad_depth and value.graph is not Tri.NO and not value.is_model:
            value = replace(value, graph=Tri.NO)
        self.scope.values[node] = value
        return value

    def _children_join(self, node: ast.AST) -> Value:
        result = PLAIN
        for child in syntactic_children(node):
            if isinstance(child, ast.expr):
                result = _combine(result, self.expr(child))
            else:
                result = _combine(result, self._children_join(child))
        return result

    def expr_Name(self, node: ast.Name) -> Value:
        found = self.env.get(node.id)
        if found is not None:
            return found
        if MODEL_NAME.match(node.id):
            return Value(is_model=True)
        return UNKNOWN

    def expr_Attribute(self, node: ast.Attribute) -> Value:
        dotted = dotted_name(node)
        if dotted is not None and dotted in self.env:
            self.expr(node.value)
            return self.env[dotted]
        base = self.expr(node.value)
        attr = node.attr
        if attr in NONDIFF_ATTRIBUTES:
            return PLAIN
        if attr == "data":
            return replace(base, graph=Tri.NO)
        if attr in ("grad",):
            return Value(Tri.NO, base.device, is_tensor_like=True)
        if dotted is not None and dotted.startswith("self.") and MODEL_NAME.match(attr):
            return Value(is_model=True)
        if base.is_model:
            return Value(graph=Tri.MAYBE, device=base.device, is_model=bool(MODEL_NAME.match(attr)))
        return replace(base, is_model=False)

    def expr_Subscript(self, node: ast.Subscript) -> Value:
        base = self.expr(node.value)
        for index in _subscript_indices(node.slice):
            self.expr(index)
        return replace(base, is_model=False)

    def expr_BinOp(self, node: ast.BinOp) -> Value:
        return _combine(self.expr(node.left), self.expr(node.right))

    def expr_UnaryOp(self, node: ast.UnaryOp) -> Value:
        operand = self.expr(node.operand)
        return PLAIN if isinstance(node.op, ast.Not) else operand

    def expr_BoolOp(self, node: ast.BoolOp) -> Value:
        result = self.expr(node.values[0])
        for operand in node.values[1:]:
            result = result.join(self.expr(operand))
        return result

    def expr_Compare(self, node: ast.Compare) -> Value:
        self.expr(node.left)
        for comparator in node.comparators:
            self.expr(comparator)
        return Value(Tri.NO, Tri.MAYBE, is_tensor_like=True)

    def expr_IfExp(self, node: ast.IfExp) -> Value:
        self.expr(node.test)
        return self.expr(node.body).join(self.expr(node.orelse))

    def expr_Constant(self, node: ast.Constant) -> Value:
        return PLAIN

    expr_JoinedStr = expr_Constant  # an f-string: its parts are not evaluated

    def expr_Tuple(self, node: ast.Tuple | ast.List | ast.Set) -> Value:
        result = PLAIN
        for element in node.elts:
            result = _combine(result, self.expr(_unstarred(element)))
        return replace(result, is_model=False)

    expr_List = expr_Set = expr_Tuple

    def expr_Dict(self, node: ast.Dict) -> Value:
        result = PLAIN
        for key, value in zip(node.keys, node.values):
            if key is not None:  # None: ``**other``
                self.expr(key)
            result = _combine(result, self.expr(value))
        return replace(result, is_model=False)

    def expr_Lambda(self, node: ast.Lambda) -> Value:
        return UNKNOWN

    def expr_GeneratorExp(self, node: ast.GeneratorExp | ast.ListComp | ast.SetComp) -> Value:
        return self._comprehension(node, node.elt)

    expr_ListComp = expr_SetComp = expr_GeneratorExp

    def expr_DictComp(self, node: ast.DictComp) -> Value:
        return self._comprehension(node, node.value)

    def _comprehension(self, node: ast.expr, element: ast.expr) -> Value:
        saved = dict(self.env)
        for clause in node.generators:
            iterable = self.expr(clause.iter)
            for name in targets_of(clause.target):
                self.env[name] = Value(iterable.graph if iterable.is_tensor_like else Tri.MAYBE, iterable.device)
            for condition in clause.ifs:
                self.expr(condition)
        if isinstance(node, ast.DictComp):
            self.expr(node.key)
        value = self.expr(element)
        self.env = saved
        return replace(value, is_model=False)

    def expr_NamedExpr(self, node: ast.NamedExpr) -> Value:
        value = self.expr(node.value)
        self._assign(node.target, value, node.value)
        return value

    def expr_Await(self, node: ast.Await) -> Value:
        return self.expr(node.value)

    # -- calls -------------------------------------------------------------
    def expr_Call(self, node: ast.Call) -> Value:
        args = [self.expr(argument) for argument in call_arguments(node)]
        qualified = self.ctx.qualified(node.func)
        if isinstance(node.func, ast.Attribute):
            return self._method_call(node, node.func.attr, args, qualified)
        callee = self.expr(node.func)
        name = node.func.id if isinstance(node.func, ast.Name) else None
        return self._function_call(node, name, qualified, callee, args)
    def _function_call(self, node: ast.Call, name: str | None, qualified: str | None, callee: Value, args: list[Value]) -> Value:
        if name in PLAIN_BUILTINS and qualified == name:
            return PLAIN
        if name in PASSTHROUGH_BUILTINS and qualified == name:
            return _join_all(args) if args else PLAIN
        if qualified is not None and qualified != name:
            imported = self._qualified_call(node, qualified, args)
            if imported is not None:
                return imported
        if callee.is_model:
            return self._forward(node, args, callee)
        if name is not None and name in self.flow.functions:
            return self._local_function_result(name, args)
        return Value(Tri.MAYBE, _any_device(args))

    def _local_function_result(self, name: str, args: list[Value]) -> Value:
        returned = self.flow.function_returns(name)
        if returned.graph is not Tri.MAYBE:
            return returned
        return Value(Tri.MAYBE, _any_device(args))

    def _qualified_call(self, node: ast.Call, qualified: str, args: list[Value]) -> Value | None:
        if not qualified.startswith(("torch.", "transformers.")):
            return None
        if NONDIFF_TORCH.match(qualified):
            return Value(Tri.NO, self._factory_device(node, _any_device(args)), is_tensor_like=True)
        if TORCH_FACTORIES.match(qualified):
            requires_grad = keyword_arg(node, "requires_grad")
            graph = Tri.YES if requires_grad is not None and is_true_literal(requires_grad.value) else Tri.NO
            if qualified.endswith("_like") and args:
                return Value(graph, self._factory_device(node, args[0].device), is_tensor_like=True)
            return Value(graph, self._factory_device(node, Tri.NO), is_tensor_like=True)
        if LOSS_FUNCTION.match(qualified):
            return self._forward(node, args, Value(is_model=True), count_as_forward=False)
        if MODULE_CONSTRUCTOR.match(qualified):
            return Value(Tri.NO, Tri.NO, is_model=True)
        if qualified.startswith("torch.utils.checkpoint."):
            return self._forward(node, args, Value(is_model=True))
        return Value(_join_all(args).graph if args else Tri.NO, _any_device(args), is_tensor_like=True)

    def _factory_device(self, node: ast.Call, default: Tri) -> Tri:
        device = keyword_arg(node, "device")
        if device is None:
            return default
        return _device_of_expression(device.value)

    def _method_call(self, node: ast.Call, method: str, args: list[Value], qualified: str | None) -> Value:
        if qualified is not None and qualified.split(".")[0] in ("torch", "transformers"):
            imported = self._qualified_call(node, qualified, args)
            if imported is not None and not qualified.startswith(("torch.Tensor",)):
                return imported
        callee = self.expr(node.func)
        receiver = self.scope.values.get(node.func.value, UNKNOWN)
        if callee.is_model:
            return self._forward(node, args, callee)
        if method in ("item", "tolist"):
            return PLAIN
        if method == "numpy":
            return PLAIN
        if method in ("detach", "detach_"):
            return Value(Tri.NO, receiver.device, is_tensor_like=True)
        if method == "cpu":
            return replace(receiver, device=Tri.NO)
        if method == "cuda":
            return replace(receiver, device=Tri.YES)
        if method == "to":
            return replace(receiver, device=self._to_device(node, receiver.device))
        if method in NONDIFF_METHODS:
            return Value(Tri.NO, receiver.device, is_tensor_like=True)
        if receiver.is_model:
            return self._model_method(node, method, receiver, args)
        if method == "backward":
            return PLAIN
        if receiver.graph is Tri.YES or receiver.is_tensor_like:
            return Value(_combine(receiver, _join_all(args) if args else receiver).graph, receiver.device, is_tensor_like=True)
        if node.func.value is not None and dotted_name(node.func.value) == "self" and method in self.flow.functions:
            return self._local_function_result(method, args)
        return Value(Tri.MAYBE, Tri.MAYBE)

    def _model_method(self, node: ast.Call, method: str, receiver: Value, args: list[Value]) -> Value:
        if method in ("to", "cuda", "cpu", "half", "float", "bfloat16", "double", "train", "eval", "requires_grad_"):
            return receiver
        if FORWARD_METHODS.match(method):
            if dotted_name(node.func.value) == "self" and method in self.flow.functions:
                local = self.flow.function_returns(method)
                if local.graph is not Tri.MAYBE:
                    return local
            return self._forward(node, args, receiver)
        if method in ("parameters", "named_parameters", "state_dict", "modules", "children", "buffers", "zero_grad", "apply", "generate"):
            return Value(Tri.NO, receiver.device)
        return Value(Tri.MAYBE, receiver.device)

    def _to_device(self, node: ast.Call, current: Tri) -> Tri:
        for argument in _device_arguments(node):
            device = _device_of_expression(argument)
            if device is not Tri.MAYBE or self._looks_like_device_name(argument):
                return Tri.YES if self._looks_like_device_name(argument) else device
        return current

    def _looks_like_device_name(self, node: ast.expr) -> bool:
        dotted = dotted_name(node)
        if dotted is None:
            return False
        last = dotted.split(".")[-1].lower()
        return "device" in last or last in ("dev", "rank", "local_rank", "gpu", "gpu_id")

    def _forward(self, node: ast.Call, args: list[Value], model: Value, count_as_forward: bool = True) -> Value:
        if count_as_forward:
            self.scope.forward_calls.append(node)
        graph = Tri.NO if self.no_grad_depth else Tri.YES
        device = model.device.join(_any_device(args)) if args else model.device
        if Tri.YES in (model.device, _any_device(args)):
            device = Tri.YES
        return Value(graph, device, is_tensor_like=True)


def _combine(left: Value, right: Value) -> Value:
    """Value of an arithmetic combination: attached if either side is."""
    if left.graph is Tri.YES or right.graph is Tri.YES:
        graph = Tri.YES
    elif left.graph is Tri.NO and right.graph is Tri.NO:
        graph = Tri.NO
    else:
        graph = Tri.MAYBE
    if Tri.YES in (left.device, right.device):
        device = Tri.YES
    elif left.device is Tri.NO and right.device is Tri.NO:
        device = Tri.NO
    else:
        device = Tri.MAYBE
    return Value(graph, device, is_tensor_like=left.is_tensor_like or right.is_tensor_like)


def _join_all(values: list[Value]) -> Value:
    result = PLAIN
    for value in values:
        result = _combine(result, value)
    return result


def _any_device(values: list[Value]) -> Tri:
    return _join_all(values).device if values else Tri.NO


def _element_value(value: Value) -> Value:
    return replace(value, is_model=False)


def _join_env(left: dict[str, Value], right: dict[str, Value]) -> dict[str, Value]:
    merged = dict(left)
    for name, value in right.items():
        merged[name] = merged[name].join(value) if name in merged else value
    return merged


def _device_of_expression(node: ast.expr) -> Tri:
    """YES for ``"cuda"``/``"cuda:0"``/``torch.device("cuda")``, NO for ``"cpu"``."""
    text = string_value(node)
    if text is not None:
        if text.startswith(("cuda", "mps", "xpu", "hpu")):
            return Tri.YES
        if text.startswith("cpu") or text == "meta":
            return Tri.NO
        return Tri.MAYBE
    if isinstance(node, ast.Call) and _first_argument(node) is not None:
        return _device_of_expression(_first_argument(node))  # torch.device("cuda")
    if is_constant(node, None):
        return Tri.NO
    dotted = dotted_name(node)
    if dotted is not None and ("device" in dotted.split(".")[-1].lower()):
        return Tri.YES
    return Tri.MAYBE


def _backward_receivers(body: list[ast.stmt]) -> set[str]:
    """Names whose ``.backward()`` is called, directly or via a scaler/accelerator."""
    collector = _BackwardCollector()
    walk_visit(body, collector)
    return collector.names


class _BackwardCollector(Visitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_FunctionDef(self, node: FunctionNode) -> bool:
        return False  # nested functions are separate scopes

    def visit_Call(self, node: ast.Call) -> None:
        method = call_method_name(node)
        if method == "backward":
            receiver = node.func.value
            if isinstance(receiver, ast.Call) and call_method_name(receiver) == "scale" and _first_argument(receiver) is not None:
                receiver = _first_argument(receiver)  # scaler.scale(loss).backward()
            receiver_name = dotted_name(receiver)
            unnamed = _unnamed_arguments(node)
            if unnamed and receiver_name is not None and "loss" not in receiver_name.lower():
                # accelerator.backward(loss) / fabric.backward(loss) / engine.backward(loss)
                self._add(unnamed[0])
            elif receiver_name is not None:
                self.names.add(receiver_name)
        elif method == "manual_backward" and _first_argument(node) is not None:
            self._add(_first_argument(node))

    def _add(self, node: ast.expr) -> None:
        name = dotted_name(node)
        if name is not None:
            self.names.add(name)
