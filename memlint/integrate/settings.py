"""Estimate configuration: the ``[tool.memlint.estimate]`` table and the per-script comment block.

Both use the same keys (kebab-case).  A script's comment block::

    # memlint: estimate target=models.py:build input=int64[B,1024]
    # memlint: estimate gpu=A100-40GB reserve=10% precision=amp-bf16

Every comment line (a real comment, alone on its line: text in a string or
a docstring is not configuration) starting with ``# memlint: estimate`` adds
``key=value`` pairs (split like a shell line, so values with spaces can be
quoted; ``input`` may repeat).  Values are validated here, without importing torch; an invalid
value raises :class:`ConfigError` naming the key and the file (and line, for
a comment block).  Precedence per key: comment block > pyproject table >
what the script itself shows (memlint.integrate.recipe) > estimator default.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memlint.errors import ConfigError, UsageError

# Same choices as memlint.estimate.step.OPTIMIZER_NAMES + TRANSFORMERS_OPTIMIZERS /
# PRECISIONS (kept here so that reading the configuration never imports torch; a test
# checks they agree).
OPTIMIZERS = ("sgd", "sgd-momentum", "adam", "adamw", "adagrad", "rmsprop", "adafactor")
PRECISIONS = ("fp32", "amp-fp16", "amp-bf16", "bf16", "fp16")

#: Ranks assumed by the advisor's sharding remedies when ``advise-world-size`` is not set.
DEFAULT_ADVISE_WORLD_SIZE = 8

_COMMENT = re.compile(r"#\s*memlint:\s*estimate\b(?P<rest>.*)$", re.IGNORECASE)


def _string(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a non-empty string")
    return value.strip()


def _positive_int(key: str, value: Any) -> int:
    from memlint.estimate.cli import MAX_DIMENSION  # no torch

    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"must be a positive integer (got {value!r})")
    if value > MAX_DIMENSION:
        raise ValueError(f"must be at most 2**40 (got {value}): no device holds more")
    return value


def _bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "1", "false", "no", "0"):
        return value.strip().lower() in ("true", "yes", "1")
    raise ValueError(f"must be true or false (got {value!r})")


def _choice(choices: tuple[str, ...]):
    def check(key: str, value: Any) -> str:
        text = value.strip().lower() if isinstance(value, str) else value
        if text not in choices:
            raise ValueError(f"must be one of {', '.join(choices)} (got {value!r})")
        return text

    return check


def _zero_stage(key: str, value: Any) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or value not in (0, 1, 2, 3):
        raise ValueError(f"must be 0, 1, 2 or 3 (got {value!r})")
    return value


def _inputs(key: str, value: Any) -> list[str]:
    from memlint.estimate.workload import parse_input_spec  # no torch at import time

    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
        raise ValueError("must be an input spec such as int64[B,1024] or a list of them")
    for spec in values:
        try:
            parse_input_spec(spec)
        except UsageError as exc:
            raise ValueError(str(exc).replace("--input ", "")) from None
    return list(values)


def _capacity(key: str, value: Any) -> str:
    from memlint.estimate.units import parse_bytes

    try:
        if parse_bytes(value) <= 0:
            raise ValueError(f"must be a positive size such as 24GiB (got {value!r})")
    except UsageError:
        raise ValueError(f"must be a size such as 24GiB or 40GB (got {value!r})") from None
    return str(value)


def _reserve(key: str, value: Any) -> float:
    from memlint.estimate.units import parse_fraction

    try:
        return parse_fraction(value)
    except UsageError:
        raise ValueError(f"must be a fraction such as 10% or 0.1 (got {value!r})") from None


def _gpu(key: str, value: Any) -> str:
    from memlint.estimate.gpus import lookup_gpu

    text = _string(key, value)
    if text.lower() != "auto":
        try:
            lookup_gpu(text)
        except UsageError as exc:
            raise ValueError(str(exc)) from None
    return text


def _globs(key: str, value: Any) -> list[str]:
    if not (isinstance(value, list) and value and all(isinstance(v, str) for v in value)):
        raise ValueError("must be a non-empty list of glob strings")
    return list(value)


#: key -> validator; documented in docs/configuration.md ("Estimate configuration").
KEYS = {
    "target": _string,
    "input": _inputs,
    "batch-size": _positive_int,
    "optimizer": _choice(OPTIMIZERS),
    "precision": _choice(PRECISIONS),
    "checkpointing": _bool,
    "grad-accum": _positive_int,
    "set-to-none": _bool,
    "world-size": _positive_int,
    "zero-stage": _zero_stage,
    "parallel": _choice(("ddp", "fsdp", "tp", "fsdp+tp")),  # memlint/estimate/distributed.py PARALLEL_MODES
    "tp-size": _positive_int,  # with parallel = "fsdp+tp"
    "gpu": _gpu,
    "capacity": _capacity,
    "reserve": _reserve,
    "advise": _bool,
    "advise-world-size": _positive_int,
    "files": _globs,
}
#: Keys only the pyproject table may carry.
TABLE_ONLY = ("files",)


@dataclass
class Setting:
    """One configured value and where it came from (``source``: human-readable, e.g. "pyproject.toml")."""

    value: Any
    source: str


@dataclass
class EstimateConfig:
    """Validated settings of one script: key -> Setting; ``base_dir`` resolves relative targets."""

    settings: dict[str, Setting] = field(default_factory=dict)
    base_dir: Path = field(default_factory=Path.cwd)
    comment_line: int | None = None

    def get(self, key: str, default: Any = None) -> Any:
        setting = self.settings.get(key)
        return default if setting is None else setting.value

    def __contains__(self, key: str) -> bool:
        return key in self.settings

    def to_json(self) -> dict:
        """JSON-ready form (for the estimate child and the cache key)."""
        return {"settings": {key: [s.value, s.source] for key, s in sorted(self.settings.items())},
                "base_dir": str(self.base_dir), "comment_line": self.comment_line}

    @classmethod
    def from_json(cls, data: dict) -> "EstimateConfig":
        """The inverse of :meth:`to_json` (values were validated when read)."""
        return cls(settings={key: Setting(value, source) for key, (value, source) in data["settings"].items()},
                   base_dir=Path(data["base_dir"]), comment_line=data["comment_line"])


def validate_table(table: dict, where: str, prefix: str = "tool.memlint.estimate") -> dict[str, Any]:
    """Validate the pyproject table; returns key -> value.  Raises ConfigError naming the key."""
    values: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}.{key}" if prefix else key
        if key not in KEYS:
            raise ConfigError(f"{where}: unknown key '{name}' (known: {', '.join(KEYS)})")
        try:
            values[key] = KEYS[key](key, value)
        except ValueError as exc:
            raise ConfigError(f"{where}: '{name}' {exc}") from None
    return values


def parse_comment_block(path: str, source: str) -> tuple[dict[str, Any], int | None]:
    """The ``# memlint: estimate key=value ...`` lines of ``source``: (key -> value, first line).

    Raises ConfigError naming ``path:line`` and the key.
    """
    if "estimate" not in source:
        return {}, None
    from memlint.lint.suppression import directive_comments

    values: dict[str, Any] = {}
    first: int | None = None
    for comment in directive_comments(source, _COMMENT):
        match = _COMMENT.match(comment.text)
        if match is None or not comment.whole_line:
            continue
        number = comment.line
        first = first or number
        where = f"{path}:{number}"
        try:
            words = shlex.split(match.group("rest"))
        except ValueError as exc:
            raise ConfigError(f"{where}: cannot read the estimate comment ({exc})") from None
        for word in words:
            key, sep, value = word.partition("=")
            key = key.strip().lower().replace("_", "-")
            if not sep or not key:
                raise ConfigError(f"{where}: expected key=value in the estimate comment, got {word!r}")
            if key not in KEYS or key in TABLE_ONLY:
                allowed = ", ".join(k for k in KEYS if k not in TABLE_ONLY)
                raise ConfigError(f"{where}: unknown estimate key '{key}' (known: {allowed})")
            try:
                checked = KEYS[key](key, value)
            except ValueError as exc:
                raise ConfigError(f"{where}: estimate key '{key}' {exc}") from None
            if key == "input":
                values.setdefault("input", []).extend(checked)
            elif key in values:
                raise ConfigError(f"{where}: estimate key '{key}' is given twice in the estimate comment")
            else:
                values[key] = checked
    return values, first


def script_config(path: str, source: str, table: dict[str, Any], config_path: Path | None,
                  target_gpu: str | None) -> EstimateConfig | None:
    """The estimate settings of one script, or None when no estimate applies to it.

    An estimate applies when the script has a comment block with a ``target``,
    or the table has a ``target`` and the script matches the table's ``files``
    globs (default: scripts that call ``.backward(``).
    """
    comment, line = parse_comment_block(path, source)
    table_source = config_path.name if config_path else "configuration"
    applies = "target" in comment or ("target" in table and _matches_files(path, source, table, config_path))
    if not applies:
        return None
    result = EstimateConfig(comment_line=line)
    if target_gpu and "gpu" not in table:
        result.settings["gpu"] = Setting(_gpu("gpu", target_gpu), f"{table_source} (target-gpu)")
    for key, value in table.items():
        if key not in TABLE_ONLY:
            result.settings[key] = Setting(value, table_source)
    for key, value in comment.items():
        result.settings[key] = Setting(value, f"comment line {line}")
    _check_world_size(path, result)
    if "target" in comment or config_path is None:
        result.base_dir = Path(path).resolve().parent
    else:
        result.base_dir = config_path.resolve().parent
    return result


def _check_world_size(path: str, config: EstimateConfig) -> None:
    """ConfigError, naming where ``world-size`` was set, when no engine would use it, or when it is
    more ranks than the engines' trace simulates (memlint.estimate.distributed.MAX_WORLD_SIZE)."""
    from memlint.estimate.distributed import MAX_WORLD_SIZE

    setting = config.settings.get("world-size")
    if setting is None or setting.value <= 1:
        return
    line = setting.source.removeprefix("comment line ")
    where = f"{path}:{line}" if line != setting.source else f"{setting.source} (for {path})"
    if config.get("parallel") is None and not config.get("zero-stage", 0):
        raise ConfigError(f"{where}: estimate key 'world-size' {setting.value} needs an engine to shard over "
                          "the ranks: add parallel=ddp|fsdp|tp|fsdp+tp or zero-stage=1|2|3")
    if config.get("parallel") is not None and setting.value > MAX_WORLD_SIZE:
        raise ConfigError(f"{where}: estimate key 'world-size' {setting.value}: at most {MAX_WORLD_SIZE} "
                          "ranks with parallel")


def _matches_files(path: str, source: str, table: dict[str, Any], config_path: Path | None) -> bool:
    globs = table.get("files")
    if globs is None:
        return ".backward(" in source
    from memlint.config import _matches_any

    root = config_path.resolve().parent if config_path else Path.cwd()
    try:
        relative = Path(path).resolve().relative_to(root).as_posix()
    except ValueError:
        relative = Path(path).as_posix()
    return _matches_any(relative, globs)
