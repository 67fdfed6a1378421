"""The semantic model of one file: built once from its ``ast`` tree, shared
by every rule (``ctx.semantic``).

It answers what each value *is* (:mod:`.values`), which code runs with
autograd off, which statements repeat and what outlives an iteration, and
what each function of the file does with its arguments:

- names are resolved by scope (:mod:`.scopes`), classes by their bases
  (:mod:`.classes`), library calls and attributes by data tables
  (:mod:`.frameworks`, :mod:`.torch_ops`) in :mod:`.operations`;
- every unit (function, lambda, the module's top level) is interpreted
  abstractly (:mod:`.interpreter`) under a calling context: its parameters
  take the join of the arguments that the file's own call sites pass, and
  it runs grad-disabled when every such call site does;
- a call of a function of the same file is evaluated by interpreting the
  callee with that call's arguments (memoized), so the call is judged by
  what its callee does: ``meter.update(loss)`` where ``update`` adds into
  ``self.sum`` is an accumulation into ``meter``.

Everything is computed on demand and memoized: a unit is interpreted only
when a rule asks about it, about one of its callees' contexts, or about a
global it binds. A cycle of calls is cut where it closes (the caller whose
context led back to it is left out). A file whose interpretation would exceed
:data:`WORK_BUDGET` statements per statement of source stops summarising
calls (their results become unknown): rules then stay silent rather than
guess.
"""

from __future__ import annotations

import ast
import builtins
import os
from collections import deque
from dataclasses import dataclass

from memlint.lint.names import dotted_name, root_name, targets_of
from memlint.lint.semantic import frameworks as fw
from memlint.lint.semantic import operations
from memlint.lint.semantic import torch_ops as ops
from memlint.lint.semantic.classes import ClassInfo, ClassTable
from memlint.lint.semantic.interpreter import Analysis, CallSite, Context, Interpreter
from memlint.lint.semantic.constants import Constants
from memlint.lint.semantic.scopes import BindingKind, ScopeKind, ScopeTree
from memlint.lint.semantic.values import PLAIN, UNKNOWN, Kind, Tri, Value, container, join_all, join_call_arguments, module, obj
from memlint.lint.syntax import COMPREHENSION_TYPES, FOR_TYPES, FUNCTION_TYPES, LOOP_TYPES, WITH_TYPES, call_arguments
from memlint.lint.walk import descendants
from memlint.lint.signatures import default_of, first_parameter, is_static_method, parameter_names, positional_parameters

Function = ast.FunctionDef | ast.AsyncFunctionDef
UNIT_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
#: Statements interpreted per statement of the file before call summaries
#: stop. Measured on the real-code corpus (docs/performance.md): 3 keeps
#: every finding of the corpus and the cold run within its budget.
WORK_BUDGET = 6
#: How deep calls are followed for their results: a call inside a callee's
#: summary is followed, one more level down is unknown. Two levels follow
#: ``train -> train_step -> compute_loss``; deeper helpers rarely decide a finding.
MAX_SUMMARY_DEPTH = 2
#: How far up the callers a context is taken from (``main -> train -> step``)
#: when the callers' own analyses are not settled yet (:meth:`SemanticModel._settle_callers`).
MAX_CONTEXT_DEPTH = 2
#: How long a chain of callers is settled before a unit's own analysis
#: (``main -> fit -> train_epoch -> train_step -> ...``). Deeper chains fall
#: back to MAX_CONTEXT_DEPTH. A bound on Python's stack, not a tuning knob:
#: each level costs a few dozen frames of the 20,000 the engine allows.
MAX_SETTLE_DEPTH = 64


#: Loop statements, for own_nodes queries.
LOOP_NODE_TYPES = (ast.For, ast.AsyncFor, ast.While)
#: Builtins that wrap what a loop iterates (their names are not the data).
_ITERATION_BUILTINS = frozenset({"range", "enumerate", "zip", "len", "reversed", "sorted", "list", "tuple"})


@dataclass(frozen=True)
class OptimizerUsage:
    """Names a unit calls ``.step()`` on, names it uses as optimizers, and
    names whose ``.step()`` is the first to follow a backward call in its block."""

    stepped: frozenset[str]
    used_as_optimizer: frozenset[str]
    stepped_after_backward: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Keeper:
    """Why a storage keeps what a statement puts into it across iterations:
    ``loop`` (it lives outside this run loop) or ``calls`` (it is persistent
    state and ``function`` runs once per batch or step)."""

    why: str
    loop: ast.AST | None = None
    function: ast.AST | None = None


@dataclass(frozen=True)
class Repetition:
    """Why a function's body runs again and again: ``reason`` is "hook"
    (a framework calls it per batch), "driver" (handed to ``study.optimize``
    or ``optimizer.step``), "caller" (called from a loop, or from a
    repeated function, in this file) or "step" (it takes one training step
    and no call of the file shows its callers); ``per_batch`` when it runs
    once per batch or step."""

    reason: str
    per_batch: bool
    detail: str = ""


class SemanticModel:
    """The shared analysis of one file (see the module docstring)."""

    def close(self) -> None:
        """Drop every analysis and table: their objects refer back to the
        model (the constant folder, interpreters' call sites), and a cycle
        would leave the whole tree to the cyclic garbage collector instead
        of reference counting. The model is unusable afterwards."""
        self.__dict__.clear()

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.module = ctx.module
        self.index = ctx.index
        self.parents: dict[ast.AST, ast.AST] = ctx.index.parents
        self.scopes = ScopeTree(ctx.module, ctx.index)
        self.classes = ClassTable(ctx.module, self.scopes, self.index.of_type(ast.ClassDef))
        self.library_roots = self._library_roots()
        #: (unit, context, summary depth) -> its analysis: an analysis whose calls were
        #: followed less deep is never reused where they are followed deeper
        self._analyses: dict[tuple[ast.AST, Context, int], Analysis] = {}
        self._active: dict[ast.AST, list[Interpreter]] = {}
        self._provisional: dict[ast.AST, Analysis] = {}
        self._unit_memo: dict[ast.AST, ast.AST] = {}
        self._canonical: dict[ast.AST, Analysis] = {}
        self._site_memo: dict[ast.AST, list[CallSite]] = {}
        self._contexting: set[ast.AST] = set()
        self._settling: set[ast.AST] = set()
        self._calls_by_name: dict[str, list[ast.Call]] | None = None
        self._local_names: frozenset[str] | None = None
        self._summary_depth = 0
        #: how many calls were cut off so far (depth, budget, recursion), and the
        #: analyses (by id) in which one was: those are valid only at their own depth
        self._cuts = 0
        self._cut: set[int] = set()
        #: (unit, context) -> (deepest depth, analysis) of an analysis with no cut
        self._uncut: dict[tuple[ast.AST, Context], tuple[int, Analysis]] = {}
        self._context_depth = 0
        self._own_memo: dict[tuple, list[ast.AST]] = {}
        self._accumulating: frozenset[str] | None = None
        self._collecting: frozenset[str] | None = None
        self._method_owners: dict[str, ClassInfo] | None = None
        self._budget = WORK_BUDGET * max(1, len(self.index.of_type(*_STATEMENT_TYPES)))
        self._work = 0
        self.truncated = False
        self._evidence_memo: dict[tuple[str, ast.AST], frozenset[str]] = {}
        self._attribute_targets: dict[ClassInfo, dict[str, list[tuple[Function, ast.AST]]]] = {}
        self._repetition: dict[ast.AST, Repetition | None] = {}
        self._driven: dict[ast.AST, Repetition] | None = None
        self._ancestor_memo: dict[str, dict[ast.AST, tuple]] = {}
        self._loops_memo: dict[ast.AST, tuple[ast.AST, ...]] = {}
        self._run_loop_memo: dict[ast.AST, bool] = {}
        self._constants: Constants | None = None

    @property
    def constants(self) -> Constants:
        """Constant folding of the file's literals (:mod:`.constants`), built on first use."""
        if self._constants is None:
            self._constants = Constants(self)
        return self._constants

    # ==================================================================================
    # structure
    # ==================================================================================
    def _library_roots(self) -> frozenset[str]:
        roots = set()
        for scope in self.scopes.scopes.values():
            for bindings in scope.bindings.values():
                for binding in bindings:
                    if binding.kind is BindingKind.IMPORT and binding.qualified:
                        roots.add(binding.qualified.split(".")[0])
        return frozenset(roots - {""})

    def imports(self, *packages: str) -> bool:
        """True when the file imports one of ``packages`` (or a submodule) in any scope."""
        return any(self.scopes.imports_module(package) for package in packages)

    def sets_default_device(self) -> bool:
        """The file calls ``torch.set_default_device`` (or the tensor-type setter):
        constructors may then create tensors on the accelerator."""
        found = self.index.memo.get("sets_default_device")
        if found is None:
            found = self.index.memo["sets_default_device"] = any(
                self.qualified(call.func) in fw.DEFAULT_DEVICE_SETTERS for call in self.index.of_type(ast.Call)
                if isinstance(call.func, (ast.Attribute, ast.Name)) and (call.func.attr if isinstance(call.func, ast.Attribute) else call.func.id).startswith("set_default"))
        return found

    def uses_accelerator(self, node: ast.AST, explicit: bool = False) -> bool:
        """``node``'s code (a function with its decorators, a class, or the
        module) shows that it runs on an accelerator: a CUDA attribute, device
        string or GPU keyword (:data:`~.frameworks.ACCELERATOR_ATTRIBUTES` and
        the tables after it); unless ``explicit``, also a module of
        :data:`~.frameworks.ACCELERATOR_MODULES` it uses, or an engine
        (Accelerator, Fabric) it builds without asking for the CPU."""
        key = ("uses_accelerator", id(node), explicit)
        found = self.index.memo.get(key)
        if found is None:
            found = any(self._accelerator_evidence(n, explicit) for n in self._subtree(node))
            if not found and not explicit and node is self.module:
                found = any(self.imports(name) for name in fw.ACCELERATOR_MODULES)
            self.index.memo[key] = found
        return found

    def _subtree(self, node: ast.AST) -> list[ast.AST]:
        if node is self.module:
            return self.index.nodes
        position = self.index.position_of(node)
        if position is None:
            return list(ast.walk(node))
        return self.index.subtree_of_type(position, (ast.Attribute, ast.Constant, ast.keyword, ast.Call))

    def _accelerator_evidence(self, node: ast.AST, explicit: bool) -> bool:
        if isinstance(node, ast.Attribute):
            if node.attr in fw.ACCELERATOR_ATTRIBUTES:
                return self.qualified(node) not in fw.CUDA_METADATA  # `torch.version.cuda` is a version string
            return not explicit and node.attr == "accelerator" and (self.qualified(node) or "").startswith(fw.ACCELERATOR_MODULES)
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str) and fw.ACCELERATOR_STRINGS.match(node.value) is not None
        if isinstance(node, ast.keyword):
            return node.arg is not None and fw.ACCELERATOR_KEYWORDS.search(node.arg) is not None
        if isinstance(node, ast.Call) and not explicit:
            return self.qualified(node.func) in fw.ENGINE_TYPES and not any(
                isinstance(k.value, ast.Constant) and fw.CPU_ENGINE_KEYWORDS.get(k.arg, ...) == k.value.value for k in node.keywords)
        return False

    def assignment_before(self, name: ast.Name, parallel: bool = False) -> ast.Assign | None:
        """The ``name = ...`` statement of ``name``'s scope that comes last
        before ``name`` in the text, passing over ones that derive the name
        from itself (``path = path if ok else path / "x"``); None when the
        name is bound otherwise there (a parameter, a loop) or not at all.
        With ``parallel``, a ``a, name = ...`` statement counts too (the
        caller picks the part that binds ``name``)."""
        position = self.index.position_of(name)
        if position is None:
            return None
        found, found_at = None, -1
        for binding in self.scopes.bindings_of(name.id, self.scopes.scope_for(name)):
            statement = self.parents.get(binding.node)
            if parallel and isinstance(statement, (ast.Tuple, ast.List)):
                statement = self.parents.get(statement)
            at = self.index.position_of(binding.node)
            if at is None or at >= position:
                continue
            if binding.kind is not BindingKind.ASSIGNMENT or not isinstance(statement, ast.Assign):
                if at > found_at:
                    found, found_at = None, at
                continue
            derived = any(isinstance(n, ast.Name) and n.id == name.id for n in descendants(statement.value))
            if not derived and at > found_at:
                found, found_at = statement, at
        return found

    def is_test_function(self, function: ast.AST) -> bool:
        """A test as pytest collects one by default (``python_files =
        test_*.py *_test.py``, ``python_functions = test*``, ``python_classes
        = Test*``), or a method of a ``unittest.TestCase`` class. A
        ``test_step`` of a trainer in ``train.py`` is no test."""
        if not isinstance(function, FUNCTION_TYPES):
            return False
        klass = self.class_of_method(function)
        if klass is not None and any(b.endswith("TestCase") for b in klass.library_bases):
            return True
        if not self.is_test_file:
            return False
        return function.name.startswith("test") or klass is not None and klass.name.startswith("Test")

    def is_untrained_test(self, function: ast.AST | None) -> bool:
        """``function`` is a test (:meth:`is_test_function`) that runs no
        backward pass and takes no training step, itself or through what it
        calls: a parity or shape check whose loops are as long as the test
        makes them, not a training run."""
        return function is not None and self.is_test_function(function) and not self.runs_backward(function) \
            and not self.trains(function.body)

    @property
    def is_test_file(self) -> bool:
        """The file's name is one pytest collects tests from by default, or ``conftest.py``."""
        name = os.path.basename(str(self.ctx.path))
        return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py")

    @property
    def is_torch_file(self) -> bool:
        return self.imports(*fw.TORCH_PACKAGES)

    @property
    def is_tensorflow_file(self) -> bool:
        return self.imports(*fw.TF_PACKAGES)

    def qualified(self, node: ast.AST) -> str | None:
        """The library name ``node`` refers to (scope-aware), see :meth:`ScopeTree.qualified`."""
        return self.scopes.qualified(node)

    def ancestors(self, node: ast.AST):
        """Ancestors of ``node``, innermost first."""
        parent = self.parents.get(node)
        while parent is not None:
            yield parent
            parent = self.parents.get(parent)

    def offloads_state_dict(self, call: ast.Call) -> bool:
        """``model.state_dict()`` taken inside ``with FSDP.state_dict_type(model,
        kind, config)`` whose config offloads to the CPU
        (``FullStateDictConfig(offload_to_cpu=True)``): it holds host tensors
        (torch 2.13.0 torch/distributed/fsdp/api.py, ``offload_to_cpu``)."""
        for ancestor in self.ancestors(call):
            if isinstance(ancestor, (ast.With, ast.AsyncWith)):
                for item in ancestor.items:
                    context = item.context_expr
                    if (isinstance(context, ast.Call) and isinstance(context.func, ast.Attribute)
                            and context.func.attr == "state_dict_type"
                            and any(self.offloading_options(a, "offload_to_cpu") for a in call_arguments(context))):
                        return True
        return False

    def offloading_options(self, expr: ast.expr, flag: str) -> bool:
        """``expr`` is (or names) a ``*StateDictConfig``/``StateDictOptions`` call
        with ``flag=True`` (``offload_to_cpu`` for FSDP1, ``cpu_offload`` for
        ``torch.distributed.checkpoint.state_dict``)."""
        if isinstance(expr, ast.Name):
            statement = self.assignment_before(expr)
            expr = statement.value if statement is not None else expr
        if not isinstance(expr, ast.Call):
            return False
        name = (dotted_name(expr.func) or "").rsplit(".", 1)[-1]
        return (name.endswith("StateDictConfig") or name == "StateDictOptions") and any(
            keyword.arg == flag and isinstance(keyword.value, ast.Constant) and keyword.value.value is True
            for keyword in expr.keywords)

    def first_ancestor_verdict(self, node: ast.AST, key: str, decide, default=None):
        """``decide(a)`` for the innermost ancestor ``a`` of ``node`` for
        which it is not None, else ``default``; answers memoized per ancestor
        under ``key`` (``decide`` must depend on the ancestor alone), so a
        deep nest is walked once in all."""
        memo = self._ancestor_memo.setdefault(key, {})
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

    def unit_of(self, node: ast.AST) -> ast.AST:
        """The function, lambda or module whose body evaluates ``node``."""
        found = self._unit_memo.get(node)
        if found is not None:
            return found
        if node is self.module:
            return node
        scope = self.scopes.scope_for(node)
        while scope.kind in (ScopeKind.CLASS, ScopeKind.COMPREHENSION):
            if scope.kind is ScopeKind.CLASS:
                scope = None
                break
            scope = scope.parent
        found = self._unit_memo[node] = self.module if scope is None else scope.node  # class bodies run at module level
        return found

    def function_of(self, node: ast.AST) -> Function | None:
        """The ``def`` whose body contains ``node`` (lambdas looked through), or None."""
        unit = self.unit_of(node)
        while isinstance(unit, ast.Lambda):
            unit = self.unit_of(unit)
        return unit if isinstance(unit, FUNCTION_TYPES) else None

    def class_of_method(self, function: ast.AST) -> ClassInfo | None:
        """The class that defines ``function`` as a method, or None."""
        return self.classes.owner_of(function, self.parents)

    def runs_at_construction(self, function: ast.AST) -> bool:
        """``function`` is a method that runs once when its class is
        instantiated: ``__init__``, or the method a class decorator's
        generated ``__init__`` calls (a ``@dataclass``'s ``__post_init__``,
        :data:`~.frameworks.POST_INIT_METHODS`)."""
        if not isinstance(function, FUNCTION_TYPES):
            return False
        if function.name == "__init__":
            return True
        klass = self.class_of_method(function)
        if klass is None:
            return False
        for decorator in klass.node.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            if fw.POST_INIT_METHODS.get(self.qualified(target)) == function.name:
                return True
        return False

    @property
    def functions(self) -> list[Function]:
        return self.index.of_type(*FUNCTION_TYPES)

    def enclosing_loops(self, node: ast.AST) -> list[ast.AST]:
        """``for``/``while`` loops around ``node`` in its unit, innermost first
        (not a loop whose header holds ``node``)."""
        memo = self._loops_memo
        below: list[ast.AST] = []
        current = node
        while current not in memo:
            parent = self.parents.get(current)
            if parent is None or isinstance(parent, (*UNIT_TYPES, ast.ClassDef)):
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

    def repeating_loops(self, node: ast.AST) -> list[ast.AST]:
        """The loops around ``node`` (in its unit, innermost first) that may
        run more than a few times: every ``for``/``while`` but a loop over a
        tuple/list/set display or a ``range`` of a small integer literal.
        Wider than :meth:`run_loops` (a loop over files or figures counts)."""
        return [loop for loop in self.enclosing_loops(node)
                if not (isinstance(loop, FOR_TYPES) and operations.literal_iterable(loop.iter))]

    def called_repeatedly(self, function: ast.AST) -> bool:
        """Some call of the file runs ``function`` many times: a call inside a
        repeating loop (:meth:`repeating_loops`), inside a comprehension over
        anything but a literal display or a small literal ``range``, or inside
        a function that is itself called repeatedly (followed through the
        file's calls: ``train`` loops over batches and calls ``metric``,
        which calls ``embed``: ``embed`` runs once per batch)."""
        memo = self.__dict__.setdefault("_called_repeatedly_memo", {})
        if function in memo:
            return memo[function]
        memo[function] = False  # a cycle of calls adds nothing
        found = False
        for site in self.call_sites_of(function):
            comprehension = self.comprehension_of(site)
            if self.repeating_loops(site) or (comprehension is not None and not all(
                    operations.literal_iterable(g.iter) for g in comprehension.generators)):
                found = True
                break
            caller = self.function_of(site)
            if caller is not None and caller is not function and self.called_repeatedly(caller):
                found = True
                break
        memo[function] = found
        return found

    def tf_function(self, function: ast.AST) -> ast.expr | None:
        """The ``@tf.function`` decorator of ``function`` (a bare
        ``@tf.function`` or a ``@tf.function(...)`` call, any import
        spelling), or None when it is not one."""
        if not isinstance(function, FUNCTION_TYPES):
            return None
        for decorator in function.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            if self.qualified(target) in fw.TF_FUNCTIONS:
                return decorator
        return None

    def in_except(self, node: ast.AST) -> bool:
        """``node`` runs inside an ``except`` handler of its unit."""
        return self.first_ancestor_verdict(node, "except", _except_verdict, False)

    def oom_branch(self, handler: ast.ExceptHandler) -> list[ast.stmt] | None:
        """The statements of ``handler`` that run when it catches an
        out-of-memory error, or None when it does not catch one: the whole
        body for ``except torch.cuda.OutOfMemoryError`` (a tuple naming it
        too), the body of an ``if`` that tests the caught exception for it
        (``"out of memory" in str(e)``, ``is_oom_error(e)``, a function of
        this file that does) in an ``except RuntimeError``/``Exception``/bare
        ``except``."""
        caught = handler.type
        names = caught.elts if isinstance(caught, ast.Tuple) else [caught] if caught is not None else []
        qualified = {self.qualified(name) for name in names}
        if qualified & fw.OOM_ERRORS:
            return handler.body
        if caught is not None and not any(isinstance(n, ast.Name) and n.id in ("RuntimeError", "Exception", "BaseException")
                                          for n in names):
            return None
        for position, statement in enumerate(handler.body):
            # `if "out of memory" not in str(e): raise` -- what follows runs on an OOM only
            if (isinstance(statement, ast.If) and _negated(statement.test) is not None
                    and self._tests_oom(statement.test, 0)
                    and statement.body and isinstance(statement.body[-1], ast.Raise) and not statement.orelse):
                return handler.body[position + 1:]
        for node in ast.walk(ast.Module(body=handler.body, type_ignores=[])):
            if isinstance(node, ast.If) and _negated(node.test) is None and self._tests_oom(node.test, 0):
                return node.body
        return None

    def _tests_oom(self, test: ast.expr, depth: int) -> bool:
        for node in ast.walk(test):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and fw.OOM_MESSAGE in node.value.lower():
                return True
            if isinstance(node, ast.Call):
                if self.qualified(node.func) in fw.OOM_TESTS:
                    return True
                target = operations._local_target(self, node.func) if depth < 2 else None
                if isinstance(target, FUNCTION_TYPES):
                    if any(self._tests_oom(r.value, depth + 1) for r in self.own_nodes(target, (ast.Return,)) if r.value is not None):
                        return True
        return False

    def comprehension_of(self, node: ast.AST) -> ast.AST | None:
        """The innermost comprehension around ``node`` within its unit."""
        return self.first_ancestor_verdict(node, "comprehension", _comprehension_verdict, None) or None

    # ==================================================================================
    # contexts: what the file's call sites pass
    # ==================================================================================
    def _candidate_calls(self, unit: ast.AST) -> list[ast.Call]:
        """Calls that may run ``unit``, by the name they call it with (a
        module's ``forward`` is reached from too many calls to follow)."""
        if self._calls_by_name is None:
            by_name: dict[str, list[ast.Call]] = {}
            for call in self.index.of_type(ast.Call):
                func = call.func
                name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
                if name is not None:
                    by_name.setdefault(name, []).append(call)
            self._calls_by_name = by_name
        if not isinstance(unit, FUNCTION_TYPES):
            return []
        klass = self.class_of_method(unit)
        if klass is not None and klass.is_module and unit.name in ("forward", "__call__"):
            return []
        found = list(self._calls_by_name.get(unit.name, ()))
        if klass is not None and unit.name == "__init__":
            found += self._calls_by_name.get(klass.name, [])
        return found

    def sites_of(self, unit: ast.AST) -> list[CallSite]:
        """The file's calls of ``unit``, each with the arguments its caller
        passes there (callers whose own context led here are left out: a
        cycle of calls)."""
        return self._sites(unit)[0] or []

    def _sites(self, unit: ast.AST) -> tuple[list[CallSite] | None, bool]:
        """:meth:`sites_of` and whether the list is complete. None when the
        context depth is spent (the callers are not known); incomplete when a
        caller's own context is being worked out (a cycle of calls) or its
        analysis is running and has not reached the call yet. Only complete
        lists are memoized, so the answer does not depend on what was asked first."""
        found = self._site_memo.get(unit)
        if found is not None:
            return found, True
        if self._context_depth >= MAX_CONTEXT_DEPTH:
            return None, False
        sites: list[CallSite] = []
        complete = True
        self._contexting.add(unit)
        self._context_depth += 1
        saved_depth, self._summary_depth = self._summary_depth, 0
        try:
            for call in self._candidate_calls(unit):
                caller = self.unit_of(call)
                if caller is unit:
                    continue
                if caller in self._contexting:
                    complete = False
                    continue
                running = self._active.get(caller)
                if running:
                    site = running[-1].analysis.call_sites.get(call)  # the caller is being interpreted: what it has seen
                    complete = complete and site is not None
                else:
                    site = self.canonical(caller).call_sites.get(call)
                    # a caller analysed under a context cut short is no final word on this call
                    complete = complete and caller in self._canonical
                if site is not None and site.callee is unit:
                    sites.append(site)
        finally:
            self._contexting.discard(unit)
            self._context_depth -= 1
            self._summary_depth = saved_depth
        if complete:
            self._site_memo[unit] = sites
        return sites, complete

    def own_nodes(self, unit: ast.AST, types: tuple[type, ...]) -> list[ast.AST]:
        """The nodes of ``types`` in ``unit``'s own body (not in nested
        functions, lambdas or classes), in source order, from the node index."""
        key = (unit, types)
        found = self._own_memo.get(key)
        if found is None:
            position = self.index.position_of(unit)
            found = [] if position is None else self.index.subtree_of_type(position, types, _NESTED_UNITS)
            self._own_memo[key] = found
        return found

    def accumulating_functions(self) -> frozenset[str]:
        """Names of the file's functions whose body adds into persistent
        state (``self.x += v``, ``self.x = self.x + v``, a global or
        ``nonlocal`` total): a cheap test for calls worth following."""
        if self._accumulating is None:
            names = set()
            for function in self.index.of_type(*FUNCTION_TYPES):
                if any(self.persistent_root(statement.target, function) is not None
                       for statement in self.own_nodes(function, (ast.AugAssign,))):
                    names.add(function.name)
            self._accumulating = frozenset(names)
        return self._accumulating

    def iterates_fixed_structure(self, comprehension: ast.AST) -> bool:
        """Cheap, syntactic: every ``for`` of ``comprehension`` walks a fixed
        structure, never a stream of batches: a module's parameters, buffers
        or children, a mapping's items/keys/values, a literal display or a
        small ``range`` (through ``enumerate``/``zip``/``sorted``/``list``)."""
        return all(_fixed_structure(clause.iter) for clause in comprehension.generators)

    def holds_no_graph(self, expr: ast.expr) -> bool:
        """Cheap, syntactic: ``expr`` evaluates to a Python value or a
        detached tensor whatever its parts are (a literal, ``len(...)``,
        ``x.item()``, ``float(...)``, a comparison, ``.detach()``), or is
        arithmetic on such values only."""
        if isinstance(expr, (ast.Constant, ast.JoinedStr, ast.Compare)):
            return True
        if isinstance(expr, ast.UnaryOp):
            return self.holds_no_graph(expr.operand)
        if isinstance(expr, ast.IfExp):
            return self.holds_no_graph(expr.body) and self.holds_no_graph(expr.orelse)
        if isinstance(expr, ast.BinOp):
            return self.holds_no_graph(expr.left) and self.holds_no_graph(expr.right)
        if isinstance(expr, ast.Call):
            func = expr.func
            if isinstance(func, ast.Attribute) and func.attr in _DETACHING_CALLS:
                return True
            if isinstance(func, ast.Name) and func.id in _PLAIN_CALLS and self.qualified(func) == func.id:
                return True
            qualified = self.qualified(func)
            if qualified is not None and (qualified in fw.HOST_VALUE_CALLABLES
                                          or qualified.partition(".")[0] in fw.HOST_VALUE_NAMESPACES):
                return True
        return False

    def collecting_functions(self) -> frozenset[str]:
        """Names of the file's functions whose body stores values into
        persistent containers (``self.items.append(v)``, ``self.d[k] = v``,
        a global list): a cheap test for calls worth following."""
        if self._collecting is None:
            from memlint.lint.semantic.stores import STORING_METHODS

            names = set()
            for function in self.index.of_type(*FUNCTION_TYPES):
                for node in self.own_nodes(function, (ast.Call, ast.Assign)):
                    if isinstance(node, ast.Call):
                        func = node.func
                        target = func.value if isinstance(func, ast.Attribute) and func.attr in STORING_METHODS else None
                    else:
                        target = node.targets[0] if isinstance(node.targets[0], ast.Subscript) else None
                    if target is not None and self.persistent_root(target, function) is not None:
                        names.add(function.name)
                        break
            self._collecting = frozenset(names)
        return self._collecting

    def may_call_local(self, call: ast.Call) -> bool:
        """Cheap test: ``call`` names a function or class defined in this file."""
        if self._local_names is None:
            self._local_names = frozenset(
                [f.name for f in self.index.of_type(*FUNCTION_TYPES)] + [c.name for c in self.index.of_type(ast.ClassDef)])
        func = call.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if name not in self._local_names:
            return False
        if isinstance(func, ast.Attribute) and _is_super_call(func.value):
            return self._has_local_base(call)  # `super().__init__()` of a library base class
        return True

    def _has_local_base(self, node: ast.AST) -> bool:
        """The class around ``node`` names a base class defined in this file."""
        current = self.parents.get(node)
        while current is not None and not isinstance(current, ast.ClassDef):
            current = self.parents.get(current)
        if current is None:
            return True  # `super()` outside a class body: let the full analysis decide
        local_classes = {klass.name for klass in self.index.of_type(ast.ClassDef)}
        return any((dotted_name(base) or "").split(".")[-1] in local_classes for base in current.bases)

    def may_persist(self, root: str, node: ast.AST) -> bool:
        """Cheap test: ``root`` may be state that outlives a call of ``node``'s
        function (an attribute, a global, a free variable)."""
        if "." in root:
            return True
        unit = self.unit_of(node)
        return unit is not self.module and self.outlives_call(root, unit)

    def call_sites_of(self, function: ast.AST) -> list[ast.Call]:
        """The calls of the file that run ``function``."""
        return [site.call for site in self.sites_of(function)]

    def context_of(self, unit: ast.AST) -> Context:
        """The calling context of ``unit``: parameters joined over the file's
        call sites (a method's receiver is always its class's instance),
        grad mode from decorators, framework hooks and callers."""
        return self._context(unit)[0]

    def _context(self, unit: ast.AST) -> tuple[Context, bool]:
        """:meth:`context_of` and whether it is complete (False: the callers
        were beyond the context depth, so parameters and grad are unknown)."""
        if isinstance(unit, ast.Module):
            return Context((), Tri.YES), True
        sites, complete = self._sites(unit)
        receiver = first_parameter(unit) if self.class_of_method(unit) is not None else None
        params: dict[str, Value] = {}
        for site in sites or ():
            for name, value in site.bound:
                if name != receiver:
                    params[name] = value if name not in params else join_call_arguments(params[name], value)
        if receiver is not None and sites and self._receives_default(unit, receiver, sites):
            # the same environment as leaving it out, and the context is then the tuple a
            # call's summary was memoized under: a function called once reuses that summary
            params[receiver] = dict(sites[0].bound)[receiver]
        grad = self.entry_grad(unit, sites if complete else None)
        return Context(tuple(sorted(params.items())), grad), complete

    def _receives_default(self, unit: ast.AST, receiver: str, sites: list[CallSite]) -> bool:
        """Every call site binds the receiver of method ``unit`` to the value
        the method is entered with when no call says (its class's instance)."""
        default = self.parameter_default(unit, receiver, 0)
        return all(dict(site.bound).get(receiver) == default for site in sites)

    def entry_grad(self, unit: ast.AST, sites: list[CallSite] | None) -> Tri:
        """Grad mode at entry: NO when decorated with ``no_grad`` or driven by a
        framework under it; else the join over the in-file call sites; YES
        when nothing says otherwise; MAYBE when the callers are not known
        (``sites`` None: beyond the context depth, or a cycle of calls)."""
        if isinstance(unit, FUNCTION_TYPES):
            decorated = self.decorator_grad(unit)
            if decorated is not None:
                return decorated
            hook = self.hook_of(unit)
            if hook is not None and hook.grad == "disabled":
                return Tri.NO
            if hook is not None and hook.grad == "enabled":
                return Tri.YES
        if sites is None:
            # callers beyond the context depth: they run with grad on when nothing in the
            # file ever turns it off (no `no_grad`, `inference_mode`, `set_grad_enabled`,
            # no hook a framework runs without grad)
            return Tri.YES if self.never_disables_grad() else Tri.MAYBE
        if not sites:
            return Tri.YES
        grad = sites[0].grad
        for site in sites[1:]:
            grad = grad.join(site.grad)
        return grad

    def never_disables_grad(self) -> bool:
        """Nothing in the file can turn autograd off: it names no grad-disabling
        context or setter (:data:`~.frameworks.GRAD_DISABLING`,
        :data:`~.frameworks.GRAD_SETTERS`, through imports) and defines no
        framework hook that runs without grad."""
        found = self.index.memo.get("never_disables_grad")
        if found is None:
            names = {q.rsplit(".", 1)[-1] for q in (*fw.GRAD_DISABLING, *fw.GRAD_SETTERS)}
            found = True
            for node in (*self.index.of_type(ast.Attribute), *self.index.of_type(ast.Name)):
                last = node.attr if isinstance(node, ast.Attribute) else node.id
                if last in names and self.qualified(node) in fw.GRAD_DISABLING | fw.GRAD_SETTERS:
                    found = False
                    break
            if found:
                found = not any(hook is not None and hook.grad == "disabled"
                                for hook in (self.hook_of(f) for f in self.index.of_type(*FUNCTION_TYPES)))
            self.index.memo["never_disables_grad"] = found
        return found

    def decorator_grad(self, function: Function) -> Tri | None:
        """NO for ``@torch.no_grad()``/``@torch.inference_mode()``, YES for ``@torch.enable_grad()``."""
        for decorator in function.decorator_list:
            mode = self.grad_mode_of_context(decorator)
            if mode is not None:
                return mode
        return None

    def grad_mode_of_context(self, expr: ast.expr) -> Tri | None:
        """The grad mode a ``with`` item or decorator sets, or None when it sets none."""
        target = expr.func if isinstance(expr, ast.Call) else expr
        qualified = self.qualified(target)
        if qualified in fw.GRAD_DISABLING:
            if isinstance(expr, ast.Call) and "inference_mode" in qualified and expr.args:
                from memlint.lint.semantic.interpreter import literal_flag

                flag = literal_flag(expr.args[0])
                return {Tri.YES: Tri.NO, Tri.NO: Tri.YES}.get(flag, Tri.MAYBE)
            return Tri.NO
        if qualified in fw.GRAD_ENABLING:
            return Tri.YES
        if qualified in fw.GRAD_SETTERS and isinstance(expr, ast.Call) and expr.args:
            from memlint.lint.semantic.interpreter import literal_flag

            return literal_flag(expr.args[0])
        return None

    # ==================================================================================
    # analyses
    # ==================================================================================
    def analyse(self, unit: ast.AST, context: Context) -> Analysis:
        """Interpret ``unit`` under ``context`` at the current summary depth
        (memoized). An analysis in which no call was cut off (by depth, the
        work budget or recursion) is the same at every shallower depth, and
        is reused there."""
        depth = self._summary_depth
        key = (unit, context, depth)
        found = self._analyses.get(key)
        if found is None:
            uncut = self._uncut.get((unit, context))
            found = uncut[1] if uncut is not None and uncut[0] >= depth else None
        if found is not None:
            if id(found) in self._cut:
                self._cuts += 1  # what this analysis reads was cut off: so is its reader
            return found
        interpreter = Interpreter(self, unit, context)
        running = self._active.setdefault(unit, [])
        running.append(interpreter)
        cuts = self._cuts
        try:
            analysis = interpreter.run()
        finally:
            running.pop()
            if not running:
                del self._active[unit]
        self._work += interpreter.statements
        self._analyses[key] = analysis
        if self._cuts > cuts:
            self._cut.add(id(analysis))
        else:
            previous = self._uncut.get((unit, context))
            if previous is None or previous[0] < depth:
                self._uncut[(unit, context)] = (depth, analysis)
        return analysis

    def summary(self, unit: ast.AST, context: Context) -> Analysis | None:
        """``unit`` interpreted for one call one level deeper; None for a
        recursive call, past MAX_SUMMARY_DEPTH, or when the work budget is
        spent and no analysis of that call is at hand."""
        if unit in self._active or (self._summary_depth >= MAX_SUMMARY_DEPTH and not self._is_leaf(unit)):
            self._cuts += 1
            return None
        if self._work > self._budget:
            found = self._analyses.get((unit, context, self._summary_depth + 1))
            if found is None:
                self.truncated = True
                self._cuts += 1
                return None
        self._summary_depth += 1
        try:
            return self.analyse(unit, context)
        finally:
            self._summary_depth -= 1

    def _is_leaf(self, unit: ast.AST) -> bool:
        """``unit`` calls nothing defined in this file (and builds no lambda or
        nested function): its summary is the same at any depth, so the depth
        limit does not cut it off."""
        found = self._evidence_memo.get(("leaf", unit))
        if found is None:
            position = self.index.position_of(unit)
            nested = self.index.subtree_of_type(position, UNIT_TYPES, ()) if position is not None else []
            found = position is not None and len(nested) <= 1 and not any(
                self.may_call_local(call) for call in self._calls_of_unit(unit))
            self._evidence_memo[("leaf", unit)] = found
        return found

    def canonical(self, unit: ast.AST) -> Analysis:
        """The analysis rules read: ``unit`` under its calling context, its
        calls followed to the full MAX_SUMMARY_DEPTH wherever it is asked from."""
        found = self._canonical.get(unit)
        if found is not None:
            return found
        saved_depth, self._summary_depth = self._summary_depth, 0
        try:
            return self._canonical_from_top(unit)
        finally:
            self._summary_depth = saved_depth

    def _canonical_from_top(self, unit: ast.AST) -> Analysis:
        if unit in self._contexting:  # asked while finding its own context: a cycle of calls
            return self.analyse(unit, Context((), self.entry_grad(unit, None)))
        nested = bool(self._contexting)
        if nested and unit in self._provisional:
            return self._provisional[unit]
        if not nested:
            self._settle_callers(unit)
            found = self._canonical.get(unit)
            if found is not None:  # reached through a cycle of calls while its callers settled
                return found
        context, complete = self._context(unit)
        found = self.analyse(unit, context)
        if complete or not nested:
            self._canonical[unit] = found
        else:
            # asked while another unit's context is being worked out, with callers cut off:
            # good enough for that work, not for a rule's question, which asks again from the top
            self._provisional[unit] = found
        return found

    def _settle_callers(self, unit: ast.AST) -> None:
        """Give each in-file caller of ``unit`` its canonical analysis before
        ``unit``'s context is read from them, callers before callees: the
        context is then taken from final analyses, whatever a rule asked
        first. Callers already settling (a cycle of calls), being
        interpreted, or past MAX_SETTLE_DEPTH are left to the provisional
        path of :meth:`_sites`."""
        if len(self._settling) >= MAX_SETTLE_DEPTH or unit in self._settling:
            return
        self._settling.add(unit)
        try:
            for call in self._candidate_calls(unit):
                caller = self.unit_of(call)
                if caller is unit or caller in self._canonical or caller in self._settling or caller in self._active:
                    continue
                self.canonical(caller)
        finally:
            self._settling.discard(unit)

    def live_env(self, unit: ast.AST) -> dict[str, Value] | None:
        """The environment of ``unit`` as it stands now: the running
        interpreter's when ``unit`` is being interpreted (a global read from
        a function the module's top level calls), else its canonical result."""
        active = self._active.get(unit)
        if active:
            return active[-1].state.env
        return self.canonical(unit).env

    # ==================================================================================
    # hooks for the interpreter
    # ==================================================================================
    def evaluate_call(self, call, interpreter: Interpreter) -> Value:
        return operations.evaluate_call(self, call, interpreter)

    def attribute_of(self, base: Value, attr: str, node: ast.Attribute, interpreter: Interpreter) -> Value:
        return operations.attribute_of(self, base, attr, node, interpreter)

    def element_of(self, value: Value) -> Value:
        return operations.element_of(value)

    def library_attribute(self, qualified: str) -> Value:
        return operations.library_attribute(qualified)

    def name_value(self, node: ast.Name, interpreter: Interpreter) -> Value:
        """The value of a name the unit's environment does not hold: a
        global, a free variable of an enclosing function, an import, a class
        or function of the file, a builtin."""
        scope = self.scopes.scope_for(node)
        found = self.scopes.binding_scope(node.id, scope)
        if found is None:
            return Value(Kind.FUNCTION, Tri.NO, Tri.NO) if node.id in _BUILTIN_CALLABLES else UNKNOWN
        bindings = found.bindings[node.id]
        imported = next((b.qualified for b in bindings if b.kind is BindingKind.IMPORT), None)
        if imported is not None:
            return operations.library_attribute(imported)
        defined = next((b for b in bindings if b.kind in (BindingKind.CLASS, BindingKind.FUNCTION)), None)
        if defined is not None and len(bindings) == 1:
            info = self.classes.of(defined.node) if defined.kind is BindingKind.CLASS else None
            return Value(Kind.FUNCTION, Tri.NO, Tri.NO, klass=info.qualname if info else None)
        owner = found.node
        if owner is interpreter.unit or (isinstance(owner, ast.Module) and interpreter.unit is self.module):
            return UNKNOWN  # bound later in this unit
        if not isinstance(owner, (ast.Module, *UNIT_TYPES)):
            return UNKNOWN  # a class body's or a comprehension's name, seen from a nested function
        if isinstance(owner, ast.Module) and not self._active.get(self.module):
            reaching = self._global_at_calls(node.id, interpreter.unit, bindings)
            if reaching is not None:
                return reaching
        env = self.live_env(owner if not isinstance(owner, ast.Module) else self.module)
        if env is None:
            return UNKNOWN
        value = env.get(node.id)
        return value if value is not None else UNKNOWN

    def _global_at_calls(self, name: str, function: ast.AST, bindings) -> Value | None:
        """A global read in a module-level ``function`` that the module's top
        level calls (a notebook's helper, run in the next cell): the value the
        global holds at those calls, from the module-level binding of ``name``
        that comes last before each call, joined over the calls; not the
        value of the module's end (``model`` rebound to another model in a
        later cell). None when ``function`` is no module-level function or
        not only called from the top level, or the global is bound only once."""
        if len(bindings) < 2 or not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                or self.parents.get(function) is not self.module \
                or len(self.scopes.module_scope.bindings.get(function.name, ())) != 1:
            return None  # calls by its name run it only when the name is bound to it alone
        memo = self.__dict__.setdefault("_module_calls_memo", {})
        if function not in memo:
            memo[function] = [call for call in self.index.of_type(ast.Call)
                              if isinstance(call.func, ast.Name) and call.func.id == function.name]
        calls = memo[function]
        if not calls or any(self.unit_of(call) is not self.module for call in calls):
            return None
        values = self.canonical(self.module).values
        found = None
        for call in calls:
            at = self.index.position_of(call)
            before = [(self.index.position_of(b.node), b) for b in bindings]
            before = [(p, b) for p, b in before if p is not None and at is not None and p < at]
            if not before:
                return None
            last = max(before, key=lambda pair: pair[0])[1]
            if last.kind is not BindingKind.ASSIGNMENT or self.unit_of(last.node) is not self.module:
                return None  # a loop target, an import, a function's `global` assignment: not followed
            value = values.get(last.node)
            if value is None:
                return None
            found = value if found is None else found.join(value)
        return found

    def parameter_default(self, unit: ast.AST, name: str, index: int) -> Value:
        """A parameter's value when no call site of the file says: ``self``
        is an instance of its class; annotations and framework hooks say
        what the others are; literal defaults are Python values."""
        if isinstance(unit, ast.Lambda):
            return UNKNOWN
        klass = self.class_of_method(unit)
        decorators = {self.qualified(d) or dotted_name(d) for d in unit.decorator_list}
        if klass is not None and index == 0 and "staticmethod" not in decorators:
            if "classmethod" in decorators:
                return Value(Kind.FUNCTION, Tri.NO, Tri.NO, klass=klass.qualname)
            return self.instance_of(klass)
        annotated = self._annotation_value(unit, name)
        if annotated is not None:
            return annotated
        if klass is not None:
            hooked = operations.hook_parameter(klass, unit, name, index)
            if hooked is not None:
                return hooked
        default = default_of(unit, name)
        if default is not None and isinstance(default, ast.Constant):
            from memlint.lint.semantic.interpreter import constant_value

            return constant_value(default)
        if isinstance(default, ast.Call):  # `crit=nn.CrossEntropyLoss()`: a module built once, at definition
            qualified = self.qualified(default.func)
            if qualified and fw.MODULE_NAMESPACE.match(qualified) and qualified not in fw.NOT_MODULES:
                return module(type_name=qualified, output=Kind.TENSOR)
        if default is None:
            klass = self.module_class_by_attributes(unit, name)
            if klass is not None:
                return self.instance_of(klass)
        return UNKNOWN

    def module_class_by_attributes(self, unit: Function, name: str) -> ClassInfo | None:
        """The module class of this file that parameter ``name`` of ``unit``
        is an instance of, told by the attributes the function reads from it:
        two or more distinct ones (``lm.embed``, ``lm.lstm``, ``lm.linear``),
        each a ``self.x`` that the class's methods assign or one of its
        methods (its in-file bases' included), and no other class
        of the file assigns them all. The methods ``nn.Module`` itself
        defines (``lm.to(device)``, ``lm.eval()``: :data:`torch_ops.MODULE_OWN_METHODS`)
        fit a torch module class too, but do not count among the two.
        None when fewer are read, when one is
        read that the class does not have, or when no class or several fit."""
        key = ("instance by attributes", id(unit), name)
        if key in self.index.memo:
            return self.index.memo[key]
        found = None
        if any(info.is_module for info in self.classes.by_node.values()):
            read = self._attributes_read_by_name(unit).get(name, set())
            if len(read) >= 2:
                fits = [info for info in self.classes.by_node.values() if self._has_attributes(info, read)]
                found = fits[0] if len(fits) == 1 and fits[0].is_module else None
        self.index.memo[key] = found
        return found

    def _has_attributes(self, info: ClassInfo, read: set[str]) -> bool:
        """Every attribute of ``read`` is one that instances of ``info`` have,
        and two or more of them are the class's own (not ``nn.Module``'s)."""
        own = self.assigned_attributes(info) | {m for c in info.mro() for m in c.methods}
        if info.is_module and "keras" not in info.roles:
            read = read - (ops.MODULE_OWN_METHODS - own)
        return len(read) >= 2 and read <= own

    def _attributes_read_by_name(self, unit: Function) -> dict[str, set[str]]:
        """``{name: {attr, ...}}`` for each ``name.attr`` in ``unit``'s own body (once per unit)."""
        key = ("attributes read", id(unit))
        found = self.index.memo.get(key)
        if found is None:
            found = self.index.memo[key] = {}
            for node in self.own_nodes(unit, (ast.Attribute,)):
                if isinstance(node.value, ast.Name):
                    found.setdefault(node.value.id, set()).add(node.attr)
        return found

    def instance_of(self, klass: ClassInfo) -> Value:
        if klass.is_module:
            return module("keras" if "keras" in klass.roles else "torch", klass=klass.qualname)
        if "optimizer" in klass.roles:
            return Value(Kind.OPTIMIZER, Tri.NO, Tri.MAYBE, klass=klass.qualname)
        stream = Tri.YES if "dataset" in klass.roles else Tri.NO
        return (obj(klass=klass.qualname, stream=stream)).evolve(graph=Tri.MAYBE)

    def moves_itself(self, klass: ClassInfo) -> bool:
        """The module's constructor (its own or an in-file base's
        ``__init__``) moves the module to the accelerator, in its own body:
        ``self.cuda(rank)``, ``self.cuda()``, ``self.to("cuda")``. Every
        instance is then on the accelerator once built (torch 2.13.0
        ``torch/nn/modules/module.py`` ``Module.cuda``/``to`` move the
        parameters and buffers in place)."""
        memo = self.__dict__.setdefault("_moves_itself_memo", {})
        if klass.qualname in memo:
            return memo[klass.qualname]
        memo[klass.qualname] = False
        found = False
        for info in klass.mro():
            init = info.methods.get("__init__")
            receiver = first_parameter(init) if init is not None else None
            if receiver is None:
                continue
            for call in self.own_nodes(init, (ast.Call,)):
                func = call.func
                if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == receiver):
                    continue
                if func.attr == "cuda" or func.attr == "to" and any(
                        isinstance(a, ast.Constant) and isinstance(a.value, str) and fw.ACCELERATOR_STRINGS.match(a.value)
                        for a in [*call.args, *(k.value for k in call.keywords if k.arg == "device")]):
                    found = True
                    break
            if found:
                break
        memo[klass.qualname] = found
        return found

    def _annotation_value(self, unit: Function, name: str) -> Value | None:
        arguments = unit.args
        for argument in (*positional_parameters(arguments), *arguments.kwonlyargs):
            if argument.arg == name and argument.annotation is not None:
                return operations.annotation_value(self, argument.annotation)
        return None

    def hook_of(self, function: ast.AST) -> fw.Hook | None:
        """The framework hook ``function`` is (a method of a Lightning module,
        an HF callback...), or None."""
        if not isinstance(function, FUNCTION_TYPES):
            return None
        klass = self.class_of_method(function)
        return None if klass is None else klass.hook(function.name)

    def class_attribute(self, klass: ClassInfo, attr: str, interpreter: Interpreter) -> Value:
        """``self.<attr>`` of an instance of ``klass``: the join of what its
        methods (and in-file bases') assign to it; a method name is a method."""
        targets = self._attribute_index(klass).get(attr)
        if not targets:
            if klass.method(attr) is not None:
                return Value(Kind.FUNCTION, Tri.NO, Tri.NO)
            if attr == fw.KERAS_CALLBACK_MODEL_ATTRIBUTE and "keras_callback" in klass.roles:
                return module("keras")  # set by `fit` before the first hook runs
        values = self._assigned_values(targets or (), interpreter)
        if not values:  # never assigned here, or only by the method being interpreted (`self.model = best`)
            values = self._assigned_values(self._subclass_targets(klass, attr), interpreter)
        joined = join_all(values)
        return joined if joined is not None else UNKNOWN

    def _assigned_values(self, targets, interpreter: Interpreter) -> list[Value]:
        """What the assignments ``targets`` (method, target) store, from the
        methods' analyses; not the method being interpreted nor one running."""
        values = []
        for method, target in targets:
            if method is interpreter.unit or method in self._active:
                continue
            analysis = self.canonical(method)
            if target in analysis.values:
                values.append(analysis.values[target])
        return values

    def submodule_name(self, attr: str, interpreter: Interpreter) -> bool:
        """``m.<attr>`` of a module whose class the file does not know (a
        Lightning callback's ``pl_module``, a model passed in) is a submodule
        when the module classes of the file that assign ``self.<attr>`` all
        assign it a module, and at least one does (``self.student =
        student`` called as ``self.student(x)``)."""
        key = ("submodule name", attr)
        found = self.index.memo.get(key)
        if found is None:
            self.index.memo[key] = False  # while deciding: a recursive question gets "no"
            owners = [k for k in self.classes.by_node.values() if k.is_module and attr in self._attribute_index(k)]
            found = bool(owners) and all(self.class_attribute(k, attr, interpreter).kind is Kind.MODULE for k in owners)
            self.index.memo[key] = found
        return found

    def sole_method_owner(self, name: str) -> ClassInfo | None:
        """The one class of the file that defines a method ``name`` (None when
        none or several do): a receiver of unknown kind calling ``x.name(...)``
        is taken for its instance (``agent.act(obs, h)`` with ``class Agent``)."""
        if self._method_owners is None:
            owners: dict[str, list[ClassInfo]] = {}
            for info in self.classes.by_node.values():
                for method in info.methods:
                    owners.setdefault(method, []).append(info)
            self._method_owners = {method: found[0] for method, found in owners.items() if len(found) == 1}
        return self._method_owners.get(name)

    def assigned_attributes(self, klass: ClassInfo) -> frozenset[str]:
        """The ``self.x`` attributes the methods of ``klass`` (and its in-file bases) assign."""
        return frozenset(self._attribute_index(klass))

    def _subclass_targets(self, klass: ClassInfo, attr: str) -> list[tuple[Function, ast.AST]]:
        """The assignments to ``self.<attr>`` in the file's subclasses of
        ``klass``, when ``klass`` and its bases never assign it: a base class
        whose methods use what each subclass sets up (``fit`` reading the
        ``self.model`` that a subclass's ``__init__`` builds) reads one of those."""
        found = []
        for info in self.classes.by_node.values():
            if info is not klass and klass in info.mro():
                found.extend(self._attribute_index(info).get(attr, ()))
        return found

    def _attribute_index(self, klass: ClassInfo) -> dict[str, list[tuple[Function, ast.AST]]]:
        found = self._attribute_targets.get(klass)
        if found is None:
            found = {}
            for info in klass.mro():
                for method in info.methods.values():
                    receiver = first_parameter(method)
                    if receiver is None:
                        continue
                    for target in self._attribute_targets_in(method, receiver):
                        found.setdefault(target.attr, []).append((method, target))
            self._attribute_targets[klass] = found
        return found

    def _attribute_targets_in(self, method: Function, receiver: str) -> list[ast.Attribute]:
        """``receiver.x`` targets of assignments in ``method`` (not in nested functions)."""
        statements = self.index.subtree_of_type(self.index.position_of(method), (ast.Assign, ast.AnnAssign, ast.AugAssign), UNIT_TYPES[:2] + (ast.Lambda, ast.ClassDef))
        found = []
        for node in statements:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for element in _flatten_targets(target):
                    if isinstance(element, ast.Attribute) and isinstance(element.value, ast.Name) and element.value.id == receiver:
                        found.append(element)
        return found

    def persistent_root(self, target: ast.expr, unit: ast.AST) -> str | None:
        """The root of a write target that outlives a call of ``unit``:
        ``self.x`` for ``self.x[...]``/``self.x.y`` (``self`` the method's first
        parameter), a global or ``nonlocal`` name, a free variable; None for a local."""
        node = target
        while isinstance(node, (ast.Subscript, ast.Attribute)):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                break
            node = node.value
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            receiver = first_parameter(unit) if isinstance(unit, FUNCTION_TYPES) else None
            if receiver is not None and node.value.id == receiver and self.class_of_method(unit) is not None:
                return f"self.{node.attr}"
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        scope = self.scopes.scope_for(node)
        found = self.scopes.binding_scope(node.id, scope)
        if isinstance(unit, ast.Module):
            return node.id if found is self.scopes.module_scope and isinstance(target, (ast.Subscript, ast.Attribute)) else None
        if found is None or found is scope:
            if node.id in scope.global_names or node.id in scope.nonlocal_names:
                return node.id
            return None
        return node.id

    # -- syntactic evidence per unit ------------------------------------------------------
    def backward_evidence(self, unit: ast.AST) -> frozenset[str]:
        """Names (dotted) whose value is differentiated by a backward pass in
        ``unit``, or returned to a framework that backpropagates it (a
        Lightning ``training_step``, a ``Trainer.compute_loss``)."""
        key = ("backward", unit)
        found = self._evidence_memo.get(key)
        if found is None:
            found = self._evidence_memo[key] = frozenset(
                name for expr in self._differentiated(unit) if (name := dotted_name(expr)) is not None)
        hook = self.hook_of(unit)
        if hook is not None and hook.returns_loss:
            found = found | self._returned_losses(unit)
        return found

    def summed_backward_evidence(self, unit: ast.AST) -> frozenset[str]:
        """Names (dotted) added as terms into an expression a backward pass
        of ``unit`` differentiates (:func:`operations.summed_into_backward_names`)."""
        key = ("summed backward", unit)
        found = self._evidence_memo.get(key)
        if found is None:
            found = self._evidence_memo[key] = frozenset(operations.summed_terms(self._differentiated(unit)))
        return found

    def differentiated_in(self, unit: ast.AST) -> list[ast.expr]:
        """The expressions ``unit``'s backward calls differentiate (syntactic)."""
        return self._differentiated(unit)

    def _differentiated(self, unit: ast.AST) -> list[ast.expr]:
        """The expressions ``unit``'s backward calls differentiate (once per unit)."""
        key = ("differentiated", unit)
        found = self._evidence_memo.get(key)
        if found is None:
            found = self._evidence_memo[key] = operations.differentiated_expressions(self, self._calls_of_unit(unit))
        return found

    def _returned_losses(self, unit: ast.AST) -> frozenset[str]:
        names = set()
        for statement in self.own_nodes(unit, (ast.Return,)):
            value = statement.value
            if isinstance(value, ast.Dict):
                value = next((v for k, v in zip(value.keys, value.values) if isinstance(k, ast.Constant) and k.value == "loss"), None)
            elif isinstance(value, ast.Tuple) and value.elts:
                value = value.elts[0]  # compute_loss(..., return_outputs=True) returns (loss, outputs)
            name = dotted_name(value) if value is not None else None
            if name is not None:
                names.add(name)
        return frozenset(names)

    def module_evidence(self, unit: ast.AST) -> frozenset[str]:
        """Names (dotted) that ``unit`` calls a module-only method on (``.parameters()``,
        ``.eval()``, ``.state_dict()``...)."""
        return self._evidence("module", unit, operations.module_evidence_names)

    def parameterless_class(self, klass: ClassInfo, depth: int = 0) -> bool:
        """``klass`` is a torch module class of this file that creates no
        parameter: it derives from ``nn.Module`` itself (or from such classes
        of the file), and no method builds an ``nn.Parameter``, registers a
        parameter or submodule, or sets ``self.x`` to a module with
        parameters or to a value handed in (which may be one). Tensors
        (``torch.ones(...)``), numbers and parameterless modules (a
        ``torch.nn`` loss) are fine (a focal loss with a constant ``alpha``)."""
        key = ("parameterless", klass.node)
        found = self._evidence_memo.get(key)
        if found is None:
            self._evidence_memo[key] = False  # a cycle of bases is not parameterless
            found = self._evidence_memo[key] = self._parameterless_class(klass, depth)
        return found

    def _parameterless_class(self, klass: ClassInfo, depth: int) -> bool:
        if depth > 3 or not klass.is_module or "torch" not in klass.roles:
            return False
        if any(base not in fw.PLAIN_MODULE_BASES for base in klass.library_bases):
            return False
        if not all(self.parameterless_class(base, depth + 1) for base in klass.local_bases):
            return False
        used = _attributes_used_as_objects(klass)
        for method in klass.methods.values():
            receiver = first_parameter(method)
            parameters = parameter_names(method)
            for node in ast.walk(method):
                if isinstance(node, ast.Call):
                    qualified = self.qualified(node.func)
                    if qualified in fw.PARAMETER_CONSTRUCTORS:
                        return False
                    if isinstance(node.func, ast.Attribute) and node.func.attr in fw.PARAMETER_REGISTERING_METHODS:
                        return False
                elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    stored = [t.attr for t in targets if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == receiver]
                    handed_in = isinstance(node.value, ast.Name) and node.value.id in parameters
                    if stored and handed_in and not used.intersection(stored):
                        continue  # an argument kept for arithmetic (`self.gamma = gamma`), never called
                    if stored and not self._holds_no_parameters(node.value, parameters, depth):
                        return False
        return True

    def _holds_no_parameters(self, expr: ast.expr, parameters: set[str], depth: int) -> bool:
        """What ``self.x = expr`` stores in a module has no parameters: a
        constant, arithmetic, a tensor factory, a parameterless module."""
        if isinstance(expr, ast.Constant):
            return True
        if isinstance(expr, ast.Name):
            return expr.id not in parameters  # a module handed in may have parameters
        if isinstance(expr, (ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.IfExp, ast.Tuple, ast.List)):
            return all(self._holds_no_parameters(child, parameters, depth) for child in ast.iter_child_nodes(expr)
                       if isinstance(child, ast.expr))
        if isinstance(expr, ast.Call):
            qualified = self.qualified(expr.func)
            if qualified in fw.PARAMETERLESS_MODULES:
                return True
            if isinstance(expr.func, ast.Name):
                local = operations._local_target(self, expr.func)
                if isinstance(local, ast.ClassDef):
                    info = self.classes.of(local)
                    return info is not None and (not info.is_module or self.parameterless_class(info, depth + 1))
            value = self.value(expr)
            return value.kind in (Kind.TENSOR, Kind.PLAIN) and not value.leaf
        return isinstance(expr, ast.Attribute) and self.value(expr).kind in (Kind.TENSOR, Kind.PLAIN)

    def module_apart_from_mode(self, receiver: ast.expr) -> bool:
        """``receiver`` (of a ``.eval()``/``.train()``) is a module known by
        more than that switch: by construction (``nn.Linear(...)``, a module
        class of the file, ``from_pretrained``), a submodule of a module, an
        attribute of an instance of the file's classes, or by another use
        in its unit: called (``model(x)``), or a module-only method
        (``.parameters()``, ``.state_dict()``) -- not an object whose only
        module-like use is ``.eval()``/``.train()`` (an environment wrapper, an
        agent class of another file)."""
        if self.value(receiver).kind is not Kind.MODULE:
            return False
        unit = self.unit_of(receiver)
        dotted = self.scopes.dotted.of(receiver) if isinstance(receiver, (ast.Name, ast.Attribute)) else None
        if dotted is None or dotted not in self.module_evidence(unit):
            return True  # a module whatever the switch says
        if dotted in self._evidence("module apart from mode", unit,
                                    lambda model, calls: operations.module_evidence_names(model, calls, mode_switches=False)):
            return True
        if any(isinstance(call.func, (ast.Name, ast.Attribute)) and self.scopes.dotted.of(call.func) == dotted
               for call in self._calls_of_unit(unit)):
            return True  # called: a forward pass
        if isinstance(receiver, ast.Attribute):
            base = self.value(receiver.value)
            return base.kind is Kind.MODULE or base.klass is not None
        assignment = self.assignment_before(receiver)
        if assignment is None:
            if isinstance(unit, FUNCTION_TYPES):  # a parameter: what the file's callers pass
                given = self.context_of(unit).param(receiver.id)
                return given is not None and given.kind is Kind.MODULE
            return False
        built = self.value(assignment.value)
        target = assignment.targets[0]
        if isinstance(target, (ast.Tuple, ast.List)) and built.items is not None:
            at = next((i for i, elt in enumerate(target.elts) if isinstance(elt, ast.Name) and elt.id == receiver.id), None)
            built = built.items[at] if at is not None and at < len(built.items) else UNKNOWN
        return built.kind is Kind.MODULE

    def keras_model_evidence(self, unit: ast.AST) -> frozenset[str]:
        """Names (dotted) that ``unit``, in a file importing Keras, both calls
        (``model(x)``) and reads a Keras layer attribute of
        (:data:`~.frameworks.KERAS_MODEL_ATTRIBUTES`, ``model.trainable_variables``):
        a Keras model of a class defined elsewhere."""
        key = ("keras model", unit)
        found = self._evidence_memo.get(key)
        if found is None:
            found = frozenset()
            if self.library_roots & fw.KERAS_ROOTS:
                position = self.index.position_of(unit) if unit is not self.module else None
                attributes = ([a for a in self.index.of_type(ast.Attribute) if self.unit_of(a) is self.module] if unit is self.module
                              else self.index.subtree_of_type(position, (ast.Attribute,), UNIT_TYPES) if position is not None else [])
                read = {dotted_name(a.value) for a in attributes if a.attr in fw.KERAS_MODEL_ATTRIBUTES}
                if read - {None}:
                    called = {dotted_name(c.func) for c in self._calls_of_unit(unit)}
                    found = frozenset((read & called) - {None})
            self._evidence_memo[key] = found
        return found

    def optimizer_usage(self, unit: ast.AST) -> "OptimizerUsage":
        """Cheap, syntactic: which names ``unit`` steps (``x.step()``) and
        which it uses as optimizers (``x.zero_grad()``, ``x.param_groups``)."""
        key = ("optimizer usage", unit)
        found = self._evidence_memo.get(key)
        if found is None:
            stepped, used = set(), set()
            for call in self._calls_of_unit(unit):
                func = call.func
                if isinstance(func, ast.Attribute) and func.attr in ("step", "zero_grad"):
                    name = dotted_name(func.value)
                    if name is not None:
                        (stepped if func.attr == "step" else used).add(name)
            position = self.index.position_of(unit)
            for node in self.index.subtree_of_type(position, (ast.Attribute,), _NESTED_UNITS) if position is not None else []:
                if node.attr == "param_groups" and dotted_name(node.value) is not None:
                    used.add(dotted_name(node.value))
            after = self._stepped_after_backward(unit) if len(stepped) > 1 else frozenset()
            found = self._evidence_memo[key] = OptimizerUsage(frozenset(stepped), frozenset(used), after)
        return found

    def _stepped_after_backward(self, unit: ast.AST) -> frozenset[str]:
        """Receivers (dotted) of the first ``x.step()`` that follows a
        ``.backward()``/``manual_backward()`` call of ``unit`` in the same
        block (the backward's statement or a later one of its statement
        list, at any depth there). PyTorch requires ``optimizer.step()``
        before ``lr_scheduler.step()`` in each iteration (torch 2.13.0
        ``torch/optim/lr_scheduler.py`` warns "Detected call of
        `lr_scheduler.step()` before `optimizer.step()`"), so the step that
        first follows the gradients is the optimizer's."""
        found, pending = set(), []  # pending: blocks of the backward calls not yet followed by a step
        for call in self._calls_of_unit(unit):
            method = call.func.attr if isinstance(call.func, ast.Attribute) else None
            if method in ("backward", "manual_backward"):
                statement = next((a for a in self.ancestors(call) if isinstance(a, ast.stmt)), None)
                if statement is not None:
                    pending.append(self.parents.get(statement))
            elif method == "step" and pending and len(call.args) <= 1 and not call.keywords:
                name = dotted_name(call.func.value)
                ancestors = set(map(id, self.ancestors(call)))
                if name is not None and any(id(block) in ancestors for block in pending):
                    found.add(name)
                pending = []
        return frozenset(found)

    def runs_backward(self, unit: ast.AST) -> bool:
        """Cheap, syntactic: ``unit`` has a backward call of its own."""
        key = ("runs backward", unit)
        found = self._evidence_memo.get(key)
        if found is None:
            found = self._evidence_memo[key] = bool(self._differentiated(unit))
        return found

    def with_module_evidence(self, unit: ast.AST, name: str, value: Value) -> Value:
        """``value`` of ``name`` in ``unit``, a module when the unit (or, for
        ``self.x``, any method of the class) uses it as one."""
        if not operations.could_be_module(value):
            return value
        if name in self.keras_model_evidence(unit):
            return module("keras", type_name=value.type_name, device=value.device)
        if name in self.module_evidence(unit):
            return operations.as_module(value)
        if name.startswith("self.") and isinstance(unit, FUNCTION_TYPES):
            klass = self.class_of_method(unit)
            if klass is not None and name in self.class_module_evidence(klass):
                return operations.as_module(value)
        return value

    def class_module_evidence(self, klass: ClassInfo) -> frozenset[str]:
        """``self.x`` attributes that some method of ``klass`` uses as a module."""
        key = ("class", klass.node)
        found = self._evidence_memo.get(key)
        if found is None:
            names: set[str] = set()
            for info in klass.mro():
                for method in info.methods.values():
                    receiver = first_parameter(method)
                    for name in self.module_evidence(method):
                        head, _, rest = name.partition(".")
                        if receiver is not None and head == receiver and rest and "." not in rest:
                            names.add(f"self.{rest}")
            if klass.is_module:
                names |= self._given_and_called(klass)
            found = self._evidence_memo[key] = frozenset(names)
        return found

    def _given_and_called(self, klass: ClassInfo) -> set[str]:
        """``self.x`` of a module class that ``__init__`` sets from one of its
        parameters (``self.eps_model = eps_model``) and a method calls: a
        submodule handed in, the way modules compose."""
        init = klass.method("__init__")
        if init is None:
            return set()
        parameters = parameter_names(init)
        given = {target.attr for target, value in self._self_assignments(init)
                 if isinstance(value, ast.Name) and value.id in parameters}
        called = set()
        for method in klass.methods.values():
            receiver = first_parameter(method)
            for call in self.own_nodes(method, (ast.Call,)):
                func = call.func
                if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == receiver
                        and func.attr in given and (call.args or call.keywords)):
                    called.add(f"self.{func.attr}")
        return called

    def _self_assignments(self, method: Function) -> list[tuple[ast.Attribute, ast.expr]]:
        receiver = first_parameter(method)
        found = []
        for node in self.own_nodes(method, (ast.Assign,)):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == receiver:
                    found.append((target, node.value))
        return found

    def _evidence(self, kind: str, unit: ast.AST, collect) -> frozenset[str]:
        key = (kind, unit)
        found = self._evidence_memo.get(key)
        if found is None:
            found = self._evidence_memo[key] = frozenset(collect(self, self._calls_of_unit(unit)))
        return found

    def _calls_of_unit(self, unit: ast.AST) -> list[ast.Call]:
        if unit is self.module:
            return [call for call in self.index.of_type(ast.Call) if self.unit_of(call) is self.module]
        found = self.index.subtree_of_type(self.index.position_of(unit), (ast.Call,), UNIT_TYPES)
        return found

    # ==================================================================================
    # queries for rules
    # ==================================================================================
    def analysis_of(self, node: ast.AST) -> Analysis:
        return self.canonical(self.unit_of(node))

    def value(self, expr: ast.AST) -> Value:
        """What is known about ``expr`` where it is evaluated."""
        return self.analysis_of(expr).values.get(expr, UNKNOWN)

    def grad_mode(self, node: ast.AST) -> Tri:
        """Whether autograd records at ``node``: YES, NO (``no_grad``, a
        grad-disabled caller or framework hook), or MAYBE."""
        analysis = self.analysis_of(node)
        current = node
        while current is not None:
            found = analysis.grad_at.get(current)
            if found is not None:
                return found
            current = self.parents.get(current)
        return analysis.context.grad

    def grad_disabled(self, node: ast.AST) -> bool:
        return self.grad_mode(node) is Tri.NO

    def is_forward_call(self, call: ast.Call) -> bool:
        """``call`` runs a module's forward pass (a torch module)."""
        return call in self.analysis_of(call).forward_calls

    def forward_calls(self, unit: ast.AST) -> list[ast.Call]:
        return list(self.canonical(unit).forward_calls)

    def may_run_forward(self, unit: ast.AST) -> bool:
        """Cheap test before :meth:`forward_calls`: ``unit``'s own body calls
        something other than builtins and :data:`fw.NON_MODEL_NAMESPACES`."""
        for call in self.own_nodes(unit, (ast.Call,)):
            qualified = self.qualified(call.func)
            if qualified is None:
                return True
            head = qualified.partition(".")[0]
            if head not in fw.NON_MODEL_NAMESPACES and not (head == qualified and head in _BUILTIN_NAMES):
                return True
        return False

    def callee(self, call: ast.Call) -> ast.AST | None:
        """The in-file function ``call`` runs, or None."""
        site = self.analysis_of(call).call_sites.get(call)
        return None if site is None else site.callee

    def call_effects(self, call: ast.Call):
        """The effects on persistent state of the in-file function ``call`` runs."""
        return self.analysis_of(call).call_effects.get(call, ())

    def returns(self, function: ast.AST) -> Value:
        found = self.canonical(function).returns
        return found if found is not None else UNKNOWN

    def is_backward_call(self, call: ast.Call) -> bool:
        return call in self.analysis_of(call).backward_calls

    def backward_calls(self, unit: ast.AST) -> dict[ast.Call, Value]:
        return self.canonical(unit).backward_calls

    def differentiated(self, call: ast.Call) -> ast.expr | None:
        """The expression a backward call differentiates, or None when ``call`` is none."""
        found = operations.differentiated_expressions(self, [call])
        return found[0] if found else None

    def is_optimizer_step(self, call: ast.Call) -> bool:
        return call in self.analysis_of(call).optimizer_steps

    def backpropagated(self, name: str, unit: ast.AST) -> bool:
        """``name``'s value flows (through differentiable operations) into a
        backward pass run by ``unit`` or by a function it calls."""
        return name in self.canonical(unit).backpropagated

    def trains(self, node: ast.AST | list[ast.stmt]) -> bool:
        """``node`` (a statement, a loop, a body) runs a backward pass or an
        optimizer step, itself or through a function of the file it calls."""
        statements = node if isinstance(node, list) else [node]
        for statement in statements:
            analysis = self.analysis_of(statement)
            for call in self._calls_within(statement):
                if call in analysis.backward_calls or call in analysis.optimizer_steps:
                    return True
                site = analysis.call_sites.get(call)
                if site is not None and self._callee_trains(site):
                    return True
        return False

    def _callee_trains(self, site: CallSite) -> bool:
        summary = self._analyses.get((site.callee, Context(site.bound, site.grad), 1))  # made for a canonical analysis's call
        if summary is not None:
            return summary.trains
        return self.canonical(site.callee).trains

    def _calls_within(self, node: ast.AST) -> list[ast.Call]:
        position = self.index.position_of(node)
        if position is None:
            return []
        return self.index.subtree_of_type(position, (ast.Call,), UNIT_TYPES)

    # -- repetition and lifetimes -----------------------------------------------------------
    def run_loops(self, node: ast.AST) -> list[ast.AST]:
        """The loops around ``node`` (in its unit) whose iterations grow with
        the run, innermost first: a ``while``, a loop over a stream of batches,
        a loop that trains, a loop whose element is moved to the accelerator
        or fed to a forward pass, or that pulls ``next()`` from a stream. Loops
        inside a module's methods (a forward pass's loop over time steps or
        layers) never are."""
        function = self.function_of(node)
        if function is not None and self._module_internal(function):
            return []
        return [loop for loop in self.enclosing_loops(node) if self.is_run_loop(loop)]

    def is_module_method(self, function: ast.AST) -> bool:
        """``function`` is a method of a module class that no framework drives
        as a hook: ``forward`` and what it calls, run within one forward pass."""
        return isinstance(function, FUNCTION_TYPES) and self._module_internal(function)

    def _module_internal(self, function: Function) -> bool:
        klass = self.class_of_method(function)
        if klass is None or not klass.is_module:
            return False
        return self.hook_of(function) is None

    def forward_pass_methods(self, klass: ClassInfo) -> frozenset[Function]:
        """The methods of the module class ``klass`` that run within its
        forward pass: ``forward`` (as ``self.forward`` resolves it through
        the file's bases) and the methods it calls on ``self``
        (``self._attend(x)``), transitively. Empty for a class that is no
        module. Hooks a framework drives (``training_step``) are not forward
        passes."""
        memo = self.__dict__.setdefault("_forward_methods", {})
        found = memo.get(klass)
        if found is not None:
            return found
        methods: list[Function] = []
        start = klass.method("forward") if klass.is_module else None
        pending = [start] if start is not None else []
        while pending:
            method = pending.pop()
            if method in methods or self.hook_of(method) is not None:
                continue
            methods.append(method)
            receiver = first_parameter(method)
            for call in self._calls_of_unit(method):
                func = call.func
                if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == receiver:
                    callee = klass.method(func.attr)
                    if callee is not None and callee.name != "__init__":
                        pending.append(callee)
        found = memo[klass] = frozenset(methods)
        return found

    def in_forward_pass(self, function: ast.AST) -> ClassInfo | None:
        """The module class whose forward pass runs ``function`` (see
        :meth:`forward_pass_methods`), or None. A method of an in-file base
        class counts when a subclass's forward calls it."""
        owner = self.class_of_method(function)
        if owner is None or not owner.is_module:
            return None
        runs = self.__dict__.get("_forward_pass_owner")
        if runs is None:
            runs = {}
            for klass in self.classes.by_node.values():
                if klass.is_module:
                    for method in self.forward_pass_methods(klass):
                        runs.setdefault(method, klass)
            self._forward_pass_owner = runs
        return runs.get(function)

    def input_derived(self, function: Function) -> frozenset[str]:
        """The names of ``function`` that hold what its callers give it: its
        parameters other than the receiver of a method, and the locals assigned
        from an expression that mentions one of them (``h = result.hidden[-1]``),
        to a fixed point over its own assignments. A value whose
        :attr:`~.values.Value.sources` meet these depends on the call's inputs;
        one computed from ``self.`` state alone (weights derived from
        parameters) does not."""
        memo = self.__dict__.setdefault("_input_derived", {})
        found = memo.get(function)
        if found is not None:
            return found
        arguments = function.args
        positional = positional_parameters(arguments)
        if self.class_of_method(function) is not None and not is_static_method(function):
            positional = positional[1:]
        names = {a.arg for a in (*positional, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg) if a is not None}
        assignments = []
        for node in self.own_nodes(function, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For)):
            if isinstance(node, ast.For):
                targets, value = [node.target], node.iter
            elif isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            else:
                targets, value = [node.target], node.value
            if value is None:
                continue
            bound = {name for target in targets for name in targets_of(target) if "." not in name}
            used = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
            if isinstance(node, ast.AugAssign):
                used |= bound
            assignments.append((bound, used))
        changed = True
        while changed:
            changed = False
            for bound, used in assignments:
                if used & names and not bound <= names:
                    names |= bound
                    changed = True
        found = memo[function] = frozenset(names)
        return found

    def callable_definition(self, expr: ast.expr, depth: int = 0) -> tuple[ast.AST, int] | None:
        """The function of this file that the callable ``expr`` denotes, and
        how many of its leading parameters are already bound, or None: a name
        bound to a ``def`` (0), a lambda (0), ``self.method`` in a method of
        the class (1: the receiver), ``functools.partial(f, a, b)`` (f's,
        plus 2), and a call of a function of the file that returns a
        ``def`` or lambda it defines (``register_forward_hook(save(name))``:
        the inner function, 0)."""
        if depth > 2:
            return None
        if isinstance(expr, ast.Lambda):
            return expr, 0
        if isinstance(expr, ast.Name):
            target = operations._local_target(self, expr)
            if isinstance(target, FUNCTION_TYPES):
                return target, 0
            return self._bound_from_factory(expr, depth) or self._unpacked_from_factory(expr, depth)
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            unit = self.function_of(expr)
            klass = self.class_of_method(unit) if unit is not None else None
            if klass is not None and expr.value.id == first_parameter(unit):
                method = klass.method(expr.attr)
                if method is not None:  # a static method is the plain function: nothing bound
                    return method, 0 if is_static_method(method) else 1
            return None
        if isinstance(expr, ast.Call):
            if self.qualified(expr.func) == "functools.partial" and expr.args and not any(isinstance(a, ast.Starred) for a in expr.args):
                inner = self.callable_definition(expr.args[0], depth + 1)
                return None if inner is None else (inner[0], inner[1] + len(expr.args) - 1)
            factory = self.callable_definition(expr.func, depth + 1)
            if factory is None or not isinstance(factory[0], FUNCTION_TYPES):
                return None
            returned = [r.value for r in self.own_nodes(factory[0], (ast.Return,)) if r.value is not None]
            if len(returned) == 1:
                value = returned[0]
                if isinstance(value, ast.Lambda):
                    return value, 0
                if isinstance(value, ast.Name):
                    nested = [n for n in factory[0].body if isinstance(n, FUNCTION_TYPES) and n.name == value.id]
                    if len(nested) == 1:
                        return nested[0], 0
        return None

    def range_count(self, iterable: ast.expr) -> int | None:
        """How many times a loop over ``iterable`` runs when the file fixes
        it: ``range(n)``/``range(a, b)`` whose bounds fold to int constants
        (:attr:`constants`); None for anything else."""
        if not (isinstance(iterable, ast.Call) and self.qualified(iterable.func) in ("range", "builtins.range")
                and 1 <= len(iterable.args) <= 2 and not iterable.keywords):
            return None
        bounds = [self.constants.value(argument) for argument in iterable.args]
        if not all(type(bound) is int for bound in bounds):
            return None
        return bounds[0] if len(bounds) == 1 else max(0, bounds[1] - bounds[0])

    def keyword_partial(self, func: ast.expr) -> ast.Call | None:
        """The ``functools.partial(f, k=v, ...)`` call that the called name
        ``func`` is bound to, once, by a plain assignment (``load =
        partial(torch.load, weights_only=True)``), when that call binds
        keywords only, so the name takes ``f``'s positional parameters
        unchanged; None otherwise. A call of the name is a call of ``f``
        with those keywords added (CPython 3.11 ``functools.partial``)."""
        made = self._call_bound_once(func) if isinstance(func, ast.Name) else None
        if made is None or self.qualified(made.func) != "functools.partial" or len(made.args) != 1:
            return None
        return made

    def _call_bound_once(self, name: ast.Name) -> ast.Call | None:
        """The call whose result ``name`` is bound to, when one plain
        assignment (``name = f(...)``) is its only binding in its scope."""
        bindings = self.scopes.bindings_of(name.id, self.scopes.scope_for(name))
        if len(bindings) != 1 or bindings[0].kind is not BindingKind.ASSIGNMENT:
            return None
        statement = self.parents.get(bindings[0].node)
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                and statement.targets[0] is bindings[0].node and isinstance(statement.value, ast.Call)):
            return None
        return statement.value

    def _bound_from_factory(self, name: ast.Name, depth: int) -> tuple[ast.AST, int] | None:
        """A name bound once, by a plain assignment, to a callable made by a
        call: ``step = make_step(model, opt)`` where ``make_step`` returns a
        ``def`` of its body, or ``hook = functools.partial(save, name)``:
        what :meth:`callable_definition` says of that call."""
        made = self._call_bound_once(name)
        return None if made is None else self.callable_definition(made, depth + 1)

    def _unpacked_from_factory(self, name: ast.Name, depth: int) -> tuple[ast.AST, int] | None:
        """A name bound once by unpacking what a function of the file returns,
        ``a, hook = attach(model)`` where ``attach`` returns ``bank, hook`` and
        ``hook`` is a ``def`` of its body: that inner function."""
        bindings = self.scopes.bindings_of(name.id, self.scopes.scope_for(name))
        if len(bindings) != 1 or bindings[0].kind is not BindingKind.ASSIGNMENT:
            return None
        statement = self.parents.get(self.parents.get(bindings[0].node))
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Tuple) and isinstance(statement.value, ast.Call)):
            return None
        targets = statement.targets[0].elts
        position = next((i for i, t in enumerate(targets) if t is bindings[0].node), None)
        factory = self.callable_definition(statement.value.func, depth + 1)
        if position is None or factory is None or not isinstance(factory[0], FUNCTION_TYPES):
            return None
        returned = [r.value for r in self.own_nodes(factory[0], (ast.Return,)) if r.value is not None]
        if len(returned) != 1 or not isinstance(returned[0], ast.Tuple) or len(returned[0].elts) != len(targets):
            return None
        element = returned[0].elts[position]
        if not isinstance(element, ast.Name):
            return None
        nested = [n for n in factory[0].body if isinstance(n, FUNCTION_TYPES) and n.name == element.id]
        return (nested[0], 0) if len(nested) == 1 else None

    def walks_data(self, loop: ast.AST, counted: bool = True) -> bool:
        """``loop``'s iterations come with the data or the steps of the run:
        a ``for`` over a loader, a dataset or another stream, or over slices
        of the data (``for i in range(0, n, bs): x[i:i + bs]``); a ``while``
        that draws batches with ``next()`` or trains. A ``while`` that
        generates up to a length (``while pos < max_len``) and a ``for`` over
        ``range(steps)`` of sampling make an output of a bounded size.

        With ``counted=False`` a ``for`` over ``range(n)`` (of a count the
        file does not fix) walks the data only when it trains or slices the
        data: a loop that samples ``n`` tokens or ``n`` images makes an
        output of the size asked for."""
        if isinstance(loop, FOR_TYPES):
            walked = self.value(loop.iter)
            if _slices_batches(loop):
                return True
            if not counted and walked.type_name == "range":
                return self.trains(loop.body)
            return walked.stream is not Tri.NO
        if any(isinstance(call.func, ast.Name) and call.func.id == "next" for call in ast.walk(loop) if isinstance(call, ast.Call)):
            return True
        return self.trains(loop.body)

    def walks_file_contents(self, loop: ast.AST) -> bool:
        """``loop`` is a ``for`` over what a file or a directory holds: the
        records a reader of :data:`~.frameworks.DATA_RECORD_READERS` returns
        (``coco = json.load(f)`` ... ``for image in coco["images"]``), an item
        of them, or the entries of :data:`~.frameworks.DIRECTORY_LISTINGS`,
        through ``enumerate``/``zip``/``sorted``/... and ``.items()``/``.values()``/``.keys()``
        and names assigned them in the same scope. Its iterations come with
        the data on disk, as many as it holds, not with the program's own
        structure."""
        return isinstance(loop, FOR_TYPES) and self._read_from_files(loop.iter, 0)

    def reads_a_file_per_item(self, loop: ast.AST) -> bool:
        """``loop`` is a ``for`` over something other than a display or a small
        ``range`` whose own body loads, each iteration, a file named by its
        item with a reader of :data:`~.frameworks.FILE_READERS` (``for
        path in subject["func"]: img = nib.load(path)``): its iterations
        come with the files on disk it is given, one per file."""
        if not isinstance(loop, FOR_TYPES) or operations.literal_iterable(loop.iter):
            return False
        items = set(targets_of(loop.target))
        for call in self._calls_within_loop(loop):
            if call.args and self.qualified(call.func) in fw.FILE_READERS and any(
                    isinstance(node, ast.Name) and node.id in items for node in ast.walk(call.args[0])):
                return True
        return False

    def _read_from_files(self, expr: ast.expr, depth: int) -> bool:
        if depth > 4:
            return False
        if isinstance(expr, ast.Subscript) and not isinstance(expr.slice, ast.Slice):
            return self._read_from_files(expr.value, depth + 1)
        if isinstance(expr, (ast.GeneratorExp, ast.ListComp, ast.SetComp)):  # entries filtered or mapped
            return self._read_from_files(expr.generators[0].iter, depth + 1)
        if isinstance(expr, ast.Name):
            assigned = self.assignment_before(expr, parallel=True)
            source = None if assigned is None else _assigned_part(assigned, expr.id)
            return source is not None and self._read_from_files(source, depth + 1)
        if not isinstance(expr, ast.Call):
            return False
        func = expr.func
        if isinstance(func, ast.Name) and func.id in _ITERATION_WRAPPERS and self.scopes.binding_scope(func.id, self.scopes.scope_for(func)) is None:
            return any(self._read_from_files(a, depth + 1) for a in expr.args)
        if isinstance(func, ast.Attribute) and func.attr in _MAPPING_VIEWS and not expr.args and not expr.keywords:
            return self._read_from_files(func.value, depth + 1)
        if isinstance(func, ast.Attribute) and func.attr in fw.PATH_DIRECTORY_LISTINGS \
                and self.value(func.value).type_name in fw.PATH_TYPES:
            return True
        qualified = self.qualified(func)
        return qualified in fw.DATA_RECORD_READERS or qualified in fw.DIRECTORY_LISTINGS or qualified in fw.ARRAY_FILE_READERS

    def walks_layers(self, loop: ast.AST) -> bool:
        """``loop`` is a ``for`` over a module's layers (``for block in
        self.blocks``, an ``nn.Sequential``/``nn.ModuleList``, or
        ``.children()``/``.modules()``, through ``enumerate``/``zip``/...):
        one pass through stacked layers, the structure of a forward pass,
        not a repetition of steps."""
        if not isinstance(loop, FOR_TYPES):
            return False
        iterable = loop.iter
        while (isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name)
               and iterable.func.id in _ITERATION_WRAPPERS and iterable.args):
            iterable = iterable.args[0]
        if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute) and iterable.func.attr in _LAYER_METHODS:
            return self.value(iterable.func.value).kind is Kind.MODULE
        return self.value(iterable).kind is Kind.MODULE

    def walks_one_forward(self, loop: ast.AST) -> bool:
        """``loop`` passes values through layers, the structure of one forward
        pass: it iterates a module's layers (:meth:`walks_layers`) or calls
        its item, or a module's layer at its counter, on other values
        (:func:`operations.calls_its_item`)."""
        return self.walks_layers(loop) or operations.calls_its_item(self, loop)

    def runs_after(self, first: ast.AST, second: ast.AST, undone=None) -> bool:
        """``second`` can run after ``first`` in their unit along the forward
        flow of control: not in exclusive branches (``if``/``else``, two
        ``except`` handlers, ``match`` cases), ``first`` before ``second`` in
        the statement list that holds both (a loop's back edge does not
        count). With ``undone`` (a predicate on statements), False when a
        statement that ``undone`` accepts runs unconditionally on the way:
        after ``first`` to the end of each block ``first`` leaves, or
        between the two in the common block."""
        chain = [first]
        node = first
        while node in self.parents:
            node = self.parents[node]
            chain.append(node)
        on_first = {id(n): i for i, n in enumerate(chain)}
        below_second = second
        node = second
        while id(node) not in on_first:
            below_second = node
            node = self.parents.get(node)
            if node is None:
                return False
        common = node
        index = on_first[id(common)]
        if index == 0:
            return False  # `second` inside `first`
        below_first = chain[index - 1]
        if below_second is common:
            return False
        first_field, first_at = _field_of(common, below_first)
        second_field, second_at = _field_of(common, below_second)
        if first_field is None or second_field is None:
            if first_field is None and second_field is None:  # two parts of one statement or expression
                return (below_first.lineno, below_first.col_offset) < (below_second.lineno, below_second.col_offset)
            return first_field is None  # a header (test, iterable, subject) runs before its blocks
        if first_field != second_field:
            order = _STATEMENT_FIELD_ORDER.get(type(common).__name__, ())
            if (first_field not in order or second_field not in order or order.index(first_field) >= order.index(second_field)
                    or {first_field, second_field} in _EXCLUSIVE_FIELDS):
                return False  # `if`/`else` branches, `match` cases, or back against the flow
        elif first_at >= second_at or first_field in ("handlers", "cases"):
            return False  # later in the block (a back edge away), or another handler or case
        if undone is None:
            return True
        # every block `first` leaves on its way up to the common one
        for level in range(1, index):
            holder, child = chain[level], chain[level - 1]
            field, at = _field_of(holder, child)
            if field is None or not isinstance(child, ast.stmt):
                continue
            if any(undone(statement) for statement in getattr(holder, field)[at + 1:]) and field not in ("handlers", "cases"):
                return False
        if first_field == second_field and first_field is not None:
            if any(undone(statement) for statement in getattr(common, first_field)[first_at + 1:second_at]):
                return False
        return True

    def feeds_items_forward(self, loop: ast.AST) -> bool:
        """A ``for`` loop whose item feeds a forward pass or is moved to the
        accelerator (:func:`operations.feeds_items_forward`): it walks data,
        also when the model does not know its iterable is a stream."""
        key = ("feeds items forward", loop)
        found = self._evidence_memo.get(key)
        if found is None:
            found = self._evidence_memo[key] = isinstance(loop, FOR_TYPES) and operations.feeds_items_forward(self, loop)
        return found

    def is_run_loop(self, loop: ast.AST) -> bool:
        found = self._run_loop_memo.get(loop)
        if found is None:
            found = self._run_loop_memo[loop] = operations.is_run_loop(self, loop)
        return found

    def is_run_comprehension(self, node: ast.AST) -> bool:
        """A list/set/dict comprehension or generator whose iterations grow with the run."""
        found = self._run_loop_memo.get(node)
        if found is None:
            found = self._run_loop_memo[node] = operations.is_run_comprehension(self, node)
        return found

    def repetition(self, function: ast.AST) -> Repetition | None:
        """Why ``function``'s body runs repeatedly during a run, or None: a
        framework calls it per batch, a driver (``study.optimize``,
        ``optimizer.step(closure)``) calls it, or a call of the file runs it
        from a run loop or from a function that itself repeats."""
        if function in self._repetition:
            return self._repetition[function]
        self._repetition[function] = None  # a cycle of calls adds nothing
        found = self._repetition_of(function)
        self._repetition[function] = found
        return found

    def driven_repetition(self, function: ast.AST) -> Repetition | None:
        """Cheap part of :meth:`repetition`: a framework hook run per batch,
        or a driver that calls ``function`` (``study.optimize(objective)``),
        without following the file's call sites."""
        hook = self.hook_of(function)
        if hook is not None and hook.per_batch:
            return Repetition("hook", True, hook.source)
        if self._driven is None:
            self._driven = operations.driven_functions(self)
        return self._driven.get(function)

    def _repetition_of(self, function: ast.AST) -> Repetition | None:
        found = self.driven_repetition(function)
        if found is not None:
            return found
        for site in self.sites_of(function):
            loops = self.run_loops(site.call)
            caller = self.unit_of(site.call)
            upstream = None if loops else self.repetition(caller)
            if loops or upstream is not None:
                per_batch = bool(loops and self.trains(loops[0].body)) or bool(upstream and upstream.per_batch)
                return Repetition("caller", per_batch, getattr(caller, "name", "<module>"))
        if isinstance(function, FUNCTION_TYPES) and not self.sites_of(function) and self._is_training_step(function):
            return Repetition("step", True, function.name)
        return None

    def _is_training_step(self, function: Function) -> bool:
        """The function takes one training step (a backward pass and an
        optimizer step, with no run loop of its own): whoever calls it, from
        another file, calls it once per batch."""
        if not self.trains(function.body):
            return False
        return not any(self.is_run_loop(loop) for loop in self.own_nodes(function, LOOP_NODE_TYPES))

    def bound_before(self, loop: ast.AST) -> frozenset[str]:
        """Names bound before ``loop`` starts (in its unit)."""
        return self.analysis_of(loop).bound_before.get(loop, frozenset())

    def kept_past_iteration(self, loop: ast.AST, value: ast.expr, names: frozenset[str]) -> bool:
        """In ``loop``, the value ``value`` computes (or a name in ``names`` bound
        to it) is kept past its iteration: handed to ``append``/``extend``/
        ``insert``/``add`` of a container the loop did not create (an attribute,
        a name bound before the loop), or stored under a key of one
        (``copies[k] = v``), also inside a display or a call that may hand
        it back (``Camera(image=image)``, ``client.train(local)``; not a call
        whose value is a number or a tensor, ``float(score(local))``)."""
        outside = self.bound_before(loop)
        for node in ast.walk(loop):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in _KEEPING_METHODS and self._outlives_loop(node.func.value, outside):
                if any(self._holds(argument, value, names) for argument in node.args):
                    return True
            if isinstance(node, ast.Assign) and any(
                    isinstance(target, ast.Subscript) and self._outlives_loop(target.value, outside) for target in node.targets):
                if self._holds(node.value, value, names):
                    return True
        return False

    @staticmethod
    def _outlives_loop(container: ast.expr, outside: frozenset[str]) -> bool:
        """``container`` is an attribute of an object, or a name bound before the loop."""
        root = root_name(container)
        return root is not None and (root.startswith("self.") or root.split(".")[0] in outside)

    def _holds(self, argument: ast.expr, value: ast.expr, names: frozenset[str]) -> bool:
        if argument is value or isinstance(argument, ast.Name) and argument.id in names:
            return True
        if isinstance(argument, (ast.Tuple, ast.List, ast.Set, ast.Starred, ast.Dict)):
            parts = argument.values if isinstance(argument, ast.Dict) else \
                [argument.value] if isinstance(argument, ast.Starred) else argument.elts
            return any(self._holds(part, value, names) for part in parts)
        if isinstance(argument, ast.Call) and self.value(argument).kind not in (Kind.PLAIN, Kind.TENSOR):
            return any(self._holds(part, value, names) for part in (*argument.args, *(k.value for k in argument.keywords)))
        return False

    def carried_loop(self, root: str, node: ast.AST) -> ast.AST | None:
        """The innermost run loop across whose iterations ``root`` (a name or
        ``self.x``) keeps what ``node`` puts into it: ``root`` is bound before
        that loop and not rebound inside it before ``node``; None when it is
        re-created in every iteration."""
        for loop in self.enclosing_loops(node):
            if not self.outside(root, loop):
                return None
            if self.is_run_loop(loop) and not self._within_one_pass(self.function_of(node), loop):
                if self._bounded_by_enclosing_iteration(loop):
                    continue  # the micro-batches of one step: the step's loop decides
                if self._made_per_batch(root, loop):
                    return None  # re-created for every batch: it lives for one batch
                return loop
        return None

    def _within_one_pass(self, function: ast.AST | None, loop: ast.AST) -> bool:
        """``loop`` runs inside one call of a module's own method, so it is
        no run loop of its own: ``function`` is a module method (see
        :meth:`is_module_method`), unless it is outside the forward pass and
        ``loop`` walks data and runs a forward pass on it in its own body (a
        method that predicts over a loader itself, ``def predict(self,
        dataloader): for x in dataloader: out = self(x)``, is a run over the
        data, whatever class it is defined in; a sampling loop that calls the
        module's own methods step by step is not, nor is a loop that calls
        its item, ``for blk in blocks: x = blk(x)``: one pass through the
        layers, as in ``forward_intermediates``)."""
        if function is None or not self._module_internal(function):
            return False
        if self.in_forward_pass(function) is not None or not self.walks_data(loop, counted=False) \
                or operations.calls_its_item(self, loop):
            return True
        return not any(isinstance(node, ast.Call) and self.is_forward_call(node) for node in self._calls_within_loop(loop))

    def _calls_within_loop(self, loop: ast.AST):
        """The calls of ``loop``'s body, not those of a function or loop nested in it."""
        pending = list(loop.body)
        while pending:
            node = pending.pop()
            if isinstance(node, (*FUNCTION_TYPES, ast.Lambda, ast.ClassDef, *FOR_TYPES, ast.While)):
                continue
            if isinstance(node, ast.Call):
                yield node
            pending.extend(ast.iter_child_nodes(node))

    def _made_per_batch(self, root: str, loop: ast.AST) -> bool:
        """``root`` is a local made afresh in the body of a loop around
        ``loop`` that walks a stream of batches (``for x in loader: parts =
        []``), and ``loop`` itself walks no stream (``for crop in
        args.crops: parts.append(...)``): what ``loop`` puts in ``root`` is
        dropped at the next batch, so it holds one batch's worth, however
        long the run."""
        if "." in root or not isinstance(loop, FOR_TYPES) or self.value(loop.iter).stream is Tri.YES:
            return False
        for outer in self.enclosing_loops(loop):
            if not self.outside(root, outer):
                return isinstance(outer, FOR_TYPES) and self.value(outer.iter).stream is Tri.YES
        return False

    def bounded_by_enclosing_iteration(self, loop: ast.AST) -> bool:
        """``loop`` walks what the loop around it makes afresh each iteration
        (the micro-batches of one step): its length does not grow with the run."""
        return self._bounded_by_enclosing_iteration(loop)

    def _bounded_by_enclosing_iteration(self, loop: ast.AST) -> bool:
        """``loop`` walks something the loop around it makes afresh each
        iteration and that is no data stream: the micro-batches of one step
        (``for b in chunks``, ``range(0, len(rollout), mb)`` with ``chunks`` and
        ``rollout`` rebound per step). Its length does not grow with the run."""
        if not isinstance(loop, FOR_TYPES):
            return False
        walked = self.value(loop.iter)
        if walked.type_name != "range" and (walked.stream is not Tri.NO or walked.kind not in (Kind.CONTAINER, Kind.PLAIN)):
            return False  # a loader, or something not known to be a list or a range
        names = {n.id for n in ast.walk(loop.iter) if isinstance(n, ast.Name)} - _ITERATION_BUILTINS
        if not names:
            return False
        outer_loops = self.enclosing_loops(loop)
        return bool(outer_loops) and any(not self.outside(name, outer_loops[0]) for name in names)

    def keeper(self, root: str, node: ast.AST) -> Keeper | None:
        """Why ``root`` (a name or ``self.x``) keeps what ``node`` writes into it
        from one iteration of the run to the next, or None when it does not:
        a local bound outside a run loop around ``node`` (and not re-created
        in it); persistent state (``self.x``, a global, a free variable)
        written in a run loop, or in a function that runs once per batch
        (a framework hook, a function called from a run loop)."""
        loop = self.carried_loop(root, node)
        if loop is not None:
            return Keeper("loop", loop=loop)
        unit = self.unit_of(node)
        persistent = "." in root or (unit is not self.module and self.outlives_call(root, unit))
        if not persistent or not all(self.outside(root, loop) for loop in self.enclosing_loops(node)):
            return None
        function = self.function_of(node)
        if function is not None and not self._module_internal(function) and self.repetition(function) is not None:
            return Keeper("calls", function=function)
        return None

    def effect_root(self, call: ast.Call, effect) -> str | None:
        """The storage of the caller that an effect of ``call``'s callee writes:
        the callee's ``self.x`` is the receiver's (``meter`` for
        ``meter.update(v)``; ``self.x`` again when the caller calls a method
        on its own ``self``); a global or free variable is itself."""
        if not effect.target.startswith("self."):
            return effect.target
        receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
        if receiver is None:
            return None
        unit = self.unit_of(call)
        own = first_parameter(unit) if isinstance(unit, FUNCTION_TYPES) else None
        if isinstance(receiver, ast.Name) and receiver.id == own and self.class_of_method(unit) is not None:
            return effect.target
        from memlint.lint.names import root_name

        holder = self._holder_of_item(receiver)
        if holder is not None:
            return holder  # the object lives in a container: it keeps what its method writes as long as that does
        root = root_name(receiver)
        if root is not None and isinstance(unit, FUNCTION_TYPES) and root in parameter_names(unit):
            # `pool.push(x)` on an object the caller passed in: its attribute outlives this call
            return root + effect.target[len("self"):]
        return root

    def _holder_of_item(self, expr: ast.expr) -> str | None:
        """The container (dotted name) ``expr`` takes an item out of:
        ``meters`` for ``meters.setdefault(k, Meter())``, ``meters.get(k)``,
        ``meters[k]``, or a name last assigned one of these
        (``meter = self.stats.setdefault(k, Meter())``); None otherwise."""
        if isinstance(expr, ast.Name):
            statement = self.assignment_before(expr)
            if statement is None or len(statement.targets) != 1 or not isinstance(statement.targets[0], ast.Name):
                return None
            expr = statement.value
        if isinstance(expr, ast.Subscript):
            holder = expr.value
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in ("setdefault", "get"):
            holder = expr.func.value
        else:
            return None
        return dotted_name(holder) if self.value(holder).kind is Kind.CONTAINER else None

    def result_backpropagated(self, call: ast.Call) -> bool:
        """The value ``call`` returns flows into a backward pass of its unit."""
        parent = self.parents.get(call)
        if isinstance(parent, ast.Attribute) and parent.attr == "backward":
            return True
        analysis = self.analysis_of(call)
        for backward, differentiated in analysis.backward_calls.items():
            if call in ast.walk(backward):
                return True
        if isinstance(parent, (ast.Assign, ast.AnnAssign)):
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            names = {name for target in targets for name in targets_of(target)}
            return bool(names & analysis.backpropagated)
        return False

    def outside(self, root: str, loop: ast.AST) -> bool:
        """``root`` lives outside ``loop``: an attribute, a global or free
        variable, or a local bound before the loop and not rebound by a plain
        assignment in its body (one under a periodic condition,
        ``if step % N == 0: total = 0``, resets it only every N iterations)."""
        if "." in root:
            return True
        unit = self.unit_of(loop)
        scope = self.scopes.own_scope(unit) if unit is not self.module else self.scopes.module_scope
        if scope is not None and root not in scope.bindings:
            return True
        return root in self.bound_before(loop) and root not in operations.rebound_in(loop, every_iteration=True)

    def iterates_items_of_iteration(self, node: ast.AST) -> bool:
        """A comprehension inside a loop that iterates values of the loop's own
        iteration (``conds = [c.to(dtype) for c in conds]`` where ``conds`` is
        bound in the body every iteration, or the loop's target): the items of
        one batch, not a stream of batches; it gathers nothing across
        iterations (an outer store of its result is a store of its own)."""
        loops = self.enclosing_loops(node)
        if not loops or not isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            return False
        analysis = self.analysis_of(node)
        for clause in node.generators:
            root = root_name(clause.iter)
            iterable = analysis.values.get(clause.iter)
            if root is None or "." in root or iterable is None or iterable.stream is Tri.YES \
                    or self.outside(root, loops[0]):
                return False
        return True

    def outlives_call(self, root: str, function: ast.AST) -> bool:
        """``root`` survives the end of a call of ``function``: ``self.x``, a global, a free variable."""
        if "." in root:
            return True
        scope = self.scopes.own_scope(function)
        return scope is not None and (root not in scope.bindings or root in scope.global_names or root in scope.nonlocal_names)


#: Calls whose result holds no graph whatever their arguments (see :meth:`SemanticModel.holds_no_graph`).
_DETACHING_CALLS = frozenset({"item", "tolist", "detach", "numpy", "size", "numel", "dim", "argmax", "argmin", "long", "int", "bool"})
_PLAIN_CALLS = frozenset({"len", "float", "int", "bool", "str", "round", "isinstance"})
_NESTED_UNITS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_STATEMENT_TYPES = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return, ast.If, ast.For, ast.AsyncFor,
                    ast.While, ast.With, ast.AsyncWith, ast.Try, ast.FunctionDef, ast.AsyncFunctionDef)
_BUILTIN_CALLABLES = frozenset({
    "len", "range", "enumerate", "zip", "iter", "next", "sum", "max", "min", "abs", "round", "sorted", "reversed",
    "list", "tuple", "dict", "set", "frozenset", "float", "int", "bool", "str", "print", "isinstance", "getattr",
    "setattr", "hasattr", "super", "map", "filter", "open", "type", "repr", "any", "all", "id", "hash", "vars",
})


def _slices_batches(loop: ast.For | ast.AsyncFor) -> bool:
    """``for i in range(0, n, bs): x[i:i + bs]``: the loop walks data in slices."""
    index = set(targets_of(loop.target))
    for node in descendants(loop):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice) and node.slice.lower is not None:
            if {n.id for n in ast.walk(node.slice.lower) if isinstance(n, ast.Name)} & index:
                return True
    return False


def _is_loop_header(child: ast.AST, loop: ast.AST) -> bool:
    if isinstance(loop, FOR_TYPES):
        return child is loop.target or child is loop.iter
    return child is loop.test


def _except_verdict(node: ast.AST) -> bool | None:
    if isinstance(node, ast.ExceptHandler):
        return True
    if isinstance(node, (*UNIT_TYPES, ast.ClassDef)):
        return False
    return None


def _comprehension_verdict(node: ast.AST):
    if isinstance(node, COMPREHENSION_TYPES):
        return node
    if isinstance(node, (*UNIT_TYPES, ast.ClassDef)):
        return False
    return None


#: Builtins, less those that call what they are given (`map(model, batches)` runs forwards).
_BUILTIN_NAMES = frozenset(dir(builtins)) - {"map", "filter"}


#: Methods that walk a module's or a mapping's fixed contents (torch 2.13.0 nn.Module; dict).
_STRUCTURE_METHODS = frozenset({"parameters", "named_parameters", "buffers", "named_buffers", "children",
                                "named_children", "modules", "named_modules", "items", "keys", "values"})
def _assigned_part(statement: ast.Assign, name: str) -> ast.expr | None:
    """What ``statement`` binds to ``name``: its whole value for ``name = v``,
    the matching element for a parallel ``a, name = x, y``; None otherwise."""
    if len(statement.targets) != 1:
        return None
    target, value = statement.targets[0], statement.value
    if isinstance(target, ast.Name):
        return value if target.id == name else None
    if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
            and len(target.elts) == len(value.elts):
        for part, part_value in zip(target.elts, value.elts):
            if isinstance(part, ast.Name) and part.id == name:
                return part_value
    return None


#: Container methods that keep what they are given.
_KEEPING_METHODS = frozenset({"append", "extend", "insert", "add", "appendleft"})
_ITERATION_WRAPPERS = frozenset({"enumerate", "zip", "sorted", "list", "reversed", "tuple"})
#: ``dict`` methods that iterate its entries.
_MAPPING_VIEWS = frozenset({"items", "keys", "values"})
#: Module methods that iterate its submodules (torch 2.13.0 torch/nn/modules/module.py).
_LAYER_METHODS = frozenset({"children", "modules", "named_children", "named_modules"})
#: Statement fields in the order control flows through them (an ``else`` after a loop or a ``try``).
_STATEMENT_FIELD_ORDER = {
    "For": ("body", "orelse"), "AsyncFor": ("body", "orelse"), "While": ("body", "orelse"),
    "Try": ("body", "handlers", "orelse", "finalbody"), "TryStar": ("body", "handlers", "orelse", "finalbody"),
}
#: Pairs of fields of which one run takes only one: an ``except`` handler or the ``try``'s ``else``.
_EXCLUSIVE_FIELDS = ({"handlers", "orelse"},)


def _attributes_used_as_objects(klass: ClassInfo) -> frozenset[str]:
    """``self.x`` attributes that the class's methods call or call a method
    of (``self.x(...)``, ``self.x.m(...)``), or iterate: what may be a module."""
    found = set()
    for info in klass.mro():
        for method in info.methods.values():
            receiver = first_parameter(method)
            for node in ast.walk(method):
                target = node.func if isinstance(node, ast.Call) else node.iter if isinstance(node, (ast.For, ast.comprehension)) else None
                while isinstance(target, ast.Attribute):
                    if isinstance(target.value, ast.Name) and target.value.id == receiver:
                        found.add(target.attr)
                        break
                    target = target.value
    return frozenset(found)


def _field_of(holder: ast.AST, child: ast.AST) -> tuple[str | None, int]:
    """The statement-list field of ``holder`` that holds ``child`` and its
    index there; (None, -1) for an expression child (a test, an iterable)."""
    for field in ("body", "orelse", "handlers", "finalbody", "cases"):
        items = getattr(holder, field, None)
        if isinstance(items, list):
            for at, item in enumerate(items):
                if item is child:
                    return field, at
    return None, -1



def _fixed_structure(iterable: ast.expr) -> bool:
    if operations.literal_iterable(iterable):
        return True
    if not isinstance(iterable, ast.Call):
        return False
    func = iterable.func
    if isinstance(func, ast.Name) and func.id in _ITERATION_WRAPPERS:
        return bool(iterable.args) and all(_fixed_structure(a) for a in iterable.args)
    return isinstance(func, ast.Attribute) and func.attr in _STRUCTURE_METHODS


def _negated(test: ast.expr) -> ast.expr | None:
    """What ``test`` negates: ``x`` for ``not x``, the comparison for ``a not in b``; else None."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return test.operand
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.NotIn):
        return test
    return None


def _is_super_call(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "super"


def _flatten_targets(target: ast.expr) -> list[ast.expr]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return [leaf for element in target.elts for leaf in _flatten_targets(element)]
    if isinstance(target, ast.Starred):
        return _flatten_targets(target.value)
    return [target]


_ = (WITH_TYPES, container)
