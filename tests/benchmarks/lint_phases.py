"""Where one lint run's time goes, phase by phase (not a test).

Runs the lint pipeline of :func:`memlint.lint.engine.lint_pending` in this
process, one file after another, and adds up the wall time of each phase
over the corpus: reading and decoding (with the text pre-filter when the
syntax check is off), CPython's parse (the syntax check and the tree the
rules read), the node index, the facts and gate (read from the index, then
the trigger tokens of the rules it lets through), the rules (including
the positions of their findings), and freeing the file's tree. The files
the gate skips cost no rules. The ratio it prints is the design's target:
the whole lint over a loop of plain ``ast.parse`` of the same files.

Run::

    python tests/benchmarks/lint_phases.py [--stride 6] [--corpus DIR ...] [--doc-section NAME]

With ``--doc-section NAME`` the table is also written into
docs/performance.md between the ``<!-- NAME:begin/end -->`` markers.
"""

from __future__ import annotations

import argparse
import ast
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_lint import python_files_under, write_report  # noqa: E402
from corpus import load_corpus  # noqa: E402

from memlint.lint.context import FileContext  # noqa: E402
from memlint.lint.engine import LintOptions, _run_rules, applicable_codes, precheck  # noqa: E402
from memlint.lint.facts import CodeFacts  # noqa: E402
from memlint.lint.registry import rule_classes, rule_index  # noqa: E402
from memlint.lint.runner import fewer_collections  # noqa: E402
from memlint.lint.walk import NodeIndex  # noqa: E402

PHASES = ("pre-filter", "CPython parse", "node index", "facts + gate", "rules", "free")


def measure(files: list[str]) -> tuple[dict[str, float], int, int, float, float]:
    """Seconds per phase, files parsed, files whose rules ran, and the
    seconds of plain ``ast.parse`` over the same files (the target's
    baseline), with the collector's default thresholds and with the lint's.

    "free" drops the file's tree, node index and context, as the engine does
    when a file is done (deallocating a tree costs about a tenth of its
    parse). The baseline is what a loop of ``ast.parse`` over the files
    costs, run after the lint in the same process (each result dropped, so
    freed, before the next parse)."""
    options = LintOptions(enabled=frozenset(code for code, info in rule_index().items() if info.default_enabled))
    rule_classes(tuple(options.enabled))  # importing the rules is a fixed cost, not a phase

    totals = dict.fromkeys(PHASES, 0.0)
    parsed_sources: list[str] = []
    with fewer_collections():  # as the engine's workers lint (memlint.lint.runner)
        gated, linted = _lint_all(files, options, totals, parsed_sources)
    gc.collect()  # what the lint left for the collector is not charged to the baseline
    baseline = _parse_loop(parsed_sources)  # the collector's default thresholds, as a plain loop of ast.parse runs
    with fewer_collections():
        tuned = _parse_loop(parsed_sources)
    return totals, gated, linted, baseline, tuned


def _parse_loop(sources: list[str]) -> float:
    start = time.perf_counter()
    for source in sources:
        ast.parse(source)
    return time.perf_counter() - start


def _lint_all(files: list[str], options: LintOptions, totals: dict[str, float], parsed_sources: list[str]) -> tuple[int, int]:
    gated = linted = 0
    for path in files:
        clock = time.perf_counter()
        _, pending = precheck(path, Path(path).read_bytes(), options)
        clock = _add(totals, "pre-filter", clock)
        if pending is None:
            continue
        try:
            tree = ast.parse(pending.source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        clock = _add(totals, "CPython parse", clock)
        gated += 1
        index = NodeIndex(tree)
        clock = _add(totals, "node index", clock)
        codes = applicable_codes(pending.codes, CodeFacts.of(index))
        rules = [rule for rule in rule_classes(codes).values() if rule.is_triggered_by(pending.source)] if codes else []
        clock = _add(totals, "facts + gate", clock)
        if rules:
            linted += 1
            ctx = FileContext(path, pending.source, tree, index)
            _run_rules(ctx, rules)
            ctx.close()
            del ctx
            clock = _add(totals, "rules", clock)
        del tree, index
        _add(totals, "free", clock)
        parsed_sources.append(pending.source)
    return gated, linted


def _add(totals: dict[str, float], phase: str, since: float) -> float:
    now = time.perf_counter()
    totals[phase] += now - since
    return now


def main() -> int:
    parser = argparse.ArgumentParser(description="per-phase lint time on the benchmark corpus")
    parser.add_argument("--stride", type=int, default=1, help="every N-th corpus file")
    parser.add_argument("--corpus", nargs="+", metavar="DIR", help="every .py file under these directories")
    parser.add_argument("--doc-section", help="also write the table into docs/performance.md between these markers")
    args = parser.parse_args()
    files = python_files_under([str(Path(d).resolve()) for d in args.corpus]) if args.corpus else load_corpus()[0]
    files = files[:: max(1, args.stride)]
    totals, parsed, linted, baseline, tuned = measure(files)
    total = sum(totals.values())
    command = "python tests/benchmarks/lint_phases.py" + (f" --stride {args.stride}" if args.stride > 1 else "")
    command += f" --corpus {' '.join(args.corpus)}" if args.corpus else ""
    lines = [
        f"`{command}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {len(files)} files, "
        f"{parsed} parsed, {linted} past the gate; {total:.2f} s in all.",
        "",
        "| phase | seconds | share |",
        "|---|---:|---:|",
        *(f"| {phase} | {totals[phase]:.2f} | {totals[phase] / total:.0%} |" for phase in PHASES),
        "",
        f"`ast.parse` alone over the same {parsed} files (each tree dropped): {baseline:.2f} s; "
        f"lint / parse = **{total / baseline:.2f}x** ({tuned:.2f} s and {total / tuned:.2f}x with the lint's "
        "collector thresholds for the parse too).",
    ]
    section = "\n".join(lines)
    print(section)
    if args.doc_section:
        write_report(section, args.doc_section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
