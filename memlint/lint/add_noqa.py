"""``memlint check --add-noqa``: suppress every reported finding in place.

Each finding gets ``# noqa: CODE`` on its first line, or on its last line
when the first cannot take a comment (it ends inside a multi-line string or
with a backslash), or else on the next line that can (the last physical line
of that logical line, where :mod:`memlint.lint.suppression` reads it for the
lines above); the codes of one line share one directive, merged into a
``# noqa:`` comment the line already has
(:func:`memlint.lint.suppression.add_noqa_comments`). Running it again adds
nothing: the findings are suppressed.

A Python file keeps its encoding (PEP 263 cookie or BOM) and its line ends.
A notebook gets the comments in its code cells' sources (a masked IPython
line, such as a magic, cannot hold one), rewritten in the JSON as ``--fix``
rewrites cells (:func:`memlint.lint.notebook.rewrite_sources`). Writes follow
the rules of ``--fix`` (:mod:`memlint.lint.fixes`): atomic, never through a
link out of the linted tree, never a file that changed on disk since it was
read. MEM001 (a file that does not parse) is not suppressed this way.

Findings that could not be suppressed stay in the run and are reported.
"""

from __future__ import annotations

import bisect
import hashlib
import io
import sys
import tokenize
from collections import defaultdict

from memlint.lint.diagnostic import Diagnostic, FileResult
from memlint.lint.suppression import add_noqa_comments, commentable_lines

SYNTAX_ERROR_CODE = "MEM001"


def add_noqa_to_run(run, trees: dict[str, str] | None, quiet: bool = False) -> int:
    """Add the directives for the findings of ``run`` (a
    :class:`~memlint.check.CheckRun`), write the files, and leave in ``run``
    only the findings that are still reported; returns the directives added.

    Problems (a file that cannot be written, changed meanwhile, encoded
    back) are one-line errors or notes of ``run``.
    """
    added = files = 0
    for index, result in enumerate(run.results):
        wanted = [d for d in result.diagnostics if d.code != SYNTAX_ERROR_CODE and d.line >= 1]
        if result.error or not wanted:
            continue
        outcome = _add_to_file(run, result, wanted, (trees or {}).get(result.path))
        if outcome is None:
            continue
        handled, count = outcome
        added += count
        files += 1 if count else 0
        left = [d for d in result.diagnostics if d not in handled]
        run.results[index] = FileResult(path=result.path, diagnostics=left, parsed=result.parsed,
                                        internal_errors=result.internal_errors)
    if not quiet:
        plural = "s" if added != 1 else ""
        print(f"Added {added} noqa directive{plural} to {files} file{'s' if files != 1 else ''}", file=sys.stderr)
    return added


def _add_to_file(run, result: FileResult, diagnostics: list[Diagnostic], tree: str | None):
    """(the findings now suppressed, the lines changed) of one file, after
    writing it; None when it was not written (the reason is in ``run``)."""
    from memlint.lint.fixes import write_fixed, write_problem

    try:
        with open(result.path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        run.errors.append(f"{result.path}: cannot read file for --add-noqa ({exc.strerror or type(exc).__name__})")
        return None
    if result.digest is not None and hashlib.sha256(data).hexdigest() != result.digest:
        run.notes.append(f"{result.path}: skipped: changed on disk since it was read; no noqa added")
        return None
    from memlint.lint.notebook import is_notebook_path

    edit = _notebook_edit if is_notebook_path(result.path) else _python_edit
    outcome = edit(result.path, data, diagnostics)
    if isinstance(outcome, str):
        run.errors.append(f"{result.path}: {outcome}")
        return None
    new_data, handled, changed = outcome
    if changed:
        problem = write_problem(result.path, tree)
        if problem is not None:
            run.errors.append(f"{result.path}: {problem.replace('not fixed', 'no noqa added')}")
            return None
        try:
            write_fixed(result.path, new_data)
        except OSError as exc:
            run.errors.append(f"{result.path}: cannot write ({exc.strerror or type(exc).__name__})")
            return None
    return handled, changed


def _codes_by_line(diagnostics: list[Diagnostic], commentable: set[int], line_of=lambda line: line):
    """line -> codes for the findings, each on its first commentable line
    (first, else last, else the next commentable line after the first);
    and the findings placed."""
    wanted: dict[int, set[str]] = defaultdict(set)
    placed: dict[int, list[Diagnostic]] = defaultdict(list)
    ordered = sorted(commentable)
    for diagnostic in diagnostics:
        line = next((line for line in (diagnostic.line, diagnostic.end_line) if line_of(line) in commentable),
                    None)
        if line is None:
            after = bisect.bisect_right(ordered, diagnostic.line)
            line = ordered[after] if after < len(ordered) else None
        if line is not None:
            wanted[line].add(diagnostic.code)
            placed[line].append(diagnostic)
    return wanted, placed


def _python_edit(path: str, data: bytes, diagnostics: list[Diagnostic]):
    """(new bytes, findings suppressed, lines changed), or a one-line problem."""
    try:
        encoding = tokenize.detect_encoding(io.BytesIO(data).readline)[0]
        text = data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError):
        return "no noqa added: the file does not decode"
    commentable = commentable_lines(text)
    wanted, placed = _codes_by_line(diagnostics, commentable)
    new_text, handled_lines = add_noqa_comments(text, wanted, commentable)
    handled = [d for line in handled_lines for d in placed[line]]
    changed = sum(1 for a, b in zip(text.splitlines(), new_text.splitlines()) if a != b)
    try:
        return new_text.encode(encoding), handled, changed
    except UnicodeEncodeError:
        return f"no noqa added: the text cannot be encoded as {encoding}"


def _notebook_edit(path: str, data: bytes, diagnostics: list[Diagnostic]):
    """The same for a notebook: comments in the cells' sources."""
    from memlint.lint.notebook import NotebookError, load, rewrite_sources

    try:
        notebook = load(path, data)
    except NotebookError as exc:
        return str(exc)
    module_lines = commentable_lines(notebook.module)
    cells = {cell.number: cell for cell in notebook.layout.cells}
    by_cell: dict[int, list[Diagnostic]] = defaultdict(list)
    for diagnostic in diagnostics:
        if diagnostic.cell in cells:
            by_cell[diagnostic.cell].append(diagnostic)
    sources: dict[int, str] = {}
    handled: list[Diagnostic] = []
    changed = 0
    for number, found in by_cell.items():
        cell = cells[number]
        if not cell.runs_python:
            continue
        # a line of the cell can take a comment when its module line can, and it is not masked
        commentable = {line for line in range(1, cell.lines + 1)
                       if line not in cell.masked and cell.start + line - 1 in module_lines}
        wanted, placed = _codes_by_line(found, commentable)
        source = notebook.sources[cell.index]
        new_source, handled_lines = add_noqa_comments(source, wanted, commentable)
        handled.extend(d for line in handled_lines for d in placed[line])
        if new_source != source:
            sources[cell.index] = new_source
            changed += sum(1 for a, b in zip(source.splitlines(), new_source.splitlines()) if a != b)
    if not sources:
        return data, handled, 0
    try:
        text = rewrite_sources(notebook.text, sources)
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        return f"no noqa added: the notebook could not be rewritten safely ({exc})"
    return text.encode("utf-8"), handled, changed
