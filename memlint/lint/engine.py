"""Lint files: read, decode, pre-filter, parse once, run every rule in one visit.

The flow for one file (:func:`lint_source`):

1. decode the bytes (PEP 263 cookie or UTF-8); undecodable bytes or a NUL byte
   are a MEM001 diagnostic at the offending position;
2. ``# memlint: skip-file`` skips the file;
3. the trigger pre-filter keeps only rules one of whose trigger tokens occurs
   in the text; with none left the file gets only the syntax check of step 4;
4. CPython's parser (``ast``) checks the syntax (a syntax error, or nesting
   too deep, is a MEM001 diagnostic; a file of newer syntax that libcst
   parses is parsed through :mod:`memlint.lint.newer_syntax` instead), and the pre-parse gate
   (:mod:`memlint.lint.facts`) drops the rules whose requirements the code
   does not meet;
5. the same ``ast`` tree is walked once into a node index; each remaining
   rule's ``visit_<Type>``/``leave_<Type>`` hooks get the nodes of their
   types in traversal order;
6. inline suppressions are applied.

A Jupyter notebook (``.ipynb``) is read first (:mod:`memlint.lint.notebook`):
its code cells, magics masked, make the module that steps 2-6 lint, and the
findings are mapped back to cells at the end (``Diagnostic.cell``). A
notebook that is not valid JSON or not nbformat 4 is a one-line error
(``FileResult.error``), like an unreadable file. Rules marked
``NOTEBOOK_ONLY`` run on notebooks only.

A rule that crashes on a file (or whose question crashes the semantic
model) is dropped for that file only and reported as an internal error
naming it, with ``--debug`` for the traceback; the other rules' findings on
that file are kept.

Steps 1-3 need neither the parser nor the rule modules: they use the
registry's static :func:`~memlint.lint.registry.rule_index`. The rule modules
are imported only when a file needs them (:func:`lint_pending`), so a run
where every file is a cache hit never imports them. The runner calls the two
halves separately to keep the cheap half out of its process pool.
"""

from __future__ import annotations

import codecs
import os
import re
import sys
import traceback
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from memlint.lint.diagnostic import Diagnostic, FileResult, Severity
from memlint.lint.registry import rule_classes, rule_index
from memlint.lint.suppression import is_suppressed, skips_file, suppressions

if TYPE_CHECKING:
    from memlint.lint.context import FileContext
    from memlint.lint.rule import Rule

SYNTAX_ERROR_CODE = "MEM001"

#: Larger files are skipped with a note: they are generated code (tables,
#: embedded data), not training code; the largest hand-written transformers
#: modeling files are ~0.3 MB.
MAX_SOURCE_BYTES = 2**20
#: A notebook's file holds its outputs too (plots as base64 images: tens of
#: MiB are common); the limit above applies to its code cells, this one to
#: the file that is read.
MAX_NOTEBOOK_BYTES = 64 * 2**20


def size_limit(path: str) -> int:
    """The most bytes of ``path`` that are read for linting."""
    from memlint.lint.notebook import is_notebook_path

    return MAX_NOTEBOOK_BYTES if is_notebook_path(path) else MAX_SOURCE_BYTES


@dataclass(frozen=True)
class LintOptions:
    """What to run on one file: the enabled codes and the codes ignored for it."""

    enabled: frozenset[str]
    ignored_here: frozenset[str] = field(default_factory=frozenset)

    def codes(self) -> list[str]:
        """The codes that run on the file, sorted."""
        return sorted(self.enabled - self.ignored_here)

    def rules(self) -> list[type]:
        """The rule classes that run on the file (imports their modules)."""
        return list(rule_classes(self.codes()).values())


@dataclass(frozen=True)
class Pending:
    """A decoded file that passed the trigger pre-filter and must be parsed.

    ``codes`` are the rules that may run on ``source`` (:func:`pending_for`);
    each rule's trigger tokens (``is_triggered_by``) are checked after the
    ``ast`` gate. Picklable, so the runner can hand it to a worker process.
    """

    path: str
    source: str
    codes: tuple[str, ...]
    #: a notebook's :class:`~memlint.lint.notebook.NotebookLayout` (``source``
    #: is the module of its code cells); None for a Python file
    notebook: object = None
    #: MEM001 is selected: a file that does not parse is reported (else it
    #: only gets a note that it was not linted)
    syntax_check: bool = True


def lint_source(path: str, data: bytes, options: LintOptions) -> FileResult:
    """Lint one file's bytes; never raises for bad content (MEM001 instead)."""
    result, pending = precheck(path, data, options)
    return result if pending is None else lint_pending(pending)


def precheck(path: str, data: bytes, options: LintOptions) -> tuple[FileResult, Pending | None]:
    """Decode, honour ``skip-file`` and apply the trigger pre-filter.

    Returns the file's result so far and, when some rule's trigger occurs in
    the text, the :class:`Pending` parse; without one the result is final.
    """
    result = FileResult(path=path)
    if len(data) > size_limit(path):
        result.note = too_large_note(path, len(data))
        return result, None
    layout = None
    from memlint.lint.notebook import is_notebook_path

    if is_notebook_path(path):
        notebook = read_notebook(path, data, result)
        if notebook is None:
            return result, None
        source, layout = notebook.module, notebook.layout
        if len(source) > MAX_SOURCE_BYTES:
            size = len(source.encode("utf-8", errors="surrogatepass")) / 2**20
            if size * 2**20 > MAX_SOURCE_BYTES:
                result.note = (f"{path}: skipped: its code cells hold {size:.1f} MiB, over the "
                               f"{MAX_SOURCE_BYTES / 2**20:.0f} MiB limit for linting (generated code?)")
                return result, None
    else:
        source = _decode(path, data, result)
    if source is None or skips_file(source):
        return result, None
    return result, pending_for(path, source, options, layout)


def lint_notebook(notebook, options: LintOptions) -> FileResult:
    """Lint a :class:`~memlint.lint.notebook.Notebook` already read (its
    current cell sources): what :func:`lint_source` gives for its bytes."""
    result = FileResult(path=notebook.path)
    if skips_file(notebook.module):
        return result
    pending = pending_for(notebook.path, notebook.module, options, notebook.layout)
    return result if pending is None else lint_pending(pending)


def too_large_note(path: str, size: int) -> str:
    """The note of a file skipped for its size."""
    return (f"{path}: skipped: {size / 2**20:.1f} MiB is over the {size_limit(path) / 2**20:.0f} MiB limit "
            "for linting (generated code?)")


def read_notebook(path: str, data: bytes, result: FileResult):
    """The :class:`~memlint.lint.notebook.Notebook` of ``data``, or None after
    setting ``result.error`` (not a notebook) or ``result.note`` (a notebook
    of another kernel language)."""
    from memlint.lint.notebook import NotebookError, is_python, load

    try:
        notebook = load(path, data)
    except NotebookError as exc:
        result.error = str(exc)
        return None
    if not is_python(notebook):
        result.note = f"{path}: skipped: not a Python notebook (kernel language {notebook.language!r})"
        return None
    return notebook


def pending_for(path: str, source: str, options: LintOptions, notebook=None) -> Pending | None:
    """The :class:`Pending` parse of decoded ``source``: the codes that may
    run on it (notebook-only rules only for a notebook, whose ``notebook``
    layout is given); None when nothing is to be done, not even the syntax
    check.

    When the syntax check is asked for, the file is parsed whatever its
    text, so the trigger tokens are not looked for here: the rules that
    pass the ``ast`` gate check theirs after the parse (:func:`_lint_module`),
    once, on fewer rules. Without it, the tokens decide whether the file is
    parsed at all."""
    index = rule_index()
    codes = []
    for code in options.codes():
        info = index.get(code)
        if info is None or code == SYNTAX_ERROR_CODE:
            continue
        if info.notebook_only and notebook is None:
            continue
        codes.append(code)
    if SYNTAX_ERROR_CODE in options.codes():
        return Pending(path, source, tuple(codes), notebook)
    triggered = tuple(code for code in codes
                      if index[code].triggers is None or any(token in source for token in index[code].triggers))
    return Pending(path, source, triggered, notebook, syntax_check=False) if triggered else None


def lint_pending(pending: Pending) -> FileResult:
    """Check a pre-filtered file's syntax, gate its rules on the ``ast``
    facts, and run the rules that can still report on the same tree."""
    result = _lint_module(pending)
    if pending.notebook is not None:
        from memlint.lint.notebook import to_cells

        result.diagnostics = sorted((to_cells(d, pending.notebook) for d in result.diagnostics), key=Diagnostic.sort_key)
    return result


def _lint_module(pending: Pending) -> FileResult:
    result = FileResult(path=pending.path)
    if pending.notebook is not None:
        tree, parsed_text = _notebook_tree(pending, result)
    else:
        tree, parsed_text = _python_tree(pending.path, pending.source, result)
    if not pending.syntax_check and any(d.code == SYNTAX_ERROR_CODE for d in result.diagnostics):
        result.diagnostics = [d for d in result.diagnostics if d.code != SYNTAX_ERROR_CODE]
        what = "its code does not parse" if tree is None else "some of its cells do not parse"
        result.note = result.note or f"{pending.path}: {'not linted' if tree is None else 'partly linted'}: {what} (MEM001 is not selected)"
    if tree is None:
        return result
    newer_syntax = parsed_text is not pending.source
    result.parsed = True
    if not pending.codes:
        return result  # only the syntax check was asked for
    from memlint.lint.facts import CodeFacts
    from memlint.lint.walk import NodeIndex

    index = NodeIndex(tree)
    codes = applicable_codes(pending.codes, CodeFacts.of(index))
    if not codes:
        return result
    rules = [rule for rule in rule_classes(codes).values() if rule.is_triggered_by(pending.source)]
    if not rules:
        return result
    from memlint.lint.context import FileContext

    ctx = FileContext(pending.path, pending.source, tree, index, notebook=pending.notebook)
    try:
        errors, details = _run_rules(ctx, rules)
    finally:
        ctx.close()
    # The suppression comments are read from the text that was parsed: the
    # down-levelled one tokenizes on the running Python, with the same lines.
    table = suppressions(parsed_text)
    kept = (d for d in ctx.diagnostics if not is_suppressed(d, table))
    if newer_syntax:
        # The fix engine re-checks a fixed file with CPython's parser, which
        # rejects this file (or, in a notebook, its broken cells): no fix is offered here.
        kept = (replace(d, fix=None) if d.fix is not None else d for d in kept)
    result.diagnostics = sorted([*result.diagnostics, *kept], key=Diagnostic.sort_key)
    result.internal_errors = errors
    result.internal_details = details
    return result


def applicable_codes(codes: tuple[str, ...], facts) -> tuple[str, ...]:
    """The codes among ``codes`` whose pre-parse requirements the module's
    code meets (:class:`~memlint.lint.facts.CodeFacts` of its syntax tree)."""
    index = rule_index()
    return tuple(code for code in codes if code not in index or index[code].applies_to(facts))


def _syntax_error(path: str, line: int, col: int, message: str) -> Diagnostic:
    return Diagnostic(
        code=SYNTAX_ERROR_CODE,
        name="syntax-error",
        severity=Severity.ERROR,
        message=message,
        path=path,
        line=max(line, 1),
        col=max(col, 1),
        end_line=max(line, 1),
        end_col=max(col, 1) + 1,
    )


def _position_of_offset(data: bytes, offset: int) -> tuple[int, int]:
    before = data[:offset]
    line = before.count(b"\n") + 1
    col = offset - (before.rfind(b"\n") + 1) + 1
    return line, col


def source_text(data: bytes) -> str | None:
    """``data`` decoded as the linter decodes a file (its PEP 263 cookie, else
    UTF-8; a BOM dropped), or None when it does not decode."""
    return _decode("", data, FileResult(path=""))


def _decode(path: str, data: bytes, result: FileResult) -> str | None:
    nul = data.find(b"\x00")
    if nul != -1:
        line, col = _position_of_offset(data, nul)
        result.diagnostics.append(_syntax_error(path, line, col, "source contains a NUL byte"))
        return None
    try:
        encoding = _detect_encoding(data)
    except SyntaxError as exc:
        result.diagnostics.append(_syntax_error(path, 1, 1, f"bad encoding declaration: {exc.msg}"))
        return None
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        line, col = _position_of_offset(data, exc.start)
        message = f"cannot decode byte 0x{data[exc.start]:02x} as {encoding}"
        result.diagnostics.append(_syntax_error(path, line, col, message))
        return None
    except (LookupError, UnicodeError) as exc:  # `# coding: rot13` names a codec that is not a text encoding
        result.diagnostics.append(_syntax_error(path, 1, 1, f"cannot decode as {encoding}: {exc}"))
        return None
    return text[1:] if text.startswith("\ufeff") else text


def _detect_encoding(data: bytes) -> str:
    """The PEP 263 encoding of ``data`` (UTF-8 without a cookie).

    Only the first two lines can carry a cookie; the common case (no
    ``coding`` in them, no BOM) skips :mod:`tokenize` and its imports.
    """
    first = data.find(b"\n")
    second = data.find(b"\n", first + 1) if first != -1 else -1
    head = data if second == -1 else data[:second]
    if not data.startswith(codecs.BOM_UTF8) and b"coding" not in head and _is_utf8(head):
        return "utf-8"
    import io
    import tokenize

    return tokenize.detect_encoding(io.BytesIO(data).readline)[0]


def _is_utf8(head: bytes) -> bool:
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return False  # tokenize words this case ("invalid or missing encoding declaration")
    return True


def _python_tree(path: str, source: str, result: FileResult):
    """CPython's ``ast`` of ``source`` and the text it was parsed from, or
    (None, None) after recording a MEM001.

    CPython's own parser decides what is valid Python for the running
    interpreter and gives the best messages; its tree is what the rules read.
    A file it rejects that libcst parses (newer syntax than the running
    interpreter: PEP 695, PEP 701) is parsed through
    :mod:`memlint.lint.newer_syntax`, which keeps every position; the text
    returned is then the down-levelled one (same lines and columns).
    """
    import ast

    try:
        return ast.parse(source), source
    except SyntaxError as exc:
        problem = exc.lineno or 1, exc.offset or 1, f"syntax error: {exc.msg}"
        newer = _parse_newer(source)
        if newer is not None and newer.tree is not None:
            return newer.tree, newer.text
        if newer is not None:
            if newer.error and _at_newer_syntax(source, problem[0]):
                problem = newer.error  # CPython stopped at the newer syntax: libcst's error is the one past it
            if newer.note and result.note is None:
                result.note = f"{path}: {newer.note}"
    except (RecursionError, MemoryError):
        problem = 1, 1, "too deeply nested to parse"
    except ValueError as exc:  # e.g. source that CPython rejects outright
        problem = 1, 1, f"cannot parse: {exc}"
    result.diagnostics.append(_syntax_error(path, *problem))
    return None, None


def _notebook_tree(pending: Pending, result: FileResult):
    """:func:`_python_tree` of a notebook's module, without the code cells
    that do not compile on their own: Jupyter compiles each cell by itself,
    so a cell with an exercise blank (``model = ``), a header with only a
    comment for its body, or half of a string or decorator split across
    cells fails alone and the other cells still run. Each such cell gets its
    MEM001 at its own position (the message's line numbers are the cell's)
    and is blanked (its lines kept, empty); the rest is parsed and linted.
    A cell with syntax newer than the running Python is left to
    :func:`_python_tree`, which down-levels it."""
    import ast

    layout = pending.notebook
    lines = pending.source.split("\n")
    broken = []
    for cell in layout.cells:
        if cell.lines:
            problem = _cell_problem("\n".join(lines[cell.start - 1:cell.end]) + "\n", cell.lines)
            if problem is not None:
                broken.append((cell, problem))
    if not broken:
        return _python_tree(pending.path, pending.source, result)
    for cell, (line, col, message) in broken:
        result.diagnostics.append(_syntax_error(pending.path, cell.start + line - 1, col, message))
        lines[cell.start - 1:cell.end] = [""] * cell.lines
    text = "\n".join(lines)
    try:
        return ast.parse(text), text
    except SyntaxError as exc:  # cells that compile alone but not as one module (a late `from __future__`)
        result.diagnostics.append(_syntax_error(pending.path, exc.lineno or 1, exc.offset or 1, f"syntax error: {exc.msg}"))
    except (RecursionError, MemoryError, ValueError):
        pass
    return None, None


def _cell_problem(text: str, lines: int) -> tuple[int, int, str] | None:
    """Why one cell's code does not compile alone, as (line in the cell,
    column, message); None when it does, or when its error is at syntax
    newer than the running Python."""
    import ast

    try:
        ast.parse(text)
    except SyntaxError as exc:
        line = min(max(exc.lineno or 1, 1), lines)
        if _at_newer_syntax(text, line):
            return None
        return line, exc.offset or 1, f"syntax error: {exc.msg}"
    except (RecursionError, MemoryError):
        return 1, 1, "too deeply nested to parse"
    except ValueError as exc:  # a NUL character
        return 1, 1, f"cannot parse: {exc}"
    return None


#: Text without which :mod:`memlint.lint.newer_syntax` has nothing to
#: down-level: ``def``/``class NAME[`` (type parameters), a ``type NAME``
#: statement, an f-string prefix. A syntax error in a file without any is
#: CPython's verdict at once, without importing libcst.
_NEWER_SYNTAX_HINT = re.compile(r"\b(?:def|class)\s+\w+\s*\[|(?:^|[;:])[ \t]*type[ \t]+\w|(?<![\w])(?:[rR]?[fF]|[fF][rR])['\"]",
                                re.MULTILINE)


def _at_newer_syntax(source: str, line: int) -> bool:
    """CPython's error is on a line with a construct of newer syntax (its
    message is about that construct, not about the real error)."""
    lines = source.splitlines()
    return 1 <= line <= len(lines) and _NEWER_SYNTAX_HINT.search(lines[line - 1]) is not None


def _parse_newer(source: str):
    """The :class:`~memlint.lint.newer_syntax.NewerParse` of a file CPython
    rejects, or None (nothing newer to down-level). libcst runs (in a child
    process) only for a file with a construct it could down-level."""
    if not _NEWER_SYNTAX_HINT.search(source):
        return None
    from memlint.lint.newer_syntax import parse_newer

    try:
        return parse_newer(source)
    except Exception:  # noqa: BLE001 - a failure of the fallback itself: CPython's verdict (MEM001) stands
        return None


#: The semantic model recurses a few Python frames per level of expression
#: nesting, and a long ``a + b + c ...`` chain is nested one level per
#: operand; the default limit of 1000 frames would refuse valid code (a
#: 400-term sum). Deeper code makes the rules that need the model report an
#: internal error (memlint's limit, not a problem of the user's code).
VISIT_RECURSION_LIMIT = 20_000


def _run_rules(ctx, classes: list[type]) -> tuple[list[str], list[str]]:
    """Run the rules over the file; (internal errors, their tracebacks)."""
    dispatcher = _Dispatcher(ctx, [rule(ctx) for rule in classes])
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(max(previous, VISIT_RECURSION_LIMIT))
    try:
        from memlint.lint.walk import indexed

        with indexed(ctx.index):
            dispatcher.run()
    finally:
        sys.setrecursionlimit(previous)
    return dispatcher.errors, dispatcher.details


def internal_error(code: str, exc: BaseException) -> str:
    """The one line that reports memlint's own failure while ``code`` ran:
    the semantic model's when its code raised, else the rule's."""
    frames = [frame.filename for frame in traceback.extract_tb(exc.__traceback__)]
    in_model = any(f"{os.sep}semantic{os.sep}" in name for name in frames[-3:])
    what = f"the semantic model crashed while rule {code} asked it" if in_model else f"rule {code} crashed"
    return (f"internal error: {what} ({type(exc).__name__}: {str(exc)[:200]}); {code}'s findings here are incomplete "
            "(this is memlint's bug, not your code's: --debug prints the traceback)")


class _Dispatcher:
    """Routes nodes to the ``visit_<Type>``/``leave_<Type>`` hooks of every rule."""

    def __init__(self, ctx: FileContext, rules: list[Rule]) -> None:
        self.ctx = ctx
        self.errors: list[str] = []
        #: the tracebacks of ``errors`` (printed with ``--debug``)
        self.details: list[str] = []
        self.visit_hooks: dict[str, list] = defaultdict(list)
        self.leave_hooks: dict[str, list] = defaultdict(list)
        from memlint.lint.walk import hooked_names

        for rule in rules:
            for type_name in hooked_names(type(rule)):
                for prefix, table in (("visit_", self.visit_hooks), ("leave_", self.leave_hooks)):
                    hook = getattr(rule, prefix + type_name, None)
                    if hook is not None:
                        table[type_name].append((rule, hook))

    def run(self) -> None:
        """Call the hooks on the nodes of their types, in traversal order;
        ``ctx.stack`` follows (the ancestors of the node at hand)."""
        from memlint.lint.walk import hook_name

        index = self.ctx.index
        nodes = index.nodes
        for position, is_visit in index.events(set(self.visit_hooks), set(self.leave_hooks)):
            node = nodes[position]
            self.ctx.position = position
            table = self.visit_hooks if is_visit else self.leave_hooks
            hooks = table.get(hook_name(node.__class__))
            if hooks:
                self._call(hooks, node)
        self.ctx.position = None

    def _call(self, hooks: list, node) -> None:
        for rule, hook in list(hooks):
            try:
                hook(node)
            except Exception as exc:  # memlint's own failure: it must not hide the other rules, nor look like the user's
                self.errors.append(internal_error(rule.CODE, exc))
                self.details.append(traceback.format_exc())
                self._drop(rule)

    def _drop(self, rule: Rule) -> None:
        for table in (self.visit_hooks, self.leave_hooks):
            for key, hooks in table.items():
                table[key] = [(r, h) for r, h in hooks if r is not rule]
