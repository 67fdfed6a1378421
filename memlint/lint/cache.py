"""The results cache: a file whose content was linted before is not linted again.

An entry holds one file's diagnostics and is found by a key made of

- the SHA-256 of the file's bytes (not its mtime: a checkout or a touch
  does not invalidate it, an edit always does), and
- the run's *settings*: memlint's version, the Python version (the syntax
  guard is CPython's parser), the enabled codes after ``per-file-ignores``,
  the configuration table (rule options live there), and the size and
  modification time of memlint's linter and rule sources, so that an edited
  rule in a development checkout never serves stale results.

Entries do not store the path: diagnostics are re-pathed on load, so a copy
or a moved file is a hit too.

Layout: ``<cache dir>/v1/<settings hash>/<entry key>.json`` (a directory
per settings, so stale ones can simply be deleted), plus a
``CACHEDIR.TAG`` (https://bford.info/cachedir/) and a ``.gitignore`` of
``*``. The cache directory is ``--cache-dir``, else the ``cache-dir`` key
(relative to the configuration file), else ``.memlint_cache`` in the project
root (the directory of the discovered ``pyproject.toml``, else the working
directory).

Robustness: an entry that cannot be read or decoded is a miss and is
rewritten; a cache directory that cannot be created or written makes the
run uncached, never failed. Every write goes to a unique temporary file in
the same directory and is renamed into place (atomic on POSIX and Windows),
so concurrent runs never see half an entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from memlint import __version__
from memlint.config import Config
from memlint.lint.diagnostic import Applicability, Diagnostic, Edit, FileResult, Fix, Severity
from memlint.lint.runner import Job, lint_jobs, read_job

#: Bumped when the entry format changes; old entries are then simply unused.
FORMAT_VERSION = "v1"
DEFAULT_DIR_NAME = ".memlint_cache"
_CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by memlint.\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n"
)


def lint_jobs_cached(jobs: list[Job], args, config: Config) -> list[FileResult]:
    """Lint ``jobs`` like :func:`~memlint.lint.runner.lint_jobs`, serving
    unchanged files from the cache and storing the new results.

    Results are in job order. Only the misses are linted (in one
    :func:`lint_jobs` call, so they still share the process pool).
    """
    store = Store.open(cache_dir(args, config), settings_fingerprint(config))
    if store is None:
        return lint_jobs(jobs, getattr(args, "jobs", None))
    results: list[FileResult | None] = [None] * len(jobs)
    misses: list[tuple[int, Job, str]] = []
    for position, job in enumerate(jobs):
        data = read_job(job)
        if isinstance(data, FileResult):
            results[position] = data
            continue
        key = entry_key(job, data)
        cached = store.load(key, job.path)
        if cached is not None:
            results[position] = cached
        else:
            misses.append((position, Job(job.path, job.options, data), key))
    linted = lint_jobs([job for _, job, _ in misses], getattr(args, "jobs", None))
    for (position, _, key), result in zip(misses, linted):
        results[position] = result
        if _cacheable(result):
            store.save(key, result)
    return results  # type: ignore[return-value]


def _cacheable(result: FileResult) -> bool:
    # Errors and crashes are re-tried every run; notes name the path, and
    # entries are path-free (a note is only ever cheap to recompute).
    return result.error is None and not result.internal_errors and not getattr(result, "note", None)


def cache_dir(args, config: Config) -> Path:
    """Where the cache lives for this run (see the module docstring)."""
    explicit = getattr(args, "cache_dir", None)
    if explicit:
        return Path(explicit)
    if config.cache_dir:
        return config.root / config.cache_dir
    return config.root / DEFAULT_DIR_NAME


def settings_fingerprint(config: Config) -> str:
    """Hash of everything besides the file itself that decides its results."""
    table = {
        key: value for key, value in vars(config).items() if key not in ("path", "cache_dir", "exclude")
    }
    parts = [
        __version__,
        "%d.%d" % sys.version_info[:2],
        json.dumps(table, sort_keys=True, default=str),
        _code_fingerprint(),
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def entry_key(job: Job, data: bytes) -> str:
    """The entry name of one file: the hash of its bytes and of the codes run on it."""
    digest = hashlib.sha256(data)
    digest.update(b"\0" + ",".join(job.options.codes()).encode())
    return digest.hexdigest()


def _code_fingerprint() -> str:
    """Sizes and modification times of the linter's and the rules' sources."""
    import memlint.lint as lint_package
    import memlint.rules as rules_package

    stats = []
    for folder in (*lint_package.__path__, *rules_package.__path__):
        try:
            entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
        except OSError:
            continue
        for entry in entries:
            if entry.name.endswith(".py"):
                try:
                    info = entry.stat()
                except OSError:
                    continue
                stats.append(f"{entry.name}:{info.st_size}:{info.st_mtime_ns}")
    return ";".join(stats)


class Store:
    """The entries of one cache directory."""

    def __init__(self, root: Path, settings: str) -> None:
        self.root = root
        self.entries = root / FORMAT_VERSION / settings[:24]

    @classmethod
    def open(cls, root: Path, settings: str) -> "Store | None":
        """The entries of ``settings`` at ``root``, created with the tag files;
        None when they cannot be created (read-only file system, a file in the way)."""
        store = cls(root, settings)
        try:
            store.entries.mkdir(parents=True, exist_ok=True)
            for name, text in (("CACHEDIR.TAG", _CACHEDIR_TAG), (".gitignore", "# Created by memlint.\n*\n")):
                if not (root / name).is_file():
                    _write_atomic(root / name, text.encode())
        except OSError:
            return None
        return store

    def _path(self, key: str) -> Path:
        return self.entries / f"{key}.json"

    def load(self, key: str, path: str) -> FileResult | None:
        """The cached result of ``path`` under ``key``, or None (a miss)."""
        try:
            with open(self._path(key), "rb") as handle:
                return decode_result(json.loads(handle.read()), path)
        except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
            return None  # missing, unreadable or corrupt: lint again and overwrite

    def save(self, key: str, result: FileResult) -> None:
        """Store ``result`` under ``key``; a failed write is ignored."""
        target = self._path(key)
        try:
            _write_atomic(target, json.dumps(encode_result(result), separators=(",", ":")).encode())
        except OSError:
            pass


def _write_atomic(target: Path, payload: bytes) -> None:
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        with open(temporary, "xb") as handle:
            handle.write(payload)
        os.replace(temporary, target)
    except OSError:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def encode_result(result: FileResult) -> dict:
    """A JSON-ready, path-free form of ``result``."""
    return {
        "parsed": result.parsed,
        "diagnostics": [_encode_diagnostic(d) for d in result.diagnostics],
    }


def _encode_diagnostic(d: Diagnostic) -> list:
    fix = None
    if d.fix is not None:
        edits = [[e.start_line, e.start_col, e.end_line, e.end_col, e.content] for e in d.fix.edits]
        fix = [d.fix.title, d.fix.applicability.value, edits]
    return [d.code, d.name, d.severity.value, d.message, d.line, d.col, d.end_line, d.end_col, fix]


def decode_result(payload: dict, path: str) -> FileResult:
    """The :class:`FileResult` of :func:`encode_result`'s output, for ``path``.

    Raises:
        ValueError, TypeError, KeyError, IndexError: the payload is malformed.
    """
    diagnostics = []
    for item in payload["diagnostics"]:
        code, name, severity, message, line, col, end_line, end_col, fix = item
        for number in (line, col, end_line, end_col):
            if type(number) is not int:
                raise TypeError("position is not an integer")
        if not all(isinstance(text, str) for text in (code, name, message)):
            raise TypeError("code, name and message must be strings")
        diagnostics.append(
            Diagnostic(code, name, Severity(severity), message, path, line, col, end_line, end_col, _decode_fix(fix))
        )
    parsed = payload["parsed"]
    if not isinstance(parsed, bool):
        raise TypeError("parsed is not a boolean")
    return FileResult(path=path, diagnostics=diagnostics, parsed=parsed)


def _decode_fix(fix) -> Fix | None:
    if fix is None:
        return None
    title, applicability, edits = fix
    decoded = []
    for start_line, start_col, end_line, end_col, content in edits:
        if not isinstance(content, str) or not all(type(n) is int for n in (start_line, start_col, end_line, end_col)):
            raise TypeError("malformed edit")
        decoded.append(Edit(start_line, start_col, end_line, end_col, content))
    if not isinstance(title, str):
        raise TypeError("fix title is not a string")
    return Fix(title, Applicability(applicability), tuple(decoded))
