"""Lint files written for a newer Python than the one running memlint.

CPython's ``ast`` only parses the grammar of the running interpreter: under
Python 3.11 a file using PEP 695 type parameters (``def f[T](x: T)``,
``class C[T]:``), ``type`` statements (``type X = int``) or PEP 701 f-strings
(``f"{d["k"]}"``, a backslash or a comment inside a replacement field, a
replacement field over several lines of a single-quoted f-string) is a
syntax error, although it is valid Python 3.12.

When ``ast.parse`` fails, :func:`parse_newer` asks libcst, whose parser reads
Python up to :data:`memlint.lint.downlevel.NEWEST_PYTHON`. If libcst parses the file, its concrete
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

This module is imported only on this fallback path: linting code that the
running interpreter parses never imports it. It does not import libcst:
the rewriting (:mod:`memlint.lint.downlevel`) runs in a child process
(:mod:`memlint.lint.libcst_child`), because libcst's native parser can
crash or hang on hostile input. A file that libcst rejects too is a real
syntax error and stays MEM001, at libcst's position when it gives one.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field


@dataclass
class Downlevelled:
    """The result of :func:`downlevel`: ``source`` rewritten for the running
    parser, and the f-strings that became tuples, by the (1-based line,
    0-based UTF-8 byte column) of their first character."""

    source: str
    fstrings: dict[tuple[int, int], list] = field(default_factory=dict)


@dataclass
class FStringField:
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
#: four times that for slower machines; a 40 KB chain ran 150 s (the tester's report).
CHILD_TIMEOUT_SECONDS = 10.0
#: Address-space limit of the child (bytes, 2 GiB = 2**31): the child is a
#: Python interpreter with libcst and one parse at a time -- VmPeak 27.6 MB
#: after a small file, 39.6 MB after the 2000-term ``+`` chain (measured,
#: libcst 1.9.0, Python 3.11.7); 1000 nested ``[`` took ~980 MB in the
#: tester's report (deeper than CPython allows: libcst_limits.py never sends it).
CHILD_ADDRESS_SPACE_BYTES = 2 * 2**30
#: Most bytes read back from the child: the down-levelled text and its
#: f-string table are a few times the source, which is at most
#: memlint.lint.engine.MAX_NOTEBOOK_BYTES-sized.
_CHILD_OUTPUT_LIMIT = 256 * 2**20


def parse_newer(source: str) -> NewerParse:
    """Parse ``source``, which CPython rejected, as newer Python (see the
    module docstring). libcst runs in a child process
    (:mod:`memlint.lint.libcst_child`, one per process, reused) with :data:`CHILD_TIMEOUT_SECONDS` and :data:`CHILD_ADDRESS_SPACE_BYTES`,
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
    if "failed" in reply:
        return NewerParse(note=f"newer-syntax check failed (libcst: {reply['failed']}): CPython's verdict stands")
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
    """The child's JSON reply (:func:`answer`), or a short phrase saying why there is none."""
    from memlint.lint import libcst_child

    try:
        return libcst_child.ask(source, CHILD_TIMEOUT_SECONDS, CHILD_ADDRESS_SPACE_BYTES, _CHILD_OUTPUT_LIMIT)
    except libcst_child.ChildFailed as exc:
        return str(exc)


def _decode_parts(parts: list) -> list:
    return [part if isinstance(part, str) else
            FStringField(part["conversion"], part["debug_text"], part["kept"],
                   None if part["spec"] is None else _decode_parts(part["spec"]))
            for part in parts]


def _decode_fstrings(rows: list) -> dict[tuple[int, int], list]:
    return {(line, col): _decode_parts(parts) for line, col, parts in rows}


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
