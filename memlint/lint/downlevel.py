"""The libcst side of :mod:`memlint.lint.newer_syntax`: down-level a file
written for a newer Python into the running interpreter's grammar (the
rewrite is described there).

Imports libcst, whose native parser can crash the process on hostile input
(:mod:`memlint.lint.libcst_limits`): memlint calls it only in the child
process of :mod:`memlint.lint.libcst_child`, through :func:`answer`.
"""

from __future__ import annotations

import ast
import re

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from memlint.lint.diagnostic import LINE_BREAK, line_offsets
from memlint.lint.newer_syntax import Downlevelled, FStringField

#: The newest grammar asked of libcst (libcst/_parser/types/config.py,
#: KNOWN_PYTHON_VERSION_STRINGS of libcst 1.9.0 lists up to "3.15"; 3.14 is
#: the newest released CPython, so the newest grammar actually in use).
NEWEST_PYTHON = "3.14"
#: The grammar asked of an older libcst that does not know NEWEST_PYTHON:
#: libcst 1.1.0 (the oldest pyproject.toml allows) added 3.12's PEP 695/701.
OLDEST_SUPPORTED_NEWER = "3.12"

_NEWLINES = ("\n", "\r")


def answer(source: str) -> dict:
    """What the libcst child (:mod:`memlint.lint.libcst_child`) replies for
    ``source``: ``{"source": ..., "fstrings": [[line, col, parts], ...]}``
    (:func:`downlevel`'s result), ``{"error": [line, column, message]}``
    (libcst's syntax error) or ``{"error": None}`` (no rewrite)."""
    try:
        result = downlevel(source)
    except cst.ParserSyntaxError as exc:
        return {"error": _libcst_error(exc)}
    if result is None:
        return {"error": None}
    fstrings = [[line, col, _encode_parts(parts)] for (line, col), parts in result.fstrings.items()]
    return {"source": result.source, "fstrings": fstrings}


_LIBCST_POSITION = re.compile(r"^(?:parser error: )?error at (\d+):(\d+):\s*")


def _libcst_error(exc: cst.ParserSyntaxError) -> list:
    """[line, 1-based column, message] of libcst's syntax error: its native
    parser's message carries the position ("error at 2:10: expected ...");
    ``raw_line``/``raw_column`` (0-based column) otherwise."""
    message = exc.message
    match = _LIBCST_POSITION.match(message)
    if match:
        return [int(match.group(1)), int(match.group(2)), message[match.end():] or "invalid syntax"]
    return [exc.raw_line, exc.raw_column + 1, message]


def _encode_parts(parts: list) -> list:
    return [part if isinstance(part, str) else
            {"conversion": part.conversion, "debug_text": part.debug_text, "kept": part.kept,
             "spec": None if part.spec is None else _encode_parts(part.spec)}
            for part in parts]


def downlevel(source: str) -> Downlevelled | None:
    """``source`` rewritten into the running interpreter's grammar (see the
    module docstring); None when the rewriting fails.

    Raises ``libcst.ParserSyntaxError`` when libcst cannot parse ``source``.
    Runs libcst's native parser in this process: call it only on text
    within :mod:`memlint.lint.libcst_limits` or in a child process.
    """
    try:
        module = _parse(source)
    except (RecursionError, ValueError):
        return None
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    rewriter = _Rewriter(source, wrapper.resolve(PositionProvider), wrapper.module)
    wrapper.module.visit(rewriter)
    return Downlevelled(rewriter.text(), rewriter.fstrings)


#: A ``\N{NAME}`` escape (an odd number of backslashes before the N).
_NAMED_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*\\N)\{([^{}\r\n]*)\}")


def _parse(source: str) -> cst.Module:
    r"""libcst's tree of ``source``. libcst 1.9.0 misreads a ``\N{NAME}``
    escape in an f-string's format spec (``f"{x:\N{BULLET}}"``, valid
    Python): it takes the braces for a nested field (a syntax error when
    NAME has spaces). So every ``\N{NAME}`` is masked as ``\N_NAME_`` before
    parsing -- the same length, so every position holds; the rewriter reads
    the literal text from the original source."""
    masked = _NAMED_ESCAPE.sub(lambda m: f"{m.group(1)}_{m.group(2)}_", source) if "\\N{" in source else source
    return cst.parse_module(masked, config=_parser_config())


def _parser_config() -> cst.PartialParserConfig:
    try:
        return cst.PartialParserConfig(python_version=NEWEST_PYTHON)
    except ValueError:  # an older libcst: it names the versions it knows
        return cst.PartialParserConfig(python_version=OLDEST_SUPPORTED_NEWER)


class _Rewriter(cst.CSTVisitor):
    """Collects the character edits of :func:`downlevel` while visiting libcst's tree."""

    def __init__(self, source: str, positions, module: cst.Module) -> None:
        super().__init__()
        self.source = source
        self.positions = positions
        self.module = module
        self.offsets = line_offsets(source)
        #: replacement text for a character, by offset
        self.chars: dict[int, str] = {}
        #: text inserted before the character at an offset
        self.inserts: dict[int, str] = {}
        self.fstrings: dict[tuple[int, int], list] = {}
        #: [start, end) of field expressions replaced by a constant: not descended into
        self._opaque: list[tuple[int, int]] = []
        #: the string nodes that are parts of a rewritten unit
        self._handled: set[int] = set()
        #: [start, end) of the blanked type-parameter lists
        self._blanked: list[tuple[int, int]] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if node.type_parameters is not None:
            self._blank_region(*self._range(node.type_parameters))

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if node.type_parameters is not None:
            self._blank_region(*self._range(node.type_parameters))

    def visit_TypeAlias(self, node: cst.TypeAlias) -> None:
        start, _ = self._range(node)
        after = start + len("type")
        if self.source[after:after + 1] not in (" ", "\t"):
            return  # `type\` and a continuation: left alone (stays MEM001)
        for offset, char in enumerate("pass;"):
            self.chars[start + offset] = char
        if node.type_parameters is not None:
            self._blank_region(*self._range(node.type_parameters))

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        self._string(node)

    def visit_ConcatenatedString(self, node: cst.ConcatenatedString) -> None:
        self._string(node)

    def _string(self, node) -> None:
        if id(node) in self._handled:
            return
        start, end = self._range(node)
        if any(a <= start < b for a, b in self._opaque + self._blanked):
            return  # inside text that is blanked whole (`def f[T = f"..."]`)
        if _has_fstring(node) and not _parses(self.source[start:end]):
            self._fstring_unit(node, start, end)

    # -- edits --------------------------------------------------------------------
    def _range(self, node) -> tuple[int, int]:
        code_range = self.positions[node]
        return self._offset(code_range.start), self._offset(code_range.end)

    def _offset(self, position) -> int:
        return self.offsets[position.line - 1] + position.column

    def _blank(self, index: int, first: str = " ") -> None:
        """Blank the character at ``index`` (as many spaces as its UTF-8
        bytes; ``first`` replaces the first of them); line breaks stay."""
        char = self.source[index]
        if char not in _NEWLINES:
            self.chars[index] = first + " " * (len(char.encode("utf-8")) - 1)

    def _blank_region(self, start: int, end: int) -> None:
        """Blank ``[start, end)``; each line break inside it is preceded by a
        backslash, so that the statement continues on the next line."""
        self._blanked.append((start, end))
        for index in range(start, end):
            self._blank(index)
        for match in LINE_BREAK.finditer(self.source, start, end):
            before = match.start() - 1
            if before >= start and self.source[before] not in _NEWLINES:
                width = len(self.source[before].encode("utf-8"))
                self.chars[before] = " " * (width - 1) + "\\"
            else:  # an empty line inside the region: no code there to move
                self.inserts[match.start()] = "\\"

    def _fstring_unit(self, node, start: int, end: int) -> None:
        """Turn the f-string (or concatenation) ``[start, end)`` into a tuple
        of its replacement fields' expressions."""
        kept: list[tuple[int, int]] = []
        parts = self._unit_parts(node, kept)
        keep = set()
        for a, b in kept:
            keep.update(range(a, b))
        for index in range(start, end):
            if index not in keep:
                self._blank(index)
        self.chars[start] = "("
        self.chars[end - 1] = ")"
        for _, expression_end in kept:
            comma = next((i for i in range(expression_end, end - 1)
                          if i not in keep and self.source[i] not in _NEWLINES), None)
            if comma is not None:
                self.chars[comma] = ","
        before = LINE_BREAK.split(self.source[:start])
        self.fstrings[(len(before), len(before[-1].encode("utf-8")))] = parts

    def _unit_parts(self, node, kept: list) -> list:
        """The literal texts (str) and fields (:class:`FStringField`) of the unit,
        in source order; the offsets of kept expressions go to ``kept``."""
        self._handled.add(id(node))
        if isinstance(node, cst.ConcatenatedString):
            return self._unit_parts(node.left, kept) + self._unit_parts(node.right, kept)
        if isinstance(node, cst.SimpleString):
            start, end = self._range(node)  # the source's text: libcst read a masked one (see _parse)
            try:
                value = ast.literal_eval(self.source[start:end])
            except (SyntaxError, ValueError, MemoryError, RecursionError):
                value = ""
            return [value if isinstance(value, str) else ""]
        return self._content_parts(node.parts, kept)

    def _content_parts(self, contents, kept: list) -> list:
        parts: list = []
        for content in contents:
            if isinstance(content, cst.FormattedStringText):
                start, end = self._range(content)  # the source's text: libcst read a masked one (see _parse)
                parts.append(self.source[start:end].replace("{{", "{").replace("}}", "}"))
                continue
            start, end = self._expression_range(content)
            opaque = _needs_parentheses(content.expression)
            if opaque:
                self._opaque.append((start, end))
                self._blank(start, first="0")
                kept.append((start, start + 1))  # the constant `0` stands for it
                for index in range(start + 1, end):
                    self._blank(index)
            else:
                kept.append((start, end))
            debug = None
            if content.equal is not None:
                field_start, _ = self._range(content)
                debug = self.source[field_start + 1:self._range(content.equal)[1]]
            spec = None if content.format_spec is None else self._content_parts(content.format_spec, kept)
            parts.append(FStringField(content.conversion, debug, not opaque, spec))
        return parts

    def _expression_range(self, content: cst.FormattedStringExpression) -> tuple[int, int]:
        """Offsets of a field's expression, its parentheses included."""
        field_start, _ = self._range(content)
        start = field_start + 1 + len(self.module.code_for_node(content.whitespace_before_expression))
        return start, start + len(self.module.code_for_node(content.expression))

    def text(self) -> str:
        """The source with the edits applied."""
        pieces = []
        for index, char in enumerate(self.source):
            if index in self.inserts:
                pieces.append(self.inserts[index])
            pieces.append(self.chars.get(index, char))
        return "".join(pieces)


def _has_fstring(node) -> bool:
    if isinstance(node, cst.FormattedString):
        return True
    if isinstance(node, cst.ConcatenatedString):
        return _has_fstring(node.left) or _has_fstring(node.right)
    return False


def _parses(text: str) -> bool:
    """True when the running parser accepts ``text`` as an expression."""
    try:
        ast.parse(f"(\n{text}\n)", mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _needs_parentheses(expression) -> bool:
    """An f-string field expression that would not stay one element of a
    tuple: an unparenthesised tuple or ``yield``."""
    return isinstance(expression, (cst.Tuple, cst.Yield)) and not expression.lpar
