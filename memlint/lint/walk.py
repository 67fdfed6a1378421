"""Fast, read-only traversal of CPython ``ast`` trees.

The engine walks each parsed module once, into a :class:`NodeIndex`
(pre-order node list, parents, nodes by type), and hands the rules' hooks
only the nodes of the types they hook, in traversal order
(:meth:`NodeIndex.events`), instead of walking the tree again per rule.

Children are read from the fields each class's ASDL signature (its
docstring) says may hold nodes, iteratively (no recursion limit), in source order
(decorators before the ``def``; a dict literal's keys and values
interleaved). Expression contexts and operators (``ast.Load()``,
``ast.Add()``) are not nodes of the walk: CPython shares one instance of
each across the whole tree, so they have no single parent.

``visit(node, visitor)`` runs a :class:`Visitor` (``visit_<Type>`` /
``leave_<Type>`` methods; a ``visit_`` returning False skips the children).
A hook named for ``FunctionDef``, ``For`` or ``With`` also receives the
``async`` variant (:data:`memlint.lint.syntax.HOOK_ALIASES`).
"""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from itertools import islice, repeat
from typing import TypeVar
from weakref import WeakKeyDictionary

from memlint.lint.syntax import HOOK_ALIASES

#: Fields that never hold nodes of the walk (expression contexts, operator singletons).
_SKIPPED_FIELDS = frozenset({"ctx", "op", "ops"})
#: Classes whose ``_fields`` order differs from source order.
_SOURCE_ORDER = {
    ast.FunctionDef: ("decorator_list", "args", "returns", "body"),
    ast.AsyncFunctionDef: ("decorator_list", "args", "returns", "body"),
    ast.ClassDef: ("decorator_list", "bases", "keywords", "body"),
    ast.IfExp: ("body", "test", "orelse"),
}
T = TypeVar("T")


class Visitor:
    """Base class of collectors run by :func:`visit`: define
    ``visit_<ast class name>(self, node)`` (return False to skip the
    children) and ``leave_<ast class name>(self, node)`` hooks."""


_HOOK_NAMES: dict[type, str] = {}


def hook_name(node_class: type) -> str:
    """The name hooks use for ``node_class`` (``AsyncFor`` -> ``For``)."""
    name = _HOOK_NAMES.get(node_class)
    if name is None:
        name = _HOOK_NAMES[node_class] = HOOK_ALIASES.get(node_class.__name__, node_class.__name__)
    return name


#: ASDL types of fields that never hold nodes (``ast`` documents each class's
#: fields as ``Name(type[*?] field, ...)`` in its docstring, from Parser/Python.asdl).
_PRIMITIVE_TYPES = frozenset({"identifier", "string", "int", "constant", "expr_context",
                              "operator", "unaryop", "boolop", "cmpop"})
_SIGNATURE_FIELD = re.compile(r"(\w+)([*?]?) (\w+)")
#: A field whose docstring type could not be read: checked for lists and nodes at run time.
_UNKNOWN = None


def _child_fields(cls: type) -> tuple[tuple[str, bool | None], ...]:
    """``cls``'s fields that may hold nodes, in source order, each with
    whether it holds a list (None: not documented, checked per node)."""
    doc = cls.__doc__ or ""
    declared = {name: (kind, mark) for kind, mark, name in _SIGNATURE_FIELD.findall(doc[doc.find("(") + 1:])}
    fields = []
    for name in _SOURCE_ORDER.get(cls, cls._fields):
        if name in _SKIPPED_FIELDS:
            continue
        kind, mark = declared.get(name, ("", _UNKNOWN))
        if kind in _PRIMITIVE_TYPES:
            continue
        fields.append((name, mark == "*" if mark is not _UNKNOWN else _UNKNOWN))
    return tuple(fields)


_CHILD_FIELDS: dict[type, tuple[tuple[str, bool | None], ...]] = {}
_AST = ast.AST
#: Per node class, the function that lists a node's children (:func:`_children_function`).
_CHILDREN_OF: dict[type, Callable[[ast.AST], list]] = {}


def _no_children(node: ast.AST) -> list:
    return []


def _dict_children(node: ast.Dict) -> list:
    return [child for pair in zip(node.keys, node.values) for child in pair if child is not None]


def _children_function(kind: type) -> Callable[[ast.AST], list]:
    """A function listing the children of a ``kind`` node, built once per
    class from its documented fields: the generic loop over fields with
    ``getattr`` was a third of the node index's time. A list field may hold
    None (``arguments.kw_defaults``), so Nones are dropped at the end."""
    if kind is ast.Dict:
        return _dict_children
    fields = _CHILD_FIELDS.get(kind)
    if fields is None:
        fields = _CHILD_FIELDS[kind] = _child_fields(kind)
    if not fields:
        return _no_children
    if any(many is _UNKNOWN or not name.isidentifier() for name, many in fields):
        return lambda node, fields=fields: _children_by_fields(node, fields)
    lines = ["def children_of(node):", "    found = []"]
    for name, many in fields:
        if many:
            lines.append(f"    found += node.{name}")
        else:
            lines += [f"    value = node.{name}", "    if value is not None:", "        found.append(value)"]
    lines += ["    if None in found:", "        found = [child for child in found if child is not None]", "    return found"]
    namespace: dict = {}
    exec("\n".join(lines), namespace)  # noqa: S102 -- code built from ast's own field names only
    return namespace["children_of"]


def _children_by_fields(node: ast.AST, fields) -> list[ast.AST]:
    """The children of a node whose class documents a field's type unreadably."""
    found: list[ast.AST] = []
    for name, many in fields:
        value = getattr(node, name, None)
        if value is None:
            continue
        if many:
            found.extend([item for item in value if item is not None])
        elif many is not _UNKNOWN:
            found.append(value)
        elif value.__class__ is list:
            found.extend([item for item in value if isinstance(item, _AST)])
        elif isinstance(value, _AST):
            found.append(value)
    return found


def children(node: ast.AST) -> list[ast.AST]:
    """The syntactic children of ``node`` in source order (a new list)."""
    function = _CHILDREN_OF.get(node.__class__)
    if function is None:
        function = _CHILDREN_OF[node.__class__] = _children_function(node.__class__)
    return function(node)


def walk(root: ast.AST | list[ast.AST]) -> Iterator[ast.AST]:
    """``root`` (a node or a list of them) and all its descendants, pre-order."""
    stack = list(reversed(root)) if root.__class__ is list else [root]
    while stack:
        node = stack.pop()
        yield node
        kids = children(node)
        if kids:
            kids.reverse()
            stack.extend(kids)


def traverse(
    root: ast.AST,
    on_visit: Callable[[ast.AST], bool | None],
    on_leave: Callable[[ast.AST], None] | None = None,
) -> None:
    """Depth-first traversal; ``on_visit`` returning False skips the children."""
    stack: list[tuple[ast.AST, bool]] = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        if leaving:
            if on_leave is not None:
                on_leave(node)
            continue
        descend = on_visit(node)
        stack.append((node, True))
        if descend is not False:
            stack.extend([(child, False) for child in reversed(children(node))])


#: Per visitor class (weakly: collectors are often classes local to a
#: function, a new class per call), its hooks by node class.
_HOOKS: "WeakKeyDictionary[type, dict[type, tuple[Callable | None, Callable | None]]]" = WeakKeyDictionary()
#: The index of the module whose rules are running (see :func:`indexed`).
_ACTIVE: list["NodeIndex"] = []


def _hook_lookup(visitor_class: type) -> Callable[[type], tuple[Callable | None, Callable | None]]:
    """``node class -> (visit hook, leave hook)`` of ``visitor_class``, memoized."""
    table = _HOOKS.get(visitor_class)
    if table is None:
        table = _HOOKS[visitor_class] = {}

    def lookup(node_class: type) -> tuple[Callable | None, Callable | None]:
        found = table.get(node_class)
        if found is None:
            name = hook_name(node_class)
            found = table[node_class] = (getattr(visitor_class, f"visit_{name}", None), getattr(visitor_class, f"leave_{name}", None))
        return found

    return lookup


def visit(root: ast.AST | list[ast.AST], visitor: object) -> None:
    """Run ``visitor``'s ``visit_<Type>``/``leave_<Type>`` hooks over ``root``
    (a node, or a list of them such as a function's ``body``).

    While the engine runs a module's rules (:func:`indexed`), a ``root``
    inside that module is visited from the module's :class:`NodeIndex`:
    only the nodes of the types the visitor hooks are touched.
    """
    if root.__class__ is list:
        for node in root:
            visit(node, visitor)
        return
    if _ACTIVE:
        position = _ACTIVE[-1].position_of(root)
        if position is not None:
            _ACTIVE[-1].visit_subtree(position, visitor)
            return
    hooks_of = _hook_lookup(type(visitor))

    def on_visit(node: ast.AST):
        enter = hooks_of(type(node))[0]
        return None if enter is None else enter(visitor, node)

    def on_leave(node: ast.AST) -> None:
        leave = hooks_of(type(node))[1]
        if leave is not None:
            leave(visitor, node)

    traverse(root, on_visit, on_leave)


def indexed_descendants(root: ast.AST | list[ast.AST], types: tuple[type, ...], skip_inside: tuple[type, ...] = ()) -> list[ast.AST] | None:
    """``root`` (a node or a list of them) and its descendants of exactly
    ``types``, in source order, not inside a nested node of ``skip_inside``
    (a node ``root`` itself may be one; a list's elements may not), from the active index (:func:`indexed`);
    None when no active index holds ``root`` (then the caller walks)."""
    if not _ACTIVE:
        return None
    if root.__class__ is list:  # a body: its own nested definitions are skipped too
        found: list[ast.AST] = []
        for node in root:
            if isinstance(node, skip_inside):
                continue
            part = indexed_descendants(node, types, skip_inside)
            if part is None:
                return None
            found.extend(part)
        return found
    index = _ACTIVE[-1]
    position = index.position_of(root)
    return None if position is None else index.subtree_of_type(position, types, skip_inside)


def descendants(root: ast.AST) -> list[ast.AST]:
    """``root`` and every node under it, pre-order (what ``ast.walk`` yields,
    in another order and without expression contexts and operators): a
    slice of the active index's node list when ``root`` is in it, else a walk."""
    if _ACTIVE:
        index = _ACTIVE[-1]
        position = index.position_of(root)
        if position is not None:
            return index.nodes[position:index._subtree_ends()[position]]
    return list(walk(root))


def file_memo(key: Hashable, compute: Callable[[], T]) -> T:
    """``compute()``, once per ``key`` while the engine runs one module's
    rules (:func:`indexed`); computed afresh outside. For analyses that
    rules ask about repeatedly (the training steps in a loop, the names an
    expression reads), which would otherwise make a long function cost time
    quadratic in its length; ``key`` holds ``id(node)``s, which are stable
    while the index keeps the tree alive."""
    if not _ACTIVE:
        return compute()
    memo = _ACTIVE[-1].memo
    if key not in memo:
        memo[key] = compute()
    return memo[key]


@contextmanager
def indexed(index: "NodeIndex") -> Iterator[None]:
    """Within the block, :func:`visit` serves the nodes of ``index``'s module from it."""
    _ACTIVE.append(index)
    try:
        yield
    finally:
        _ACTIVE.pop()


class NodeIndex:
    """One pass over a module: every node in pre-order, each node's parent,
    and the nodes grouped by type — so that rules and analyses that look for
    "all imports", "all function definitions" or "the parent of X" do not
    each walk the whole tree again.

    ``nodes[i]``'s parent is ``nodes[parent_positions[i]]`` (-1 for the
    root): integer positions are compact and sort fast when the events of
    many hooks are merged.
    """

    def __init__(self, root: ast.AST) -> None:
        self.nodes: list[ast.AST] = []
        self.parent_positions: list[int] = []
        self.parents: dict[ast.AST, ast.AST] = {}
        self._positions_by_type: dict[type, list[int]] = {}
        self._ends: list[int] | None = None
        self._positions: dict[int, int] | None = None
        self._kinds_by_hook_name: dict[str, list[type]] | None = None
        #: Per-file results of :func:`file_memo`.
        self.memo: dict[Hashable, object] = {}
        nodes, parent_positions, parents, by_type = self.nodes, self.parent_positions, self.parents, self._positions_by_type
        stack: list[tuple[ast.AST, int]] = [(root, -1)]
        pop, push, add_node, add_parent, group_of = stack.pop, stack.extend, nodes.append, parent_positions.append, by_type.get
        children_of = _CHILDREN_OF
        position = -1
        while stack:
            node, parent_position = pop()
            position += 1
            add_node(node)
            add_parent(parent_position)
            kind = node.__class__
            group = group_of(kind)
            if group is None:
                by_type[kind] = [position]
            else:
                group.append(position)
            function = children_of.get(kind)
            if function is None:
                function = children_of[kind] = _children_function(kind)
            if function is _no_children:  # a name or a constant: most nodes
                continue
            kids = function(node)
            if kids:
                kids.reverse()
                push(zip(kids, repeat(position)))
        # in C, not per child in the loop above
        self.parents.update(zip(islice(nodes, 1, None), map(nodes.__getitem__, islice(parent_positions, 1, None))))

    def of_type(self, *types: type) -> list[ast.AST]:
        """Nodes of exactly these ``ast`` classes, in source order."""
        nodes = self.nodes
        if len(types) == 1:
            return [nodes[i] for i in self._positions_by_type.get(types[0], ())]
        positions = sorted(i for kind in types for i in self._positions_by_type.get(kind, ()))
        return [nodes[i] for i in positions]

    def ancestors_at(self, position: int) -> list[ast.AST]:
        """The ancestors of ``nodes[position]``, outermost first."""
        found = []
        parent = self.parent_positions[position]
        while parent != -1:
            found.append(self.nodes[parent])
            parent = self.parent_positions[parent]
        found.reverse()
        return found

    def position_table(self) -> dict[int, int]:
        """``id(node) -> position`` for every node (built once); a position
        is ``node``'s only when ``nodes[position] is node`` (ids are reused)."""
        if self._positions is None:
            self._positions = dict(zip(map(id, self.nodes), range(len(self.nodes))))
        return self._positions

    def position_of(self, node: ast.AST) -> int | None:
        """Pre-order position of ``node``; None when it is not in this module."""
        position = (self._positions if self._positions is not None else self.position_table()).get(id(node))
        return position if position is not None and self.nodes[position] is node else None

    def events(self, visited, left, start: int = 0, end: int | None = None) -> list[tuple[int, bool]]:
        """``(position, is_visit)`` for every node in positions ``[start, end)``
        whose class is accepted by ``visited`` (entered) or ``left`` (left),
        two containers of class names, in the order a depth-first traversal
        meets them: a node is left after all its descendants were entered
        and left, before the next node is entered."""
        ends = self._subtree_ends()
        end = len(self.nodes) if end is None else end
        whole = start == 0 and end == len(self.nodes)
        keyed: list[tuple[int, int, int, bool]] = []
        for kind in self._kinds_named(visited, left):
            positions = self._positions_by_type[kind]
            name = hook_name(kind)
            entered, exited = name in visited, name in left
            if not (entered or exited):
                continue
            if not whole:
                positions = positions[bisect.bisect_left(positions, start):bisect.bisect_left(positions, end)]
            if entered:
                keyed.extend([(i, 1, 0, True) for i in positions])
            if exited:
                keyed.extend([(ends[i], 0, -i, False) for i in positions])
        keyed.sort()
        return [(i if is_visit else -minus_i, is_visit) for i, _, minus_i, is_visit in keyed]

    def _kinds_named(self, *name_sets) -> list[type]:
        """The node classes of this module whose hook name is in one of ``name_sets``."""
        by_name = self._kinds_by_hook_name
        if by_name is None:
            by_name = self._kinds_by_hook_name = {}
            for kind in self._positions_by_type:
                by_name.setdefault(hook_name(kind), []).append(kind)
        return [kind for name in set().union(*name_sets) for kind in by_name.get(name, ())]

    def subtree_of_type(self, position: int, types: tuple[type, ...], skip_inside: tuple[type, ...] = ()) -> list[ast.AST]:
        """Nodes of exactly ``types`` in the subtree at ``position``, in
        source order, leaving out every nested node of ``skip_inside`` (not
        the subtree's root) and all it contains."""
        ends = self._subtree_ends()
        end = ends[position]
        found = sorted(self._positions_in(types, position, end))
        skipped = sorted(self._positions_in(skip_inside, position + 1, end))
        if skipped:
            kept, s, skip_end = [], 0, -1
            for at in found:
                while s < len(skipped) and skipped[s] <= at:
                    skip_end = max(skip_end, ends[skipped[s]])
                    s += 1
                if at >= skip_end:
                    kept.append(at)
            found = kept
        return [self.nodes[at] for at in found]

    def _positions_in(self, types: tuple[type, ...], start: int, end: int) -> list[int]:
        found: list[int] = []
        for kind in types:
            positions = self._positions_by_type.get(kind, ())
            found.extend(positions[bisect.bisect_left(positions, start):bisect.bisect_left(positions, end)])
        return found

    def visit_subtree(self, position: int, visitor: object) -> None:
        """:func:`visit` over the subtree at ``position``, from the index."""
        visitor_class = type(visitor)
        hooked = hooked_names(visitor_class)
        hooks_of = _hook_lookup(visitor_class)
        ends = self._subtree_ends()
        skip_start, skip_end = -1, -1  # the subtree under a visit_ that returned False
        for at, is_visit in self.events(hooked, hooked, position, ends[position]):
            if skip_start < at < skip_end:
                continue
            node = self.nodes[at]
            enter, leave = hooks_of(type(node))
            if is_visit:
                if enter is not None and enter(visitor, node) is False:
                    skip_start, skip_end = at, ends[at]
            elif leave is not None:
                leave(visitor, node)

    def _subtree_ends(self) -> list[int]:
        """``ends[i]``: one past the position of the last descendant of node ``i``."""
        if self._ends is None:
            parent_positions = self.parent_positions
            ends = list(range(1, len(parent_positions) + 1))
            for i in range(len(parent_positions) - 1, 0, -1):
                parent = parent_positions[i]
                if ends[i] > ends[parent]:
                    ends[parent] = ends[i]
            self._ends = ends
        return self._ends


#: Per visitor class (weakly, as :data:`_HOOKS`), its :func:`hooked_names`.
_HOOKED: "WeakKeyDictionary[type, frozenset[str]]" = WeakKeyDictionary()


def hooked_names(visitor_class: type) -> frozenset[str]:
    """Hook names (:func:`hook_name`) that ``visitor_class`` has a
    ``visit_``/``leave_`` method for."""
    names = _HOOKED.get(visitor_class)
    if names is None:
        found: set[str] = set()
        for klass in visitor_class.__mro__:
            if klass is not object:
                found.update(
                    attr.split("_", 1)[1] for attr in vars(klass)
                    if attr.startswith(("visit_", "leave_")) and attr.count("_") == 1
                )
        names = _HOOKED[visitor_class] = frozenset(found)
    return names
