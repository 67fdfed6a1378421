"""Join the linter and the estimator: ``memlint --estimate train.py`` also answers "will it fit?".

The flow, one way, each step returning what the next one reads:

1. :func:`plan_estimates` (static, no torch, no code of the tree): which
   linted scripts have an estimate configured (a ``# memlint: estimate
   target=...`` comment block, or ``[tool.memlint.estimate]`` with a
   ``target``), with their validated settings (:mod:`.settings`: config >
   script > estimator default). Plain ``memlint check`` stops here and says
   in one note that estimates are configured and how to run them.
2. :func:`run_estimates` (only with ``--estimate``): for each planned script,
   check its target (:mod:`.targets`), serve it from the estimate cache
   (:mod:`.estimate_cache`) or run it in a child process within a time and a
   memory limit (:mod:`.isolation`, :mod:`.worker`), and return an
   :class:`EstimateReport`: the :class:`~.result.ScriptEstimate` of each
   script, MEM302 diagnostics where the script's batch size does not fit,
   and one error line per failed estimate.
3. ``memlint check`` merges the report into what it renders.

In the child, :func:`estimate_script` reads the script's recipe statically
(:mod:`.recipe`), loads the target, traces, and runs the largest-batch search
and the advisor when the batch does not fit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from memlint.errors import ConfigError, TargetError, UsageError
from memlint.integrate.result import (
    GiB,
    MalformedResult,
    ScriptEstimate,
    Value,
    deciding_device,
    largest_batch_text,
    search_limit,
)
from memlint.integrate.settings import (
    DEFAULT_ADVISE_WORLD_SIZE,
    EstimateConfig,
    script_config,
    validate_table,
)
from memlint.lint.diagnostic import LINE_BREAK, Diagnostic, Severity

if TYPE_CHECKING:  # imported where used: only scripts with an estimate need the recipe reader
    from memlint.integrate.isolation import Limits
    from memlint.integrate.recipe import Found, Recipe

MEM302 = "MEM302"
MEM302_NAME = "batch-size-exceeds-capacity"
_RECIPE_KEYS = ("batch-size", "optimizer", "precision", "checkpointing", "grad-accum", "set-to-none")

#: What ``pip`` installs for the estimator, and what a pre-commit hook lists.
ESTIMATE_EXTRA_HINT = ("install the estimator's dependencies, the CPU build of torch first: "
                       "pip install 'torch==2.13.0' --index-url https://download.pytorch.org/whl/cpu && pip install 'memlint[estimate]'")


@dataclass
class ScriptSource:
    """A linted script as the estimate step reads it: ``codes`` are the codes
    run on it (None: every code)."""

    path: str
    source: str
    codes: frozenset[str] | None = None


@dataclass
class PlannedEstimate:
    """A script with a configured estimate; ``report_mem302``: MEM302 is run on it."""

    path: str
    source: str
    settings: EstimateConfig
    report_mem302: bool


@dataclass
class EstimatePlan:
    """What :func:`plan_estimates` found: the estimates to run, and one-line
    errors (a script's invalid comment block) and notes (``--verbose``)."""

    estimates: list[PlannedEstimate] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def not_run_note(self) -> str | None:
        """The one note of a run without ``--estimate`` (None when nothing is configured)."""
        if not self.estimates:
            return None
        first = self.estimates[0]
        if len(self.estimates) == 1:
            return (f"an estimate is configured for {first.path} (target {first.settings.get('target')}); "
                    f"it runs only on request: memlint --estimate {first.path}")
        return (f"estimates are configured for {len(self.estimates)} scripts ({first.path}, ...); "
                "they run only on request: memlint --estimate PATH...")


@dataclass
class EstimateReport:
    """What :func:`run_estimates` returns for ``memlint check`` to render."""

    estimates: list[ScriptEstimate] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class RunOptions:
    """How :func:`run_estimates` runs: ``limits`` per estimate, the targets
    named with ``--estimate-target`` (``trusted``), ``--advise``, the cache
    directory (None: no cache), and a ``progress`` callback for stderr."""

    limits: Limits
    trusted: frozenset[str] = frozenset()
    advise: bool = False
    verbose: bool = False
    cache_dir: Path | None = None
    progress: Callable[[str], None] | None = None


def plan_estimates(scripts: list[ScriptSource], config, advise: bool = False, verbose: bool = False) -> EstimatePlan:
    """The scripts of ``scripts`` that have an estimate configured (static: no torch, nothing imported).

    Raises:
        ConfigError: an invalid ``[tool.memlint.estimate]`` table (one line,
            naming the key and the file); a script's invalid comment block is
            an error line of the plan instead, so the other files still report.
    """
    where = str(config.path) if config.path else "configuration"
    prefix = "tool.memlint.estimate" if not config.path or config.path.name == "pyproject.toml" else "estimate"
    table = validate_table(config.estimate or {}, where, prefix=prefix)
    plan = EstimatePlan()
    for script in scripts:
        report_mem302 = script.codes is None or MEM302 in script.codes
        if not report_mem302 and not advise:
            if verbose and "memlint: estimate" in script.source:
                plan.notes.append(f"{script.path}: estimate skipped: MEM302 is not selected")
            continue
        try:
            settings = script_config(script.path, script.source, table, config.path, config.target_gpu)
        except ConfigError as exc:  # this script's comment block: the other files still report
            plan.errors.append(str(exc))
            continue
        if settings is None:
            if verbose and report_mem302:
                plan.notes.append(f"{script.path}: MEM302 skipped: no estimate configured (add `# memlint: estimate "
                                  f"target=...` or [tool.memlint.estimate] target)")
            continue
        plan.estimates.append(PlannedEstimate(script.path, script.source, settings, report_mem302))
    return plan


def run_estimates(plan: EstimatePlan, config, options: RunOptions) -> EstimateReport:
    """Run the planned estimates, each in a child process (see the module docstring)."""
    report = EstimateReport(errors=list(plan.errors), notes=list(plan.notes))
    if not plan.estimates:
        return report
    if not torch_is_installed():
        report.errors.append(f"--estimate needs torch, which is not installed: {ESTIMATE_EXTRA_HINT}")
        return report
    if os.name != "posix":
        report.errors.append("--estimate runs each estimate in a process group of its own, which needs a POSIX "
                             "system (Linux, macOS); use memlint estimate TARGET here")
        return report
    from memlint.integrate.estimate_cache import EstimateCache

    cache = EstimateCache.open(options.cache_dir) if options.cache_dir is not None else None
    for planned in plan.estimates:
        outcome = _estimate_one(planned, config, options, cache)
        report.estimates.append(outcome)
        if outcome.error:
            report.errors.append(f"{planned.path}: estimate (target {outcome.target}) failed: {outcome.error}")
            continue
        diagnostic = mem302_diagnostic(outcome, planned.source, _configuration_line(planned.settings))
        if diagnostic is not None and planned.report_mem302 and not _suppressed(diagnostic, planned.source):
            report.diagnostics.append(diagnostic)
        elif options.verbose and outcome.fits is None:
            report.notes.append(f"{planned.path}: MEM302 skipped: no target GPU (set gpu= or capacity=)")
    return report


def torch_is_installed() -> bool:
    """True when torch can be imported (found on the path; not imported)."""
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def _estimate_one(planned: PlannedEstimate, config, options: RunOptions, cache) -> ScriptEstimate:
    from memlint.integrate.isolation import ChildFailed, run_worker
    from memlint.integrate.targets import project_root, resolve_target

    target_text = planned.settings.get("target")
    failed = ScriptEstimate(path=planned.path, target=target_text)
    root = project_root(planned.path, config.path)
    try:
        target = resolve_target(target_text, planned.settings.base_dir, root, options.trusted)
    except TargetError as exc:
        failed.error = str(exc)
        return failed
    advise = options.advise or bool(planned.settings.get("advise"))
    key = cache.key(planned, target, root, options.advise) if cache is not None else None
    cached = cache.load(key, planned.path) if key is not None else None
    if cached is not None:
        return cached
    request = {"path": planned.path, "source": planned.source, "settings": planned.settings.to_json(),
               "target": {"spec": target.spec, "module_file": target.module_file, "search_dir": target.search_dir},
               "advise": options.advise, "cwd": str(Path.cwd())}
    if options.progress is not None:
        options.progress(f"estimating {planned.path} (target {target_text})" + (" with the advisor" if advise else ""))
    try:
        message = run_worker(request, options.limits, options.progress, options.verbose)
    except ChildFailed as exc:
        failed.error = str(exc)
        return failed
    if "failure" in message:
        failed.error = str(message["failure"])
        return failed
    try:
        outcome = ScriptEstimate.from_transfer(message["result"])
    except MalformedResult as exc:
        failed.error = f"the estimate process returned a malformed result ({exc})"
        return failed
    outcome.path = planned.path
    if outcome.error is None and key is not None:
        cache.save(key, outcome)
    return outcome


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


def estimate_script(path: str, source: str, settings: EstimateConfig, target: str, advise: bool = False,
                    progress: Callable[[str], None] | None = None) -> ScriptEstimate:
    """Recipe + configuration -> estimate, verdict, largest batch and advice
    for one script (imports torch and the target: the estimate child runs it).

    ``target``: the checked target as ``load_workload`` takes it
    (:class:`~memlint.integrate.targets.ResolvedTarget.spec`); ``progress``
    gets one line per trace of the search and the advisor.
    """
    from memlint.integrate.recipe import extract_recipe

    recipe = extract_recipe(path, source)
    values = resolve_recipe(settings, recipe)
    outcome = ScriptEstimate(path=path, target=settings.get("target"), recipe=values, notes=list(recipe.notes))
    if values["batch-size"].source.startswith("script") and recipe.batch_size is not None:
        f = recipe.batch_size
        outcome.batch_span = (f.line, f.col, f.end_line, f.end_col)
    elif values["batch-size"].source.startswith("config: comment") and settings.comment_line:
        line = settings.comment_line
        outcome.batch_span = (line, 1, line, len(LINE_BREAK.split(source)[line - 1]) + 1)
    try:
        # advise: --advise or advise=true always; advise=false never; unset: only when it does not fit
        _run_estimate(outcome, settings, values, target, True if advise else settings.get("advise"), progress)
    except (TargetError, UsageError) as exc:
        outcome.error = str(exc)
    return outcome


def _run_estimate(outcome: ScriptEstimate, settings: EstimateConfig, values: dict[str, Value], target: str,
                  advise: bool | None, progress: Callable[[str], None] | None) -> None:
    from memlint.estimate.advisor import advise as run_advisor
    from memlint.estimate.advisor import with_flops
    from memlint.estimate.api import EstimateOptions, estimate, fits, resolve_capacity
    from memlint.estimate.cli import check_estimate_inputs, reporting
    from memlint.estimate.workload import load_workload
    from memlint.estimate.search import Probe, largest_fitting

    names = ("batch-size", "grad-accum", "world-size", "input")
    world, inputs, accum = settings.get("world-size", 1), settings.get("input", []), values["grad-accum"].value
    known = values["batch-size"].value
    # before the target is imported; without a batch size, what can be checked without the workload's default
    check_estimate_inputs(None if known is None else known * accum, accum if known is not None else 1, world, inputs,
                          names=names)
    workload = load_workload(target, inputs, None)
    if known is None:
        values["batch-size"] = Value(workload.default_batch_size, "default", "the workload's default_batch_size")
        check_estimate_inputs(workload.default_batch_size * accum, accum, world, inputs, names=names)
    micro = values["batch-size"].value
    report = progress or (lambda text: None)
    gpu = settings.get("gpu")
    options = EstimateOptions(
        batch_size=micro * accum, optimizer=values["optimizer"].value, precision=values["precision"].value,
        checkpointing=values["checkpointing"].value, grad_accum=accum, set_to_none=values["set-to-none"].value,
        world_size=settings.get("world-size", 1), zero_stage=settings.get("zero-stage", 0),
        parallel=settings.get("parallel"), tp_size=settings.get("tp-size"), gpu=gpu if gpu and gpu.lower() != "auto" else None)
    for key in ("world-size", "zero-stage", "parallel", "tp-size"):
        if key in settings:
            values[key] = Value(settings.get(key), _source(settings, key))
    report(f"tracing batch {micro * accum}")
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
                                         settings.get("advise-world-size", DEFAULT_ADVISE_WORLD_SIZE),
                                         run=reporting(with_flops, report), full=True)
        return
    outcome.verdict = fits(outcome.estimate, outcome.capacity_bytes, reserve)
    if not outcome.verdict.fits or advise:
        def probe(b: int) -> Probe:
            report(f"largest batch: tracing batch {b}")
            verdict = fits(estimate(workload, replace(options, batch_size=b * accum)), outcome.capacity_bytes, reserve)
            return Probe(verdict.fits, verdict.required_bytes, verdict.usable_bytes)

        v = outcome.verdict
        outcome.max_batch = largest_fitting(probe, search_limit(micro, accum), start=micro,  # the limit is >= micro
                                            known={micro: Probe(v.fits, v.required_bytes, v.usable_bytes)})
        if advise is not False:
            outcome.advice = run_advisor(workload, outcome.estimate, outcome.capacity_bytes, reserve,
                                         settings.get("advise-world-size", DEFAULT_ADVISE_WORLD_SIZE),
                                         run=reporting(with_flops, report), full=True)


def _source(settings: EstimateConfig, key: str) -> str:
    return f"config: {settings.settings[key].source}" if key in settings else "default"


def _configuration_line(settings) -> int:
    """The script line of the estimate comment when it names the target, else 1."""
    setting = settings.settings.get("target") if settings is not None else None
    from_comment = setting is not None and setting.source.startswith("comment line") and settings.comment_line
    return settings.comment_line if from_comment else 1


def mem302_diagnostic(outcome: ScriptEstimate, source: str | None = None, anchor_line: int = 1) -> Diagnostic | None:
    """MEM302 at the batch-size literal (or the comment line) when the estimate
    does not fit; else None. A script whose batch size is not visible gets it
    at ``anchor_line`` (the estimate comment, else line 1): a step that does
    not fit is always a finding. With ``source``, a position outside it is not
    reported (the result came from another process or the cache)."""
    if outcome.verdict is None or outcome.verdict.fits:
        return None
    batch = outcome.recipe.get("batch-size")
    found = _batch_position(outcome, batch) if batch is not None else None
    lines = len(LINE_BREAK.split(source)) if source is not None else None
    if found is None:
        anchor = anchor_line if lines is None or anchor_line <= lines else 1
        found = (anchor, 1, anchor, 1)
    if lines is not None and found[2] > lines:
        return None
    line, col, end_line, end_col = found
    verdict = outcome.verdict
    largest = (f"the largest batch that fits is {largest_batch_text(outcome)}" if outcome.max_batch
               else "even batch size 1 does not fit")
    what = f"batch size {batch.value}" if batch is not None else "the estimated training step (the workload's own batch)"
    device, used = deciding_device(outcome.estimate)
    needs = f"{used / GiB:.2f} GiB" + (f" on {device}" if device else "")
    message = (f"{what} does not fit {outcome.gpu or 'the target'}: the estimate needs "
               f"{needs} of {verdict.capacity_bytes / GiB:.2f} GiB "
               f"({verdict.usable_bytes / GiB:.2f} GiB usable with {verdict.reserve:.0%} reserve); {largest}")
    return Diagnostic(MEM302, MEM302_NAME, Severity.ERROR, message, outcome.path, line, col, end_line, end_col)


def _batch_position(outcome: ScriptEstimate, batch: Value):
    if batch.source.startswith(("script line", "config: comment line")):
        return outcome.batch_span
    return None
