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
import re
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


@dataclass
class NewerParse:
    """What :func:`parse_newer` made of a file that CPython rejects: its
    ``tree`` and down-levelled ``text`` (both None when libcst rejects it
    too or could not be asked); libcst's ``error`` position and message
    (1-based line, 1-based column, "syntax error: ...") when libcst rejects
    it; a ``note`` (without the file name) when libcst was not asked or its
    child process failed, so CPython's verdict stands unchecked."""

    tree: ast.Module | None = None
    text: str | None = None
    error: tuple[int, int, str] | None = None
    note: str | None = None


#: Wall-clock limit of the libcst child process (seconds): the longest ``+``
#: chain CPython 3.11 parses took libcst 2.46 s (memlint/lint/libcst_limits.py),
#: four times that for slower machines; a 40 KB chain took 150 s.
CHILD_TIMEOUT_SECONDS = 10.0
#: Address-space limit of the child (bytes, 2 GiB = 2**31): the child is a
#: Python interpreter with libcst (~150 MB of address space measured) and
#: one parse; 1000 nested ``[`` took ~980 MB (tests/security records it).
CHILD_ADDRESS_SPACE_BYTES = 2 * 2**30
#: Most bytes read back from the child: the down-levelled text and its
#: f-string table are a few times the source, which is at most
#: memlint.lint.engine.MAX_NOTEBOOK_BYTES-sized.
_CHILD_OUTPUT_LIMIT = 256 * 2**20


def parse_newer(source: str) -> NewerParse:
    """Parse ``source``, which CPython rejected, as newer Python (see the
    module docstring). libcst runs in a child process (:func:`_child_main`)
    with :data:`CHILD_TIMEOUT_SECONDS` and :data:`CHILD_ADDRESS_SPACE_BYTES`,
    so that its native parser crashing (SIGSEGV on deep nesting) or hanging
    costs this file's fallback only; a text over
    :func:`~memlint.lint.libcst_limits.libcst_refusal`'s limits is not
    given to libcst at all. Never raises.

    Positions in the tree are those of ``source`` (1-based lines, UTF-8 byte
    columns, as ``ast.parse(source)`` would give on a newer interpreter).
    """
    from memlint.lint.libcst_limits import libcst_refusal

    refusal = libcst_refusal(source)
    if refusal is not None:
        return NewerParse(note=f"not checked for newer Python syntax ({refusal}): CPython's verdict stands")
    reply = _run_child(source)
    if isinstance(reply, str):
        return NewerParse(note=f"newer-syntax check failed ({reply}): CPython's verdict stands")
    if "error" in reply:
        if not reply["error"]:
            return NewerParse()
        line, column, message = reply["error"]
        return NewerParse(error=(line, column, f"syntax error: {message}"))
    result = Downlevelled(reply["source"], _decode_fstrings(reply["fstrings"]))
    tree = tree_of(result)
    return NewerParse() if tree is None else NewerParse(tree=tree, text=result.source)


def tree_of(result: Downlevelled) -> ast.Module | None:
    """CPython's tree of the down-levelled text, its rewritten f-strings
    turned back into ``ast.JoinedStr``; None when it does not parse."""
    try:
        tree = ast.parse(result.source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if result.fstrings:
        tree = _FStringRestorer(result.fstrings).visit(tree)
    return tree


def _run_child(source: str) -> dict | str:
    """The child's JSON reply, or a short phrase saying why there is none."""
    import json
    import os
    import subprocess
    import sys

    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # -I: neither the user's directory nor PYTHON* variables reach the child's imports
    command = [sys.executable, "-I", "-c",
               f"import sys; sys.path.insert(0, {package_root!r}); "
               "from memlint.lint.newer_syntax import _child_main; _child_main()"]
    try:
        done = subprocess.run(command, input=source.encode("utf-8", "surrogatepass"), capture_output=True,
                              timeout=CHILD_TIMEOUT_SECONDS, check=False)
    except subprocess.TimeoutExpired:
        return f"libcst took over {CHILD_TIMEOUT_SECONDS:g} s"
    except OSError as exc:
        return f"cannot start the libcst process: {exc.strerror or exc}"
    if done.returncode != 0:
        how = f"signal {-done.returncode}" if done.returncode < 0 else f"exit status {done.returncode}"
        return f"the libcst process ended with {how}"
    if len(done.stdout) > _CHILD_OUTPUT_LIMIT:
        return "the libcst process sent too much"
    try:
        reply = json.loads(done.stdout)
    except ValueError:
        return "the libcst process sent no valid reply"
    return reply if isinstance(reply, dict) else "the libcst process sent no valid reply"


def _child_main() -> None:
    """The child process: source (UTF-8) on stdin, one JSON object on stdout:
    ``{"source": ..., "fstrings": [[line, col, parts], ...]}`` or
    ``{"error": [line, column, message]}``."""
    import json
    import resource
    import sys

    try:
        resource.setrlimit(resource.RLIMIT_AS, (CHILD_ADDRESS_SPACE_BYTES, CHILD_ADDRESS_SPACE_BYTES))
    except (ValueError, OSError):
        pass  # a lower hard limit already applies
    source = sys.stdin.buffer.read().decode("utf-8", "surrogatepass")
    try:
        result = downlevel(source)
    except cst.ParserSyntaxError as exc:
        json.dump({"error": _libcst_error(exc)}, sys.stdout)
        return
    if result is None:
        json.dump({"error": None}, sys.stdout)
        return
    fstrings = [[line, col, _encode_parts(parts)] for (line, col), parts in result.fstrings.items()]
    json.dump({"source": result.source, "fstrings": fstrings}, sys.stdout)


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


def _decode_parts(parts: list) -> list:
    return [part if isinstance(part, str) else
            _Field(part["conversion"], part["debug_text"], part["kept"],
                   None if part["spec"] is None else _decode_parts(part["spec"]))
            for part in parts]


def _decode_fstrings(rows: list) -> dict[tuple[int, int], list]:
    return {(line, col): _decode_parts(parts) for line, col, parts in rows}


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
        """The literal texts (str) and fields (:class:`_Field`) of the unit,
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
