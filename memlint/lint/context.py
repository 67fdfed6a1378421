"""Per-file state shared by all rules during one traversal."""

from __future__ import annotations

import ast
from functools import cached_property

from memlint.lint.diagnostic import Diagnostic, Edit, line_offsets
from memlint.lint.names import ImportMap


class FileContext:
    """What rules know about the file being linted: its source, its CPython
    ``ast`` (``module``), the node index, the imports and the semantic
    model (the last three built on first use)."""

    def __init__(self, path: str, source: str, module: ast.Module, index=None, notebook=None) -> None:
        self.path = path
        #: in a notebook: its :class:`~memlint.lint.notebook.NotebookLayout`
        #: (``source`` is then the module made of its code cells); else None
        self.notebook = notebook
        self.source = source
        self.module = module
        if index is not None:  # the engine's, already built for the pre-parse gate
            self.index = index
        self.diagnostics: list[Diagnostic] = []
        #: Pre-order position (in :attr:`index`) of the node whose hook runs.
        self.position: int | None = None

    def close(self) -> None:
        """Drop the per-file analyses (the semantic model refers back to this
        context), so the tree is freed at once rather than by the cyclic
        garbage collector."""
        semantic = self.__dict__.get("semantic")
        if semantic is not None:
            semantic.close()
        for name in ("index", "semantic", "imports", "_lines", "_line_offsets"):
            self.__dict__.pop(name, None)

    @property
    def stack(self) -> list[ast.AST]:
        """The ancestors of the node whose hook is running, outermost first."""
        return [] if self.position is None else self.index.ancestors_at(self.position)

    @cached_property
    def index(self):
        """:class:`memlint.lint.walk.NodeIndex` of the module (one walk, shared)."""
        from memlint.lint.walk import NodeIndex

        return NodeIndex(self.module)

    @cached_property
    def imports(self) -> ImportMap:
        return ImportMap.from_statements(self.index.of_type(ast.Import, ast.ImportFrom))

    @cached_property
    def semantic(self):
        """The file's semantic model (:mod:`memlint.lint.semantic`), shared by every rule."""
        from memlint.lint.semantic.model import SemanticModel

        return SemanticModel(self)

    @cached_property
    def _line_offsets(self) -> list[int]:
        """Character offset in ``source`` where each line starts."""
        return line_offsets(self.source)

    @cached_property
    def _lines(self) -> list[str]:
        offsets = self._line_offsets
        return [self.source[start:end].rstrip("\r\n") for start, end in zip(offsets, [*offsets[1:], len(self.source)])]

    def line(self, number: int) -> str:
        """The text of 1-based line ``number``, without its line end."""
        return self._lines[number - 1]

    def qualified(self, node: ast.AST) -> str | None:
        """Dotted name of ``node`` resolved through the imports its scope
        sees (a local or parameter named ``torch`` is not the library), or None."""
        return self.semantic.qualified(node)

    def span(self, node: ast.AST) -> tuple[tuple[int, int], tuple[int, int]]:
        """1-based (line, column) start and exclusive end of ``node``'s text,
        columns in characters (``ast`` counts UTF-8 bytes). Parentheses
        around the node are not part of it. A node without a position of its
        own (``withitem``, ``comprehension``, ``arguments``) spans its
        positioned children."""
        first, last = _positioned(node)
        start = (first.lineno, self._character_column(first.lineno, first.col_offset) + 1)
        end = (last.end_lineno, self._character_column(last.end_lineno, last.end_col_offset) + 1)
        return start, end

    def _character_column(self, line: int, byte_offset: int) -> int:
        text = self._lines[line - 1]
        if text.isascii():
            return byte_offset
        return len(text.encode("utf-8")[:byte_offset].decode("utf-8", errors="replace"))

    def code(self, node: ast.AST) -> str:
        """Source text of ``node`` (without parentheses around it; line ends as in the file)."""
        (line, col), (end_line, end_col) = self.span(node)
        if line == end_line:
            return self._lines[line - 1][col - 1:end_col - 1]
        offsets = self._line_offsets
        return self.source[offsets[line - 1] + col - 1:offsets[end_line - 1] + end_col - 1]

    def edit_replacing(self, node: ast.AST, text: str) -> Edit:
        """An edit replacing ``node``'s text by ``text``."""
        start, end = self.span(node)
        return Edit(start[0], start[1], end[0], end[1], text)

    @staticmethod
    def edit_inserting(line: int, col: int, text: str) -> Edit:
        """An edit inserting ``text`` at 1-based (``line``, ``col``)."""
        return Edit(line, col, line, col, text)

    def enclosing(self, *types: type) -> ast.AST | None:
        """The nearest ancestor of one of ``types`` (during a traversal)."""
        for node in reversed(self.stack):
            if isinstance(node, types):
                return node
        return None


def _positioned(node: ast.AST) -> tuple[ast.AST, ast.AST]:
    """The nodes whose start and end give ``node``'s span: itself when the
    parser positioned it, else its first and last positioned descendants.

    Raises:
        ValueError: ``node`` holds no positioned node (an empty module).
    """
    if getattr(node, "end_col_offset", None) is not None:
        return node, node
    positioned = [child for child in ast.walk(node) if getattr(child, "end_col_offset", None) is not None]
    if not positioned:
        raise ValueError(f"{type(node).__name__} has no source position")
    first = min(positioned, key=lambda n: (n.lineno, n.col_offset))
    last = max(positioned, key=lambda n: (n.end_lineno, n.end_col_offset))
    return first, last
