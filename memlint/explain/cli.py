"""``memlint explain SNAPSHOT.pickle [--format text|json] [--top N]``.

Exit codes: 0 the report was printed; 2 the file could not be read as a
snapshot (one line, ``memlint: error: ...``).  The lint findings are on the
user files the snapshot's stack frames name (linting never runs them).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from memlint.errors import UsageError
from memlint.estimate.units import format_bytes

#: Most files linted for one snapshot (a bound of ours: a snapshot's frames
#: name a handful of user files; this keeps a hostile one from naming thousands).
MAX_LINTED_FILES = 100
#: Iterations printed at each end of a long trace in the text report (a choice of ours).
ITERATIONS_SHOWN = 5


def add_explain_arguments(parser: argparse.ArgumentParser) -> None:
    """SNAPSHOT and the explain options."""
    parser.add_argument("snapshot", metavar="SNAPSHOT",
                        help="a pickle from torch.cuda.memory._dump_snapshot() or memlint estimate --snapshot")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--top", type=int, default=10, metavar="N", help="rows per table (default 10)")


def run_explain(args) -> int:
    """Run ``memlint explain``; returns 0, or 2 for a file that is not a readable snapshot."""
    from memlint.explain.analyse import analyse, frame_files  # noqa: PLC0415
    from memlint.explain.load import load_snapshot  # noqa: PLC0415
    from memlint.report.text import printable  # noqa: PLC0415

    try:
        if args.top < 1:
            raise UsageError(f"--top {args.top}: must be at least 1")
        snapshot = load_snapshot(args.snapshot)
        reports = analyse(snapshot, args.top)
        named = frame_files(snapshot, os.path.dirname(os.path.abspath(args.snapshot)))
        findings = lint_named_files(named)
    except UsageError as exc:
        print(f"memlint: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    if args.format == "json":
        print(json.dumps(to_json(args.snapshot, reports, findings), indent=2))
    else:
        print(render_text(args.snapshot, reports, findings), end="")
    return 0


def lint_named_files(named: dict[str, set[int]]) -> list[dict]:
    """memlint's findings on the files ``named`` (path -> lines on the stack), each with ``on_stack``."""
    from memlint.check import selection  # noqa: PLC0415
    from memlint.config import load_config  # noqa: PLC0415
    from memlint.lint.engine import LintOptions, lint_source  # noqa: PLC0415

    findings = []
    for path in sorted(named)[:MAX_LINTED_FILES]:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
            config = load_config(None, Path(path).absolute().parent)
            enabled = selection(argparse.Namespace(select=None, extend_select=None, ignore=None), config)
        except (OSError, UsageError) as exc:
            findings.append({"path": path, "error": str(getattr(exc, "strerror", None) or exc)})
            continue
        result = lint_source(path, data, LintOptions(enabled=enabled))
        for diagnostic in sorted(result.diagnostics, key=lambda d: d.sort_key()):
            findings.append({"path": path, "line": diagnostic.line, "col": diagnostic.col,
                             "code": diagnostic.code, "message": diagnostic.message,
                             "on_stack": diagnostic.line in named[path]})
    return findings


def to_json(path: str, reports, findings) -> dict:
    """The JSON document of ``memlint explain --format json`` (bytes throughout)."""
    from memlint.explain.analyse import leak_suspects  # noqa: PLC0415

    def rows(items):
        return [{"name": name, "bytes": nbytes, "blocks": count} for name, nbytes, count in items]

    devices = []
    for report in reports:
        devices.append({
            "device": report.device,
            "fragmentation": report.fragmentation.to_json(),
            "by_module": rows(report.by_module),
            "by_call_site": rows(report.by_call_site),
            "trace_entries": report.trace_entries,
            "trace_peak_requested_bytes": report.trace_peak,
            "peak_by_module": rows(report.peak_by_module),
            "peak_by_call_site": rows(report.peak_by_call_site),
            "ooms": report.ooms,
            "iteration_marker": report.anchor,
            "iterations": [{"index": it.index, "trace_index": it.start, "live_at_start": it.live_at_start,
                            "growth": it.growth, "still_allocated_at_end": it.survivors}
                           for it in report.iterations],
            "leak_suspects": leak_suspects(report),
        })
    return {"snapshot": path, "devices": devices, "lint": findings}


def _table(lines: list[str], title: str, items) -> None:
    if not items:
        return
    lines.append(title)
    for name, nbytes, count in items:
        lines.append(f"  {format_bytes(nbytes):>12}  {count:6d} blocks  {name}")


def render_text(path: str, reports, findings) -> str:
    """The text report (one section per device, then the lint findings)."""
    from memlint.explain.analyse import leak_suspects  # noqa: PLC0415
    from memlint.report.text import printable  # noqa: PLC0415

    lines = [f"memlint explain {path}"]
    if not reports:
        lines.append("  the snapshot holds no segments and no trace")
    for report in reports:
        frag = report.fragmentation
        lines.append(f"device {report.device}: {frag.segments} segments")
        lines.append(f"  reserved_bytes {format_bytes(frag.reserved_bytes)}, allocated_bytes "
                     f"{format_bytes(frag.allocated_bytes)} (requested_bytes {format_bytes(frag.requested_bytes)})")
        lines.append(f"  fragmentation: reserved - allocated = {format_bytes(frag.reserved_minus_allocated)}: "
                     f"inactive_split_bytes {format_bytes(frag.inactive_split_bytes)} (free blocks inside used "
                     f"segments; largest free block {format_bytes(frag.largest_free_block)}), "
                     f"{format_bytes(frag.releasable_bytes)} in fully free segments (empty_cache() releases them)")
        for oom in report.ooms:
            free = "?" if oom["device_free"] is None else format_bytes(oom["device_free"])
            lines.append(f"  OOM at trace entry {oom['index']}: {format_bytes(oom['requested'])} requested, "
                         f"{free} free on the device, at {oom['call_site']}")
        _table(lines, "  allocated at the snapshot, by module:", report.by_module)
        _table(lines, "  allocated at the snapshot, by call site:", report.by_call_site)
        if report.trace_peak is not None:
            lines.append(f"  trace: {report.trace_entries} entries, peak {format_bytes(report.trace_peak)} requested")
            _table(lines, "  live at the trace's peak, by module:", report.peak_by_module)
            _table(lines, "  live at the trace's peak, by call site:", report.peak_by_call_site)
        _render_iterations(lines, report, leak_suspects(report))
    lines.append(f"lint findings on the {len({f['path'] for f in findings})} file(s) with findings named by the "
                 "stack frames (* = a line on the stack):" if findings else
                 "lint: no findings on the user files the stack frames name")
    for finding in findings:
        if "error" in finding:
            lines.append(f"  {finding['path']}: cannot read: {finding['error']}")
        else:
            mark = "*" if finding["on_stack"] else " "
            lines.append(f" {mark}{finding['path']}:{finding['line']}:{finding['col']}: {finding['code']} "
                         f"{finding['message']}")
    return "\n".join(printable(line) for line in lines) + "\n"


def _render_iterations(lines: list[str], report, suspects: dict[str, int]) -> None:
    if not report.iterations:
        if report.trace_entries:
            lines.append("  iterations: no repeated step found in the trace")
        return
    lines.append(f"  iterations: {len(report.iterations)}, each beginning at {report.anchor}")
    shown = report.iterations
    if len(shown) > 2 * ITERATIONS_SHOWN:
        shown = shown[:ITERATIONS_SHOWN] + [None] + shown[-ITERATIONS_SHOWN:]
    for it in shown:
        if it is None:
            lines.append(f"    ... {len(report.iterations) - 2 * ITERATIONS_SHOWN} more (all in --format json)")
            continue
        growth = "" if it.growth is None else f", then {'+' if it.growth >= 0 else ''}{format_bytes(it.growth)}"
        lines.append(f"    #{it.index} at entry {it.start}: {format_bytes(it.live_at_start)} allocated{growth}")
    if len(report.iterations) < 3:
        lines.append("  growth: telling it from the step in flight needs three iterations or more in the trace")
    elif suspects:
        lines.append("  still allocated at the end, made in a complete iteration after the first (growth):")
        for site, nbytes in list(suspects.items())[:10]:
            lines.append(f"    {format_bytes(nbytes):>12}  {site}")
    else:
        lines.append("  no growth: nothing made in a complete iteration after the first is still allocated")
