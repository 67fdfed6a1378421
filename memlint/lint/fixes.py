"""Apply the rules' fixes: ``--fix``, ``--unsafe-fixes`` and ``--diff``.

For each file with applicable fixes (safe ones; unsafe ones too with
``--unsafe-fixes``) the fixes are applied in rounds: the fixes of one round
are taken in source order, a fix whose edits overlap an already accepted one
is left for the next round, the file is re-linted, and this repeats up to
:data:`MAX_ROUNDS` times (a fix can also make room for, or reveal, another).

A file is written only when the fixed text still parses (CPython's parser), and only
when its bytes on disk are still the ones that were read (a content hash):
an editor or another tool that changed it meanwhile wins. Writes are atomic:
a temporary file in the same directory, the original file mode, then
``os.replace``. ``--diff`` prints a unified diff instead and writes nothing.

After fixing, the run's diagnostics are the ones that remain, as ruff does.
"""

from __future__ import annotations

import difflib
import hashlib
import io
import os
import stat
import sys
import tempfile
import tokenize
from dataclasses import dataclass, field

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
    problem: str | None = None  # why the fixed text must not be written
    digest: str = ""  # sha256 of the bytes that were read
    encoding: str = "utf-8"  # to write the fixed text back with

    @property
    def changed(self) -> bool:
        return self.fixed != self.original and self.problem is None


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
    for _ in range(MAX_ROUNDS):
        fixes = [d.fix for d in sorted(remaining, key=Diagnostic.sort_key) if is_applicable(d.fix, unsafe)]
        if not fixes:
            break
        candidate, applied = apply_fixes(current, fixes)
        if applied == 0 or candidate == current:
            break
        problem = _parse_problem(candidate)
        if problem is not None:
            return FileFixes(path, text, text, 0, diagnostics, problem=f"fixes would break the file ({problem}); not applied")
        current = candidate
        fixed_count += applied
        remaining = lint_source(path, current.encode(encoding, errors="replace"), options).diagnostics
    return FileFixes(path, text, current, fixed_count, list(remaining), encoding=encoding)


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


def unified_diff(path: str, before: str, after: str) -> str:
    """A unified diff of one file's fix (``a/``/``b/`` headers for relative paths)."""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=path if os.path.isabs(path) else f"a/{path}",
        tofile=path if os.path.isabs(path) else f"b/{path}",
    )
    out = []
    for line in lines:
        out.append(line if line.endswith(("\n", "\r")) else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def atomic_write(path: str, data: bytes) -> None:
    """Replace ``path``'s content with ``data`` atomically, keeping its mode.

    A symbolic link is followed: the file it points to is replaced.

    Raises:
        OSError: the directory is not writable, the disk is full, ...
    """
    target = os.path.realpath(path)
    mode = stat.S_IMODE(os.stat(target).st_mode)
    directory = os.path.dirname(target) or "."
    handle, temp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(target)}.", suffix=".memlint-tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, mode)
        os.replace(temp, target)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def apply_fixes_to_run(run, args) -> None:
    """Fix the files of a ``memlint check`` run (``--fix``/``--diff``).

    Updates ``run`` in place: each fixed file's diagnostics become the ones
    that remain; ``run.fixed`` counts the problems fixed (or, with
    ``--diff``, that would be); with ``--diff`` the diffs are printed on
    stdout and nothing is written; files that could not be fixed get a
    one-line note or error. With stdin (``-``) and ``--fix`` the source,
    fixed or not, is written to stdout.
    """
    unsafe = bool(getattr(args, "unsafe_fixes", False))
    diff_only = bool(getattr(args, "diff", False))
    total = 0
    for index, result in enumerate(run.results):
        outcome = None
        if not result.error and any(is_applicable(d.fix, unsafe) for d in result.diagnostics):
            outcome = _fix_result(run, result, unsafe)
        if outcome is not None and outcome.problem is not None:
            run.errors.append(f"{result.path}: {outcome.problem}")
            outcome = None
        if diff_only:
            if outcome is not None and outcome.changed:
                sys.stdout.write(unified_diff(result.path, outcome.original, outcome.fixed))
                total += outcome.fixed_count
        elif run.stdin is not None:
            total += _write_stdout(run, outcome)
            if outcome is not None:
                run.results[index] = _remaining(result, outcome)
        elif outcome is not None and _write(run, result, outcome):
            total += outcome.fixed_count
            run.results[index] = _remaining(result, outcome)
    run.fixed = total
    plural = "s" if total != 1 else ""
    if diff_only:
        if total:
            print(f"Would fix {total} problem{plural}", file=sys.stderr)
    elif total:
        print(f"Fixed {total} problem{plural}", file=sys.stderr)


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


def _write(run, result: FileResult, outcome: FileFixes) -> bool:
    if not outcome.changed:
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
        atomic_write(result.path, data)
    except OSError as exc:
        run.errors.append(f"{result.path}: cannot write fixes ({exc.strerror or type(exc).__name__})")
        return False
    return True
