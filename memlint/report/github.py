"""``github``: GitHub Actions workflow commands, one annotation per finding.

``::error file=PATH,line=L,col=C,endLine=L2,endColumn=C2,title=CODE name::MESSAGE``
with ``::warning`` for warnings and ``::notice`` for info findings.
Escaping follows the Actions toolkit (``@actions/core`` ``command.ts``): in
the message, ``%`` -> ``%25``, CR -> ``%0D``, LF -> ``%0A``; in property
values additionally ``:`` -> ``%3A`` and ``,`` -> ``%2C``.
Before that, every non-printable character (ESC, which GitHub's log viewer
interprets as a colour sequence, and the rest) is escaped as in the other
formats (:func:`~memlint.report.text.printable`).
Unreadable files and other run errors become ``::error`` lines too.

In a notebook, ``line``/``col`` would point into the ``.ipynb`` JSON, so the
annotation names the file only and the message starts with the cell
position: ``::warning file=nb.ipynb,title=MEM113 ...::cell 4:1:1: message``
(GitHub shows it as a file-level annotation).
"""

from __future__ import annotations

from memlint.report.text import double_backslashes, printable

COMMANDS = {"error": "error", "warning": "warning", "info": "notice"}


def escape_data(text: str) -> str:
    """Escape a workflow command's message (one line, nothing non-printable)."""
    return printable(text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A"))


def escape_property(text: str) -> str:
    """Escape a workflow command's property value."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(name: str, properties: dict[str, object], message: str) -> str:
    """One ``::name key=value,...::message`` line, escaped."""
    props = ",".join(f"{key}={escape_property(str(value))}" for key, value in properties.items())
    return f"::{name}{' ' + props if props else ''}::{escape_data(message)}"


def format_diagnostic(diagnostic) -> str:
    """The annotation line for one finding."""
    title = f"{diagnostic.code} {diagnostic.name}"
    severity = COMMANDS.get(diagnostic.severity.value, "warning")
    if diagnostic.cell is not None:
        return command(severity, {"file": diagnostic.path, "title": title}, f"{diagnostic.location}: {diagnostic.message}")
    properties = {
        "file": double_backslashes(diagnostic.path),
        "line": diagnostic.line,
        "col": diagnostic.col,
        "endLine": diagnostic.end_line,
        "endColumn": diagnostic.end_col,
        "title": title,
    }
    return command(severity, properties, diagnostic.message)


def render(run, args, stream) -> None:
    from memlint.report import run_errors

    for diagnostic in run.diagnostics:
        print(format_diagnostic(diagnostic), file=stream)
    for message in run_errors(run):
        print(command("error", {"title": "memlint"}, message), file=stream)
