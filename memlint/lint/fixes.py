"""Apply the rules' fixes: ``--fix``, ``--unsafe-fixes`` and ``--diff``.

For each file with applicable fixes (safe ones; unsafe ones too with
``--unsafe-fixes``) the fixes are applied in rounds: the fixes of one round
are taken in source order, a fix whose edits overlap an already accepted one
is left for the next round, the file is re-linted, and this repeats up to
:data:`MAX_ROUNDS` times (a fix can also make room for, or reveal, another).

The fixed text must still parse (CPython's parser). When a round's fixes
together break the file, they are taken one at a time in source order and
each fix that would break the file is skipped (one error line names it),
so the file's other fixes are still applied.

A file is written only when its bytes on disk are still the ones that were
read (a content hash): an editor or another tool that changed it meanwhile
wins. It is never written through a symbolic link that leads out of the
linted tree (the directory named on the command line), never replaced when
it is not writable (no write permission, or no write bit in its mode), and
keeps its mode and its owner (run as root on another user's file, the
replacement is given back to that user; where that is not permitted the file
is rewritten in place). Writes are atomic -- a temporary file in the same
directory, the original mode, then ``os.replace`` -- except for a file with
several hard links, which is rewritten in place so that every link sees the
fix. ``--diff`` prints a unified diff instead and writes nothing, then on stderr
``Would fix N problems`` and, without ``--unsafe-fixes``, how many fixes
only ``--unsafe-fixes`` would add (``M hidden fixes can be enabled with the
`--unsafe-fixes` option.``).

After fixing, the run's diagnostics are the ones that remain, as ruff does.

A notebook (``.ipynb``) is fixed cell by cell (:func:`fix_notebook`): each
fix's edits lie in one cell's source (a fix that would reach across cells,
or into a masked magic line, is not offered), the rounds re-lint the whole
notebook, and only the changed cells' ``source`` values are rewritten in
the file's JSON text; outputs, metadata, execution counts and indentation
stay byte for byte (:func:`memlint.lint.notebook.rewrite_sources`).
``--diff`` shows the changed cells' sources.
"""

from __future__ import annotations

import difflib
import hashlib
import io
import os
import re
import stat
import sys
import tempfile
import tokenize
from dataclasses import dataclass, field, replace

from memlint.lint.diagnostic import Applicability, Diagnostic, Edit, FileResult, Fix, line_offsets
from memlint.lint.engine import LintOptions, lint_source

#: Fix-and-relint rounds per file; two fixes rarely interact more than this.
MAX_ROUNDS = 4

@dataclass
class FileFixes:
    """The outcome of fixing one file's text."""

    path: str
    original: str
    fixed: str
    fixed_count: int
    remaining: list[Diagnostic] = field(default_factory=list)
    digest: str = ""  # sha256 of the bytes that were read
    encoding: str = "utf-8"  # to write the fixed text back with
    #: one line per fix that was skipped because it would break the file
    skipped: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.fixed != self.original

    def diff(self) -> str:
        """The unified diff of the fix (``--diff``)."""
        return unified_diff(self.path, self.original, self.fixed)


@dataclass
class NotebookFixes(FileFixes):
    """The outcome of fixing a notebook: ``original``/``fixed`` are its JSON
    texts; ``cells`` the (before, after) sources of each changed code cell
    by cell index."""

    cells: dict[int, tuple[str, str]] = field(default_factory=dict)

    def diff(self) -> str:
        """One unified diff per changed cell, headed ``a/path:cell N``."""
        out = []
        for index, (before, after) in sorted(self.cells.items()):
            out.append(unified_diff(f"{self.path}:cell {index + 1}", before, after))
        return "".join(out)


def is_applicable(fix: Fix | None, unsafe: bool) -> bool:
    """True when ``fix`` is applied under the given ``--unsafe-fixes`` setting."""
    return fix is not None and (fix.applicability is Applicability.SAFE or unsafe)


def _offset(offsets: list[int], text: str, line: int, col: int) -> int:
    if line > len(offsets):  # one past the last line: the end of the text
        return len(text)
    return min(offsets[line - 1] + col - 1, len(text))


def edit_range(edit: Edit, text: str, offsets: list[int]) -> tuple[int, int]:
    """The ``[start, end)`` character offsets in ``text`` that ``edit`` replaces."""
    start = _offset(offsets, text, edit.start_line, edit.start_col)
    end = _offset(offsets, text, edit.end_line, edit.end_col)
    return start, max(start, end)


def _overlaps(span: tuple[int, int], taken: list[tuple[int, int]]) -> bool:
    start, end = span
    for other_start, other_end in taken:
        if start < other_end and other_start < end:
            return True
        # Two insertions at one point, or an insertion touching a replacement's
        # start, would have an order-dependent result: treat as overlapping.
        if start == other_start and (start == end or other_start == other_end):
            return True
    return False


def apply_fixes(text: str, fixes: list[Fix]) -> tuple[str, int]:
    """Apply the non-overlapping ``fixes`` (in the given order) to ``text``.

    Returns the new text and how many fixes were applied; a fix any of whose
    edits overlaps an edit of an earlier accepted fix is skipped whole.
    """
    offsets = line_offsets(text)
    taken: list[tuple[int, int]] = []
    replacements: list[tuple[int, int, str]] = []
    applied = 0
    for fix in fixes:
        spans = [edit_range(edit, text, offsets) for edit in fix.edits]
        if any(_overlaps(span, taken) for span in spans) or _overlaps_itself(spans):
            continue
        taken.extend(spans)
        replacements.extend((start, end, edit.content) for (start, end), edit in zip(spans, fix.edits))
        applied += 1
    for start, end, content in sorted(replacements, key=lambda r: (r[0], r[1]), reverse=True):
        text = text[:start] + content + text[end:]
    return text, applied


def _overlaps_itself(spans: list[tuple[int, int]]) -> bool:
    return any(_overlaps(span, spans[:index]) for index, span in enumerate(spans))


def fix_text(
    path: str,
    text: str,
    options: LintOptions,
    unsafe: bool,
    diagnostics: list[Diagnostic],
    encoding: str = "utf-8",
) -> FileFixes:
    """Fix ``text`` in rounds (see the module docstring); nothing is written.

    ``diagnostics`` are ``text``'s current findings; re-linting encodes the
    text with ``encoding`` (the file's own) so that a coding cookie still holds.
    """
    current = text
    fixed_count = 0
    remaining = diagnostics
    rejected: set[tuple] = set()
    skipped: list[str] = []
    for _ in range(MAX_ROUNDS):
        candidates = [d for d in sorted(remaining, key=Diagnostic.sort_key)
                      if is_applicable(d.fix, unsafe) and _fix_identity(d) not in rejected]
        candidates = [d for d in _resolve(current, candidates) if d.fix is not None]
        if not candidates:
            break
        candidate, applied = apply_fixes(current, [d.fix for d in candidates])
        if applied and _parse_problem(candidate) is not None:
            candidate, applied = _apply_fixes_that_parse(current, candidates, rejected, skipped)
        if applied == 0 or candidate == current:
            break
        current = candidate
        fixed_count += applied
        remaining = lint_source(path, current.encode(encoding, errors="replace"), options).diagnostics
    return FileFixes(path, text, current, fixed_count, list(remaining), encoding=encoding, skipped=skipped)


def _fix_identity(diagnostic: Diagnostic) -> tuple:
    """What names one fix across rounds (its positions move when other fixes apply)."""
    fix = diagnostic.fix
    if fix.plans:
        return diagnostic.code, diagnostic.message, fix.title, tuple((plan.kind, plan.params) for plan in fix.plans)
    return diagnostic.code, diagnostic.message, fix.title, tuple(edit.content for edit in fix.edits)


def _resolve(text: str, diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """The diagnostics with their fixes' edits computed by the libcst fix
    engine (:mod:`memlint.fix`, loaded only here); unresolvable fixes dropped."""
    if all(d.fix is None or d.fix.resolved for d in diagnostics):
        return diagnostics
    from memlint.fix import resolve

    return resolve(text, diagnostics)


def _apply_fixes_that_parse(text: str, candidates: list[Diagnostic], rejected: set[tuple],
                            skipped: list[str]) -> tuple[str, int]:
    """Apply ``candidates``' fixes one at a time, in order, keeping each one
    with which the text still parses; the others are added to ``rejected``
    and described in ``skipped``. Returns the text and the fixes kept."""
    accepted: list[Fix] = []
    current = text
    for diagnostic in candidates:
        trial, applied = apply_fixes(text, [*accepted, diagnostic.fix])
        if applied <= len(accepted):
            continue  # overlaps a kept fix: the next round takes it
        problem = _parse_problem(trial)
        if problem is None:
            accepted.append(diagnostic.fix)
            current = trial
            continue
        rejected.add(_fix_identity(diagnostic))
        skipped.append(f"{diagnostic.line}:{diagnostic.col}: {diagnostic.code} fix {diagnostic.fix.title!r} would "
                       f"break the file ({problem}); that fix is skipped")
    return current, len(accepted)


def _with_line_ends_of(original: str, fixed: str) -> str:
    """``fixed`` with the line ends of the cell it replaces: the fixes write
    ``\n``, and a cell saved with ``\r\n`` (or ``\r``) alone keeps them,
    so the lines a fix adds do not mix styles."""
    if "\r\n" in original and "\n" not in original.replace("\r\n", ""):
        return fixed.replace("\r\n", "\n").replace("\n", "\r\n")
    if "\r" in original and "\n" not in original:
        return fixed.replace("\r\n", "\n").replace("\n", "\r")
    return fixed


def _parse_problem(text: str) -> str | None:
    """Why the fixed ``text`` is not valid Python (CPython's parser decides,
    as it does for MEM001); None when it is."""
    import ast

    try:
        ast.parse(text)
    except SyntaxError as exc:
        return f"line {exc.lineno}: {exc.msg}"
    except (RecursionError, MemoryError):
        return "too deeply nested"
    except ValueError as exc:
        return str(exc)
    return None


def decode(data: bytes) -> tuple[str, str]:
    """Decode source bytes as Python does (PEP 263 cookie, BOM, else UTF-8).

    Returns the text and the encoding to write it back with.

    Raises:
        SyntaxError: a bad encoding declaration.
        UnicodeDecodeError: bytes that do not decode.
    """
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding), encoding


def source_lines(text: str) -> list[str]:
    """``text`` split as Python splits source lines (``\\n``, ``\\r\\n`` or a
    lone ``\\r``; not at form feeds or the other breaks of
    :meth:`str.splitlines`), each line with its terminator."""
    return _SOURCE_LINE.findall(text)


_SOURCE_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def unified_diff(path: str, before: str, after: str) -> str:
    """A unified diff of one file's fix (``a/``/``b/`` headers for relative paths).

    What a hostile file could use to steer the terminal is escaped as in the
    ``full`` format (:func:`~memlint.report.text.printable`): the file name
    in the headers (:func:`~memlint.report.text.printable_name`) and, in the
    diff lines, every non-printable character but the tab. Each diff line is
    one line: a lone CR ending a source line is shown as ``\\r``, and
    ``\\ No newline at end of file`` only follows the text's last line.
    """
    from memlint.report.text import printable, printable_name

    old = path if os.path.isabs(path) else f"a/{path}"
    new = path if os.path.isabs(path) else f"b/{path}"
    lines = list(difflib.unified_diff(source_lines(before), source_lines(after), fromfile=old, tofile=new))
    if not lines:
        return ""
    out = [f"--- {printable_name(old)}\n", f"+++ {printable_name(new)}\n"]
    for line in lines[2:]:
        if line.startswith("@@"):
            out.append(line)
            continue
        body, ending = line, ""
        for terminator in ("\r\n", "\n", "\r"):
            if line.endswith(terminator):
                body, ending = line[: -len(terminator)], terminator
                break
        shown = "\t".join(printable(part) for part in body.split("\t"))
        if ending == "\r":
            out.append(shown + "\\r\n")
        elif ending:
            out.append(shown + ending)
        else:
            out.append(shown + "\n\\ No newline at end of file\n")
    return "".join(out)


def atomic_write(path: str, data: bytes) -> None:
    """Replace ``path``'s content with ``data`` atomically, keeping its mode
    and its owner and group (``os.chown`` of the new file; where that is not
    permitted, the file is rewritten in place instead, so it keeps them).

    A symbolic link is followed: the file it points to is replaced (callers
    check first that it stays in the tree: :func:`write_problem`).

    Raises:
        OSError: the directory is not writable, the disk is full, ...
    """
    target = os.path.realpath(path)
    info = os.stat(target)
    mode = stat.S_IMODE(info.st_mode)
    directory = os.path.dirname(target) or "."
    handle, temp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(target)}.", suffix=".memlint-tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        if not _same_owner(temp, info):
            try:
                os.chown(temp, info.st_uid, info.st_gid)
            except OSError:
                # Not permitted (a group-writable file of another user): the
                # file's own inode is rewritten, so it keeps its owner.
                os.unlink(temp)
                write_in_place(target, data)
                return
        os.chmod(temp, mode)
        os.replace(temp, target)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


def _same_owner(path: str, info: os.stat_result) -> bool:
    mine = os.stat(path)
    return (mine.st_uid, mine.st_gid) == (info.st_uid, info.st_gid)


def write_in_place(path: str, data: bytes) -> None:
    """Rewrite the regular file ``path`` with ``data`` through its own inode
    (its hard links all see the change; not atomic). ``O_NOFOLLOW``: ``path``
    is the resolved file, never a link.

    Raises:
        OSError: it cannot be opened or written.
    """
    fd = os.open(path, os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "wb") as out:
        out.write(data)
        out.truncate()
        out.flush()
        os.fsync(out.fileno())


def write_problem(path: str, tree: str | None) -> str | None:
    """Why ``path`` must not be written by ``--fix``, or None.

    ``tree``: the resolved directory the file was found in (None: no limit).
    A symbolic link out of the tree, a file that is not a regular file, and a
    file that is not writable -- no write permission for the user, or no
    write bit in its mode at all (which even root respects here) -- are not
    written.
    """
    from memlint.lint.files import is_within

    target = os.path.realpath(path)
    if tree is not None and not is_within(target, tree):
        return f"not fixed: it is a symbolic link to {target}, outside the linted tree {tree}"
    try:
        info = os.stat(target)
    except OSError as exc:
        return f"not fixed: cannot stat the file ({exc.strerror or type(exc).__name__})"
    if not stat.S_ISREG(info.st_mode):
        return "not fixed: not a regular file"
    if not info.st_mode & 0o222 or not os.access(target, os.W_OK):
        return "not fixed: the file is not writable"
    return None


def write_fixed(path: str, data: bytes) -> None:
    """Write ``data`` to ``path``: atomically, or in place for a file with
    several hard links (a rename would leave the other links on the old text).

    Raises:
        OSError: the write failed.
    """
    target = os.path.realpath(path)
    if os.stat(target).st_nlink > 1:
        write_in_place(target, data)
    else:
        atomic_write(target, data)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def apply_fixes_to_run(run, args, trees: dict[str, str] | None = None) -> None:
    """Fix the files of a ``memlint check`` run (``--fix``/``--diff``).

    Updates ``run`` in place: each fixed file's diagnostics become the ones
    that remain; ``run.fixed`` counts the problems fixed (or, with
    ``--diff``, that would be); with ``--diff`` the diffs are printed on
    stdout and nothing is written; files that could not be fixed, and fixes
    that were skipped, get a one-line note or error. With stdin (``-``) and
    ``--fix`` the source, fixed or not, is written to stdout.

    ``trees``: path -> the resolved directory it was found in
    (:attr:`memlint.lint.files.Collected.roots`); nothing is written outside it.
    """
    unsafe = bool(getattr(args, "unsafe_fixes", False))
    diff_only = bool(getattr(args, "diff", False))
    total = 0
    for index, result in enumerate(run.results):
        outcome = None
        if not result.error and any(is_applicable(d.fix, unsafe) for d in result.diagnostics):
            outcome = _fix_result(run, result, unsafe)
        if outcome is not None:
            run.errors.extend(f"{result.path}:{line}" for line in outcome.skipped)
        if diff_only:
            if outcome is not None and outcome.changed:
                sys.stdout.write(outcome.diff())
                total += outcome.fixed_count
        elif run.stdin is not None:
            total += _write_stdout(run, outcome)
            if outcome is not None:
                run.results[index] = _remaining(result, outcome)
        elif outcome is not None and _write(run, result, outcome, (trees or {}).get(result.path)):
            total += outcome.fixed_count
            run.results[index] = _remaining(result, outcome)
    run.fixed = total
    plural = "s" if total != 1 else ""
    if diff_only:
        if total:
            print(f"Would fix {total} problem{plural}", file=sys.stderr)
        from memlint.report.statistics import hidden_fixes, hidden_fixes_line

        hidden = hidden_fixes_line(hidden_fixes(run.diagnostics, unsafe))
        if hidden:
            print(hidden, file=sys.stderr)
    elif total:
        print(f"Fixed {total} problem{plural}", file=sys.stderr)


def resolve_run(run) -> None:
    """Compute the edits of every fix in ``run``'s results, for the formats
    that show them (``json``, ``sarif``): each file with a fix is read
    again and parsed by libcst (:mod:`memlint.fix`); a fix that cannot be
    resolved is shown as no fix. A file that cannot be read again keeps
    its findings, without fixes, and gets one error line."""
    for index, result in enumerate(run.results):
        if result.error or all(d.fix is None or d.fix.resolved for d in result.diagnostics):
            continue
        resolved = _resolved_diagnostics(run, result)
        run.results[index] = replace(result, diagnostics=resolved)


def _resolved_diagnostics(run, result: FileResult) -> list[Diagnostic]:
    without = [d if d.fix is None or d.fix.resolved else replace(d, fix=None) for d in result.diagnostics]
    data = _read_source(run, result)
    if data is None or (result.digest is not None and result.digest != _digest(data)):
        return without
    from memlint.lint.notebook import NotebookError, is_notebook_path, load

    if is_notebook_path(result.path):
        try:
            return resolve_cells(load(result.path, data), result.diagnostics)
        except NotebookError:
            return without
    try:
        text, _ = decode(data)
    except (SyntaxError, UnicodeDecodeError):
        return without
    return _resolve(text, result.diagnostics)


def _remaining(result: FileResult, outcome: FileFixes) -> FileResult:
    return FileResult(path=result.path, diagnostics=outcome.remaining, parsed=True, internal_errors=result.internal_errors)


def _write_stdout(run, outcome: FileFixes | None) -> int:
    data = run.stdin
    fixed = 0
    if outcome is not None and outcome.changed:
        try:
            data = outcome.fixed.encode(outcome.encoding)
            fixed = outcome.fixed_count
        except UnicodeEncodeError:
            run.errors.append(f"{outcome.path}: fixed text cannot be encoded as {outcome.encoding}; not fixed")
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return fixed


def _read_source(run, result: FileResult) -> bytes | None:
    if run.stdin is not None:
        return run.stdin
    try:
        with open(result.path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        run.errors.append(f"{result.path}: cannot read file for fixing ({exc.strerror or type(exc).__name__})")
        return None


def _fix_result(run, result: FileResult, unsafe: bool) -> FileFixes | None:
    data = _read_source(run, result)
    if data is None:
        return None
    from memlint.lint.notebook import is_notebook_path

    if is_notebook_path(result.path):
        options = (run.options.get(result.path) if run.options else None) or LintOptions(
            enabled=frozenset(d.code for d in result.diagnostics))
        diagnostics = result.diagnostics if getattr(result, "digest", None) == _digest(data) else None
        outcome, problem = fix_notebook(result.path, data, options, unsafe, diagnostics)
        if problem is not None:
            run.errors.append(f"{result.path}: {problem}")
        return outcome
    try:
        text, encoding = decode(data)
    except (SyntaxError, UnicodeDecodeError):
        return None  # already a MEM001 diagnostic; nothing to fix
    options = run.options.get(result.path) if run.options else None
    if options is None:
        options = LintOptions(enabled=frozenset(d.code for d in result.diagnostics))
    diagnostics = result.diagnostics
    if getattr(result, "digest", None) != _digest(data):
        # The file changed since it was linted: positions of the earlier
        # findings no longer apply, so lint the text that will be fixed.
        diagnostics = lint_source(result.path, data, options).diagnostics
    outcome = fix_text(result.path, text, options, unsafe, diagnostics, encoding)
    outcome.digest = _digest(data)
    return outcome


def _write(run, result: FileResult, outcome: FileFixes, tree: str | None) -> bool:
    if not outcome.changed:
        return False
    problem = write_problem(result.path, tree)
    if problem is not None:
        run.errors.append(f"{result.path}: {problem}")
        return False
    try:
        data = outcome.fixed.encode(outcome.encoding)
    except UnicodeEncodeError:
        run.errors.append(f"{result.path}: fixed text cannot be encoded as {outcome.encoding}; not written")
        return False
    try:
        with open(result.path, "rb") as handle:
            now = handle.read()
    except OSError as exc:
        run.errors.append(f"{result.path}: skipped: cannot re-read before writing ({exc.strerror or type(exc).__name__})")
        return False
    if _digest(now) != outcome.digest:
        run.notes.append(f"{result.path}: skipped: changed on disk since it was read; not fixed")
        return False
    try:
        write_fixed(result.path, data)
    except OSError as exc:
        run.errors.append(f"{result.path}: cannot write fixes ({exc.strerror or type(exc).__name__})")
        return False
    return True


def fix_notebook(path: str, data: bytes, options: LintOptions, unsafe: bool,
                 diagnostics: list[Diagnostic] | None = None) -> tuple[NotebookFixes | None, str | None]:
    """Fix a notebook's code cells in rounds, as :func:`fix_text` fixes a
    file; nothing is written.

    ``diagnostics``: the notebook's current findings (None: lint it first).
    Returns the outcome (None when the notebook cannot be read) and a
    one-line problem when the fixed cells could not be written back into
    the notebook's JSON safely (the outcome is then unchanged).
    """
    from memlint.lint.engine import lint_notebook
    from memlint.lint.notebook import NotebookError, load, rewrite_sources

    try:
        notebook = load(path, data)
    except NotebookError:
        return None, None  # already reported when it was linted
    if diagnostics is None:
        diagnostics = lint_notebook(notebook, options).diagnostics
    text = notebook.text
    original_sources = dict(notebook.sources)
    current = notebook
    fixed_count = 0
    remaining = diagnostics
    rejected: set[tuple] = set()
    skipped: list[str] = []
    cell_index = {cell.number: cell.index for cell in notebook.layout.cells}
    for _ in range(MAX_ROUNDS):
        candidates = [d for d in sorted(remaining, key=Diagnostic.sort_key)
                      if is_applicable(d.fix, unsafe) and d.cell in cell_index and _fix_identity(d) not in rejected]
        candidates = [d for d in resolve_cells(current, candidates) if d.fix is not None]
        if not candidates:
            break
        sources, applied = _apply_cell_fixes(current.sources, candidates, cell_index)
        trial = current.with_sources(sources)
        if applied and _parse_problem(trial.module) is not None:
            sources, applied = {}, 0
            accepted: list[Diagnostic] = []
            for diagnostic in candidates:
                attempt, count = _apply_cell_fixes(current.sources, [*accepted, diagnostic], cell_index)
                if count <= len(accepted):
                    continue
                problem = _parse_problem(current.with_sources(attempt).module)
                if problem is None:
                    accepted.append(diagnostic)
                    sources, applied = attempt, count
                    continue
                rejected.add(_fix_identity(diagnostic))
                skipped.append(f"cell {diagnostic.cell}:{diagnostic.line}:{diagnostic.col}: {diagnostic.code} fix "
                               f"{diagnostic.fix.title!r} would break the notebook ({problem}); that fix is skipped")
            trial = current.with_sources(sources) if applied else current
        if applied == 0 or trial.sources == current.sources:
            break
        current = trial
        fixed_count += applied
        remaining = lint_notebook(current, options).diagnostics
    changed = {index: _with_line_ends_of(original_sources[index], source)
               for index, source in current.sources.items() if source != original_sources[index]}
    outcome = NotebookFixes(path, text, text, 0, list(diagnostics), digest=_digest(data), skipped=skipped)
    if not changed:
        return outcome, None
    try:
        new_text = rewrite_sources(text, changed)
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        return outcome, f"not fixed: the notebook could not be rewritten safely ({exc})"
    outcome.fixed = new_text
    outcome.fixed_count = fixed_count
    outcome.remaining = list(remaining)
    outcome.cells = {index: (original_sources[index], source) for index, source in changed.items()}
    return outcome, None


def resolve_cells(notebook, diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """Notebook ``diagnostics`` (cell coordinates) with their fixes' edits
    computed on their cells' masked text; a fix whose edits touch a masked
    (IPython) line is dropped, since it could not be written back."""
    if all(d.fix is None or d.fix.resolved for d in diagnostics):
        return diagnostics
    from memlint.fix import resolve
    from memlint.lint.notebook import to_source_edit

    cells = {cell.number: cell for cell in notebook.layout.cells}
    module_lines = source_lines(notebook.module)
    out = []
    for diagnostic in diagnostics:
        cell = cells.get(diagnostic.cell)
        if cell is None or diagnostic.fix is None or diagnostic.fix.resolved:
            out.append(diagnostic)
            continue
        text = "".join(module_lines[cell.start - 1:cell.end])
        (resolved,) = resolve(text, [diagnostic])
        if resolved.fix is not None and _touches(resolved.fix, cell.masked):
            resolved = replace(resolved, fix=None)
        if resolved.fix is not None:  # the edits are in the module's text of the cell: in its source
            resolved = replace(resolved, fix=replace(resolved.fix, edits=tuple(
                to_source_edit(replace(edit, cell=cell.number), cell) for edit in resolved.fix.edits)))
        out.append(resolved)
    return out


def _touches(fix: Fix, masked: frozenset[int]) -> bool:
    for edit in fix.edits:
        last = edit.end_line - (1 if edit.end_col == 1 and edit.end_line > edit.start_line else 0)
        if any(number in masked for number in range(edit.start_line, max(edit.start_line, last) + 1)):
            return True
    return False


def _apply_cell_fixes(sources: dict[int, str], diagnostics: list[Diagnostic],
                      cell_index: dict[int, int]) -> tuple[dict[int, str], int]:
    """``sources`` with the fixes of ``diagnostics`` applied, each in its
    diagnostic's cell (non-overlapping ones, in order); how many were applied."""
    by_cell: dict[int, list[Fix]] = {}
    for diagnostic in diagnostics:
        by_cell.setdefault(cell_index[diagnostic.cell], []).append(diagnostic.fix)
    result = dict(sources)
    applied = 0
    for index, fixes in by_cell.items():
        result[index], count = apply_fixes(sources[index], fixes)
        applied += count
    return result, applied
