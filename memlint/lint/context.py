"""Per-file state shared by all rules during one traversal."""

from __future__ import annotations

from functools import cached_property

import libcst as cst

from memlint.lint.diagnostic import Diagnostic, Edit
from memlint.lint.names import ImportMap


#: Below this size whole-module positions are cheap (a few ms) and exact.
SMALL_FILE_CHARS = 20_000


class FileContext:
    """What rules know about the file being linted.

    Positions are computed lazily (libcst's PositionProvider costs a full
    code-generation pass), so files without findings never pay for them.
    """

    def __init__(self, path: str, source: str, module: cst.Module, tree=None) -> None:
        self.path = path
        self.source = source
        self.module = module
        #: CPython's ``ast`` of ``source`` when the caller has it (statement positions)
        self._tree = tree
        self.diagnostics: list[Diagnostic] = []
        #: Pre-order position (in :attr:`index`) of the node whose hook runs.
        self.position: int | None = None

    def close(self) -> None:
        """Drop the per-file analyses (the dataflow refers back to this
        context), so the tree is freed at once rather than by the cyclic
        garbage collector."""
        for name in ("index", "dataflow", "imports", "_positions", "_function_lines", "_statement_starts"):
            self.__dict__.pop(name, None)
        self._tree = None

    @property
    def stack(self) -> list[cst.CSTNode]:
        """The ancestors of the node whose hook is running, outermost first."""
        return [] if self.position is None else self.index.ancestors_at(self.position)

    @cached_property
    def index(self):
        """:class:`memlint.lint.walk.NodeIndex` of the module (one walk, shared)."""
        from memlint.lint.walk import NodeIndex

        return NodeIndex(self.module)

    @cached_property
    def imports(self) -> ImportMap:
        return ImportMap.from_statements(self.index.of_type(cst.Import, cst.ImportFrom))

    @cached_property
    def dataflow(self):
        """The shared graph/device/loop analysis (:mod:`memlint.lint.dataflow`)."""
        from memlint.lint.dataflow import Dataflow

        return Dataflow(self)

    @cached_property
    def _positions(self):
        return code_ranges(self.module)

    @cached_property
    def _function_lines(self) -> dict[cst.FunctionDef, tuple[int, int]] | None:
        """(line, column) of the ``def`` keyword of every function (libcst's
        positions of a FunctionDef start there too, after the decorators),
        matched between libcst and CPython's ast by source order; None when
        the two trees disagree (then only whole-module positions are used)."""
        import ast

        from memlint.lint.walk import walk

        ours = [node for node in walk(self.module) if isinstance(node, cst.FunctionDef)]
        tree = self._tree if self._tree is not None else ast.parse(self.source)
        theirs = sorted(
            (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))),
            key=lambda n: (n.lineno, n.col_offset),
        )
        if len(ours) != len(theirs) or any(a.name.value != b.name for a, b in zip(ours, theirs)):
            return None
        return {
            node: (other.lineno, other.col_offset)
            for node, other in zip(ours, theirs)
        }

    def _outermost_function(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        found = None
        parents = self.dataflow.parents
        current = node
        while current is not None:
            if isinstance(current, cst.FunctionDef):
                found = current
            current = parents.get(current)
        return found

    def _positions_in_function(self, function: cst.FunctionDef):
        """Positions of the nodes of one function, generated for that function
        alone: libcst's PositionProvider over a whole 280 KB module took ~2 s
        (transformers/modeling_utils.py), over one function milliseconds."""
        cache = self.__dict__.setdefault("_function_position_cache", {})
        found = cache.get(function)
        if found is None:
            alone = function.with_changes(leading_lines=())
            mini = cst.Module(body=[alone], default_indent=self.module.default_indent,
                              default_newline=self.module.default_newline)
            positions = code_ranges(mini)
            found = cache[function] = (positions, positions[alone].start.line, alone)
        return found

    def _span_in_function(self, node: cst.CSTNode):
        lines = self._function_lines
        function = self._outermost_function(node) if lines is not None else None
        if function is None or function not in lines:
            return None
        positions, mini_first_line, alone = self._positions_in_function(function)
        code_range = positions.get(alone if node is function else node)
        if code_range is None:
            return None
        shift = lines[function][0] - mini_first_line
        mini_lines = _split_lines(self.__dict__.setdefault("_mini_code", {}).setdefault(alone, _mini_code(alone, self.module)))
        file_lines = self._source_lines

        def point(position) -> tuple[int, int] | None:
            # The function was rendered dedented; a line's columns move by the
            # indentation removed from it (none on a multi-line string's
            # continuation lines, which the renderer leaves as they are).
            mini_line = mini_lines[position.line - 1]
            file_line = file_lines[position.line + shift - 1]
            if not file_line.endswith(mini_line):
                return None
            return position.line + shift, position.column + len(file_line) - len(mini_line) + 1

        start, end = point(code_range.start), point(code_range.end)
        return None if start is None or end is None else (start, end)

    @cached_property
    def _statement_starts(self) -> dict[cst.CSTNode, tuple[int, int]] | None:
        """(line, 0-based column) of every statement, from CPython's ``ast``,
        matched with libcst's statements in pre-order (both parsers list a
        file's statements in the same order; a ``;``-separated line holds
        several). None when the two lists disagree: then the slower paths
        are used."""
        import ast

        tree = self._tree if self._tree is not None else ast.parse(self.source)
        theirs = _ast_statements(tree)
        ours = [node for node in self.index.nodes if type(node).__name__ in _STATEMENT_NAMES]
        if len(ours) != len(theirs):
            return None
        starts = {}
        for mine, other in zip(ours, theirs):
            if type(other).__name__ not in _STATEMENT_NAMES[type(mine).__name__]:
                return None
            line = self._source_lines[other.lineno - 1]
            column = len(line.encode("utf-8")[: other.col_offset].decode("utf-8", errors="replace"))
            starts[mine] = (other.lineno, column)
        return starts

    def _span_in_statement(self, node: cst.CSTNode):
        """The span of ``node`` from rendering only its innermost statement
        (a simple one such as ``x = f(y)``; else its line, or a compound
        ``for``/``while``/``with``/``if``/``try`` around a node in its
        header), starting where CPython's ``ast`` says it starts and at its
        blocks' indentation, so that the rendered positions are the file's;
        None when no such statement can be placed."""
        statement = node
        while statement is not None and not isinstance(statement, _RENDERED_ALONE):
            statement = self.index.parents.get(statement)
        start = None if statement is None else self._render_start(statement)
        if start is None:
            return None
        cache = self.__dict__.setdefault("_statement_position_cache", {})
        ranges = cache.get(statement)
        if ranges is None:
            ranges = cache[statement] = _rendered_ranges(statement, start, self.module, self._indent_tokens(statement))
        code_range = ranges.get(node)
        return None if code_range is None else _one_based(code_range)

    def _render_start(self, statement: cst.CSTNode) -> tuple[int, int] | None:
        """(line, 0-based column) where rendering ``statement`` alone must
        start. A simple statement starts where it is; a statement line or a
        compound statement renders its leading comment and blank lines
        first, from column 0 of the first of them."""
        starts = self._statement_starts
        if starts is None:
            return None
        if isinstance(statement, cst.BaseSmallStatement):
            return starts.get(statement)
        if isinstance(statement, cst.If) and isinstance(self.index.parents.get(statement), cst.If):
            return None  # an `elif`: rendered alone it would read `if`
        first = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else statement
        found = starts.get(first)
        return None if found is None else (found[0] - len(statement.leading_lines), 0)

    def _indent_tokens(self, node: cst.CSTNode) -> list[str]:
        """Indentation tokens of the blocks enclosing ``node``, outermost first."""
        tokens = []
        for ancestor in self.dataflow.ancestors(node):
            if isinstance(ancestor, cst.IndentedBlock):
                tokens.append(self.module.default_indent if ancestor.indent is None else ancestor.indent)
        return tokens[::-1]

    @cached_property
    def _source_lines(self) -> list[str]:
        return _split_lines(self.source)

    def qualified(self, node: cst.BaseExpression) -> str | None:
        """Dotted name of ``node`` resolved through the imports, or None."""
        return self.imports.qualified(node)

    def span(self, node: cst.CSTNode) -> tuple[tuple[int, int], tuple[int, int]]:
        """1-based (line, col) start and exclusive end of ``node``.

        Cheapest first: a node inside a simple statement is positioned by
        rendering that statement alone from where CPython's ``ast`` says it
        starts; in a large file, a node elsewhere by rendering its outermost
        function; otherwise libcst's positions of the whole module (a
        code-generation pass over all of it).
        """
        if "_positions" not in self.__dict__:
            found = self._span_in_statement(node)
            if found is None and len(self.source) > SMALL_FILE_CHARS:
                found = self._span_in_function(node)
            if found is not None:
                return found
        return _one_based(self._positions[node])

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
            indent_tokens=self._indent_tokens(old),
        )
        new._codegen(state)
        return "".join(state.tokens)

    def enclosing(self, *types: type) -> cst.CSTNode | None:
        """The nearest ancestor of one of ``types`` (during a traversal)."""
        for node in reversed(self.stack):
            if isinstance(node, types):
                return node
        return None


#: libcst statement classes and the CPython ``ast`` classes they correspond to.
_STATEMENT_NAMES = {
    **{name: (name,) for name in (
        "Assign", "AnnAssign", "AugAssign", "Expr", "Return", "Pass", "Break", "Continue", "Raise", "Assert",
        "Import", "ImportFrom", "Global", "Nonlocal", "ClassDef", "If", "While", "Try", "TryStar", "Match",
        "TypeAlias",
    )},
    "Del": ("Delete",),
    "FunctionDef": ("FunctionDef", "AsyncFunctionDef"),
    "For": ("For", "AsyncFor"),
    "With": ("With", "AsyncWith"),
}


#: Statements whose rendering alone is positioned exactly (no decorators,
#: whose lines CPython's ast does not count in the statement's start).
_RENDERED_ALONE = (cst.BaseSmallStatement, cst.SimpleStatementLine, cst.For, cst.While, cst.With, cst.If, cst.Try)


def _ast_statements(tree) -> list:
    """Every statement of a CPython ``ast`` tree, in source pre-order."""
    import ast

    found = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.stmt):
            found.append(node)
        stack.extend(reversed([child for child in ast.iter_child_nodes(node) if _holds_statements(child)]))
    return found


def _holds_statements(node) -> bool:
    import ast

    return isinstance(node, (ast.stmt, ast.excepthandler, ast.match_case))


def _rendered_ranges(statement: cst.CSTNode, start: tuple[int, int], module: cst.Module, indent_tokens: list[str]):
    """CodeRanges of ``statement``'s nodes, rendered from ``start`` (line,
    0-based column) with the enclosing blocks' indentation (continuation
    lines inside brackets re-add it), so they are positions in the file."""
    from libcst.metadata.position_provider import PositionProvider, PositionProvidingCodegenState

    provider = PositionProvider()
    state = PositionProvidingCodegenState(
        default_indent=module.default_indent,
        default_newline=module.default_newline,
        provider=provider,
        indent_tokens=list(indent_tokens),
        line=start[0],
        column=start[1],
    )
    statement._codegen(state)
    return provider._computed


def code_ranges(module: cst.Module) -> dict[cst.CSTNode, "CodeRange"]:
    """libcst's syntactic ``CodeRange`` of every node of ``module`` (the
    values of ``PositionProvider``), from one code-generation pass.

    ``MetadataWrapper.resolve(PositionProvider)`` does the same pass and, in
    libcst 1.5.1 (metadata/wrapper.py, ``_resolve_impl``), also walks the
    whole tree with libcst's node-rebuilding visitor for "batchable"
    providers even when none is requested: about half of its time (cProfile
    on the shared cases and fixtures, 64 files with findings). The provider's
    own ``_gen_impl`` is called directly instead. ``libcst.metadata`` (~35 ms
    to import) is imported only here, when a file has a finding.
    """
    from libcst.metadata import PositionProvider

    provider = PositionProvider()
    provider._gen_impl(module)
    return provider._computed


def _one_based(code_range) -> tuple[tuple[int, int], tuple[int, int]]:
    """A libcst ``CodeRange`` as 1-based (line, col) start and exclusive end."""
    return (code_range.start.line, code_range.start.column + 1), (code_range.end.line, code_range.end.column + 1)


def _split_lines(text: str) -> list[str]:
    """Lines as libcst counts them (``\\n``, ``\\r\\n`` or ``\\r``), without their ends."""
    import re

    return re.split(r"\r\n|\r|\n", text)


def _mini_code(function: cst.FunctionDef, module: cst.Module) -> str:
    return cst.Module(body=[function], default_indent=module.default_indent, default_newline=module.default_newline).code
