"""Lint many files: read each, lint it, in a process pool when there are many.

A problem with one file (unreadable, undecodable, a crashing rule) is
confined to that file's :class:`FileResult`; the others are always linted.

The parent process reads, decodes and pre-filters every file itself
(:func:`memlint.lint.engine.precheck`, microseconds per file, no parse).
Only the files that must be parsed (by CPython, for the syntax check and,
if the gate lets some rule through, the rules) go to the pool, largest first
in chunks of about equal size, so the pool's workers do nothing but the
expensive part and finish together; results are put back in job order.
"""

from __future__ import annotations

import gc
import os
import platform
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from memlint.config import Config
from memlint.lint.diagnostic import FileResult
from memlint.lint.engine import LintOptions, Pending, lint_pending, lint_source, precheck, size_limit
from memlint.lint.engine import too_large_note as _too_large_note
from memlint.lint.registry import expand_selector

#: Below this many files to parse, a process pool costs more than it saves:
#: ~60 ms to import concurrent.futures and multiprocessing (22 ms), fork, and
#: import the rule modules in each worker (38 ms), against 2-5 ms of work per
#: small training-code file (measured on the 2-core reference machine: 80
#: fixture files take 0.32 s serially, 0.26 s with two workers).
PARALLEL_THRESHOLD = 24

#: Chunks per worker: several, so that one slow file cannot leave a core idle
#: at the end, few enough that the per-chunk IPC is negligible.
CHUNKS_PER_WORKER = 8

#: Collector thresholds while linting: a collection every 200,000 net
#: allocations instead of 700. Linting allocates a tree and the semantic
#: model's values per file and frees them by reference counting (the model
#: breaks its own cycles, :meth:`SemanticModel.close`), so the default
#: thresholds only make the collector walk live trees again and again.
#: mypy runs its builds with the same setting (python/mypy, mypy/build.py:
#: "Run gc less frequently, as otherwise we can spend a large fraction of
#: cpu in gc"). Measured on the real-code corpus (every 5th file, one
#: process, docs/performance.md): 8% less lint time, the same peak memory.
LINT_GC_THRESHOLDS = (200_000, 30, 30)


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Run the block with :data:`LINT_GC_THRESHOLDS` (CPython only), then
    restore the caller's thresholds."""
    if platform.python_implementation() != "CPython":
        yield
        return
    previous = gc.get_threshold()
    gc.set_threshold(*LINT_GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*previous)


@dataclass(frozen=True)
class Job:
    """One file to lint and the options that apply to it.

    ``data`` is the file's bytes when the caller has read them already (the
    cache hashes them); None means the runner reads the file.
    """

    path: str
    options: LintOptions
    data: bytes | None = None


def options_for(path: str, enabled: frozenset[str], config: Config) -> LintOptions:
    """The options of one file: ``enabled`` minus its ``per-file-ignores``."""
    ignored: set[str] = set()
    for selector in config.ignored_codes_for(path):
        ignored |= expand_selector(selector, f"{config.path}: per-file-ignores")
    return LintOptions(enabled=enabled, ignored_here=frozenset(ignored))


def read_job(job: Job) -> bytes | FileResult:
    """The job's bytes, or a FileResult carrying the one-line read error, or
    the note of a file over the linting limit (which is not read: a 10 GB
    file in a tree must not take the run's memory)."""
    if job.data is not None:
        return job.data
    try:
        # O_NONBLOCK: opening a FIFO named like a source file must not hang.
        fd = os.open(job.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with open(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                return FileResult(path=job.path, error=f"{job.path}: cannot read file (not a regular file)")
            limit = size_limit(job.path)
            if info.st_size > limit:
                return FileResult(path=job.path, note=too_large_note(job.path, info.st_size))
            return handle.read(limit + 1)  # + 1: a file that grew is still seen as too large
    except OSError as exc:
        return FileResult(path=job.path, error=f"{job.path}: cannot read file ({exc.strerror or type(exc).__name__})")


def too_large_note(path: str, size: int) -> str:
    """The note of a file skipped for its size (the engine's wording, for files it never sees)."""
    return _too_large_note(path, size)


def lint_file(job: Job) -> FileResult:
    """Read and lint one file; an unreadable file becomes ``FileResult.error``."""
    data = read_job(job)
    if isinstance(data, FileResult):
        return data
    return lint_source(job.path, data, job.options)


def lint_jobs(jobs: list[Job], jobs_limit: int | None = None, with_digests: bool = False) -> list[FileResult]:
    """Lint every job, in parallel when many need parsing; results keep job order.

    ``with_digests``: record the sha256 of the bytes linted in each result
    (``--fix`` uses it to notice a file that changed after it was linted)."""
    results: list[FileResult | None] = [None] * len(jobs)
    contents: list[bytes | None] = [None] * len(jobs)
    pending: list[tuple[int, Pending]] = []
    for position, job in enumerate(jobs):
        data = read_job(job)
        if isinstance(data, FileResult):
            results[position] = data
            continue
        contents[position] = data
        result, parse = precheck(job.path, data, job.options)
        if parse is None:
            results[position] = result
        else:
            results[position] = result
            pending.append((position, parse))
    for position, parsed in zip((p for p, _ in pending), _lint_pending_all([p for _, p in pending], jobs_limit)):
        results[position] = _merge(results[position], parsed)
    if with_digests:
        import hashlib

        for result, data in zip(results, contents):
            if result is not None and data is not None:
                result.digest = hashlib.sha256(data).hexdigest()
    return results  # type: ignore[return-value]


def _merge(before: FileResult, parsed: FileResult) -> FileResult:
    # precheck only fills diagnostics for undecodable files, which are never
    # pending; keep both lists anyway so nothing can be lost.
    if before.diagnostics:
        parsed.diagnostics = before.diagnostics + parsed.diagnostics
    if getattr(before, "note", None) and not getattr(parsed, "note", None):
        parsed.note = before.note
    return parsed


def _lint_pending_all(pending: list[Pending], jobs_limit: int | None) -> list[FileResult]:
    workers = worker_count(len(pending), jobs_limit)
    if workers <= 1:
        return _lint_chunk(pending)
    # Largest first: the long files start early and the short ones fill the
    # gaps, so both cores finish at about the same time.
    order = sorted(range(len(pending)), key=lambda i: -len(pending[i].source))
    ordered = [pending[i] for i in order]
    chunks = _balanced_chunks(ordered, workers * CHUNKS_PER_WORKER)
    done: list[FileResult] = []
    for chunk, outcome in zip(chunks, _run_chunks(chunks, workers)):
        done.extend(outcome if outcome is not None else [_lint_isolated(item) for item in chunk])
    results: list[FileResult | None] = [None] * len(pending)
    for i, result in zip(order, done):
        results[i] = result
    return results  # type: ignore[return-value]


def _balanced_chunks(ordered: list[Pending], count: int) -> list[list[Pending]]:
    """Consecutive chunks of ``ordered`` (largest file first) of about equal
    source size, about ``count`` of them: a large file is a chunk of its
    own, many small ones share one, so that no chunk of the largest files
    keeps one core busy while the other has finished."""
    target = sum(len(item.source) for item in ordered) / max(1, count)
    chunks: list[list[Pending]] = []
    current: list[Pending] = []
    size = 0
    for item in ordered:
        current.append(item)
        size += len(item.source)
        if size >= target:
            chunks.append(current)
            current, size = [], 0
    if current:
        chunks.append(current)
    return chunks


def _lint_chunk(chunk: list[Pending]) -> list[FileResult]:
    with fewer_collections():
        return [lint_pending(item) for item in chunk]


def _run_chunks(chunks: list[list[Pending]], workers: int) -> list[list[FileResult] | None]:
    """Each chunk's results, or None for chunks lost when a worker died
    (a crash in native code kills the whole pool)."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    outcomes: list[list[FileResult] | None] = []
    with ProcessPoolExecutor(max_workers=workers, mp_context=_context()) as pool:
        futures = [pool.submit(_lint_chunk, chunk) for chunk in chunks]
        for future in futures:
            try:
                outcomes.append(future.result())
            except BrokenProcessPool:
                outcomes.append(None)
    return outcomes


def _lint_isolated(item: Pending) -> FileResult:
    """Lint one file in a process of its own, so that a crash names the file
    and spares the others."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    try:
        with ProcessPoolExecutor(max_workers=1, mp_context=_context()) as pool:
            return pool.submit(_lint_chunk, [item]).result()[0]
    except BrokenProcessPool:
        return FileResult(path=item.path, error=f"{item.path}: the linter process crashed on this file; other files are unaffected")


def worker_count(n_jobs: int, limit: int | None) -> int:
    """Worker processes for ``n_jobs`` files to parse: one per usable core,
    at most ``limit`` (``--jobs``), 1 (no pool) below the threshold."""
    if n_jobs < PARALLEL_THRESHOLD or (limit is not None and limit <= 1):
        return 1
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus, limit or cpus, n_jobs))


def _context():
    # fork is the cheapest start on Linux and safe here: the linter holds no
    # threads. Elsewhere the platform default (spawn) is used.
    if sys.platform.startswith("linux"):
        import multiprocessing

        return multiprocessing.get_context("fork")
    return None
