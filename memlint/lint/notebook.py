"""Jupyter notebooks (``.ipynb``): the code cells as one Python module, and back.

A notebook is linted as the kernel runs it: its code cells, in stored order,
make one module (top-level names are shared between cells, so the semantic
model sees a value bound in one cell used in a later one). Markdown and raw
cells are left out. :class:`NotebookLayout` maps each line of that module to
its cell and its line in the cell; diagnostics are reported as
``path:cell N:line:col``, where N counts every cell of the notebook from 1,
as stored (markdown cells included), as Jupyter and ruff number them.

IPython syntax that is not Python is *masked*, never a syntax error: a line
magic (``%matplotlib inline``, ``%time f()``), a shell escape (``!pip
install x``), an assignment from one (``files = !ls``, ``t = %timeit -o
f()``) and a help query (``?obj``, ``obj?``, ``obj??``) becomes ``pass`` at
its indentation (a backslash-continued magic's following lines become
empty), so line numbers do not move and a magic inside a block still leaves
a valid block. A cell magic other than those that run the rest of the cell
as Python (``%%time``, ``%%timeit``, ``%%capture``, ``%%prun``) masks the
whole cell (``%%bash``, ``%%writefile`` ... are not Python). Only lines at
the start of a statement are candidates: a ``%`` that continues a bracketed
expression, or text inside a triple-quoted string, is left alone.

A cell whose first line is indented is dedented first, as IPython does
(:func:`leading_indent`): the module holds its lines without that
indentation, and :class:`CellSpan` keeps what was removed, so that
findings' columns and fixes' edits are mapped back to the cell's own text
(:func:`to_cells`, :func:`to_source_edit`).

Reading uses the JSON exactly as nbformat defines it (``nbformat`` 4.x: a
``cells`` list, each with ``cell_type`` and a ``source`` string or list of
strings, joined) with the standard :mod:`json` module: importing
:mod:`nbformat` costs about 120 ms (its validator and jsonschema), more than
linting a notebook, so the lint path does not. ``--fix`` rewrites only the
changed cells' ``source`` values in the file's own JSON text (same
indentation, same list-of-lines or string style, same escaping), checks that
nothing else changed, and validates the result with :mod:`nbformat` before it
is written (:func:`rewrite_sources`).
"""

from __future__ import annotations

import ast
import bisect
import json
import re
from dataclasses import dataclass, field

from memlint.lint.diagnostic import LINE_BREAK

NOTEBOOK_SUFFIX = ".ipynb"

#: Cell magics whose cell body IPython still runs as Python code.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun"})

#: ``name = !cmd`` / ``a, b = %magic``: an assignment from a shell escape or a magic.
_MAGIC_ASSIGNMENT = re.compile(r"^\s*[A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*\s*=\s*[!%]")


class NotebookError(ValueError):
    """A notebook that cannot be linted: bad JSON or not nbformat 4 (one line)."""


def is_notebook_path(path: object) -> bool:
    """True when ``path`` names a Jupyter notebook (``.ipynb``, any case)."""
    return str(path).lower().endswith(NOTEBOOK_SUFFIX)


@dataclass(frozen=True)
class CellSpan:
    """Where one code cell lies in the notebook's module.

    ``number`` is the cell's 1-based position among all cells of the notebook
    (markdown and raw ones included), ``index`` its 0-based index in
    ``cells``; ``start`` is the module line of its first line and ``lines``
    how many lines it has; ``magic`` the ``%%`` cell magic it starts with;
    ``masked`` the 1-based lines of the cell that were masked.

    ``indent`` is the leading indentation IPython strips from the cell before
    running it (its ``leading_indent`` transform, see :func:`leading_indent`)
    and ``dedented`` the 1-based lines it was stripped from: the module holds
    those lines without it, so a module column on one of them is
    ``len(indent)`` columns left of the cell's (:meth:`source_col`).
    ``raised``: the cell's stored outputs (as saved in the notebook) hold an
    ``error`` output and no ``execute_result``: when its authors last ran it,
    it raised before its last expression's value reached IPython's output
    cache (:func:`stored_run_raised`).
    """

    number: int
    index: int
    start: int
    lines: int
    magic: str | None = None
    masked: frozenset[int] = frozenset()
    indent: str = ""
    dedented: frozenset[int] = frozenset()
    raised: bool = False

    def source_col(self, line: int, col: int) -> int:
        """The cell's column of module column ``col`` on the cell's ``line``."""
        return col + len(self.indent) if line in self.dedented else col

    @property
    def end(self) -> int:
        """The module line of the cell's last line (``start - 1`` when empty)."""
        return self.start + self.lines - 1

    @property
    def runs_python(self) -> bool:
        """False for a cell masked whole (a ``%%bash``-style cell magic)."""
        return self.magic is None or self.magic in PYTHON_CELL_MAGICS


@dataclass(frozen=True)
class NotebookLayout:
    """The code cells of a notebook in module order (picklable).

    ``backends``: the backend each ``%matplotlib``/``%pylab`` line magic of
    the notebook selects, in order (``""`` for the bare magic, which
    selects the kernel's default: inline in Jupyter)."""

    cells: tuple[CellSpan, ...] = ()
    _starts: tuple[int, ...] = field(default=(), repr=False, compare=False)
    backends: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "_starts", tuple(cell.start for cell in self.cells))

    def locate(self, line: int) -> tuple[CellSpan, int] | None:
        """The cell holding module line ``line`` and the line's number in it."""
        position = bisect.bisect_right(self._starts, line) - 1
        while position >= 0:
            cell = self.cells[position]
            if cell.lines and cell.start <= line <= cell.end:
                return cell, line - cell.start + 1
            if cell.lines:
                return None
            position -= 1  # an empty cell shares its start with the next one
        return None

    def cell_of(self, line: int) -> CellSpan | None:
        """The cell holding module line ``line``, or None."""
        found = self.locate(line)
        return None if found is None else found[0]


@dataclass
class Notebook:
    """A notebook read for linting: its text, its cells and the module built
    from its code cells.

    ``cells`` are the raw cell objects (dicts) of the JSON; ``sources`` the
    code cells' sources by cell index (joined, as nbformat joins them).
    """

    path: str
    text: str
    document: dict
    cells: list
    sources: dict[int, str]
    layout: NotebookLayout
    module: str
    language: str | None = None

    def with_sources(self, sources: dict[int, str]) -> "Notebook":
        """The same notebook with the code cells' sources replaced by ``sources``
        (cell index -> text); the text and the JSON stay the original ones."""
        layout, module = build_module(self.cells, sources)
        return Notebook(self.path, self.text, self.document, self.cells, dict(sources), layout, module, self.language)

    def cell_lines(self) -> dict[int, list[str]]:
        """Each code cell's source lines by cell number (for snippets)."""
        return {cell.number: split_lines(self.sources[cell.index]) for cell in self.layout.cells}


def _one_line(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def load(path: str, data: bytes) -> Notebook:
    """Read a notebook's bytes (UTF-8 JSON, nbformat 4).

    Raises:
        NotebookError: not UTF-8, not JSON, not an nbformat 4 notebook, or
            cells of the wrong shape; the message is one line naming the file.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotebookError(f"{path}: not a valid notebook: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise NotebookError(f"{path}: not a valid notebook: bad JSON ({_one_line(exc)})") from None
    if not isinstance(document, dict):
        raise NotebookError(f"{path}: not a valid notebook: the JSON is not an object")
    major = document.get("nbformat")
    if major != 4:
        found = "no nbformat version" if major is None else f"nbformat {_one_line(major, 20)}"
        raise NotebookError(f"{path}: not a valid notebook: {found}; memlint reads nbformat 4 (convert with "
                            "`jupyter nbconvert --to notebook`)")
    cells = document.get("cells")
    if not isinstance(cells, list):
        raise NotebookError(f"{path}: not a valid notebook: 'cells' is not a list")
    sources: dict[int, str] = {}
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict) or not isinstance(cell.get("cell_type"), str):
            raise NotebookError(f"{path}: not a valid notebook: cell {index + 1} has no cell_type")
        if cell["cell_type"] != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(part, str) for part in source):
            source = "".join(source)
        if not isinstance(source, str):
            raise NotebookError(f"{path}: not a valid notebook: cell {index + 1}'s source is not text")
        sources[index] = source
    layout, module = build_module(cells, sources)
    return Notebook(path, text, document, cells, sources, layout, module, _language(document))


def _language(document: dict) -> str | None:
    metadata = document.get("metadata")
    if not isinstance(metadata, dict):
        return None
    for key, field_name in (("language_info", "name"), ("kernelspec", "language")):
        table = metadata.get(key)
        if isinstance(table, dict) and isinstance(table.get(field_name), str):
            return table[field_name].lower()
    return None


def is_python(notebook: Notebook) -> bool:
    """True unless the notebook's metadata names another kernel language (R, Julia...)."""
    return notebook.language is None or notebook.language in ("python", "python3", "ipython", "ipython3")


def split_lines(text: str) -> list[str]:
    """``text``'s lines without their line ends (Python's \\n, \\r\\n, \\r); a
    final line end does not start another line."""
    if not text:
        return []
    lines = LINE_BREAK.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def build_module(cells: list, sources: dict[int, str]) -> tuple[NotebookLayout, str]:
    """The layout and the masked module text of the code cells ``sources``."""
    spans = []
    out: list[str] = []
    backends: list[str] = []
    line = 1
    for index in sorted(sources):
        lines = split_lines(sources[index])
        indent, dedented = leading_indent(lines)
        if indent:
            lines = [text[len(indent):] if number in dedented else text for number, text in enumerate(lines, start=1)]
        masked, masked_lines, magic = mask_cell(lines)
        raised = index < len(cells) and stored_run_raised(cells[index])
        spans.append(CellSpan(index + 1, index, line, len(lines), magic, frozenset(masked_lines), indent, dedented, raised))
        if magic is None or magic in PYTHON_CELL_MAGICS:
            backends.extend(_backend_of(lines[number - 1]) for number in sorted(masked_lines)
                            if _BACKEND_MAGIC.match(lines[number - 1]))
        out.extend(masked)
        line += len(lines)
    return NotebookLayout(tuple(spans), backends=tuple(backends)), "".join(text + "\n" for text in out)


#: ``%matplotlib [backend]`` and ``%pylab [backend]`` (IPython's ``%matplotlib`` magic,
#: IPython/core/magics/pylab.py: the optional argument names the backend; options such
#: as ``--list`` select none).
_BACKEND_MAGIC = re.compile(r"^\s*%(?:matplotlib|pylab)\b")


def _backend_of(text: str) -> str:
    """The backend a ``%matplotlib``/``%pylab`` line selects (``""``: the default)."""
    words = [word for word in text.split("#", 1)[0].split()[1:] if not word.startswith("-")]
    return words[0] if words else ""


_LEADING_WHITESPACE = re.compile(r"^[ \t]+")


def leading_indent(lines: list[str]) -> tuple[str, frozenset[int]]:
    """The indentation IPython strips from a cell before running it, and the
    1-based lines it strips it from.

    IPython's input transformer (``IPython/core/inputtransformer2.py``,
    IPython 8.12.3: ``TransformerManager.cleanup_transforms`` runs
    ``leading_empty_lines`` then ``leading_indent``) drops the cell's
    leading blank lines, takes the spaces and tabs that start the first
    remaining line, and removes them from every line that starts with them
    (other lines are kept as they are). Only then are magics and the code
    read, so a cell whose lines all start with one space runs as if they
    did not. Returns ``("", frozenset())`` when the first non-blank line is
    not indented.
    """
    first = next((text for text in lines if text.strip()), None)
    match = None if first is None else _LEADING_WHITESPACE.match(first)
    if match is None:
        return "", frozenset()
    indent = match.group(0)
    return indent, frozenset(number for number, text in enumerate(lines, start=1) if text.startswith(indent))


def stored_run_raised(cell: dict) -> bool:
    """The cell's stored outputs show that it raised when it was last run: an
    ``error`` output and no ``execute_result`` (nbformat 4's output types,
    ``nbformat/v4/nbformat.v4.schema.json``). IPython's display hook stores
    the value of a cell's last expression in ``Out`` only when that
    expression ran; a cell that raised stored nothing. A cell saved without
    outputs says nothing (False)."""
    outputs = cell.get("outputs")
    if not isinstance(outputs, list):
        return False
    kinds = {output.get("output_type") for output in outputs if isinstance(output, dict)}
    return "error" in kinds and "execute_result" not in kinds


def mask_cell(lines: list[str]) -> tuple[list[str], set[int], str | None]:
    """Mask the IPython syntax of one cell's lines (see the module docstring).

    Returns the masked lines (as many as ``lines``), the 1-based numbers of
    the lines masked, and the name of the cell magic the cell starts with.
    """
    out = list(lines)
    masked: set[int] = set()
    magic = None
    first = 0
    if lines and lines[0].startswith("%%"):
        parts = lines[0][2:].split()
        magic = parts[0] if parts else ""
        if magic not in PYTHON_CELL_MAGICS:
            return [""] * len(lines), set(range(1, len(lines) + 1)), magic
        out[0] = ""
        masked.add(1)
        first = 1
    scanner = _Scanner()
    continuation = False
    for position in range(first, len(lines)):
        text = lines[position]
        if continuation:  # a backslash-continued magic goes on
            out[position] = ""
            masked.add(position + 1)
            continuation = text.rstrip().endswith("\\")
            continue
        if scanner.at_statement_start() and _is_ipython_line(text, scanner):
            indent = text[: len(text) - len(text.lstrip())]
            out[position] = _timed_statement(text) or indent + "pass"
            masked.add(position + 1)  # no fix touches it either way
            continuation = text.rstrip().endswith("\\")
            continue
        scanner.feed(text)
    return out, masked, magic


#: Line magics that run the rest of their line as Python in the kernel's namespace.
PYTHON_LINE_MAGICS = frozenset({"time", "timeit", "prun"})
_LINE_MAGIC = re.compile(r"^(\s*)(%(\w+)\s+)(\S.*)$")


def _timed_statement(text: str) -> str | None:
    """``%time train(model)`` -> ``_ =   train(model)``: the timed code,
    analysed like any other line, at the columns it has in the cell (the
    magic's text becomes an assignment to ``_`` of the same width, as
    IPython's output cache does); None when the rest of the line is not an
    expression (options such as ``-n 10``, a statement)."""
    match = _LINE_MAGIC.match(text.rstrip("\r\n"))
    if match is None or match.group(3) not in PYTHON_LINE_MAGICS or match.group(4).startswith("-"):
        return None
    code = match.group(4)
    try:
        ast.parse("_ = " + code)
    except SyntaxError:
        return None
    width = len(match.group(2))
    return match.group(1) + "_ =" + " " * (width - 3) + code


def _is_ipython_line(text: str, scanner: "_Scanner") -> bool:
    stripped = text.strip()
    if not stripped or stripped.startswith("#"):
        return False
    if stripped[0] in "%!?":
        return True
    if _MAGIC_ASSIGNMENT.match(text):
        return True
    code = scanner.code_of(text).rstrip()
    return code.endswith("?")


class _Scanner:
    """Just enough of Python's tokenizer to tell whether a line starts a
    statement: open brackets, triple-quoted strings and backslash
    continuations carried from line to line; comments and strings skipped."""

    def __init__(self) -> None:
        self.depth = 0
        self.string: str | None = None  # the open triple quote
        self.continued = False

    def at_statement_start(self) -> bool:
        return self.depth == 0 and self.string is None and not self.continued

    def code_of(self, text: str) -> str:
        """``text`` without its comment and with string contents blanked (a
        line that starts a statement; the scanner's state is not changed)."""
        probe = _Scanner()
        return probe._scan(text)

    def feed(self, text: str) -> None:
        code = self._scan(text)
        self.continued = code.rstrip().endswith("\\") and self.string is None

    def _scan(self, text: str) -> str:
        kept = []
        i, n = 0, len(text)
        while i < n:
            if self.string is not None:
                end = _string_end(text, i, self.string)
                if end is None:
                    return "".join(kept)
                self.string = None
                kept.append('""')
                i = end
                continue
            char = text[i]
            if char == "#":
                break
            if char in "'\"":
                quote = text[i:i + 3] if text[i:i + 3] in ("'''", '"""') else char
                end = _string_end(text, i + len(quote), quote)
                if end is None:
                    if len(quote) == 3:
                        self.string = quote
                    return "".join(kept)
                kept.append('""')
                i = end
                continue
            if char in "([{":
                self.depth += 1
            elif char in ")]}":
                self.depth = max(0, self.depth - 1)
            kept.append(char)
            i += 1
        return "".join(kept)


def _string_end(text: str, i: int, quote: str) -> int | None:
    """The index after the closing ``quote`` at or after ``i`` (backslash
    escapes skipped), or None when the line ends first."""
    n = len(text)
    while i < n:
        if text[i] == "\\":
            i += 2
            continue
        if text.startswith(quote, i):
            return i + len(quote)
        i += 1
    return None


# ---------------------------------------------------------------------------------
# mapping module positions to cells
# ---------------------------------------------------------------------------------
def to_cells(diagnostic, layout: NotebookLayout):
    """``diagnostic`` (module positions) with its position, and its fix's
    edits, in cell coordinates (``cell`` set). A fix whose edits leave the
    diagnostic's cell or touch a masked line is dropped: it could not be
    written back to one cell's source."""
    from dataclasses import replace

    found = layout.locate(diagnostic.line)
    if found is None:
        if not layout.cells:
            return replace(diagnostic, fix=None)
        cell = next((c for c in reversed(layout.cells) if c.lines), layout.cells[-1])
        line = max(1, cell.lines)
        return replace(diagnostic, cell=cell.number, line=line, col=1, end_line=line, end_col=2, fix=None)
    cell, line = found
    end = _inside(cell, diagnostic.end_line, diagnostic.end_col)
    end_line, end_col = end if end is not None else (line, diagnostic.col + 1)
    fix = _fix_in_cell(diagnostic.fix, cell)
    return replace(diagnostic, cell=cell.number, line=line, col=cell.source_col(line, diagnostic.col),
                   end_line=end_line, end_col=cell.source_col(end_line, end_col), fix=fix)


def _inside(cell: CellSpan, line: int, col: int) -> tuple[int, int] | None:
    """(line in cell, col) of module position (line, col) when it lies in
    ``cell`` or right after its last line (column 1)."""
    relative = line - cell.start + 1
    if 1 <= relative <= cell.lines or (relative == cell.lines + 1 and col == 1):
        return relative, col
    return None


def _fix_in_cell(fix, cell: CellSpan):
    if fix is None:
        return None
    from dataclasses import replace

    edits = []
    for edit in fix.edits:
        start = _inside(cell, edit.start_line, edit.start_col)
        end = _inside(cell, edit.end_line, edit.end_col)
        if start is None or end is None:
            return None
        touched = range(start[0], max(start[0], end[0] - (1 if end[1] == 1 and end[0] > start[0] else 0)) + 1)
        if any(number in cell.masked for number in touched):
            return None
        edits.append(to_source_edit(replace(edit, start_line=start[0], start_col=start[1], end_line=end[0],
                                            end_col=end[1], cell=cell.number), cell))
    plans = []
    for plan in fix.plans:  # resolved on the cell's (dedented) module text when fixing (memlint.lint.fixes.resolve_cells)
        start, end = _inside(cell, *plan.start), _inside(cell, *plan.end)
        if start is None or end is None:
            return None
        plans.append(replace(plan, start=start, end=end, cell=cell.number))
    return replace(fix, edits=tuple(edits), plans=tuple(plans))


def to_source_edit(edit, cell: CellSpan):
    """``edit``, in the cell's lines as the module holds them, in the cell's
    own source: for a cell whose indentation IPython strips
    (:func:`leading_indent`), columns on the lines it is stripped from move
    right by the indentation, and every line the edit's text starts gets it
    too, so that IPython strips it from the new lines as from the old ones.
    An edit of whole lines (from column 1 to column 1, its text whole lines)
    stays at column 1."""
    if not cell.indent:
        return edit
    from dataclasses import replace

    indent = cell.indent
    pieces = edit.content.split("\n")
    if edit.start_col == 1 and edit.end_col == 1 and (not edit.content or edit.content.endswith("\n")):
        content = "\n".join(indent + piece if piece else piece for piece in pieces)
        return replace(edit, content=content)
    start_col = cell.source_col(edit.start_line, edit.start_col)
    if pieces[0] and start_col == 1:  # the text starts a line that held no indentation to strip
        pieces[0] = indent + pieces[0]
    last = len(pieces) - 1
    for number in range(1, len(pieces)):
        if pieces[number] or number == last and edit.end_line in cell.dedented:
            pieces[number] = indent + pieces[number]  # the rest of the end line follows the last piece
    return replace(edit, start_col=start_col, end_col=cell.source_col(edit.end_line, edit.end_col),
                   content="\n".join(pieces))


# ---------------------------------------------------------------------------------
# writing changed cells back
# ---------------------------------------------------------------------------------
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_NON_ASCII_ESCAPE = re.compile(r"\\u(?!00[0-7][0-9a-fA-F])[0-9a-fA-F]{4}")


def source_spans(text: str) -> dict[int, tuple[int, int]]:
    """``[start, end)`` offsets in the notebook's JSON ``text`` of each cell's
    ``source`` value, by cell index (the standard library's JSON scanner
    skips the other values).

    Raises:
        ValueError: ``text`` is not a JSON object with a ``cells`` array.
    """
    from json.decoder import JSONDecoder, scanstring

    decoder = JSONDecoder()

    def ws(i: int) -> int:
        return _WHITESPACE.match(text, i).end()

    def expect(i: int, char: str) -> int:
        if text[i:i + 1] != char:
            raise ValueError(f"expected {char!r} at offset {i}")
        return i + 1

    def members(i: int, on_member) -> int:
        i = expect(ws(i), "{")
        i = ws(i)
        if text[i:i + 1] == "}":
            return i + 1
        while True:
            i = expect(ws(i), '"')
            key, i = scanstring(text, i)
            i = ws(expect(ws(i), ":"))
            i = on_member(key, i)
            i = ws(i)
            if text[i:i + 1] == ",":
                i += 1
                continue
            return expect(i, "}")

    def skip(i: int) -> int:
        return decoder.raw_decode(text, i)[1]

    spans: dict[int, tuple[int, int]] = {}

    def cells(i: int) -> int:
        i = expect(ws(i), "[")
        i = ws(i)
        if text[i:i + 1] == "]":
            return i + 1
        index = 0
        while True:
            def member(key: str, j: int, index=index) -> int:
                end = skip(j)
                if key == "source":
                    spans[index] = (j, end)
                return end

            i = members(ws(i), member)
            index += 1
            i = ws(i)
            if text[i:i + 1] == ",":
                i += 1
                continue
            return expect(i, "]")

    def top(key: str, i: int) -> int:
        return cells(i) if key == "cells" else skip(i)

    members(0, top)
    return spans


def _render_source(text: str, start: int, end: int, new: str) -> str:
    """``new`` as the JSON value replacing ``text[start:end]``, in the style
    of the value it replaces (a list of lines with its whitespace, or one string)."""
    ensure_ascii = text.isascii() and bool(_NON_ASCII_ESCAPE.search(text))
    old = text[start:end]
    if old.startswith('"'):
        return json.dumps(new, ensure_ascii=ensure_ascii)
    lines = new.splitlines(keepends=True)
    if not lines:
        return "[]"
    inner = old[1:-1]
    if inner.strip():
        opening = inner[: len(inner) - len(inner.lstrip())]
        closing = inner[len(inner.rstrip()):]
        first_end = json.JSONDecoder().raw_decode(inner, len(opening))[1]
        rest = inner[first_end:].lstrip()
        if rest.startswith(","):
            after = rest[1:]
            separator = after[: len(after) - len(after.lstrip())]
        else:
            separator = opening
    else:
        line_start = text.rfind("\n", 0, start) + 1
        indent = text[line_start: line_start + len(text[line_start:start]) - len(text[line_start:start].lstrip())]
        unit = _indent_unit(text)
        opening, separator, closing = "\n" + indent + unit, "\n" + indent + unit, "\n" + indent
    items = [json.dumps(line, ensure_ascii=ensure_ascii) for line in lines]
    return "[" + opening + ("," + separator).join(items) + closing + "]"


def _indent_unit(text: str) -> str:
    match = re.search(r"\n([ \t]+)\S", text)
    return match.group(1) if match else " "


def rewrite_sources(text: str, sources: dict[int, str]) -> str:
    """The notebook JSON ``text`` with the ``source`` of each cell in
    ``sources`` (cell index -> new text) replaced, and nothing else changed:
    outputs, metadata, execution counts, key order and indentation stay as
    they are, byte for byte.

    The result is checked: parsed again, it equals the original document
    except for those sources, and :mod:`nbformat` validates it as it
    validated the original (a notebook that was valid stays valid).

    Raises:
        ValueError: the text cannot be rewritten safely (one line).
    """
    spans = source_spans(text)
    pieces = []
    last = 0
    for index in sorted(sources):
        if index not in spans:
            raise ValueError(f"cell {index + 1} has no source to rewrite")
        start, end = spans[index]
        pieces.append(text[last:start])
        pieces.append(_render_source(text, start, end, sources[index]))
        last = end
    pieces.append(text[last:])
    result = "".join(pieces)
    before, after = json.loads(text), json.loads(result)
    for index, new in sources.items():
        cell_after = after["cells"][index]
        got = cell_after["source"]
        if ("".join(got) if isinstance(got, list) else got) != new:
            raise ValueError(f"cell {index + 1}'s source did not round-trip")
        cell_after["source"] = before["cells"][index]["source"]
    if after != before:
        raise ValueError("the rewrite changed more than the cells' sources")
    _check_still_valid(text, result)
    return result


def _check_still_valid(original: str, rewritten: str) -> None:
    """nbformat's validation of the rewritten notebook, when it accepted the original."""
    import warnings

    import nbformat

    def problem(text: str) -> str | None:
        try:
            with warnings.catch_warnings():
                # nbformat 5 warns (MissingIDFieldWarning) for a 4.5 notebook without cell ids, on stderr
                # as raw text; the rewrite adds no ids and the verdict is the exception alone
                warnings.simplefilter("ignore")
                nbformat.validate(nbformat.reader.reads(text))
        except Exception as exc:  # nbformat's ValidationError and the reader's errors
            return _one_line(exc)
        return None

    found = problem(rewritten)
    if found is not None and problem(original) is None:
        raise ValueError(f"the fixed notebook would not be valid nbformat ({found})")


# ---------------------------------------------------------------------------------
# percent-format cells (rule examples, tests)
# ---------------------------------------------------------------------------------
_PERCENT_MARKER = re.compile(r"^# %%")


def percent_cells(text: str) -> list[tuple[int, str]]:
    """The cells of ``text`` in the percent format of Jupytext and VS Code:
    a line starting with ``# %%`` starts a cell (the marker line belongs to
    none); text before the first marker is a cell when it is not blank.
    Returns (line in ``text`` of the cell's first line, cell source) pairs."""
    cells: list[tuple[int, list[str]]] = []
    current: list[str] | None = None
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        if _PERCENT_MARKER.match(line):
            current = []
            cells.append((number + 1, current))
            continue
        if current is None:
            current = []
            cells.append((number, current))
        current.append(line)
    result = []
    for first, lines in cells:
        source = "".join(lines)
        if first == 1 and not source.strip() and len(cells) > 1:
            continue
        result.append((first, source.rstrip("\n")))
    return result


def notebook_from_cells(sources: list[str]) -> str:
    """An nbformat 4.5 notebook (JSON text, as Jupyter writes it) whose code
    cells are ``sources``, a markdown cell first (so that cell numbers count
    it, as they count every cell)."""
    cells = [{"cell_type": "markdown", "id": "cell-0", "metadata": {}, "source": ["Example"]}]
    for number, source in enumerate(sources, start=1):
        cells.append({"cell_type": "code", "execution_count": None, "id": f"cell-{number}", "metadata": {},
                      "outputs": [], "source": source.splitlines(keepends=True)})
    document = {
        "cells": cells,
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                     "language_info": {"name": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def notebook_from_cell_sources(path: str, cells: list[tuple[str, str]]) -> Notebook:
    """A :class:`Notebook` of an editor's cells, (cell type, text) in order
    (the language server's notebook documents); it has no JSON text."""
    raw = [{"cell_type": kind, "source": text} for kind, text in cells]
    sources = {index: text for index, (kind, text) in enumerate(cells) if kind == "code"}
    layout, module = build_module(raw, sources)
    return Notebook(path, "", {"cells": raw, "nbformat": 4}, raw, sources, layout, module)


def source_line_numbers(text: str) -> dict[tuple[int, int], int]:
    """(cell number, line in the cell) -> 0-based line of the notebook's JSON
    ``text`` that holds it: the line of its element in a list-of-lines
    ``source``, or of the string for a one-string ``source``.

    Raises:
        ValueError: ``text`` is not a notebook's JSON.
    """
    decoder = json.JSONDecoder()
    found: dict[tuple[int, int], int] = {}
    for index, (start, end) in source_spans(text).items():
        number = index + 1
        if text[start] != "[":
            value, _ = decoder.raw_decode(text, start)
            json_line = text.count("\n", 0, start)
            for line in range(1, len(split_lines(value if isinstance(value, str) else "")) + 1):
                found[(number, line)] = json_line
            continue
        i, line = start + 1, 1
        while True:
            i = _WHITESPACE.match(text, i).end()
            if i >= end or text[i] == "]":
                break
            value, after = decoder.raw_decode(text, i)
            json_line = text.count("\n", 0, i)
            for _ in range(max(1, len(LINE_BREAK.findall(value)) if isinstance(value, str) else 1)):
                found[(number, line)] = json_line
                line += 1
            i = _WHITESPACE.match(text, after).end()
            if text[i:i + 1] == ",":
                i += 1
    return found
