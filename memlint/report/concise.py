"""``concise``: ``path:line:col: CODE message``, one finding per line.

flake8-compatible, and what the problem matchers of docs/integrations.md read.
"""

from __future__ import annotations


def format_line(diagnostic) -> str:
    return f"{diagnostic.path}:{diagnostic.line}:{diagnostic.col}: {diagnostic.code} {diagnostic.message}"


def render(run, args, stream) -> None:
    for diagnostic in run.diagnostics:
        print(format_line(diagnostic), file=stream)
    if getattr(run, "estimates", None):
        from memlint.report.estimate_section import render_estimates_plain

        render_estimates_plain(run, stream)
