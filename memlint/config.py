"""``[tool.memlint]`` configuration: discovery, validation, per-file settings.

The configuration comes from ``--config FILE`` or else from the nearest
``pyproject.toml`` containing a ``[tool.memlint]`` table, walking up from the
first linted path (or the working directory for stdin). Each file is parsed
as TOML for real (``[tool."memlint"]`` and inline tables are the same table)
after a bounded read (:func:`read_toml`). Every key is validated; an
unreadable file, invalid TOML, an unknown key or a bad value raises
:class:`ConfigError` naming the file and the key.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from memlint.errors import ConfigError

#: Directories never descended into unless named explicitly.
DEFAULT_EXCLUDE = (
    ".git", ".hg", ".svn", ".bzr", ".venv", "venv", ".tox", ".nox", ".eggs", "__pycache__",
    ".mypy_cache", ".pytest_cache", ".ruff_cache", ".memlint_cache", "build", "dist",
    "site-packages", "node_modules", "__pypackages__",
)

_LIST_KEYS = ("select", "ignore", "extend-select", "exclude", "extend-exclude")
_KNOWN_KEYS = set(_LIST_KEYS) | {"per-file-ignores", "target-gpu", "estimate", "cache-dir"}


@dataclass
class Config:
    """The validated ``[tool.memlint]`` table (keys as in pyproject, snake_cased)."""

    path: Path | None = None
    select: list[str] | None = None
    ignore: list[str] = field(default_factory=list)
    extend_select: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    target_gpu: str | None = None
    cache_dir: str | None = None
    estimate: dict = field(default_factory=dict)

    @property
    def root(self) -> Path:
        """Directory that relative patterns are matched against."""
        return self.path.parent if self.path is not None else Path.cwd()

    def relative(self, path: str) -> str:
        try:
            return PurePosixPath(Path(os.path.abspath(path)).relative_to(self.root.resolve())).as_posix()
        except ValueError:
            return PurePosixPath(path).as_posix()

    def is_excluded(self, path: str) -> bool:
        """True when ``path`` matches an ``exclude`` glob (whole path or a component)."""
        return bool(self.exclude) and _glob_set(tuple(self.exclude)).matches(self.relative(path))

    def ignored_codes_for(self, path: str) -> list[str]:
        """Selectors ignored for ``path`` by ``per-file-ignores``."""
        if not self.per_file_ignores:
            return []
        relative = self.relative(path)
        codes: list[str] = []
        for globs, selectors in _ignore_groups(tuple((k, tuple(v)) for k, v in self.per_file_ignores.items())):
            if globs.matches(relative):
                codes.extend(selectors)
        return codes


#: Most globs in ``exclude`` + ``extend-exclude``, and most entries in
#: ``per-file-ignores`` (real configurations have a few dozen); more is a
#: configuration error, not minutes of matching.
MAX_GLOBS = 2000


class GlobSet:
    """Globs compiled once into two regular expressions: one for the whole
    relative path (``glob`` or ``glob/*``, as :func:`fnmatch.fnmatch`), one
    for single path components (the globs without a ``/``). Matching costs
    one or a few regex searches, whatever the number of globs."""

    def __init__(self, patterns: tuple[str, ...]) -> None:
        import re

        whole: list[str] = []
        parts: list[str] = []
        for pattern in patterns:
            pattern = pattern.rstrip("/")
            whole.append(fnmatch.translate(pattern))
            whole.append(fnmatch.translate(pattern + "/*"))
            if "/" not in pattern:
                parts.append(fnmatch.translate(pattern))
        self._whole = re.compile("|".join(whole)) if whole else None
        self._parts = re.compile("|".join(parts)) if parts else None

    def matches(self, relative: str) -> bool:
        if self._whole is not None and self._whole.match(relative):
            return True
        if self._parts is not None:
            return any(self._parts.match(part) for part in relative.split("/"))
        return False


@functools.lru_cache(maxsize=32)
def _glob_set(patterns: tuple[str, ...]) -> GlobSet:
    return GlobSet(patterns)


@functools.lru_cache(maxsize=8)
def _ignore_groups(items: tuple[tuple[str, tuple[str, ...]], ...]) -> list[tuple[GlobSet, list[str]]]:
    """``per-file-ignores`` as one :class:`GlobSet` per distinct list of codes."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for pattern, selectors in items:
        groups.setdefault(tuple(sorted(set(selectors))), []).append(pattern)
    return [(GlobSet(tuple(patterns)), list(selectors)) for selectors, patterns in groups.items()]


def _matches_any(relative: str, patterns: list[str]) -> bool:
    return _glob_set(tuple(patterns)).matches(relative)


def find_config_file(start: Path) -> Path | None:
    """Nearest ``pyproject.toml`` with a ``[tool.memlint]`` table at or above ``start``.

    Raises:
        ConfigError: a ``pyproject.toml`` on the way that cannot be read or
            parsed, or whose ``tool`` is not a table.
    """
    found = _find_config(start)
    return found[0] if found else None


def _find_config(start: Path) -> tuple[Path, dict] | None:
    """(file, its ``[tool.memlint]`` table) of the nearest configured pyproject.toml.

    Every ``pyproject.toml`` on the way is parsed as TOML (quoted keys and
    inline tables are the same table to TOML); there is no text pre-filter.
    """
    directory = start if start.is_dir() else start.parent
    directory = directory.resolve()
    for candidate_dir in (directory, *directory.parents):
        candidate = candidate_dir / "pyproject.toml"
        if candidate.is_file():
            table = memlint_table(read_toml(candidate), candidate)
            if table is not None:
                return candidate, table
    return None


def memlint_table(data: dict, path: Path) -> dict | None:
    """``data["tool"]["memlint"]``, None when absent.

    Raises:
        ConfigError: ``tool`` or ``tool.memlint`` is there but not a table.
    """
    tool = data.get("tool")
    if tool is None:
        return None
    if not isinstance(tool, dict):
        raise ConfigError(f"{path}: 'tool' must be a table, not {_toml_type(tool)}")
    table = tool.get("memlint")
    if table is not None and not isinstance(table, dict):
        raise ConfigError(f"{path}: 'tool.memlint' must be a table, not {_toml_type(table)}")
    return table


def _toml_type(value) -> str:
    return {str: "a string", bool: "a boolean", int: "an integer", float: "a float", list: "an array"}.get(
        type(value), type(value).__name__)


def load_config(explicit: str | None, start: Path) -> Config:
    """Load ``--config FILE`` or the discovered file; defaults when there is none.

    Raises:
        ConfigError: unreadable, oversized or non-UTF-8 file, invalid TOML,
            unknown key, bad value.
    """
    if explicit is not None:
        path = Path(explicit)
        data = read_toml(path)
        table = memlint_table(data, path)
        if table is None and path.name != "pyproject.toml":
            table = data  # a TOML file of memlint's keys
        return parse_table(table or {}, path, prefix=_prefix(path))
    found = _find_config(start)
    if found is None:
        return Config()
    return parse_table(found[1], found[0], prefix="tool.memlint")


def _prefix(path: Path) -> str:
    return "tool.memlint" if path.name == "pyproject.toml" else ""


def _reason(exc: Exception) -> str:
    return getattr(exc, "strerror", None) or type(exc).__name__


#: Largest configuration file read, in bytes (1 MiB). Real pyproject.toml
#: files are a few KiB (the largest in well-known projects, with long tool
#: sections, stay under 100 KiB); a larger one is not a configuration, and
#: reading it (``--config /dev/zero``) must not take the run's memory.
MAX_CONFIG_BYTES = 2**20


def read_toml(path: Path) -> dict:
    """Parse the TOML file ``path``, which must be a regular UTF-8 file of at
    most :data:`MAX_CONFIG_BYTES`.

    Raises:
        ConfigError: one line naming the file: cannot be opened, not a
            regular file (a device, a FIFO), too large, not UTF-8, invalid TOML.
    """
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with open(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise ConfigError(f"{path}: cannot read configuration (not a regular file)")
            if info.st_size > MAX_CONFIG_BYTES:
                raise ConfigError(f"{path}: configuration is {info.st_size} bytes, over the limit of "
                                  f"{MAX_CONFIG_BYTES} bytes")
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read configuration ({_reason(exc)})") from None
    if len(data) > MAX_CONFIG_BYTES:  # it grew after fstat
        raise ConfigError(f"{path}: configuration is over the limit of {MAX_CONFIG_BYTES} bytes")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]  # a UTF-8 byte order mark (editors on Windows write one); TOML itself has none
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: configuration is not UTF-8 (byte 0x{data[exc.start]:02x} at offset "
                          f"{exc.start}); TOML files are UTF-8") from None
    return _parse_toml(path, text)


def _parse_toml(path: Path, text: str) -> dict:
    # Imported here: a run with no pyproject.toml on the way never needs it.
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on Python 3.10 only
        import tomli as tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except RecursionError:  # deeply nested arrays or inline tables
        raise ConfigError(f"{path}: invalid TOML: nested too deeply") from None


def _check_ignored_codes(per_file_ignores: dict[str, list[str]], where: str, key: str) -> None:
    """Every code of ``per-file-ignores`` must name rules, whether or not its
    glob matches a linted file (a typo is reported at once).

    Raises:
        ConfigError: naming the glob and the unknown selector.
    """
    from memlint.errors import UsageError
    from memlint.lint.registry import expand_selector, selector_suggestion
    from memlint.report.text import printable

    for pattern, selectors in per_file_ignores.items():
        for selector in selectors:
            try:
                expand_selector(selector, "")
            except UsageError:
                hint = selector_suggestion(selector)
                raise ConfigError(f"{where}: '{key}' {printable(repr(pattern))}: unknown rule selector "
                                  f"{printable(repr(selector))}{'; ' + hint if hint else ''} (see `memlint rules`)") from None


def _check_cache_dir(config: Config, where: str, key: str) -> None:
    """A ``cache-dir`` from a configuration file must resolve (symbolic links
    followed) inside the project root, the configuration file's directory: an
    untrusted pyproject.toml must not make plain ``memlint check`` create
    directories and files elsewhere. ``--cache-dir`` on the command line may
    point anywhere.

    Raises:
        ConfigError: an absolute path, ``..`` or a link leading out of the root.
    """
    from memlint.report.text import printable

    root = os.path.realpath(config.root)
    target = os.path.realpath(os.path.join(root, config.cache_dir))
    if not config.cache_dir or os.path.commonpath([root, target]) != root or target == root:
        raise ConfigError(f"{where}: '{key}' = {printable(repr(config.cache_dir))} must be a directory inside the "
                          f"project root {printable(root)} (use --cache-dir to put the cache elsewhere)")


def parse_table(table: dict, path: Path | None, prefix: str = "tool.memlint") -> Config:
    """Validate a ``[tool.memlint]`` table into a :class:`Config`.

    Raises:
        ConfigError: naming ``path`` and the dotted key that is wrong.
    """
    from memlint.report.text import printable

    where = printable(str(path)) if path is not None else "configuration"

    def key_name(key: str) -> str:
        # Keys come from the file: escaped, so that one cannot steer the terminal.
        return printable(f"{prefix}.{key}" if prefix else key)

    if not isinstance(table, dict):
        raise ConfigError(f"{where}: {prefix or 'configuration'} must be a table")
    config = Config(path=path)
    for key, value in table.items():
        if key not in _KNOWN_KEYS:
            raise ConfigError(f"{where}: unknown key '{key_name(key)}'")
        if key in _LIST_KEYS:
            if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                raise ConfigError(f"{where}: '{key_name(key)}' must be a list of strings")
    config.select = table.get("select")
    config.ignore = list(table.get("ignore", []))
    config.extend_select = list(table.get("extend-select", []))
    config.exclude = list(table.get("exclude", [])) + list(table.get("extend-exclude", []))
    pfi = table.get("per-file-ignores", {})
    if not isinstance(pfi, dict) or not all(
        isinstance(v, list) and all(isinstance(c, str) for c in v) for v in pfi.values()
    ):
        raise ConfigError(f"{where}: '{key_name('per-file-ignores')}' must map globs to lists of codes")
    config.per_file_ignores = {str(k): list(v) for k, v in pfi.items()}
    globs = len(config.exclude)
    if globs > MAX_GLOBS:
        raise ConfigError(f"{where}: '{key_name('exclude')}' and '{key_name('extend-exclude')}' have {globs} globs, "
                          f"over the limit of {MAX_GLOBS}")
    if len(config.per_file_ignores) > MAX_GLOBS:
        raise ConfigError(f"{where}: '{key_name('per-file-ignores')}' has {len(config.per_file_ignores)} entries, "
                          f"over the limit of {MAX_GLOBS}")
    _check_ignored_codes(config.per_file_ignores, where, key_name("per-file-ignores"))
    for key in ("target-gpu", "cache-dir"):
        if key in table and not isinstance(table[key], str):
            raise ConfigError(f"{where}: '{key_name(key)}' must be a string")
    config.target_gpu = table.get("target-gpu")
    if config.target_gpu is not None and config.target_gpu.lower() != "auto":
        from memlint.estimate.gpus import lookup_gpu  # the catalog only: no torch
        from memlint.errors import UsageError

        try:
            lookup_gpu(config.target_gpu)
        except UsageError as exc:
            raise ConfigError(f"{where}: '{key_name('target-gpu')}': {exc}") from None
    config.cache_dir = table.get("cache-dir")
    if config.cache_dir is not None:
        _check_cache_dir(config, where, key_name("cache-dir"))
    estimate = table.get("estimate", {})
    if not isinstance(estimate, dict):
        raise ConfigError(f"{where}: '{key_name('estimate')}' must be a table")
    config.estimate = estimate
    return config
