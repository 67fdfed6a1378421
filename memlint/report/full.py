"""``full``: the rich, human format (the default on a terminal).

For each finding: ``path:line:col: CODE [severity] message``, the source line
with a caret underline under the reported span (to the end of the line when
the span continues; a line longer than :data:`MAX_SNIPPET` characters is
cut to a window around the column, with ``\u2026`` at each cut end), and the fix title with ``[*]`` when ``--fix`` (or
``--unsafe-fixes``) would apply it. With ``--show-fixes`` the fixes applied
(or available) are listed per file. A summary line ends the output, as
ruff's does: ``Found N findings (M fixable with --fix, K more with
--unsafe-fixes)``, or ``All checks passed!`` (not with ``--quiet``).

Colour follows rich's terminal detection (and ``NO_COLOR``); severity
colours: error red, warning yellow, info blue. In a notebook the header
reads ``path:cell N:line:col:`` and the snippet is the cell's line. Paths, messages and source
lines are escaped (:func:`~memlint.report.text.printable`): a file cannot
send escape sequences to the terminal.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from memlint.lint.diagnostic import Applicability, Diagnostic
from memlint.lint.notebook import split_lines
from memlint.report.text import is_terminal, printable, printable_name

SEVERITY_STYLES = {"error": "bold red", "warning": "bold yellow", "info": "bold blue"}


def source_lines(path: str, stdin: bytes | None = None) -> list[str] | None:
    """The lines of ``path`` (or of ``stdin`` bytes) for the snippets; None if unreadable.

    Undecodable bytes are replaced, so a MEM001 finding still shows its line.
    """
    if stdin is not None:
        data = stdin
    else:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError:
            return None
    text = data.decode("utf-8", errors="replace").replace("\x00", "\ufffd")
    return split_lines(text)  # the line breaks CPython counts, not also \x0c, \x1c or \u2028 as str.splitlines


def notebook_lines(path: str, stdin: bytes | None = None) -> dict[int, list[str]] | None:
    """Each code cell's lines by cell number for a notebook's snippets; None
    if it cannot be read."""
    from memlint.lint.notebook import NotebookError, load

    if stdin is None:
        try:
            with open(path, "rb") as handle:
                stdin = handle.read()
        except OSError:
            return None
    try:
        return load(path, stdin).cell_lines()
    except NotebookError:
        return None


#: Most characters of a source line shown in a snippet (ruff-like): a
#: longer line is cut to a window around the reported column, with an
#: ellipsis at each cut end, so a 777 KB one-line file or 2,000 findings on
#: one 30 KB line cannot print megabytes per finding.
MAX_SNIPPET = 200
#: Characters kept before the reported column when the line is cut.
SNIPPET_CONTEXT = 60
ELLIPSIS = "\u2026"


def _snippet(diagnostic: Diagnostic, lines: list[str] | None) -> list[Text]:
    if lines is None or not 1 <= diagnostic.line <= len(lines):
        return []
    raw = lines[diagnostic.line - 1]
    col = max(0, diagnostic.col - 1)
    if diagnostic.end_line == diagnostic.line:
        end = max(col, diagnostic.end_col - 1)
    else:
        end = len(raw)
    # A very long line is first cut (raw characters) around the column, so
    # that escaping costs the window, not the line.
    offset = 0
    if len(raw) > 4 * MAX_SNIPPET:
        offset = max(0, col - SNIPPET_CONTEXT)
        raw = raw[offset : max(col, offset) + 2 * MAX_SNIPPET]
    cut_left, cut_right = offset > 0, offset + len(raw) < len(lines[diagnostic.line - 1])
    col, end = col - offset, end - offset
    # Tabs become spaces first, then what the terminal must not interpret
    # (ESC in a string literal, ...) becomes visible escapes, in the line and
    # in the parts that place the caret alike.
    before = printable(raw[:col].expandtabs(4))
    marked = printable(raw[col:end].expandtabs(4))
    line_text = printable(raw.expandtabs(4))
    # Then the escaped line is cut to MAX_SNIPPET characters around the caret.
    if len(line_text) > MAX_SNIPPET:
        start = max(0, len(before) - SNIPPET_CONTEXT)
        if start:
            cut_left = True
        if start + MAX_SNIPPET < len(line_text):
            cut_right = True
        line_text = line_text[start : start + MAX_SNIPPET]
        before = before[start:]
        marked = marked[: max(0, len(line_text) - len(before))]
    if cut_left:
        line_text, before = ELLIPSIS + line_text, ELLIPSIS + before
    if cut_right:
        line_text += ELLIPSIS
    gutter = str(diagnostic.line)
    pad = " " * len(gutter)
    width = max(1, cell_len(marked.rstrip()) or cell_len(marked))
    style = SEVERITY_STYLES.get(diagnostic.severity.value, "bold")
    source = Text.assemble((f"{gutter} | ", "blue"), line_text)
    caret = Text.assemble((f"{pad} | ", "blue"), " " * cell_len(before), ("^" * width, style))
    return [source, caret]


def is_fix_shown(diagnostic: Diagnostic, unsafe: bool) -> bool:
    """True when ``--fix`` (with ``--unsafe-fixes`` if ``unsafe``) applies the diagnostic's fix."""
    fix = diagnostic.fix
    return fix is not None and (fix.applicability is Applicability.SAFE or unsafe)


def format_diagnostic(diagnostic: Diagnostic, lines: list[str] | None, unsafe: bool) -> list[Text]:
    """The rich lines for one finding (header, snippet, fix hint)."""
    severity = diagnostic.severity.value
    style = SEVERITY_STYLES.get(severity, "bold")
    header = Text.assemble(
        (f"{printable_name(diagnostic.path)}:{diagnostic.location}:", "bold"),
        " ",
        (diagnostic.code, style),
        " ",
        (f"[{severity}]", style),
        " ",
        printable(diagnostic.message),
    )
    out = [header, *_snippet(diagnostic, lines)]
    if diagnostic.fix is not None:
        pad = " " * len(str(diagnostic.line))
        if is_fix_shown(diagnostic, unsafe):
            hint = Text.assemble((f"{pad} = ", "blue"), ("[*] fixable", "bold green"), f": {printable(diagnostic.fix.title)}")
        else:
            hint = Text.assemble((f"{pad} = ", "blue"),
                                 f"unsafe fix available with --unsafe-fixes: {printable(diagnostic.fix.title)}")
        out.append(hint)
    return out


def summary(diagnostics: list[Diagnostic], unsafe: bool, fixed: int = 0) -> str:
    """The closing line, as ruff words it: ``All checks passed!``;
    ``Found N findings (M fixable with --fix, K more with --unsafe-fixes)``
    (the parenthesis only when some finding has a fix; the ``K more`` part
    only for unsafe fixes that ``--unsafe-fixes`` would add); after ``--fix``,
    ``Found N findings (F fixed, R remaining)``, N counting both."""
    remaining = len(diagnostics)
    fixable = sum(1 for d in diagnostics if is_fix_shown(d, unsafe))
    hidden = sum(1 for d in diagnostics if d.fix is not None and not is_fix_shown(d, unsafe))
    if remaining == 0 and not fixed:
        return "All checks passed!"
    total = remaining + fixed
    notes = [f"{fixed} fixed, {remaining} remaining"] if fixed else []
    if fixable or hidden:
        fixes = f"{fixable} fixable with --fix"
        if hidden:
            fixes += f", {hidden} more with --unsafe-fixes"
        notes.append(fixes)
    text = f"Found {total} finding{'s' if total != 1 else ''}"
    return f"{text} ({'; '.join(notes)})" if notes else text


def shows_summary(args, stream, always: bool) -> bool:
    """Whether the summary line is printed: never with ``--quiet``; else in
    ``full`` always (``always``), in ``concise`` only on a terminal, so that
    piped concise output stays one finding per line."""
    if getattr(args, "quiet", False):
        return False
    return always or is_terminal(stream)


def shown_fixes_lines(run) -> list[str]:
    """``--show-fixes``: the fixes applied (or, without ``--fix``, available)
    per file, ``N x CODE (name)``; empty when there are none to list."""
    shown = getattr(run, "shown_fixes", None)
    if not shown:
        return []
    total = sum(count for _, rows in shown for _, _, count in rows)
    plural = "s" if total != 1 else ""
    title = (f"Fixed {total} finding{plural}:" if getattr(run, "fixes_applied", False)
             else f"{total} finding{plural} fixable with {getattr(run, 'fixes_options', '--fix')}:")
    lines = [title]
    for path, rows in shown:
        lines.append(f"- {printable_name(path)}:")
        lines.extend(f"    {count} x {code} ({name})" for code, name, count in rows)
    return lines


def render(run, args, stream) -> None:
    """Print every finding of ``run`` with its source snippet, then the summary."""
    console = Console(file=stream, highlight=False, soft_wrap=True, emoji=False)
    unsafe = bool(getattr(args, "unsafe_fixes", False))
    cache: dict[str, object] = {}
    stdin = getattr(run, "stdin", None)
    diagnostics = run.diagnostics
    for diagnostic in diagnostics:
        if diagnostic.path not in cache:
            reader = source_lines if diagnostic.cell is None else notebook_lines
            cache[diagnostic.path] = reader(diagnostic.path, stdin)
        lines = cache[diagnostic.path]
        if diagnostic.cell is not None:
            lines = (lines or {}).get(diagnostic.cell) if isinstance(lines, dict) else None
        for line in format_diagnostic(diagnostic, lines, unsafe):
            console.print(line)
        console.print()
    for line in shown_fixes_lines(run):
        console.print(Text(line))
    if shown_fixes_lines(run):
        console.print()
    if shows_summary(args, stream, always=True):
        console.print(Text(summary(diagnostics, unsafe, getattr(run, "fixed", 0)), style="bold"))
    if getattr(run, "estimates", None):
        from memlint.report.estimate_section import render_estimates

        render_estimates(run, console)
