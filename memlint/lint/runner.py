"""Lint many files: read each, lint it, in a process pool when there are many.

A problem with one file (unreadable, undecodable, a crashing rule) is
confined to that file's :class:`FileResult`; the others are always linted.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from memlint.config import Config
from memlint.lint.diagnostic import FileResult
from memlint.lint.engine import LintOptions, lint_source
from memlint.lint.registry import expand_selector

#: Below this many files a process pool costs more than it saves (measured:
#: pool start-up is ~40-80 ms on the 2-core reference machine).
PARALLEL_THRESHOLD = 24


@dataclass(frozen=True)
class Job:
    """One file to lint and the options that apply to it."""

    path: str
    options: LintOptions


def options_for(path: str, enabled: frozenset[str], config: Config) -> LintOptions:
    ignored: set[str] = set()
    for selector in config.ignored_codes_for(path):
        ignored |= expand_selector(selector, f"{config.path}: per-file-ignores")
    return LintOptions(enabled=enabled, ignored_here=frozenset(ignored))


def lint_file(job: Job) -> FileResult:
    """Read and lint one file; an unreadable file becomes ``FileResult.error``."""
    try:
        with open(job.path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        return FileResult(path=job.path, error=f"{job.path}: cannot read file ({exc.strerror or type(exc).__name__})")
    return lint_source(job.path, data, job.options)


def lint_jobs(jobs: list[Job], jobs_limit: int | None = None) -> list[FileResult]:
    """Lint every job, in parallel when there are many; results keep job order."""
    workers = _worker_count(len(jobs), jobs_limit)
    if workers <= 1:
        return [lint_file(job) for job in jobs]
    chunksize = max(1, len(jobs) // (workers * 8))
    with ProcessPoolExecutor(max_workers=workers, mp_context=_context()) as pool:
        return list(pool.map(lint_file, jobs, chunksize=chunksize))


def _worker_count(n_jobs: int, limit: int | None) -> int:
    if n_jobs < PARALLEL_THRESHOLD:
        return 1
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus, limit or cpus, n_jobs))


def _context():
    # fork is the cheapest start on Linux and safe here: the linter holds no threads.
    if sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return None
