"""Lint speed, side by side (not a test): memlint vs TorchFix (and Fixit).

One run measures, on the fixed corpus of ``corpus.txt`` (see corpus.py):

- memlint cold (empty cache directory), memlint ``--no-cache``, memlint warm
  (the cache the cold run filled), each the median of ``--repeat`` runs;
- TorchFix (its default rules, its default one job per core) and Fixit
  (``fixit lint``, its default rules), run from the separate virtual
  environment ``.venv-bench`` because they pin their own dependencies;
  neither has a results cache, and each is measured once (they are slow);
- memlint's single-file cold start (bench_single_file.py).

Before measuring, memlint's own modules are byte-compiled (``compileall``),
as ``pip install`` does for a regular install and as the comparison tools'
installs are: otherwise an editable install run with
``PYTHONDONTWRITEBYTECODE`` set (as on the reference machine) compiles its
modules from source in every run (~70 ms), a cost no installed user pays.

Per measurement: wall time, CPU time (user + system of the whole process
tree; unlike wall time it does not grow when other processes compete for the
cores) and peak memory (the largest sum of the RSS of the process tree,
sampled from /proc every 10 ms). The table goes into docs/performance.md
between the ``lint-benchmark`` markers, with the machine, the versions, the
number of rules and the load average (a loaded machine slows wall times).

Set-up of the comparison tools (once)::

    python -m venv .venv-bench && .venv-bench/bin/pip install torchfix fixit

Run::

    python tests/benchmarks/bench_lint.py [--repeat 3] [--no-write]

``--corpus DIR [DIR ...]`` measures every ``.py`` file under other
directories (for example checkouts of training repositories) instead of
``corpus.txt``; the table then names those directories.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

from bench_single_file import measure as measure_single_file  # noqa: E402
from bench_single_file import memlint_command  # noqa: E402
from corpus import load_corpus, python_files  # noqa: E402

BENCH_VENV = REPO / ".venv-bench"
PERFORMANCE_DOC = REPO / "docs" / "performance.md"
DEFAULT_SECTION = "lint-benchmark"
SAMPLE_SECONDS = 0.01


@dataclass
class Sample:
    """One measured run of a command."""

    wall: float  # seconds
    cpu: float  # seconds, user + system, the whole process tree
    peak_rss: int  # bytes, largest sum over the process tree
    returncode: int
    output_lines: int


def _tree_rss(root: int) -> int:
    """Sum of VmRSS (bytes) of ``root`` and its descendants, from /proc."""
    total, stack, seen = 0, [root], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/status") as handle:
                for line in handle:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as handle:
                    stack.extend(int(child) for child in handle.read().split())
        except (OSError, ValueError):
            continue
    return total


def run_measured(command: list[str], cwd: Path | None = None) -> Sample:
    """Run ``command`` once; output goes to a temporary file (lines counted)."""
    with tempfile.TemporaryFile() as output:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, cwd=cwd)
        peak = 0
        while process.poll() is None:
            peak = max(peak, _tree_rss(process.pid))
            time.sleep(SAMPLE_SECONDS)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        output.seek(0)
        lines = output.read().count(b"\n")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Sample(wall, cpu, peak, process.returncode, lines)


def median_sample(samples: list[Sample]) -> Sample:
    """Medians of each field (the run count of the first sample)."""
    return Sample(
        statistics.median(s.wall for s in samples),
        statistics.median(s.cpu for s in samples),
        int(statistics.median(s.peak_rss for s in samples)),
        max(s.returncode for s in samples),
        samples[0].output_lines,
    )


def byte_compile_memlint() -> None:
    """Write the ``__pycache__`` of memlint's packages, as an install does
    (``compileall`` writes whatever ``PYTHONDONTWRITEBYTECODE`` says)."""
    import compileall

    import memlint
    import memlint.rules

    for package in (memlint, memlint.rules):
        compileall.compile_dir(os.path.dirname(package.__file__), quiet=1)


def measure_memlint(files: list[str], repeat: int, extra: tuple[str, ...] = ()) -> dict[str, Sample]:
    """memlint cold / --no-cache / warm medians on ``files`` (``extra``: more options)."""
    base = [*memlint_command(), "check", "--exit-zero", "--format", "concise", *extra]
    work = Path(tempfile.mkdtemp(prefix="memlint-bench-"))
    cold, uncached, warm = [], [], []
    try:
        for _ in range(repeat):
            cache = work / "cache"
            for _attempt in range(3):
                # The cache is keyed by the rule sources' mtimes too: a rule
                # edited between the cold and the warm run (rules are being
                # written concurrently) makes the warm run cold. Measure again.
                before = _code_fingerprint()
                shutil.rmtree(cache, ignore_errors=True)
                cold_sample = run_measured([*base, "--cache-dir", str(cache), *files])
                warm_sample = run_measured([*base, "--cache-dir", str(cache), *files])
                if _code_fingerprint() == before:
                    break
            cold.append(cold_sample)
            warm.append(warm_sample)
            uncached.append(run_measured([*base, "--no-cache", *files]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"cold": median_sample(cold), "no-cache": median_sample(uncached), "warm": median_sample(warm)}


def _code_fingerprint() -> str:
    from memlint.lint.cache import _code_fingerprint as fingerprint

    return fingerprint()


def measure_tool(command: list[str], files: list[str], repeat: int) -> Sample | None:
    """Median of ``repeat`` runs of another linter, None when not installed."""
    if not Path(command[0]).exists():
        return None
    return median_sample([run_measured([*command, *files]) for _ in range(repeat)])


def _version_of(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "not installed"
    text = (done.stdout or done.stderr).strip().splitlines()
    return text[-1] if text else "unknown"


def machine() -> dict[str, str]:
    """CPU model, cores, memory, Python and tool versions, rule count."""
    model = "unknown"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    from memlint import __version__
    from memlint.lint.registry import rule_index

    index = rule_index()
    bench_python = str(BENCH_VENV / "bin" / "python")
    return {
        "machine": f"{model}, {os.cpu_count()} cores, {memory:.1f} GiB RAM, {platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "memlint": __version__,
        "rules": f"{len(index)} ({sum(info.default_enabled for info in index.values())} enabled by default)",
        "torchfix": _version_of([str(BENCH_VENV / "bin" / "torchfix"), "--version"]),
        "fixit": _version_of([str(BENCH_VENV / "bin" / "fixit"), "--version"]),
        "libcst (bench venv)": _version_of([bench_python, "-c", "import importlib.metadata as m; print(m.version('libcst'))"]),
    }


def format_report(info: dict[str, str], n_files: int, corpus_bytes: int, lint: dict[str, Sample],
                  others: dict[str, Sample | None], single: dict[str, tuple[float, float]],
                  load: tuple[float, float], repeat: int, stride: int = 1,
                  source: str = "tests/benchmarks/corpus.txt", corpus_option: str = "") -> str:
    """The Markdown section written between the markers."""
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    subset = f" --stride {stride}" if stride > 1 else ""
    lines = [
        f"Measured {when} by `python tests/benchmarks/bench_lint.py --repeat {repeat}{subset}{corpus_option}` "
        f"(medians of {repeat} runs; load average {load[0]:.1f} before, {load[1]:.1f} after).",
        "",
        *(f"- {key}: {value}" for key, value in info.items()),
        f"- corpus: {n_files} files, {corpus_bytes / 2**20:.1f} MiB ({source}"
        + (f", every {stride}th file)" if stride > 1 else ")"),
        "",
        "| tool | run | wall | CPU (user+sys) | peak memory | output lines | wall vs memlint cold |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    reference = lint["cold"].wall
    rows = [("memlint", name, sample) for name, sample in lint.items()]
    rows += [(name, "cold (no cache)", sample) for name, sample in others.items() if sample is not None]
    for tool, run, sample in rows:
        lines.append(
            f"| {tool} | {run} | {sample.wall:.2f} s | {sample.cpu:.2f} s | {sample.peak_rss / 2**20:.0f} MiB "
            f"| {sample.output_lines} | {sample.wall / reference:.2f}x |"
        )
    missing = [name for name, sample in others.items() if sample is None]
    if missing:
        lines += ["", f"Not installed, not measured: {', '.join(missing)}."]
    lines += [
        "",
        "Single file (`memlint check FILE`, fresh process each time, median of the runs):",
        "",
        "| case | wall | CPU |",
        "|---|---:|---:|",
        *(f"| {name} | {wall * 1000:.0f} ms | {cpu * 1000:.0f} ms |" for name, (wall, cpu) in single.items()),
    ]
    return "\n".join(lines)


def write_report(section: str, name: str = DEFAULT_SECTION) -> None:
    """Replace the text between the ``<!-- NAME:begin/end -->`` markers in
    docs/performance.md (other sections, such as the estimator's, are kept)."""
    text = PERFORMANCE_DOC.read_text(encoding="utf-8") if PERFORMANCE_DOC.exists() else ""
    BEGIN, END = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    block = f"{BEGIN}\n{section}\n{END}"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip() + ("\n\n" if text else "") + f"## Linter benchmark\n\n{block}\n"
    PERFORMANCE_DOC.write_text(text, encoding="utf-8")


def copy_corpus(files: list[str], destination: Path, roots: list[str] | None = None) -> list[str]:
    """Copy the corpus under ``destination`` and return the copies' paths.

    Every tool lints the copies, so no configuration or ``.gitignore`` of
    this repository applies (Fixit skips git-ignored paths, and the virtual
    environment holding torch is git-ignored here). The layout below
    ``destination`` is ``torch/...``, ``transformers/...``, ``fixtures/...``
    (or, with ``roots``, each root's name and the path below it).
    """
    from corpus import site_packages

    site, copies = str(site_packages()), []
    for path in files:
        if roots:
            root = next(r for r in roots if path.startswith(r + os.sep))
            base = os.path.dirname(root)
        else:
            base = site if path.startswith(site + os.sep) else str(REPO)
        target = destination / os.path.relpath(path, base)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        copies.append(str(target))
    return copies


def load_or_measure_others(files: list[str], path: Path | None, reuse: bool) -> tuple[dict, str | None]:
    """TorchFix/Fixit samples: measured now, or (``--reuse-others``) read from
    ``path`` where an earlier run saved them; also the time they were taken."""
    import json

    if reuse and path is not None and path.exists():
        saved = json.loads(path.read_text())
        others = {name: (Sample(**value) if value else None) for name, value in saved["samples"].items()}
        return others, saved["measured"]
    tools = {
        "TorchFix": [str(BENCH_VENV / "bin" / "torchfix")],
        "Fixit": [str(BENCH_VENV / "bin" / "fixit"), "lint"],
    }
    others = {name: measure_tool(command, files, 1) for name, command in tools.items()}
    measured = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    if path is not None:
        samples = {name: (vars(sample) if sample else None) for name, sample in others.items()}
        path.write_text(json.dumps({"measured": measured, "samples": samples}, indent=1))
    return others, None


def python_files_under(roots: list[str]) -> list[str]:
    """Every ``.py`` file below ``roots`` (see :func:`corpus.python_files`)."""
    found = []
    for root in roots:
        if not os.path.isdir(root):
            raise SystemExit(f"error: --corpus: {root} is not a directory")
        found.extend(python_files(root))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description="memlint vs TorchFix/Fixit lint speed")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (medians)")
    parser.add_argument("--single-runs", type=int, default=15, help="runs of each single-file case")
    parser.add_argument("--no-write", action="store_true", help="print the table; do not edit docs/performance.md")
    parser.add_argument("--skip-others", action="store_true", help="measure memlint only")
    parser.add_argument("--stride", type=int, default=1,
                        help="use every N-th corpus file (a quicker, still fixed, subset; default: all)")
    parser.add_argument("--others-json", type=Path, help="save TorchFix/Fixit samples here (or read them)")
    parser.add_argument("--reuse-others", action="store_true",
                        help="read TorchFix/Fixit samples from --others-json instead of re-measuring (minutes)")
    parser.add_argument("--corpus", nargs="+", metavar="DIR",
                        help="lint every .py file under these directories instead of corpus.txt")
    parser.add_argument("--lint-only", action="store_true",
                        help="run memlint with --ignore MEM302: the estimator verdict, the one rule that imports "
                             "torch and traces a model (for scripts with a `# memlint: estimate` comment)")
    parser.add_argument("--doc-section", default=DEFAULT_SECTION,
                        help="the <!-- NAME:begin/end --> markers in docs/performance.md to write between")
    args = parser.parse_args()

    roots = [os.path.abspath(d) for d in args.corpus] if args.corpus else None
    if roots:
        corpus, missing = python_files_under(roots), []
        source = ", ".join(os.path.basename(r) for r in roots)
        corpus_option = " --corpus " + " ".join(args.corpus)
    else:
        corpus, missing = load_corpus()
        source, corpus_option = "tests/benchmarks/corpus.txt", ""
    corpus = corpus[:: max(1, args.stride)]
    if missing:
        print(f"note: {len(missing)} corpus files missing here (different package versions?)", file=sys.stderr)
    if not corpus:
        print("error: the corpus has no .py files", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="memlint-corpus-"))
    try:
        files = copy_corpus(corpus, work, roots)
        load_before = os.getloadavg()[0]
        extra = ("--ignore", "MEM302") if args.lint_only else ()
        corpus_option += " --lint-only" if args.lint_only else ""
        if args.doc_section != DEFAULT_SECTION:
            corpus_option += f" --doc-section {args.doc_section}"
        byte_compile_memlint()
        lint = measure_memlint(files, args.repeat, extra)
        others, others_when = ({}, None) if args.skip_others else load_or_measure_others(
            files, args.others_json, args.reuse_others
        )
        single = measure_single_file(args.single_runs)
        load_after = os.getloadavg()[0]
        section = format_report(
            machine(), len(files), sum(os.path.getsize(f) for f in files), lint, others, single,
            (load_before, load_after), args.repeat, args.stride, source, corpus_option,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if others_when:
        section += f"\n\nTorchFix/Fixit rows: measured {others_when} on the same corpus (reused, `--reuse-others`)."
    print(section)
    if not args.no_write:
        write_report(section, args.doc_section)
        print(f"\nwrote {PERFORMANCE_DOC.relative_to(REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
