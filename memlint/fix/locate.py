"""Find the libcst node a rule reported on CPython's ``ast`` tree.

libcst's ``PositionProvider`` gives each node the span of its own text:
1-based lines, 0-based columns counted in characters, end exclusive,
without the parentheses around an expression and without the decorators of
a function (which starts at ``def``), exactly the span ``ast`` gives the
same node (:meth:`memlint.lint.context.FileContext.span`, whose columns are
1-based). Several nodes share a span (a statement line and its only
statement, ``Expr`` and its value): the plan's transform names the node
classes it applies to, and the outermost node of those classes is taken.
"""

from __future__ import annotations

from collections import defaultdict

import libcst
from libcst.metadata import CodeRange

Span = tuple[int, int, int, int]


class NodeIndex:
    """The nodes of one parsed module by span (built once per parse)."""

    def __init__(self, positions: "dict[libcst.CSTNode, CodeRange]") -> None:
        self._by_span: dict[Span, list[libcst.CSTNode]] = defaultdict(list)
        # positions are in visit order: a node comes before the nodes inside it
        for node, where in positions.items():
            key = (where.start.line, where.start.column + 1, where.end.line, where.end.column + 1)
            self._by_span[key].append(node)

    def find(self, start: tuple[int, int], end: tuple[int, int],
             types: tuple[type, ...]) -> libcst.CSTNode | None:
        """The outermost node of one of ``types`` spanning ``start``-``end``
        (1-based line and column, end exclusive), or None."""
        for node in self._by_span.get((*start, *end), ()):
            if isinstance(node, types):
                return node
        return None
