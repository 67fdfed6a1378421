"""``--statistics``: how many findings of each code, most frequent first.

A code is marked ``[*]`` when some of its findings have a fix that ``--fix``
applies (a safe fix, or any fix with ``--unsafe-fixes``), as ruff marks them.
With ``--format json`` the same counts are a JSON array of
``{"code", "name", "count", "fixable"}``.
"""

from __future__ import annotations

import json
from collections import Counter

from memlint.lint.diagnostic import Applicability


def rows(run, unsafe_fixes: bool) -> list[dict]:
    """``{"code", "name", "count", "fixable"}`` per code, most frequent first."""
    counts = Counter((d.code, d.name) for d in run.diagnostics)
    fixable = Counter(
        d.code for d in run.diagnostics
        if d.fix is not None and (unsafe_fixes or d.fix.applicability is Applicability.SAFE)
    )
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0][0]))
    return [{"code": code, "name": name, "count": count, "fixable": fixable[code]} for (code, name), count in ordered]


def render(run, args, stream) -> None:
    table = rows(run, bool(getattr(args, "unsafe_fixes", False)))
    if getattr(args, "format", None) == "json":
        json.dump(table, stream, indent=2)
        stream.write("\n")
        return
    for row in table:
        mark = "[*]" if row["fixable"] else "   "
        print(f"{row['count']:>6}\t{row['code']}\t{mark} {row['name']}", file=stream)
    from memlint.report.full import shows_summary, summary

    if shows_summary(args, stream, always=False):  # on a terminal, as the concise format
        print(summary(run.diagnostics, bool(getattr(args, "unsafe_fixes", False)), getattr(run, "fixed", 0)),
              file=stream)
