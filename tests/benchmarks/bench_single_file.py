"""Cold start of ``memlint check one_file.py`` (not a test): median of N runs.

Each run is a fresh process, as a pre-commit hook or an editor runs it.
Three cases, with Python's own start as the floor:

- ``parse``: a fixture that triggers rules, so it is parsed, the rule
  modules are imported and the rules run (``--no-cache``);
- ``no-trigger``: a file that triggers no rule (syntax check only);
- ``cache-hit``: the ``parse`` file again with a hot cache (no parse, no rule);
- floor: ``python -c pass``.

    python tests/benchmarks/bench_single_file.py [--runs 15]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: A lint fixture with findings (parsed by the default rules).
PARSE_FILE = REPO / "fixtures" / "lint" / "MEM303" / "basic.py"
NO_TRIGGER_SOURCE = "import os\n\n\ndef main():\n    print(os.getcwd())\n"


def memlint_command() -> list[str]:
    """The ``memlint`` console script next to this interpreter, else ``-m``."""
    script = Path(sys.executable).with_name("memlint")
    return [str(script)] if script.exists() else [sys.executable, "-m", "memlint"]


def median_seconds(command: list[str], runs: int, cwd: str | None = None) -> tuple[float, float]:
    """Median wall time and median CPU time (user + system), in seconds, of
    ``runs`` executions of ``command`` (after one warm-up run).

    CPU time is reported too because it does not grow when other processes
    compete for the cores, and wall time does.
    """
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd)
    walls, cpus = [], []
    for _ in range(runs):
        before = _children_cpu()
        started = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd)
        walls.append(time.perf_counter() - started)
        cpus.append(_children_cpu() - before)
    return statistics.median(walls), statistics.median(cpus)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def parse_file() -> Path:
    """The file of the ``parse`` case (the first MEM303 fixture if the default moved)."""
    if PARSE_FILE.is_file():
        return PARSE_FILE
    return sorted((REPO / "fixtures" / "lint").glob("*/*.py"))[0]


def measure(runs: int) -> dict[str, tuple[float, float]]:
    """(median wall s, median CPU s) of each case, by case name."""
    memlint = memlint_command()
    target = parse_file()
    work = Path(tempfile.mkdtemp(prefix="memlint-single-"))
    try:
        quiet = work / "quiet.py"
        quiet.write_text(NO_TRIGGER_SOURCE, encoding="utf-8")
        cache = str(work / "cache")
        results = {
            "python -c pass": median_seconds([sys.executable, "-c", "pass"], runs),
            "parse (--no-cache)": median_seconds([*memlint, "check", "--exit-zero", "--no-cache", str(target)], runs),
            "no-trigger (--no-cache)": median_seconds([*memlint, "check", "--exit-zero", "--no-cache", str(quiet)], runs),
            "cache-hit": median_seconds([*memlint, "check", "--exit-zero", "--cache-dir", cache, str(target)], runs),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description="memlint single-file cold start")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    print(f"file: {parse_file().relative_to(REPO)}; median of {args.runs} runs")
    print(f"{'case':28s} {'wall':>8s} {'cpu':>8s}")
    for name, (wall, cpu) in measure(args.runs).items():
        print(f"{name:28s} {wall * 1000:6.0f}ms {cpu * 1000:6.0f}ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
