"""Output formats for ``memlint check``.

Each format module has ``render(run, args, stream)``; :func:`render` picks one
(``--format``; default ``full`` on a terminal, ``concise`` otherwise) and
prints the run's one-line errors on stderr in every format (its notes too,
unless ``--quiet``).
"""

from __future__ import annotations

import importlib
import sys

from memlint.report.text import printable

FORMAT_MODULES = {
    "full": "memlint.report.full",
    "concise": "memlint.report.concise",
    "json": "memlint.report.json_format",
    "github": "memlint.report.github",
    "sarif": "memlint.report.sarif",
}


def run_notes(run) -> list[str]:
    """One-line remarks that are not errors: the run's own ("no Python files
    to check") and each file's (a file skipped as too large to lint)."""
    return [*run.notes, *(r.note for r in run.results if getattr(r, "note", None))]


def default_format(stream) -> str:
    isatty = getattr(stream, "isatty", None)
    return "full" if isatty is not None and isatty() else "concise"


def render(run, args, stream=None) -> None:
    """Print ``run`` in the chosen format on ``stream`` (stdout) and errors on stderr."""
    if stream is None:
        stream = sys.stdout
        if getattr(run, "stdin", None) is not None and getattr(args, "fix", False):
            stream = sys.stderr  # stdout carries the fixed source
    for message in run_errors(run):
        print(f"memlint: error: {printable(message)}", file=sys.stderr)
    if getattr(args, "debug", False):
        for result in run.results:
            for detail in getattr(result, "internal_details", ()):
                print(f"memlint: traceback for {printable(result.path)}:\n{detail}", file=sys.stderr)
    for note in [] if getattr(args, "quiet", False) else run_notes(run):
        print(f"memlint: {printable(note)}", file=sys.stderr)
    if getattr(run, "diff_only", False):
        return  # --diff printed the diffs; findings are not reported
    fmt = args.format or default_format(stream)
    if getattr(args, "statistics", False) and fmt in ("full", "concise", "json"):
        from memlint.report.statistics import render as render_statistics

        render_statistics(run, args, stream)
        return
    module = importlib.import_module(FORMAT_MODULES[fmt])
    module.render(run, args, stream)


def run_failed(run) -> bool:
    """True when the run had errors (exit code 2): a one-line error (bad path,
    unreadable file, failed estimate, crashed rule) or a file that does not
    parse (MEM001). SARIF's ``executionSuccessful`` is its negation."""
    from memlint.lint.engine import SYNTAX_ERROR_CODE

    return bool(run_errors(run)) or any(d.code == SYNTAX_ERROR_CODE for d in run.diagnostics)


def run_errors(run) -> list[str]:
    """One-line errors: bad paths, unreadable files, crashed rules."""
    messages = list(run.errors)
    for result in run.results:
        if result.error:
            messages.append(result.error)
        messages.extend(f"{result.path}: {message}" for message in result.internal_errors)
    return messages
