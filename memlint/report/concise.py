"""``concise``: ``path:line:col: CODE message``, one finding per line.

In a notebook the position is the cell's: ``path:cell N:line:col: CODE
message`` (N counts every cell from 1, as stored; line and column in the
cell), as ruff prints it.

flake8-compatible, and what the problem matchers of docs/integrations.md read.
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
    for diagnostic in run.diagnostics:
        print(format_line(diagnostic), file=stream)
    if getattr(run, "estimates", None):
        from memlint.report.estimate_section import render_estimates_plain

        render_estimates_plain(run, stream)
