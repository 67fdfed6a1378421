"""Join the linter and the estimator: ``memlint train.py`` also answers "will it fit?".

:func:`attach_estimates` runs after linting (called by :mod:`memlint.check`).
For each linted script that has estimate configuration (a ``# memlint:
estimate target=...`` comment block, or ``[tool.memlint.estimate]`` with a
``target``) it reads the script's recipe statically (:mod:`.recipe`), merges
it with the configuration (:mod:`.settings`: config > script > estimator
default), runs the estimator, and attaches a :class:`~.result.ScriptEstimate`
to ``run.estimates``; when the estimate at the script's batch size does not
fit the target GPU it adds MEM302 at the batch-size literal and runs the
advisor.  Without configuration nothing here imports torch.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from memlint.errors import ConfigError, TargetError, UsageError
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: only scripts with an estimate need the recipe reader
    from memlint.integrate.recipe import Found, Recipe
from memlint.integrate.result import GiB, ScriptEstimate, Value
from memlint.integrate.settings import (
    DEFAULT_ADVISE_WORLD_SIZE,
    EstimateConfig,
    script_config,
    validate_table,
)
from memlint.lint.diagnostic import Diagnostic, Severity

MEM302 = "MEM302"
MEM302_NAME = "batch-size-exceeds-capacity"
#: Upper bound of the largest-batch search (batch per step).
MAX_BATCH_LIMIT = 1 << 16
_RECIPE_KEYS = ("batch-size", "optimizer", "precision", "checkpointing", "grad-accum", "set-to-none")


def attach_estimates(run, args, config) -> None:
    """Estimate every configured script of ``run``; add MEM302 diagnostics and ScriptEstimates.

    Raises ConfigError (one line, naming the key and file/line) for invalid configuration.
    Estimator failures (target cannot be imported/traced) become one-line ``run.errors``.
    """
    where = str(config.path) if config.path else "configuration"
    table = validate_table(config.estimate or {}, where,
                           prefix="tool.memlint.estimate" if not config.path or config.path.name == "pyproject.toml"
                           else "estimate")
    verbose = bool(getattr(args, "verbose", False))
    for result in run.results:
        if result.error or any(d.code == "MEM001" for d in result.diagnostics):
            continue
        source = _source_of(result.path, run)
        if source is None:
            continue
        enabled = _mem302_enabled(run, result.path)
        if not enabled and not getattr(args, "advise", False):
            if verbose and "memlint: estimate" in source:
                run.notes.append(f"{result.path}: estimate skipped: MEM302 is not selected")
            continue
        try:
            settings = script_config(result.path, source, table, config.path, config.target_gpu)
        except ConfigError as exc:  # this script's comment block: the other files still report
            run.errors.append(str(exc))
            continue
        if settings is None:
            if verbose and enabled:
                run.notes.append(f"{result.path}: MEM302 skipped: no estimate configured (add `# memlint: estimate "
                                 f"target=...` or [tool.memlint.estimate] target)")
            continue
        outcome = estimate_script(result.path, source, settings, advise=bool(getattr(args, "advise", False)))
        run.estimates.append(outcome)
        if outcome.error:
            run.errors.append(f"{result.path}: estimate: {outcome.error}")
            continue
        diagnostic = mem302_diagnostic(outcome)
        if diagnostic is not None and enabled and not _suppressed(diagnostic, source):
            result.diagnostics.append(diagnostic)
            result.diagnostics.sort(key=Diagnostic.sort_key)
        elif verbose and outcome.fits is None:
            run.notes.append(f"{result.path}: MEM302 skipped: no target GPU (set gpu= or capacity=)")


def _source_of(path: str, run) -> str | None:
    data = run.stdin if getattr(run, "stdin", None) is not None and path in (run.options or {}) and not Path(path).is_file() else None
    try:
        data = data if data is not None else Path(path).read_bytes()
    except OSError:
        return None
    from memlint.lint.engine import source_text

    return source_text(data)


def _mem302_enabled(run, path: str) -> bool:
    options = (run.options or {}).get(path)
    return options is None or MEM302 in options.codes()


def _suppressed(diagnostic: Diagnostic, source: str) -> bool:
    from memlint.lint.suppression import is_suppressed, suppressions

    return is_suppressed(diagnostic, suppressions(source))


def resolve_recipe(settings: EstimateConfig, recipe: Recipe) -> dict[str, Value]:
    """Each recipe key's value and source: config ("config: <where>") > script ("script line N") > "default"."""
    script = {"batch-size": recipe.batch_size, "optimizer": recipe.optimizer, "precision": recipe.precision,
              "checkpointing": recipe.checkpointing, "grad-accum": recipe.grad_accum,
              "set-to-none": recipe.set_to_none}
    defaults = {"batch-size": None, "optimizer": None, "precision": "fp32", "checkpointing": False,
                "grad-accum": 1, "set-to-none": True}
    resolved: dict[str, Value] = {}
    for key in _RECIPE_KEYS:
        if key in settings:
            resolved[key] = Value(settings.get(key), f"config: {settings.settings[key].source}")
        elif script[key] is not None:
            found: Found = script[key]
            resolved[key] = Value(found.value, f"script line {found.line}", found.how)
        else:
            resolved[key] = Value(defaults[key], "default")
    if recipe.optimizer_call and resolved["optimizer"].source.startswith("script"):
        resolved["optimizer"].detail = recipe.optimizer_call
    return resolved


def _resolve_target(target: str, base_dir: Path) -> str:
    where, sep, attr = target.rpartition(":")
    if not sep:
        return target
    if where.endswith(".py") or "/" in where or "\\" in where:
        path = Path(where)
        if not path.is_absolute() and (base_dir / path).is_file():
            return f"{(base_dir / path).resolve()}:{attr}"
        return target
    if str(base_dir) not in sys.path:
        sys.path.append(str(base_dir))  # package.module:factory next to the script or pyproject
    return target


def estimate_script(path: str, source: str, settings: EstimateConfig, advise: bool = False) -> ScriptEstimate:
    """Recipe + configuration -> estimate, verdict, largest batch and advice for one script (imports torch)."""
    from memlint.integrate.recipe import extract_recipe

    recipe = extract_recipe(path, source)
    values = resolve_recipe(settings, recipe)
    outcome = ScriptEstimate(path=path, target=settings.get("target"), recipe=values, notes=list(recipe.notes))
    if values["batch-size"].source.startswith("script") and recipe.batch_size is not None:
        f = recipe.batch_size
        outcome.batch_span = (f.line, f.col, f.end_line, f.end_col)
    elif values["batch-size"].source.startswith("config: comment") and settings.comment_line:
        line = settings.comment_line
        outcome.batch_span = (line, 1, line, len(source.splitlines()[line - 1]) + 1)
    try:
        # advise: --advise or advise=true always; advise=false never; unset: only when it does not fit
        _run_estimate(outcome, settings, values, True if advise else settings.get("advise"))
    except (TargetError, UsageError) as exc:
        outcome.error = str(exc)
    return outcome


def _run_estimate(outcome: ScriptEstimate, settings: EstimateConfig, values: dict[str, Value],
                  advise: bool | None) -> None:
    from memlint.estimate.advisor import advise as run_advisor
    from memlint.estimate.api import EstimateOptions, estimate, fits, resolve_capacity
    from memlint.estimate.workload import load_workload

    target = _resolve_target(settings.get("target"), settings.base_dir)
    workload = load_workload(target, settings.get("input", []), None)
    if values["batch-size"].value is None:
        values["batch-size"] = Value(workload.default_batch_size, "default", "the workload's default_batch_size")
    micro, accum = values["batch-size"].value, values["grad-accum"].value
    gpu = settings.get("gpu")
    options = EstimateOptions(
        batch_size=micro * accum, optimizer=values["optimizer"].value, precision=values["precision"].value,
        checkpointing=values["checkpointing"].value, grad_accum=accum, set_to_none=values["set-to-none"].value,
        world_size=settings.get("world-size", 1), zero_stage=settings.get("zero-stage", 0),
        gpu=gpu if gpu and gpu.lower() != "auto" else None)
    for key in ("world-size", "zero-stage"):
        if key in settings:
            values[key] = Value(settings.get(key), _source(settings, key))
    outcome.estimate = estimate(workload, options)
    if values["optimizer"].value is None:
        values["optimizer"] = Value(outcome.estimate.optimizer, "default", "the workload's optimizer_factory (else SGD)")
    outcome.gpu, outcome.capacity_bytes = resolve_capacity(gpu, settings.get("capacity"))
    reserve = settings.get("reserve", 0.10)
    values["gpu"] = Value(outcome.gpu, _source(settings, "capacity" if "capacity" in settings else "gpu"))
    values["reserve"] = Value(reserve, _source(settings, "reserve"))
    if outcome.capacity_bytes is None:
        outcome.notes.append("no target GPU configured (gpu= or capacity=): no verdict")
        if advise:
            outcome.advice = run_advisor(workload, outcome.estimate, None, reserve,
                                         settings.get("advise-world-size", DEFAULT_ADVISE_WORLD_SIZE))
        return
    outcome.verdict = fits(outcome.estimate, outcome.capacity_bytes, reserve)
    if not outcome.verdict.fits or advise:
        def probe(b: int) -> tuple[bool, int, int]:
            verdict = fits(estimate(workload, replace(options, batch_size=b * accum)), outcome.capacity_bytes, reserve)
            return verdict.fits, verdict.required_bytes, verdict.usable_bytes

        v = outcome.verdict
        outcome.max_batch = largest_fitting_batch(probe, micro, (v.fits, v.required_bytes, v.usable_bytes),
                                                  MAX_BATCH_LIMIT // accum)
        if advise is not False:
            outcome.advice = run_advisor(workload, outcome.estimate, outcome.capacity_bytes, reserve,
                                         settings.get("advise-world-size", DEFAULT_ADVISE_WORLD_SIZE))


def _source(settings: EstimateConfig, key: str) -> str:
    return f"config: {settings.settings[key].source}" if key in settings else "default"


def largest_fitting_batch(probe, start: int, start_result: tuple[bool, int, int], limit: int = MAX_BATCH_LIMIT) -> int:
    """Largest b in [1, limit] whose estimate fits; 0 if none.  Every answer is a real trace.

    probe(b) -> (fits, required_bytes, usable_bytes); ``start_result`` is probe(start), already known.
    Memory is close to affine in the batch, so a second point gives a guess of the
    limit by interpolation; the guess and its neighbour are traced, and plain
    doubling/bisection over the remaining bracket handles what interpolation
    missed (allocator rounding).  Assumes memory grows with the batch.
    """
    known: dict[int, tuple[bool, int, int]] = {start: start_result}

    def ok(b: int) -> bool:
        if b not in known:
            known[b] = probe(b)
        return known[b][0]

    last = start
    other = start // 2 if start >= 16 else start * 4  # far enough apart that rounding does not hide the slope
    if 1 <= other <= limit:
        ok(other)
        (b1, (_, r1, usable)), (b2, (_, r2, _)) = sorted(known.items())[:2]
        if r2 > r1:
            guess = min(limit, max(1, b1 + int((usable - r1) * (b2 - b1) // (r2 - r1))))
            last = guess
            if ok(guess) and guess < limit:
                last = guess + 1
                ok(last)
            elif not ok(guess) and guess > 1:
                last = guess - 1
                ok(last)
    low = max((b for b, r in known.items() if r[0]), default=0)
    high = min((b for b, r in known.items() if not r[0] and b > low), default=limit + 1)
    step = 1  # gallop from the side of the last answer: distances 1, 2, 4, ... then bisect
    if known[last][0]:
        while (candidate := min(low + step, high - 1)) > low:
            if not ok(candidate):
                high = candidate
                break
            low, step = candidate, step * 2
    else:
        while (candidate := max(high - step, low + 1)) < high:
            if ok(candidate):
                low = candidate
                break
            high, step = candidate, step * 2
    while high - low > 1:
        mid = (low + high) // 2
        if ok(mid):
            low = mid
        else:
            high = mid
    return low


def mem302_diagnostic(outcome: ScriptEstimate) -> Diagnostic | None:
    """MEM302 at the batch-size literal (or the comment line) when the estimate does not fit; else None."""
    if outcome.verdict is None or outcome.verdict.fits:
        return None
    batch = outcome.recipe["batch-size"]
    found = _batch_position(outcome, batch)
    if found is None:
        return None
    line, col, end_line, end_col = found
    verdict = outcome.verdict
    largest = (f"the largest batch that fits is {outcome.max_batch}" if outcome.max_batch
               else "even batch size 1 does not fit")
    message = (f"batch size {batch.value} does not fit {outcome.gpu or 'the target'}: the estimate needs "
               f"{outcome.estimate.device_used / GiB:.2f} GiB of {verdict.capacity_bytes / GiB:.2f} GiB "
               f"({verdict.usable_bytes / GiB:.2f} GiB usable with {verdict.reserve:.0%} reserve); {largest}")
    return Diagnostic(MEM302, MEM302_NAME, Severity.ERROR, message, outcome.path, line, col, end_line, end_col)


def _batch_position(outcome: ScriptEstimate, batch: Value):
    if batch.source.startswith(("script line", "config: comment line")):
        return outcome.batch_span
    return None
