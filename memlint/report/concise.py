"""``concise``: ``path:line:col: CODE message``, one finding per line.

In a notebook the position is the cell's: ``path:cell N:line:col: CODE
message`` (N counts every cell from 1, as stored; line and column in the
cell), as ruff prints it.

flake8-compatible, and what the problem matchers of docs/integrations.md read.
On a terminal the ``full`` format's summary line follows (``Found N
findings ...``); piped or in ``--output-file`` it does not, so every line is a
finding.
Control characters in paths and messages are escaped, so a file name cannot
add a line.
"""

from __future__ import annotations

from memlint.report.text import printable, printable_name


def format_line(diagnostic) -> str:
    """One finding as ``path:line:col: CODE message`` (``path:cell N:line:col``
    in a notebook); the path and the
    message are escaped (:func:`~memlint.report.text.printable`), so the line
    is always one line."""
    return f"{printable_name(diagnostic.path)}:{diagnostic.location}: {diagnostic.code} {printable(diagnostic.message)}"


def render(run, args, stream) -> None:
    """One line per finding; then the ``--show-fixes`` list, and on a
    terminal the summary line of the ``full`` format (piped, the output stays
    one finding per line for the tools that read it)."""
    from memlint.report.full import shown_fixes_lines, shows_summary, summary

    diagnostics = run.diagnostics
    for diagnostic in diagnostics:
        print(format_line(diagnostic), file=stream)
    for line in shown_fixes_lines(run):
        print(line, file=stream)
    if shows_summary(args, stream, always=False):
        print(summary(diagnostics, bool(getattr(args, "unsafe_fixes", False)), getattr(run, "fixed", 0)), file=stream)
    if getattr(run, "estimates", None):
        from memlint.report.estimate_section import render_estimates_plain

        render_estimates_plain(run, stream)
