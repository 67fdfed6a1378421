"""``json``: a stable, versioned document (schema in docs/output-formats.md).

Top level: ``{"schema_version": 1, "memlint_version", "summary", "diagnostics",
"errors", "notes", "estimates"}``; each diagnostic has code, name, severity, message,
path, start/end line and column (1-based, end exclusive) and ``fix`` (null or
``{"title", "applicability", "edits": [{start/end line/col, content}]}``).
Since memlint 0.1 (still schema version 1: the field is additive), each
diagnostic and each edit also has ``cell``: null in a Python file; in a
notebook the 1-based number of the cell (counting every cell as stored,
markdown included), the lines and columns then being the cell's.

Strings are valid Unicode: the bytes of a file name that are not UTF-8 are
written as the four characters ``\\xNN``; JSON's own escaping handles
control characters.
"""

from __future__ import annotations

import json

from memlint import __version__
from memlint.report.text import valid_document, valid_name

SCHEMA_VERSION = 1


def diagnostic_to_dict(d) -> dict:
    fix = None
    if d.fix is not None:
        fix = {
            "title": d.fix.title,
            "applicability": d.fix.applicability.value,
            "edits": [
                {
                    "start_line": e.start_line,
                    "start_col": e.start_col,
                    "end_line": e.end_line,
                    "end_col": e.end_col,
                    "content": e.content,
                    "cell": e.cell,
                }
                for e in d.fix.edits
            ],
        }
    return {
        "code": d.code,
        "name": d.name,
        "severity": d.severity.value,
        "message": d.message,
        "path": valid_name(d.path),
        "start_line": d.line,
        "start_col": d.col,
        "end_line": d.end_line,
        "end_col": d.end_col,
        "cell": d.cell,
        "fix": fix,
    }


def document(run) -> dict:
    from memlint.report import run_errors, run_notes

    diagnostics = [diagnostic_to_dict(d) for d in run.diagnostics]
    by_severity: dict[str, int] = {}
    for d in run.diagnostics:
        by_severity[d.severity.value] = by_severity.get(d.severity.value, 0) + 1
    return {
        "schema_version": SCHEMA_VERSION,
        "memlint_version": __version__,
        "summary": {"files": len(run.results), "diagnostics": len(diagnostics), "by_severity": by_severity},
        "diagnostics": diagnostics,
        "errors": run_errors(run),
        "notes": run_notes(run),
        "estimates": [e.to_json() if hasattr(e, "to_json") else e for e in run.estimates],
    }


def render(run, args, stream) -> None:
    from memlint.lint.fixes import resolve_run

    resolve_run(run)  # each fix's edits, from libcst (loaded only for a file that has a fix)
    json.dump(valid_document(document(run)), stream, indent=2)
    stream.write("\n")
