"""The classes of one file: what each one is (a module, a dataset, a
framework callback, an optimizer), its methods, and method resolution
through its in-file bases.

A class is a module when one of its bases is a module: a library base of
:data:`~memlint.lint.semantic.frameworks.BASE_ROLES` (``nn.Module``,
``LightningModule``, ``PreTrainedModel``, ``keras.Model``...) or a class
of the same file that is one (``class Block(Base)`` where ``class
Base(nn.Module)``); or when it derives from a library class the tables do
not know and defines ``forward`` (``class Actor(BasePolicy)`` with a
``forward``: ``nn.Module``'s convention). Names never decide: a class
called ``Model`` that derives from ``object`` is not a module.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from memlint.lint.semantic.frameworks import Hook, hook_for, roles_of_base
from memlint.lint.semantic.scopes import BindingKind, ScopeTree
from memlint.lint.syntax import FUNCTION_TYPES

Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(eq=False)
class ClassInfo:
    """One ``class`` statement of the file.

    ``library_bases``: qualified names of bases imported from libraries;
    ``local_bases``: bases defined in this file (resolved by scope);
    ``roles``: "module", "torch"/"keras", "dataset", "lightning_module", ...
    """

    node: ast.ClassDef
    qualname: str
    library_bases: list[str] = field(default_factory=list)
    local_bases: list["ClassInfo"] = field(default_factory=list)
    methods: dict[str, Function] = field(default_factory=dict)
    roles: frozenset[str] = frozenset()

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def is_module(self) -> bool:
        return "module" in self.roles

    def mro(self) -> list["ClassInfo"]:
        """This class and its in-file bases, depth first, each once."""
        order: list[ClassInfo] = []
        pending = [self]
        while pending:
            current = pending.pop(0)
            if current in order:
                continue
            order.append(current)
            pending.extend(current.local_bases)
        return order

    def method(self, name: str) -> Function | None:
        """``name`` as ``self.name`` resolves it among the in-file classes."""
        for klass in self.mro():
            found = klass.methods.get(name)
            if found is not None:
                return found
        return None

    def hook(self, method: str) -> Hook | None:
        """The framework hook that ``method`` of this class is, or None."""
        return hook_for(self.roles, method)


class ClassTable:
    """Every class of a module, by node and by qualified name."""

    def __init__(self, module: ast.Module, scopes: ScopeTree, class_nodes: list[ast.ClassDef]) -> None:
        self.scopes = scopes
        self.by_node: dict[ast.ClassDef, ClassInfo] = {}
        self.by_qualname: dict[str, ClassInfo] = {}
        for node in class_nodes:
            own = scopes.own_scope(node)
            info = ClassInfo(node, own.qualname if own else node.name)
            info.methods = {item.name: item for item in node.body if isinstance(item, FUNCTION_TYPES)}
            self.by_node[node] = info
            self.by_qualname[info.qualname] = info
        for info in self.by_node.values():
            self._resolve_bases(info)
        for info in self.by_node.values():
            info.roles = self._roles(info, set())
        for info in self.by_node.values():
            if not info.roles and self._subclasses_unknown_module(info):
                info.roles = frozenset({"module", "torch"})

    def _resolve_bases(self, info: ClassInfo) -> None:
        scope = self.scopes.scope_for(info.node)
        for base in info.node.bases:
            local = None
            if isinstance(base, ast.Name):
                for binding in self.scopes.bindings_of(base.id, scope):
                    if binding.kind is BindingKind.CLASS and binding.node in self.by_node:
                        local = self.by_node[binding.node]
            if local is not None:
                info.local_bases.append(local)
                continue
            qualified = self.scopes.qualified(base)
            if qualified is not None:
                info.library_bases.append(qualified)

    def _roles(self, info: ClassInfo, visiting: set[int]) -> frozenset[str]:
        if id(info) in visiting:
            return frozenset()
        visiting.add(id(info))
        roles: set[str] = set()
        for qualified in info.library_bases:
            roles |= roles_of_base(qualified)
        for base in info.local_bases:
            roles |= base.roles or self._roles(base, visiting)
        return frozenset(roles)

    @staticmethod
    def _subclasses_unknown_module(info: ClassInfo) -> bool:
        """A class that derives from a library class the tables do not know
        and defines ``forward`` (or inherits it from such a class of the
        file): ``nn.Module``'s calling convention, so a module subclass."""
        return any(klass.library_bases and "forward" in klass.methods for klass in info.mro()) or (
            bool(info.library_bases) and info.method("forward") is not None)

    def of(self, node: ast.ClassDef) -> ClassInfo | None:
        return self.by_node.get(node)

    def get(self, qualname: str | None) -> ClassInfo | None:
        return None if qualname is None else self.by_qualname.get(qualname)

    def owner_of(self, function: ast.AST, parents: dict[ast.AST, ast.AST]) -> ClassInfo | None:
        """The class whose body defines ``function`` directly (a method), or None."""
        parent = parents.get(function)
        return self.by_node.get(parent) if isinstance(parent, ast.ClassDef) else None
