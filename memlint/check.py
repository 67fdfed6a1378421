"""``memlint check``: lint the given paths, apply fixes, print a report.

The run never stops at a bad file: unreadable files, unparsable files (MEM001)
and crashing rules are reported and the other files' results still printed.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from dataclasses import dataclass, field

from memlint.cli import _split_codes, config_start
from memlint.config import Config, load_config
from memlint.errors import UsageError
from memlint.lint.diagnostic import Diagnostic, FileResult
from memlint.lint.engine import SYNTAX_ERROR_CODE, LintOptions, lint_source
from memlint.lint.files import collect_files
from memlint.lint.registry import resolve_selection
from memlint.lint.runner import Job, lint_jobs, options_for


@dataclass
class CheckRun:
    """Everything one ``memlint check`` produced, for the formatters."""

    results: list[FileResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    estimates: list = field(default_factory=list)
    #: per-path lint options, for re-linting after fixes
    options: dict[str, LintOptions] = field(default_factory=dict)
    #: the bytes read from stdin when the path was '-'
    stdin: bytes | None = None
    #: problems fixed by --fix (or that --diff would fix)
    fixed: int = 0
    #: --diff: report changes, not findings (exit 1 when there are changes)
    diff_only: bool = False

    @property
    def diagnostics(self) -> list[Diagnostic]:
        """Every finding of the run, sorted by path, line, column and code."""
        return sorted((d for result in self.results for d in result.diagnostics), key=Diagnostic.sort_key)

    def exit_code(self, exit_zero: bool) -> int:
        broken = self.errors or any(
            r.error or r.internal_errors or any(d.code == SYNTAX_ERROR_CODE for d in r.diagnostics) for r in self.results
        )
        if broken:
            return 2
        if self.diff_only:
            return 1 if self.fixed else 0
        if self.diagnostics and not exit_zero:
            return 1
        return 0


def selection(args: argparse.Namespace, config: Config) -> frozenset[str]:
    """Enabled codes. The configuration gives the base (its ``select`` or the
    defaults, + ``extend-select`` - ``ignore``); ``--select`` replaces that
    base; then ``--extend-select`` adds and ``--ignore`` removes."""
    where = str(config.path) if config.path else "configuration"
    if args.select is not None:
        base = resolve_selection(_split_codes(args.select), [], [], option_names=("--select", "", ""))
    else:
        base = resolve_selection(
            config.select,
            config.ignore,
            config.extend_select,
            option_names=(f"{where}: select", f"{where}: ignore", f"{where}: extend-select"),
        )
    added = resolve_selection([], [], _split_codes(args.extend_select) or [], option_names=("", "", "--extend-select"))
    removed = resolve_selection([], [], _split_codes(args.ignore) or [], option_names=("", "", "--ignore"))
    return frozenset((base | added) - removed)


def run_check(args: argparse.Namespace) -> int:
    if args.unsafe_fixes and not (args.fix or args.diff):
        args.fix = False
    config = load_config(args.config, config_start(args.paths))
    enabled = selection(args, config)
    if not enabled:
        print("memlint: warning: no rule is selected (check --select/--ignore and [tool.memlint]); nothing can be reported",
              file=sys.stderr)
    run = CheckRun(diff_only=bool(args.diff))
    if args.paths == ["-"] or (not args.paths and args.stdin_filename):
        run.results.append(_lint_stdin(args, enabled, config, run))
    elif not args.paths:
        print("memlint: no files to check", file=sys.stderr)
        return 0
    else:
        if "-" in args.paths:
            raise UsageError("'-' (stdin) cannot be combined with other paths")
        collected = collect_files(args.paths, config)
        run.errors.extend(collected.errors)
        jobs = [Job(path, options_for(path, enabled, config)) for path in collected.files]
        run.options = {job.path: job.options for job in jobs}
        run.results = _lint_with_cache(jobs, args, config)
        if not collected.files and not collected.errors:
            run.notes.append("no Python files to check")
    if args.fix or args.diff:
        from memlint.lint.fixes import apply_fixes_to_run

        apply_fixes_to_run(run, args)
    _maybe_estimate(run, args, config)
    from memlint.report import render

    render(run, args)
    return run.exit_code(args.exit_zero)


def _lint_stdin(args: argparse.Namespace, enabled: frozenset[str], config: Config, run: CheckRun) -> FileResult:
    path = args.stdin_filename or "-"
    data = sys.stdin.buffer.read()
    options = options_for(path, enabled, config)
    run.stdin = data
    run.options[path] = options
    result = lint_source(path, data, options)
    result.digest = hashlib.sha256(data).hexdigest()
    return result


def _lint_with_cache(jobs: list[Job], args: argparse.Namespace, config: Config) -> list[FileResult]:
    if args.no_cache or args.fix or args.diff:
        return lint_jobs(jobs, args.jobs, with_digests=bool(args.fix or args.diff))
    from memlint.lint import cache

    return cache.lint_jobs_cached(jobs, args, config)


def _maybe_estimate(run: CheckRun, args: argparse.Namespace, config: Config) -> None:
    """Run the configured estimate (MEM302, advisor); a no-op until configured."""
    from memlint.integrate import attach_estimates

    attach_estimates(run, args, config)
