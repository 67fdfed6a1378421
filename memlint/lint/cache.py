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

Trust: the cache directory sits in the project, so a repository (a pull
request) can commit one. An entry therefore carries an HMAC-SHA256 (RFC 2104)
of its name and content under a key that never leaves the user's machine
(:func:`signing_key`, in the user's cache directory, created on first use
with mode 0600): a committed entry, or one renamed to another file's key,
fails verification and is a miss, so it can neither hide nor invent
findings. A verified entry is still checked against the file: its codes must
be among the codes run on the file and its positions inside the file.

Robustness: an entry that cannot be read, decoded or verified is a miss and
is rewritten; a cache directory (or signing key) that cannot be created or
written makes the run uncached, never failed. Every write goes to a unique
temporary file in the same directory and is renamed into place (atomic on
POSIX and Windows), so concurrent runs never see half an entry.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import stat
import sys
from pathlib import Path

from memlint import __version__
from memlint.config import Config
from memlint.lint.notebook import is_notebook_path
from memlint.lint.diagnostic import Applicability, Diagnostic, Edit, FileResult, Fix, FixPlan, Severity
from memlint.lint.runner import Job, lint_jobs, read_job

#: Bumped when the entry format changes; old entries are then simply unused.
FORMAT_VERSION = "v3"  # v3: fixes carry libcst fix plans
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
        cached = store.load(key, job.path, FileBounds(data, frozenset(job.options.codes()),
                                                                  is_notebook_path(job.path)))
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
    if is_notebook_path(job.path):
        # the same bytes mean something else as a notebook (cells, notebook-only rules)
        digest.update(b"\0ipynb")
    return digest.hexdigest()


def _code_fingerprint() -> str:
    """Sizes and modification times of the linter's and the rules' sources."""
    import memlint.lint as lint_package
    import memlint.rules as rules_package

    return source_fingerprint([*lint_package.__path__, *rules_package.__path__])


def source_fingerprint(folders: list[str]) -> str:
    """Names, sizes and modification times of the ``.py`` files in ``folders``,
    so that an edited source of a development checkout is a miss."""
    stats = []
    for folder in folders:
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


#: Largest cache entry read (bytes): an entry is one file's findings, a few
#: KiB; 64 MiB is far beyond any real one.
MAX_ENTRY_BYTES = 64 * 2**20
#: Bytes of the signing key: RFC 2104 (section 3) recommends a key at least
#: as long as the hash output, 32 bytes for SHA-256.
KEY_BYTES = 32


def signing_key_path() -> Path:
    """Where the key that signs cache entries lives: ``$XDG_CACHE_HOME/memlint/cache-key``
    (XDG Base Directory specification), else ``~/.cache/memlint/cache-key``.
    It is outside every project, so a repository cannot supply it."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "memlint" / "cache-key"


def signing_key() -> bytes | None:
    """The user's cache signing key, created (random, mode 0600) on first use;
    None when it can be neither read nor created (then nothing is cached)."""
    path = signing_key_path()
    for _ in range(2):
        try:
            with open(path, "rb") as handle:
                key = handle.read(KEY_BYTES + 1)
            return key if len(key) == KEY_BYTES else None
        except FileNotFoundError:
            pass
        except OSError:
            return None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue  # another run created it meanwhile: read theirs
        except OSError:
            return None
        with os.fdopen(fd, "wb") as handle:
            handle.write(os.urandom(KEY_BYTES))
    return None


class FileBounds:
    """What a cached result of one file may contain: positions inside the
    file's lines (1-based, end exclusive) and codes among those run on it."""

    _LINE_BREAK = re.compile(rb"\r\n|\r|\n")

    def __init__(self, data: bytes, codes: frozenset[str], notebook: bool = False) -> None:
        self.data = data
        self.codes = codes
        #: positions are in cells, not in the file's lines: only a cell is required
        self.notebook = notebook
        self._lengths: list[int] | None = None

    def contains(self, line: int, col: int, end_line: int, end_col: int) -> bool:
        """True when the span lies within the file. A column counts
        characters, never more than the line's bytes; a span may end one
        column past the end of its line (a caret after the last character),
        no further."""
        if self.notebook:
            return 1 <= line <= end_line and col >= 1 and end_col >= 1
        if self._lengths is None:
            self._lengths = [len(text) for text in self._LINE_BREAK.split(self.data)]
        lengths = self._lengths
        if not (1 <= line <= end_line <= len(lengths) + 1 and col >= 1 and end_col >= 1):
            return False
        if (line, col) > (end_line, end_col):
            return False
        return _column_fits(lengths, line, col) and _column_fits(lengths, end_line, end_col)


def _column_fits(lengths: list[int], line: int, col: int) -> bool:
    if line == len(lengths) + 1:  # one past the last line: only its start
        return col == 1
    return col <= lengths[line - 1] + 2


class Store:
    """The signed entries of one cache directory (see the module docstring)."""

    def __init__(self, root: Path, settings: str, key: bytes) -> None:
        self.root = root
        self.entries = root / FORMAT_VERSION / settings[:24]
        self._key = key

    @classmethod
    def open(cls, root: Path, settings: str) -> "Store | None":
        """The entries of ``settings`` at ``root``, created with the tag files;
        None when they cannot be created (read-only file system, a file in
        the way) or there is no signing key."""
        key = signing_key()
        if key is None:
            return None
        store = cls(root, settings, key)
        if any(os.path.islink(path) for path in (root, root / FORMAT_VERSION, store.entries)):
            return None  # a planted link would send the entries elsewhere on the machine
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

    def _mac(self, key: str, body: bytes) -> str:
        return hmac.new(self._key, key.encode() + b"\0" + body, hashlib.sha256).hexdigest()

    def load_payload(self, key: str):
        """The verified JSON payload stored under ``key``, or None (missing,
        unreadable, corrupt, not signed with this user's key, or not a
        regular file of at most :data:`MAX_ENTRY_BYTES`: a planted link to
        ``/dev/zero`` is never read)."""
        try:
            fd = os.open(self._path(key), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
            with open(fd, "rb") as handle:
                info = os.fstat(handle.fileno())
                if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_ENTRY_BYTES:
                    return None
                mac, _, body = handle.read(MAX_ENTRY_BYTES).partition(b"\n")
            if not hmac.compare_digest(mac, self._mac(key, body).encode()):
                return None
            return json.loads(body)
        except (OSError, ValueError):
            return None

    def save_payload(self, key: str, payload) -> None:
        """Store the JSON ``payload`` under ``key``, signed; a failed write is ignored."""
        body = json.dumps(payload, separators=(",", ":")).encode()
        try:
            _write_atomic(self._path(key), self._mac(key, body).encode() + b"\n" + body)
        except OSError:
            pass

    def load(self, key: str, path: str, bounds: FileBounds | None = None) -> FileResult | None:
        """The cached result of ``path`` under ``key``, or None (a miss)."""
        payload = self.load_payload(key)
        if payload is None:
            return None
        try:
            return decode_result(payload, path, bounds)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            return None  # malformed: lint again and overwrite

    def save(self, key: str, result: FileResult) -> None:
        """Store ``result`` under ``key``; a failed write is ignored."""
        self.save_payload(key, encode_result(result))


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
        edits = [[e.start_line, e.start_col, e.end_line, e.end_col, e.content, *([e.cell] if e.cell else [])]
                 for e in d.fix.edits]
        plans = [[p.kind, [*p.start, *p.end], [[key, _listed(value)] for key, value in p.params],
                  *([p.cell] if p.cell else [])] for p in d.fix.plans]
        fix = [d.fix.title, d.fix.applicability.value, edits, plans]
    return [d.code, d.name, d.severity.value, d.message, d.line, d.col, d.end_line, d.end_col, fix,
            *([d.cell] if d.cell else [])]


def decode_result(payload: dict, path: str, bounds: FileBounds | None = None) -> FileResult:
    """The :class:`FileResult` of :func:`encode_result`'s output, for ``path``.

    ``bounds``: the file the entry must describe (its codes and positions).

    Raises:
        ValueError, TypeError, KeyError, IndexError: the payload is malformed
            or does not fit ``bounds``.
    """
    diagnostics = []
    for item in payload["diagnostics"]:
        code, name, severity, message, line, col, end_line, end_col, fix, *rest = item
        cell = _cell(rest, bounds)
        _check_span(bounds, line, col, end_line, end_col)
        if not all(isinstance(text, str) for text in (code, name, message)):
            raise TypeError("code, name and message must be strings")
        if bounds is not None and code not in bounds.codes:
            raise ValueError(f"{code} is not run on this file")
        diagnostics.append(
            Diagnostic(code, name, Severity(severity), message, path, line, col, end_line, end_col,
                       _decode_fix(fix, bounds), cell)
        )
    parsed = payload["parsed"]
    if not isinstance(parsed, bool):
        raise TypeError("parsed is not a boolean")
    return FileResult(path=path, diagnostics=diagnostics, parsed=parsed)


def _cell(rest: list, bounds: FileBounds | None) -> int | None:
    """The cell number stored after a position (notebooks only), checked."""
    if len(rest) > 1:
        raise ValueError("malformed entry")
    cell = rest[0] if rest else None
    if cell is not None and (type(cell) is not int or cell < 1):
        raise TypeError("cell is not a positive integer")
    if bounds is not None and (cell is None) == bounds.notebook:
        raise ValueError("cell positions do not match the kind of file")
    return cell


def _check_span(bounds: FileBounds | None, line, col, end_line, end_col) -> None:
    if not all(type(number) is int for number in (line, col, end_line, end_col)):
        raise TypeError("position is not an integer")
    if bounds is not None and not bounds.contains(line, col, end_line, end_col):
        raise ValueError("position outside the file")


def _listed(value):
    """A plan parameter as JSON (tuples become lists)."""
    return [_listed(item) for item in value] if isinstance(value, tuple) else value


def _tupled(value):
    """A plan parameter from JSON (lists become tuples), checked."""
    if isinstance(value, list):
        return tuple(_tupled(item) for item in value)
    if value is not None and type(value) not in (str, int, bool):
        raise TypeError("malformed fix parameter")
    return value


def _decode_plans(plans, bounds: FileBounds | None) -> tuple[FixPlan, ...]:
    decoded = []
    for kind, (line, col, end_line, end_col), params, *rest in plans:
        cell = _cell(rest, bounds)
        _check_span(bounds, line, col, end_line, end_col)
        if not isinstance(kind, str) or not isinstance(params, list):
            raise TypeError("malformed fix plan")
        pairs = tuple((key, _tupled(value)) for key, value in params)
        if not all(isinstance(key, str) for key, _ in pairs):
            raise TypeError("malformed fix plan")
        decoded.append(FixPlan(kind, (line, col), (end_line, end_col), pairs, cell))
    return tuple(decoded)


def _decode_fix(fix, bounds: FileBounds | None = None) -> Fix | None:
    if fix is None:
        return None
    title, applicability, edits, plans = fix
    decoded = []
    for start_line, start_col, end_line, end_col, content, *rest in edits:
        cell = _cell(rest, bounds)
        _check_span(bounds, start_line, start_col, end_line, end_col)
        if not isinstance(content, str):
            raise TypeError("malformed edit")
        decoded.append(Edit(start_line, start_col, end_line, end_col, content, cell))
    if not isinstance(title, str):
        raise TypeError("fix title is not a string")
    return Fix(title, Applicability(applicability), tuple(decoded), _decode_plans(plans, bounds))
