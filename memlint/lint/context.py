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
        """An edit replacing ``node``'s text by ``new`` (code, or a node rendered
        at ``node``'s block indentation so that its continuation lines line up)."""
        start, end = self.span(node)
        content = new if isinstance(new, str) else self._code_at(node, new)
        return Edit(start[0], start[1], end[0], end[1], content)

    def _code_at(self, old: cst.CSTNode, new: cst.CSTNode) -> str:
        # Module.code_for_node renders at indentation level zero; a multi-line
        # node inside an indented block would lose its block's indentation.
        from libcst._nodes.internal import CodegenState  # libcst exports no public renderer with indentation

        state = CodegenState(
            default_indent=self.module.default_indent,
            default_newline=self.module.default_newline,
            indent_tokens=_IndentFinder.tokens_for(self.module, old),
        )
        new._codegen(state)
        return "".join(state.tokens)

    def enclosing(self, *types: type) -> cst.CSTNode | None:
        """The nearest ancestor of one of ``types`` (during a traversal)."""
        for node in reversed(self.stack):
            if isinstance(node, types):
                return node
        return None


class _IndentFinder(cst.CSTVisitor):
    """Finds the indentation tokens of the blocks enclosing one node."""

    def __init__(self, module: cst.Module, target: cst.CSTNode) -> None:
        self.module = module
        self.target = target
        self.stack: list[str] = []
        self.found: list[str] | None = None

    @classmethod
    def tokens_for(cls, module: cst.Module, target: cst.CSTNode) -> list[str]:
        finder = cls(module, target)
        module.visit(finder)
        return finder.found or []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.found is not None:
            return False
        if node is self.target:
            self.found = list(self.stack)
            return False
        if isinstance(node, cst.IndentedBlock):
            self.stack.append(self.module.default_indent if node.indent is None else node.indent)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if isinstance(original_node, cst.IndentedBlock) and self.found is None:
            self.stack.pop()
