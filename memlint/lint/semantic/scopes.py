"""Scopes and name resolution, as Python itself resolves names.

A name is ``torch`` only where an import binds it in a scope that the
reference sees (a parameter or a local named ``torch`` is not the library);
functions and methods are keyed by their qualified scope (``Trainer.fit``,
``main.<locals>.step``), so two classes' ``forward`` methods are different.

Python's rules, followed here (Python Language Reference, "Naming and
binding", 4.2.2): a name bound anywhere in a function body is local to it
unless declared ``global``/``nonlocal``; class bodies are not enclosing
scopes for the functions inside them; comprehensions have their own scope,
except for their first iterable; decorators, default values, annotations
and base classes are evaluated in the enclosing scope.

Resolution is flow-insensitive within a scope (a name imported in a
``try`` and reassigned in the ``except`` still resolves to the import),
which is what linting needs: the question is what a name *is*, not which
assignment ran last.
"""

from __future__ import annotations

import ast
import builtins
import enum
from dataclasses import dataclass, field

from memlint.lint.names import DottedNames
from memlint.lint.syntax import COMPREHENSION_TYPES, FUNCTION_TYPES

BUILTIN_NAMES = frozenset(dir(builtins))


class ScopeKind(enum.Enum):
    MODULE = "module"
    CLASS = "class"
    FUNCTION = "function"
    LAMBDA = "lambda"
    COMPREHENSION = "comprehension"


class BindingKind(enum.Enum):
    IMPORT = "import"
    ASSIGNMENT = "assignment"
    PARAMETER = "parameter"
    FUNCTION = "function"
    CLASS = "class"
    LOOP = "loop"
    WITH = "with"
    EXCEPT = "except"
    OTHER = "other"


@dataclass(frozen=True)
class Binding:
    """One place that binds ``name`` in a scope.

    ``node`` is the binding node: an ``alias`` for imports, the target
    ``Name`` of an assignment, an ``arg``, a ``FunctionDef``/``ClassDef``.
    ``qualified`` is the imported dotted name (``torch.nn.functional`` for
    ``import torch.nn.functional as F``), else None.
    """

    name: str
    kind: BindingKind
    node: ast.AST
    qualified: str | None = None


@dataclass(eq=False)
class Scope:
    """A module, class, function, lambda or comprehension scope."""

    node: ast.AST
    kind: ScopeKind
    parent: "Scope | None"
    qualname: str
    bindings: dict[str, list[Binding]] = field(default_factory=dict)
    global_names: set[str] = field(default_factory=set)
    nonlocal_names: set[str] = field(default_factory=set)

    def bind(self, binding: Binding) -> None:
        self.bindings.setdefault(binding.name, []).append(binding)

    def enclosing_function(self) -> "Scope | None":
        """The nearest function (or lambda) scope at or above this one."""
        scope: Scope | None = self
        while scope is not None and scope.kind not in (ScopeKind.FUNCTION, ScopeKind.LAMBDA):
            scope = scope.parent
        return scope


def _opens_scope(node: ast.AST) -> ScopeKind | None:
    if isinstance(node, FUNCTION_TYPES):
        return ScopeKind.FUNCTION
    if isinstance(node, ast.Lambda):
        return ScopeKind.LAMBDA
    if isinstance(node, ast.ClassDef):
        return ScopeKind.CLASS
    if isinstance(node, COMPREHENSION_TYPES):
        return ScopeKind.COMPREHENSION
    return None


_SCOPE_OPENERS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, *COMPREHENSION_TYPES)


def _outer_parts(node: ast.AST) -> list[ast.AST]:
    """The children of a scope-opening node that run in the enclosing scope."""
    if isinstance(node, FUNCTION_TYPES):
        arguments = node.args
        defaults = [*arguments.defaults, *[d for d in arguments.kw_defaults if d is not None]]
        annotations = [a.annotation for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                                              *(x for x in (arguments.vararg, arguments.kwarg) if x)) if a.annotation]
        return [*node.decorator_list, *defaults, *annotations, *([node.returns] if node.returns else [])]
    if isinstance(node, ast.Lambda):
        return [*node.args.defaults, *[d for d in node.args.kw_defaults if d is not None]]
    if isinstance(node, ast.ClassDef):
        return [*node.decorator_list, *node.bases, *node.keywords]
    if isinstance(node, COMPREHENSION_TYPES):
        return [node.generators[0].iter]
    return []


class ScopeTree:
    """Every scope of one module, built from its node index: scopes and
    bindings from the nodes of the binding kinds (no walk of the whole tree),
    the scope of any other node found on demand from its ancestors."""

    def __init__(self, module: ast.Module, index) -> None:
        self.module = module
        self._parents: dict[ast.AST, ast.AST] = index.parents
        self.module_scope = Scope(module, ScopeKind.MODULE, None, "")
        #: scope-opening node -> its own scope
        self.scopes: dict[ast.AST, Scope] = {module: self.module_scope}
        self._qualified_memo: dict[ast.AST, str | None] = {}
        #: dotted names of this tree's chains, shared with the interpreter
        self.dotted = DottedNames()
        self._index = index
        self._positions, self._nodes = index.position_table(), index.nodes
        #: the scope each node of the index is evaluated in, by pre-order position
        self._scope_at: list[Scope] = [self.module_scope] * len(index.nodes)
        for node in index.of_type(*_SCOPE_OPENERS):  # outer openers first (pre-order)
            self._fill(node, self._open(node, _opens_scope(node), self.scope_for(node)))
        for node in index.of_type(ast.Global, ast.Nonlocal):  # first: they decide where a store binds
            self._record_binding(node, self.scope_for(node))
        for node in index.of_type(ast.Name):
            if not isinstance(node.ctx, ast.Load):
                self._binding_scope_of_store(node).bind(Binding(node.id, self._store_kind(node), node))
        for node in index.of_type(ast.Import, ast.ImportFrom, ast.ExceptHandler, ast.MatchAs):
            self._record_binding(node, self.scope_for(node))

    # -- construction ----------------------------------------------------------
    def _fill(self, opener: ast.AST, inner: Scope) -> None:
        """Record ``inner`` as the scope of the nodes under ``opener``, but
        for its parts that Python evaluates in the enclosing scope
        (:func:`_outer_parts`: decorators, defaults, annotations, bases and
        class keywords, a comprehension's first iterable); nested openers,
        later in pre-order, overwrite their own parts. Slice assignments: no walk."""
        index, table = self._index, self._scope_at
        ends = index._subtree_ends()
        start = index.position_of(opener)
        if start is None:
            return
        outer = table[start]
        table[start + 1:ends[start]] = [inner] * (ends[start] - start - 1)
        for part in _outer_parts(opener):
            at = index.position_of(part)
            if at is not None:
                table[at:ends[at]] = [outer] * (ends[at] - at)

    def _open(self, node: ast.AST, kind: ScopeKind, scope: Scope) -> Scope:
        name = getattr(node, "name", None) or f"<{kind.value}>"
        if kind in (ScopeKind.FUNCTION, ScopeKind.CLASS):
            scope.bind(Binding(name, BindingKind.FUNCTION if kind is ScopeKind.FUNCTION else BindingKind.CLASS, node))
        prefix = scope.qualname
        if scope.kind in (ScopeKind.FUNCTION, ScopeKind.LAMBDA):
            prefix += ".<locals>"
        inner = Scope(node, kind, scope, f"{prefix}.{name}" if prefix else name)
        self.scopes[node] = inner
        if kind in (ScopeKind.FUNCTION, ScopeKind.LAMBDA):
            arguments = node.args
            for argument in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                             *(x for x in (arguments.vararg, arguments.kwarg) if x)):
                inner.bind(Binding(argument.arg, BindingKind.PARAMETER, argument))
        return inner

    def _binding_scope_of_store(self, name: ast.Name) -> Scope:
        """The scope a store to ``name`` binds in: its own, but for a
        ``global`` name (the module's), a ``nonlocal`` one (the enclosing
        function's that binds it) and an assignment expression in a
        comprehension (the enclosing non-comprehension scope, PEP 572)."""
        scope = self.scope_for(name)
        if isinstance(self._parents.get(name), ast.NamedExpr):
            while scope.kind is ScopeKind.COMPREHENSION and scope.parent is not None:
                scope = scope.parent
        if name.id in scope.global_names:
            return self.module_scope
        if name.id in scope.nonlocal_names:
            outer = scope.parent
            while outer is not None and not (outer.kind in (ScopeKind.FUNCTION, ScopeKind.LAMBDA)
                                             and name.id in outer.bindings and name.id not in outer.nonlocal_names):
                outer = outer.parent
            return outer if outer is not None else scope
        return scope

    def _store_kind(self, name: ast.Name) -> BindingKind:
        child: ast.AST = name
        parent = self._parents.get(child)
        while isinstance(parent, (ast.Tuple, ast.List, ast.Starred)):
            child, parent = parent, self._parents.get(parent)
        if isinstance(parent, (ast.For, ast.AsyncFor, ast.comprehension)) and parent.target is child:
            return BindingKind.LOOP
        if isinstance(parent, ast.withitem) and parent.optional_vars is child:
            return BindingKind.WITH
        return BindingKind.ASSIGNMENT

    def _record_binding(self, node: ast.AST, scope: Scope) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    scope.bind(Binding(alias.asname, BindingKind.IMPORT, alias, alias.name))
                else:
                    head = alias.name.split(".")[0]
                    scope.bind(Binding(head, BindingKind.IMPORT, alias, head))
        elif isinstance(node, ast.ImportFrom):
            module = ("." * node.level) + (node.module or "")
            for alias in node.names:
                if alias.name != "*":
                    separator = "" if module.endswith(".") or not module else "."
                    scope.bind(Binding(alias.asname or alias.name, BindingKind.IMPORT, alias, f"{module}{separator}{alias.name}"))
        elif isinstance(node, ast.Global):
            scope.global_names.update(node.names)
        elif isinstance(node, ast.Nonlocal):
            scope.nonlocal_names.update(node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            scope.bind(Binding(node.name, BindingKind.EXCEPT, node))
        elif isinstance(node, ast.MatchAs) and node.name:
            scope.bind(Binding(node.name, BindingKind.OTHER, node))

    # -- queries -----------------------------------------------------------------
    def scope_for(self, node: ast.AST) -> Scope:
        """The scope ``node`` is evaluated in (the module scope for the module itself)."""
        position = self._positions.get(id(node))  # NodeIndex.position_of inlined: the model's hottest query
        if position is not None and self._nodes[position] is node:
            return self._scope_at[position]
        return self.module_scope  # a node the analyses made (a lambda's body wrapped in a `return`): no scope of its own

    def own_scope(self, node: ast.AST) -> Scope | None:
        """The scope a function/lambda/class/comprehension node opens."""
        return self.scopes.get(node)

    def binding_scope(self, name: str, scope: Scope) -> Scope | None:
        """The scope whose binding of ``name`` a reference in ``scope`` sees;
        None for a builtin or an unbound name."""
        if name in scope.global_names:
            return self.module_scope if name in self.module_scope.bindings else None
        if name in scope.bindings and name not in scope.nonlocal_names:
            return scope
        current = scope.parent
        while current is not None:
            if current.kind is not ScopeKind.CLASS or current is self.module_scope:
                if name in current.bindings and name not in current.nonlocal_names:
                    return current
            current = current.parent
        return None

    def bindings_of(self, name: str, scope: Scope) -> list[Binding]:
        found = self.binding_scope(name, scope)
        return [] if found is None else found.bindings[name]

    def qualified(self, node: ast.AST) -> str | None:
        """The dotted name ``node`` (a Name/Attribute chain) refers to,
        resolved through the imports its scope sees: ``F.relu`` ->
        ``torch.nn.functional.relu``; a builtin or unbound name resolves to
        itself (``len``, or ``torch`` in a snippet that never imports it).
        None when the head is a local, a parameter or any non-import binding,
        or ``node`` is not a dotted name."""
        memo = self._qualified_memo
        if node in memo:
            return memo[node]
        memo[node] = None  # an alias cycle (``a = b`` / ``b = a``) names nothing
        found = memo[node] = self._qualify(node)
        return found

    def _qualify(self, node: ast.AST) -> str | None:
        dotted = self.dotted.of(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        bindings = self.bindings_of(head, self.scope_for(node))  # a chain's head is evaluated in the chain's scope
        if not bindings:
            return dotted
        imported = next((b.qualified for b in bindings if b.kind is BindingKind.IMPORT), None)
        if imported is None:
            imported = self._alias_of(bindings)
        if imported is None:
            return None
        return f"{imported}.{rest}" if rest else imported

    def _alias_of(self, bindings: list[Binding]) -> str | None:
        """What a name bound once, by ``name = <dotted chain>`` whose head is
        an import (``tf1 = tf.compat.v1``, ``ec = torch.cuda.empty_cache``),
        refers to: the same object as the chain, so the chain's qualified
        name. None for any other binding, or a name bound more than once."""
        if len(bindings) != 1 or bindings[0].kind is not BindingKind.ASSIGNMENT:
            return None
        target = bindings[0].node
        statement = self._parents.get(target)
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1 and statement.targets[0] is target
                and isinstance(statement.value, (ast.Name, ast.Attribute))):
            return None
        dotted = self.dotted.of(statement.value)
        if dotted is None or not self.bindings_of(dotted.partition(".")[0], self.scope_for(statement.value)):
            return None  # a builtin or an unbound head is no import
        return self.qualified(statement.value)

    def imports_module(self, prefix: str) -> bool:
        """True when some scope of the file imports ``prefix`` or a submodule of it."""
        for scope in self.scopes.values():
            for bindings in scope.bindings.values():
                for binding in bindings:
                    target = binding.qualified
                    if binding.kind is BindingKind.IMPORT and target and (target == prefix or target.startswith(prefix + ".")):
                        return True
        return False


