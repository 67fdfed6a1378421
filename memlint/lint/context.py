"""Per-file state shared by all rules during one traversal."""

from __future__ import annotations

from functools import cached_property

import libcst as cst

from memlint.lint.diagnostic import Diagnostic, Edit
from memlint.lint.names import ImportMap


class FileContext:
    """What rules know about the file being linted.

    Positions are computed lazily (libcst's PositionProvider costs a full
    code-generation pass), so files without findings never pay for them.
    """

    def __init__(self, path: str, source: str, module: cst.Module) -> None:
        self.path = path
        self.source = source
        self.module = module
        self.stack: list[cst.CSTNode] = []
        self.diagnostics: list[Diagnostic] = []

    @cached_property
    def imports(self) -> ImportMap:
        return ImportMap.from_module(self.module)

    @cached_property
    def dataflow(self):
        """The shared graph/device/loop analysis (:mod:`memlint.lint.dataflow`)."""
        from memlint.lint.dataflow import Dataflow

        return Dataflow(self)

    @cached_property
    def _positions(self):
        # libcst.metadata costs ~35 ms to import: only files with findings need it.
        from libcst.metadata import MetadataWrapper, PositionProvider

        wrapper = MetadataWrapper(self.module, unsafe_skip_copy=True)
        return wrapper.resolve(PositionProvider)

    def qualified(self, node: cst.BaseExpression) -> str | None:
        """Dotted name of ``node`` resolved through the imports, or None."""
        return self.imports.qualified(node)

    def span(self, node: cst.CSTNode) -> tuple[tuple[int, int], tuple[int, int]]:
        """1-based (line, col) start and exclusive end of ``node``."""
        code_range = self._positions[node]
        return (
            (code_range.start.line, code_range.start.column + 1),
            (code_range.end.line, code_range.end.column + 1),
        )

    def code(self, node: cst.CSTNode) -> str:
        """Source text of ``node``."""
        return self.module.code_for_node(node)

    def edit_replacing(self, node: cst.CSTNode, new: cst.CSTNode | str) -> Edit:
        start, end = self.span(node)
        content = new if isinstance(new, str) else self.module.code_for_node(new)
        return Edit(start[0], start[1], end[0], end[1], content)

    def enclosing(self, *types: type) -> cst.CSTNode | None:
        """The nearest ancestor of one of ``types`` (during a traversal)."""
        for node in reversed(self.stack):
            if isinstance(node, types):
                return node
        return None
