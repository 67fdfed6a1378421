"""Lint files written for a newer Python than the one running memlint.

CPython's ``ast`` only parses the grammar of the running interpreter: under
Python 3.11 a file using PEP 695 type parameters (``def f[T](x: T)``,
``class C[T]:``), ``type`` statements (``type X = int``) or PEP 701 f-strings
(``f"{d["k"]}"``, a backslash or a comment inside a replacement field, a
replacement field over several lines of a single-quoted f-string) is a
syntax error, although it is valid Python 3.12.

When ``ast.parse`` fails, :func:`parse_newer` asks libcst, whose parser reads
Python up to :data:`NEWEST_PYTHON`. If libcst parses the file, its concrete
tree tells exactly where the newer constructs are, and the source is
*down-levelled* into text that the running parser accepts, with every line
and column of the remaining code where it was:

- a type-parameter list ``[T, *Ts, **P]`` is blanked with spaces (a list
  over several lines keeps its line breaks, each blanked line ending in
  ``\\`` so the statement goes on);
- ``type X[T] = v`` becomes ``pass;X    = v`` (``type`` -> ``pass``, the
  space after it -> ``;``): an assignment of ``v`` to ``X``;
- an f-string (or an implicit concatenation holding one) that the running
  parser rejects becomes a parenthesised tuple of its replacement fields'
  expressions, each expression left in place character for character:
  ``f"{d["k"]}"`` -> ``(  d["k"],)``; the literal text, conversions and
  braces are blanked. After parsing, each such tuple is turned back into
  the ``ast.JoinedStr`` / ``ast.FormattedValue`` nodes CPython 3.11 builds
  for an f-string, so rules see an f-string (literal parts keep their
  source spelling, escapes undecoded). A field whose expression is an
  unparenthesised tuple or ``yield`` (``f"{a, b}"``) is kept as a constant.

A blanked character is replaced by as many spaces as it has UTF-8 bytes, so
``ast``'s byte columns after it are unchanged and findings map back to the
original text exactly. Everything else -- comments, blank lines,
suppression comments -- is untouched.

This module (and so libcst) is imported only on this fallback path: linting code that the
running interpreter parses never imports it. A file that libcst rejects too
is a real syntax error and stays MEM001 with CPython's message.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from memlint.lint.diagnostic import LINE_BREAK, line_offsets

#: The newest grammar asked of libcst (libcst/_parser/types/config.py,
#: KNOWN_PYTHON_VERSION_STRINGS of libcst 1.9.0 lists up to "3.15"; 3.14 is
#: the newest released CPython, so the newest grammar actually in use).
NEWEST_PYTHON = "3.14"
#: The grammar asked of an older libcst that does not know NEWEST_PYTHON:
#: libcst 1.1.0 (the oldest pyproject.toml allows) added 3.12's PEP 695/701.
OLDEST_SUPPORTED_NEWER = "3.12"

_NEWLINES = ("\n", "\r")


@dataclass
class Downlevelled:
    """The result of :func:`downlevel`: ``source`` rewritten for the running
    parser, and the f-strings that became tuples, by the (1-based line,
    0-based UTF-8 byte column) of their first character."""

    source: str
    fstrings: dict[tuple[int, int], list] = field(default_factory=dict)


@dataclass
class _Field:
    """One replacement field of an f-string: its conversion (``"r"``, ``"s"``,
    ``"a"`` or None), the ``=`` debug text (``"x="``) or None, whether its
    expression was kept (else a constant stands for it), and its format
    spec's parts (None without a spec)."""

    conversion: str | None
    debug_text: str | None
    kept: bool
    spec: list | None


def parse_newer(source: str) -> tuple[ast.Module, str] | None:
    """The ``ast`` tree of ``source`` through the down-levelled text, and that
    text; None when libcst does not parse ``source`` either (a real syntax
    error) or the down-levelled text still does not parse.

    Positions in the tree are those of ``source`` (1-based lines, UTF-8 byte
    columns, as ``ast.parse(source)`` would give on a newer interpreter).
    """
    result = downlevel(source)
    if result is None:
        return None
    try:
        tree = ast.parse(result.source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if result.fstrings:
        tree = _FStringRestorer(result.fstrings).visit(tree)
    return tree, result.source


def downlevel(source: str) -> Downlevelled | None:
    """``source`` rewritten into the running interpreter's grammar (see the
    module docstring); None when libcst cannot parse it."""
    try:
        module = cst.parse_module(source, config=_parser_config())
    except (cst.ParserSyntaxError, RecursionError, ValueError):
        return None
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    rewriter = _Rewriter(source, wrapper.resolve(PositionProvider), wrapper.module)
    wrapper.module.visit(rewriter)
    return Downlevelled(rewriter.text(), rewriter.fstrings)


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
        """The literal texts (str) and fields (:class:`_Field`) of the unit,
        in source order; the offsets of kept expressions go to ``kept``."""
        self._handled.add(id(node))
        if isinstance(node, cst.ConcatenatedString):
            return self._unit_parts(node.left, kept) + self._unit_parts(node.right, kept)
        if isinstance(node, cst.SimpleString):
            value = node.evaluated_value
            return [value if isinstance(value, str) else ""]
        return self._content_parts(node.parts, kept)

    def _content_parts(self, contents, kept: list) -> list:
        parts: list = []
        for content in contents:
            if isinstance(content, cst.FormattedStringText):
                parts.append(content.value.replace("{{", "{").replace("}}", "}"))
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
            parts.append(_Field(content.conversion, debug, not opaque, spec))
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


class _FStringRestorer(ast.NodeTransformer):
    """Turns the tuples that stand for rewritten f-strings back into
    ``ast.JoinedStr`` nodes."""

    def __init__(self, fstrings: dict[tuple[int, int], list]) -> None:
        self.fstrings = fstrings

    def visit_Tuple(self, node: ast.Tuple) -> ast.AST:
        self.generic_visit(node)
        parts = self.fstrings.get((node.lineno, node.col_offset))
        if parts is None:
            return node
        elements = iter(node.elts)
        joined = self._joined(parts, elements, node)
        if next(elements, None) is not None:
            return node  # the tuple does not match the f-string's fields: leave it
        return joined

    def _joined(self, parts: list, elements, where: ast.AST) -> ast.JoinedStr:
        values: list[ast.expr] = []
        for part in parts:
            if isinstance(part, str):
                if part:
                    values.append(ast.copy_location(ast.Constant(value=part), where))
                continue
            value = next(elements, None)
            if value is None:
                value = ast.copy_location(ast.Constant(value=None), where)
            if part.debug_text:
                values.append(ast.copy_location(ast.Constant(value=part.debug_text), where))
            conversion = part.conversion
            if part.debug_text and conversion is None and part.spec is None:
                conversion = "r"  # `f"{x=}"` formats repr(x), as CPython builds it
            spec = None if part.spec is None else self._joined(part.spec, elements, where)
            formatted = ast.FormattedValue(value=value, conversion=ord(conversion) if conversion else -1,
                                           format_spec=spec)
            values.append(ast.copy_location(formatted, where))
        return ast.copy_location(ast.JoinedStr(values=_merge_constants(values)), where)


def _merge_constants(values: list[ast.expr]) -> list[ast.expr]:
    """Adjacent literal parts joined into one constant, as CPython joins them."""
    merged: list[ast.expr] = []
    for value in values:
        if isinstance(value, ast.Constant) and merged and isinstance(merged[-1], ast.Constant):
            merged[-1] = ast.copy_location(ast.Constant(value=merged[-1].value + value.value), merged[-1])
        else:
            merged.append(value)
    return merged
