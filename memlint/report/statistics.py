"""``--statistics``: how many findings of each code, most frequent first.

A code is marked ``[*]`` when some of its findings have a fix that ``--fix``
applies (a safe fix, or any fix with ``--unsafe-fixes``), as ruff marks them.
Without ``--unsafe-fixes``, a last line says how many findings have a fix
that only ``--unsafe-fixes`` applies (``N hidden fixes can be enabled with
the `--unsafe-fixes` option.``, as ruff says it). With ``--format json`` the
same counts are a JSON array of ``{"code", "name", "count", "fixable"}``.
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


def hidden_fixes(diagnostics, unsafe_fixes: bool) -> int:
    """How many of ``diagnostics`` have a fix that only ``--unsafe-fixes`` applies
    (0 when ``unsafe_fixes`` is on)."""
    if unsafe_fixes:
        return 0
    return sum(1 for d in diagnostics if d.fix is not None and d.fix.applicability is Applicability.UNSAFE)


def hidden_fixes_line(count: int) -> str:
    """``N hidden fixes can be enabled with the `--unsafe-fixes` option.`` (as ruff says it); '' for 0."""
    if not count:
        return ""
    return f"{count} hidden fix{'es' if count != 1 else ''} can be enabled with the `--unsafe-fixes` option."


def render(run, args, stream) -> None:
    unsafe = bool(getattr(args, "unsafe_fixes", False))
    table = rows(run, unsafe)
    if getattr(args, "format", None) == "json":
        json.dump(table, stream, indent=2)
        stream.write("\n")
        return
    for row in table:
        mark = "[*]" if row["fixable"] else "   "
        print(f"{row['count']:>6}\t{row['code']}\t{mark} {row['name']}", file=stream)
    from memlint.report.full import shows_summary, summary

    if shows_summary(args, stream, always=False):  # on a terminal, as the concise format
        print(summary(run.diagnostics, unsafe, getattr(run, "fixed", 0)), file=stream)  # "K more with --unsafe-fixes"
    elif not getattr(args, "quiet", False):
        hidden = hidden_fixes_line(hidden_fixes(run.diagnostics, unsafe))
        if hidden:
            print(hidden, file=stream)
