"""Equal results: serial and parallel, with and without the cache (issue 7).

The corpus: the real-world bug cases (fixtures/cases) and a generated set with syntax errors, undecodable bytes, suppressions and
per-file ignores, so that the process pool is used (more files to parse
than runner.PARALLEL_THRESHOLD).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from memlint.config import Config, parse_table
from memlint.lint import cache, runner
from memlint.lint.engine import lint_source, precheck
from memlint.lint.files import collect_files
from memlint.lint.registry import resolve_selection
from memlint.lint.runner import Job, lint_jobs, options_for, worker_count

REPO = Path(__file__).resolve().parents[2]

GENERATED = {
    "load_{i}.py": "import torch; torch.cuda.init()\n\ndef f(p):\n    return torch.load(p{i})\n",
    "loop_{i}.py": (
        "import torch\n\ndef train(model, loader, opt):\n    total = 0\n    for x, y in loader:\n"
        "        loss = model(x).sum() + {i}\n        loss.backward()\n        total += loss\n    return total\n"
    ),
    "quiet_{i}.py": "import os\nVALUE = {i}\n",
    "broken_{i}.py": "import torch; torch.cuda.init()\nx = torch.load(({i}\n",
    "noqa_{i}.py": "import torch; torch.cuda.init()\nx = torch.load('a{i}')  # noqa\n",
}


def build_corpus(root: Path, copies: int = 6) -> list[str]:
    for i in range(copies):
        for name, text in GENERATED.items():
            (root / name.format(i=i)).write_text(text.format(i=i if i % 2 else ""), encoding="utf-8")
    (root / "latin1.py").write_bytes(b"import torch; torch.cuda.init()\nx = 'caf\xe9'\ntorch.load(x)\n")
    (root / "ignored_here.py").write_text("import torch; torch.cuda.init()\ntorch.load('x')\n", encoding="utf-8")
    paths = collect_files([str(root)], Config()).files
    cases = REPO / "fixtures" / "cases"
    if cases.is_dir():
        paths += collect_files([str(cases)], Config()).files
    return paths


def make_jobs(paths: list[str], root: Path) -> tuple[list[Job], Config]:
    config = parse_table({"per-file-ignores": {"ignored_here.py": ["MEM303"]}}, root / "pyproject.toml")
    enabled = resolve_selection(None, [], [])
    return [Job(path, options_for(path, enabled, config)) for path in paths], config


def summary(results) -> list[tuple]:
    return [(r.path, r.diagnostics, r.error, r.parsed, r.internal_errors) for r in results]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    jobs, config = make_jobs(build_corpus(root), root)
    return root, jobs, config


def test_corpus_uses_the_pool(corpus):
    _, jobs, _ = corpus
    pending = [precheck(job.path, runner.read_job(job), job.options)[1] for job in jobs]
    assert sum(p is not None for p in pending) >= runner.PARALLEL_THRESHOLD
    assert worker_count(len(pending), None) >= 1


def test_serial_parallel_cached_and_uncached_results_are_identical(corpus, tmp_path):
    _, jobs, config = corpus
    serial = summary(lint_jobs(jobs, 1))
    parallel = summary(lint_jobs(jobs, 2))
    args_serial = argparse.Namespace(cache_dir=str(tmp_path / "serial"), jobs=1)
    args_parallel = argparse.Namespace(cache_dir=str(tmp_path / "parallel"), jobs=2)
    cold_serial = summary(cache.lint_jobs_cached(jobs, args_serial, config))
    cold_parallel = summary(cache.lint_jobs_cached(jobs, args_parallel, config))
    warm_serial = summary(cache.lint_jobs_cached(jobs, args_serial, config))
    warm_parallel = summary(cache.lint_jobs_cached(jobs, args_parallel, config))
    assert serial == parallel == cold_serial == cold_parallel == warm_serial == warm_parallel
    codes = {d.code for _, diagnostics, *_ in serial for d in diagnostics}
    assert {"MEM001", "MEM303"} <= codes  # the comparison covered findings and syntax errors
    assert [path for path, *_ in serial] == [job.path for job in jobs]  # job order kept


def test_unreadable_file_in_a_parallel_run_stays_in_place(corpus, tmp_path):
    _, jobs, _ = corpus
    missing = Job(str(tmp_path / "gone.py"), jobs[0].options)
    mixed = jobs[:5] + [missing] + jobs[5:]
    results = lint_jobs(mixed, 2)
    assert results[5].path == missing.path and "cannot read" in results[5].error
    assert summary(results[:5] + results[6:]) == summary(lint_jobs(jobs, 2))


@pytest.mark.parametrize(
    ("n_files", "limit", "cpus", "expected"),
    [(5, None, 2, 1), (100, 1, 2, 1), (100, None, 2, 2), (100, 8, 2, 2), (100, None, 16, 16), (30, None, 64, 30)],
)
def test_worker_count(monkeypatch, n_files, limit, cpus, expected):
    monkeypatch.setattr(runner.os, "sched_getaffinity", lambda _pid: set(range(cpus)), raising=False)
    assert worker_count(n_files, limit) == expected


def test_cli_output_is_identical_serial_parallel_cached(corpus, tmp_path):
    root, _, _ = corpus
    (root / "pyproject.toml").write_text('[tool.memlint]\nper-file-ignores = { "ignored_here.py" = ["MEM303"] }\n')
    base = [sys.executable, "-m", "memlint", "check", "--format", "json", str(root)]
    runs = [
        base + ["--no-cache", "--jobs", "1"],
        base + ["--cache-dir", str(tmp_path / "c"), "--jobs", "2"],
        base + ["--cache-dir", str(tmp_path / "c")],
    ]
    outputs = [subprocess.run(command, capture_output=True, timeout=300).stdout for command in runs]
    assert outputs[0] and len(set(outputs)) == 1


def test_lint_source_in_one_step_matches_the_runner(corpus):
    _, jobs, _ = corpus
    some = jobs[::4]
    direct = [lint_source(job.path, Path(job.path).read_bytes(), job.options) for job in some]
    assert summary(direct) == summary(lint_jobs(some, 1))


def test_a_worker_crash_is_confined_to_its_file(tmp_path, monkeypatch):
    """A native crash (simulated with os._exit in the worker) breaks the
    process pool; the file that crashed is reported, the others still linted."""
    import os

    from memlint.lint import engine, runner

    real = engine.lint_pending

    def crashing(item):
        if item.path.endswith("crash_07.py"):
            os._exit(1)
        return real(item)

    monkeypatch.setattr(runner, "lint_pending", crashing)
    paths = []
    for i in range(runner.PARALLEL_THRESHOLD + 6):
        path = tmp_path / f"crash_{i:02d}.py"
        path.write_text("import torch; torch.cuda.init()\nstate = torch.load('x.pt')\n")
        paths.append(path)
    jobs = [runner.Job(str(p), engine.LintOptions(enabled=frozenset({"MEM303"}))) for p in paths]
    results = runner.lint_jobs(jobs, jobs_limit=2)
    assert [r.path for r in results] == [str(p) for p in paths]
    crashed = [r for r in results if r.error]
    assert [r.path for r in crashed] == [str(tmp_path / "crash_07.py")]
    assert "crashed" in crashed[0].error
    assert all(d.code == "MEM303" for r in results if not r.error for d in r.diagnostics)
    assert sum(len(r.diagnostics) for r in results) == len(paths) - 1
