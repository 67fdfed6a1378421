"""``memlint check``: lint the given paths, apply fixes, print a report.

The run never stops at a bad file: unreadable files, unparsable files (MEM001)
and crashing rules are reported and the other files' results still printed.

Nothing from the linted tree is imported or run, whatever its files or its
configuration say. Estimates configured in the tree are planned statically
(:func:`memlint.integrate.plan_estimates`) and run only with ``--estimate``,
each in a child process (:func:`memlint.integrate.run_estimates`), which
returns a report that this module merges into the run it renders; without
``--estimate`` one note says that estimates are configured.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from dataclasses import dataclass, field
from pathlib import Path

from memlint.config import Config, load_config
from memlint.errors import UsageError
from memlint.lint.diagnostic import Diagnostic, FileResult
from memlint.lint.engine import SYNTAX_ERROR_CODE, LintOptions, lint_source
from memlint.lint.files import collect_files
from memlint.lint.registry import resolve_selection
from memlint.lint.runner import Job, lint_jobs, options_for, read_job

#: The code the estimate step reports (memlint.integrate.MEM302), named here
#: so that a run with nothing to estimate never imports memlint.integrate.
MEM302 = "MEM302"
#: Options that only mean something with ``--estimate``.
_ESTIMATE_OPTIONS = (("advise", "--advise"), ("estimate_timeout", "--estimate-timeout"),
                     ("estimate_memory", "--estimate-memory"), ("estimate_target", "--estimate-target"))


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
    #: --show-fixes: (path, [(code, name, count)]) per file, and whether they
    #: were applied (--fix) or are only available
    shown_fixes: list = field(default_factory=list)
    fixes_applied: bool = False
    #: the options that apply the listed fixes ("--fix", "--fix --unsafe-fixes")
    fixes_options: str = "--fix"
    #: --diff with --output-file: the diffs, written to the file before the report
    diff_text: str = ""

    @property
    def diagnostics(self) -> list[Diagnostic]:
        """Every finding of the run, sorted by path, line, column and code."""
        return sorted((d for result in self.results for d in result.diagnostics), key=Diagnostic.sort_key)

    def exit_code(self, exit_zero: bool) -> int:
        """2 when the run had errors (:func:`memlint.report.run_failed`), else 1 for findings (or, with
        ``--diff``, changes) unless ``exit_zero``, else 0."""
        from memlint.report import run_failed

        if run_failed(self):
            return 2
        if self.diff_only:
            return 1 if self.fixed else 0
        if self.diagnostics and not exit_zero:
            return 1
        return 0

    def add_estimates(self, report) -> None:
        """Merge an :class:`~memlint.integrate.EstimateReport`: its estimates,
        errors and notes, and its MEM302 findings into their files' results."""
        self.estimates.extend(report.estimates)
        self.errors.extend(report.errors)
        self.notes.extend(report.notes)
        by_path = {result.path: result for result in self.results}
        for diagnostic in report.diagnostics:
            result = by_path[diagnostic.path]
            result.diagnostics.append(diagnostic)
            result.diagnostics.sort(key=Diagnostic.sort_key)


def split_codes(values: list[str] | None) -> list[str] | None:
    """Comma-separated selectors of repeated options, as one list (None stays None)."""
    if values is None:
        return None
    return [code.strip() for value in values for code in value.split(",") if code.strip()]


def config_start(paths: list[str]) -> Path:
    """Where configuration discovery starts: the first real path, else the cwd."""
    for path in paths:
        if path != "-":
            return Path(path).absolute()
    return Path.cwd()


def selection(args: argparse.Namespace, config: Config) -> frozenset[str]:
    """Enabled codes. The configuration gives the base (its ``select`` or the
    defaults, + ``extend-select`` - ``ignore``); ``--select`` replaces that
    base; then ``--extend-select`` adds and ``--ignore`` removes."""
    where = str(config.path) if config.path else "configuration"
    if args.select is not None:
        base = resolve_selection(split_codes(args.select), [], [], option_names=("--select", "", ""))
    else:
        base = resolve_selection(
            config.select,
            config.ignore,
            config.extend_select,
            option_names=(f"{where}: select", f"{where}: ignore", f"{where}: extend-select"),
        )
    added = resolve_selection([], [], split_codes(args.extend_select) or [], option_names=("", "", "--extend-select"))
    removed = resolve_selection([], [], split_codes(args.ignore) or [], option_names=("", "", "--ignore"))
    return frozenset((base | added) - removed)


def run_check(args: argparse.Namespace) -> int:
    """Run ``memlint check``; returns the exit code.

    With ``--format json`` or ``sarif`` a usage or configuration error still
    writes a valid document to stdout (the error in ``errors``, or a SARIF
    run with ``executionSuccessful`` false and the error as a notification),
    so that ``memlint --format sarif . > memlint.sarif`` uploads a valid
    file; the error line goes to stderr and the exit code is 2.

    Raises:
        UsageError: bad options or configuration (one line, exit 2), in the
            other formats.
    """
    try:
        return _run_check(args)
    except UsageError as exc:
        if getattr(args, "format", None) not in ("json", "sarif") or isinstance(exc, OutputOverInput):
            raise  # (a report written to an input file would replace it)
        render_run(CheckRun(errors=[str(exc)]), args)
        return exc.exit_code


def render_run(run: CheckRun, args: argparse.Namespace) -> None:
    """Print the report of ``run`` (:func:`memlint.report.render`) on stdout,
    or with ``--output-file`` into that file: written whole to a temporary
    file in its directory, then renamed over it, so a reader never sees half
    a report.

    Raises:
        UsageError: the file cannot be written (one line naming it).
    """
    from memlint.report import render

    target = getattr(args, "output_file", None)
    if not target:
        render(run, args)
        return
    import io

    buffer = io.StringIO(getattr(run, "diff_text", ""))
    buffer.seek(0, io.SEEK_END)
    render(run, args, buffer)
    write_report(target, buffer.getvalue())


def write_report(path: str, text: str) -> None:
    """Write ``text`` (UTF-8) to the ``--output-file`` ``path``.

    A regular file (or a new one) is replaced atomically: a temporary file
    in the same directory, then ``os.replace``. A symbolic link to a
    regular file has its target replaced that way (the link stays). A path
    that is not a regular file -- a character or block device
    (``/dev/null``), a FIFO, a socket, or a link to one (``/dev/stdout``) --
    is opened and written into: replacing it would put a regular file where
    the device was.

    Raises:
        UsageError: the path is a directory, or it cannot be written (names the file).
    """
    import os
    import stat

    try:
        mode = os.stat(path).st_mode  # follows links
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise _cannot_write(path, exc) from None
    if mode is not None and stat.S_ISDIR(mode):
        raise _cannot_write(path, IsADirectoryError(21, "Is a directory"))
    if mode is not None and not stat.S_ISREG(mode):
        try:
            with open(path, "w", encoding="utf-8", newline="") as out:
                out.write(text)
        except OSError as exc:
            raise _cannot_write(path, exc) from None
        return
    _replace_atomically(os.path.realpath(path) if os.path.islink(path) else path, text, shown=path)


def _replace_atomically(path: str, text: str, shown: str) -> None:
    import os
    import tempfile

    directory = os.path.dirname(os.path.abspath(path))
    try:
        handle, temp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".memlint-tmp")
    except OSError as exc:
        raise _cannot_write(shown, exc) from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as out:
            out.write(text)
        os.chmod(temp, 0o666 & ~_umask())
        os.replace(temp, path)
    except OSError as exc:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise _cannot_write(shown, exc) from None


def _cannot_write(path: str, exc: OSError) -> UsageError:
    return UsageError(f"--output-file {path}: cannot write ({exc.strerror or type(exc).__name__})")


class OutputOverInput(UsageError):
    """``--output-file`` names a linted file: reported on stderr only."""


def refuse_output_over_inputs(output: str | None, files: list[str]) -> None:
    """Refuse an ``--output-file`` that is one of the linted ``files`` (the
    same file, through any link or hard link): the report would replace
    the source.

    Raises:
        UsageError: one line naming the file (exit status 2).
    """
    import os

    if not output:
        return
    try:
        target = os.stat(output)
    except OSError:
        return  # not there yet: not an input
    for path in files:
        try:
            same = os.path.samestat(target, os.stat(path))
        except OSError:
            continue
        if same:
            raise OutputOverInput(f"--output-file {output}: is the input file {path}; the report would replace it")


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


def _run_check(args: argparse.Namespace) -> int:
    check_options(args)
    limits = estimate_limits(args)
    config = load_config(args.config, config_start(args.paths))
    enabled = selection(args, config)
    if not enabled:
        print("memlint: warning: no rule is selected (check --select/--ignore and [tool.memlint]); nothing can be reported",
              file=sys.stderr)
    run = CheckRun(diff_only=bool(args.diff))
    roots: dict[str, str] | None = None
    if args.paths == ["-"] or (not args.paths and args.stdin_filename):
        run.results.append(_lint_stdin(args, enabled, config, run))
    else:
        args.paths = args.paths or ["."]  # as ruff: no path checks the current directory
        if "-" in args.paths:
            raise UsageError("'-' (stdin) cannot be combined with other paths")
        collected = collect_files(args.paths, config)
        refuse_output_over_inputs(getattr(args, "output_file", None), collected.files)
        run.errors.extend(collected.errors)
        run.notes.extend(collected.notes)
        roots = collected.roots
        jobs = [Job(path, options_for(path, enabled, config)) for path in collected.files]
        run.options = {job.path: job.options for job in jobs}
        run.results = _lint_with_cache(jobs, args, config)
        if not collected.files and not collected.errors:
            run.notes.append("no Python files or notebooks to check")
    if args.add_noqa:
        from memlint.lint.add_noqa import add_noqa_to_run

        add_noqa_to_run(run, roots, quiet=args.quiet)
    before_fixes = list(run.results)
    if args.fix or args.diff:
        _apply_fixes(run, args, roots)
    if args.show_fixes:
        _record_shown_fixes(run, args, before_fixes)
    _estimates(run, args, config, limits)
    render_run(run, args)
    return run.exit_code(args.exit_zero)


def _apply_fixes(run: CheckRun, args: argparse.Namespace, roots: dict[str, str] | None) -> None:
    """``--fix``/``--diff``; with ``--quiet`` the fix engine's "Fixed N
    problems" line is not printed (its errors and notes are in ``run`` and
    still reported); with ``--diff --output-file`` the diffs go to the file."""
    import contextlib
    import io

    from memlint.lint.fixes import apply_fixes_to_run

    with contextlib.ExitStack() as stack:
        if args.quiet:
            stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
        diffs = None
        if args.diff and args.output_file:
            diffs = stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
        apply_fixes_to_run(run, args, roots)
        if diffs is not None:
            run.diff_text = diffs.getvalue()


def _record_shown_fixes(run: CheckRun, args: argparse.Namespace, before: list[FileResult]) -> None:
    """``--show-fixes``: per file, the findings whose fix was applied (found
    before ``--fix`` with an applicable fix, gone after it), or, without
    ``--fix``, the findings whose fix ``--fix`` would apply."""
    from collections import Counter

    from memlint.lint.diagnostic import Applicability

    unsafe = bool(args.unsafe_fixes)

    def fixable(diagnostics) -> Counter:
        return Counter((d.code, d.name) for d in diagnostics
                       if d.fix is not None and (unsafe or d.fix.applicability is Applicability.SAFE))

    after = {result.path: result for result in run.results}
    run.fixes_applied = bool(args.fix)
    run.fixes_options = "--fix --unsafe-fixes" if unsafe else "--fix"
    for result in before:
        counts = fixable(result.diagnostics)
        if args.fix:
            remaining = Counter((d.code, d.name) for d in after[result.path].diagnostics)
            counts = counts - remaining
        if counts:
            rows = sorted(((code, name, count) for (code, name), count in counts.items()), key=lambda r: r[0])
            run.shown_fixes.append((result.path, rows))


def check_options(args: argparse.Namespace) -> None:
    """The checks of options that argparse cannot express; a combination that
    does nothing gets a one-line warning on stderr (as ruff does).

    Raises:
        UsageError: ``--jobs`` below 1, ``--estimate-timeout`` not above 0,
            ``--diff`` with ``--fix``, ``--add-noqa`` with a fix option or stdin.
    """
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs}: must be at least 1")
    timeout = getattr(args, "estimate_timeout", None)
    if timeout is not None and not (timeout > 0 and timeout != float("inf")):
        raise UsageError(f"--estimate-timeout {timeout}: must be a positive number of seconds")
    if args.diff and args.fix:
        raise UsageError("--diff and --fix are mutually exclusive (--diff shows the fixes and writes nothing)")
    if args.add_noqa and (args.fix or args.diff):
        raise UsageError("--add-noqa cannot be combined with --fix or --diff (run them one after the other)")
    if args.add_noqa and (args.paths == ["-"] or (not args.paths and args.stdin_filename)):
        raise UsageError("--add-noqa edits files in place; it cannot be used with stdin ('-')")
    if args.unsafe_fixes and not (args.fix or args.diff or args.show_fixes):
        print("memlint: warning: --unsafe-fixes has no effect without --fix or --diff", file=sys.stderr)
    if args.show_fixes and (args.format in ("json", "github", "sarif") or args.statistics or args.diff):
        what = "--statistics" if args.statistics else "--diff" if args.diff else f"--format {args.format}"
        print(f"memlint: warning: --show-fixes has no effect with {what} (it lists fixes in the full and "
              "concise formats)", file=sys.stderr)
    if args.stdin_filename is not None and args.paths and "-" not in args.paths:
        print("memlint: warning: --stdin-filename has no effect: no '-' (stdin) among the paths", file=sys.stderr)


def estimate_limits(args: argparse.Namespace):
    """The per-estimate :class:`~memlint.integrate.isolation.Limits` of
    ``--estimate`` (None without it).

    Raises:
        UsageError: an estimate option without ``--estimate``, or a timeout
            or memory size that is not a positive value.
    """
    if not args.estimate:
        for attribute, option in _ESTIMATE_OPTIONS:
            if getattr(args, attribute, None) not in (None, False):
                raise UsageError(f"{option} needs --estimate (estimates run only when the command line asks)")
        return None
    from memlint.estimate.cli import check_timeout
    from memlint.estimate.units import parse_bytes
    from memlint.integrate.isolation import DEFAULT_TIMEOUT_SECONDS, MIN_MEMORY_BYTES, Limits, default_memory_limit

    timeout = DEFAULT_TIMEOUT_SECONDS if args.estimate_timeout is None else args.estimate_timeout
    memory = default_memory_limit()
    if args.estimate_memory is not None:
        try:
            memory = parse_bytes(args.estimate_memory)
        except UsageError as exc:
            raise UsageError(f"--estimate-memory {args.estimate_memory!r}: {exc}") from None
        if memory < MIN_MEMORY_BYTES:
            raise UsageError(f"--estimate-memory {args.estimate_memory!r}: at least 256MiB is needed to start the "
                             "estimator (Python and torch)")
    return Limits(timeout=check_timeout(timeout, "--estimate-timeout"), memory=memory)


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
    edits = bool(args.fix or args.diff or args.add_noqa)
    if args.no_cache or edits:
        return lint_jobs(jobs, args.jobs, with_digests=edits)
    from memlint.lint import cache

    return cache.lint_jobs_cached(jobs, args, config)


NO_ESTIMATE_CONFIGURED = ("--estimate: no linted file has an estimate configured (add `# memlint: estimate "
                          "target=models.py:build ...` to the script or a [tool.memlint.estimate] table; docs/configuration.md)")


def _estimates(run: CheckRun, args: argparse.Namespace, config: Config, limits) -> None:
    """Plan the configured estimates; run them with ``--estimate``, else note that they are configured."""
    sources = _estimate_sources(run, args.advise or args.verbose)
    if not (config.estimate or args.verbose) and not any("estimate" in script[1] for script in sources):
        if limits is not None:  # --estimate asked for, and there is nothing to estimate
            run.notes.append(NO_ESTIMATE_CONFIGURED)
        return  # nothing can configure an estimate: skip the step and its imports (plain runs stay fast)
    from memlint.integrate import RunOptions, ScriptSource, plan_estimates, run_estimates

    plan = plan_estimates([ScriptSource(*script) for script in sources], config, advise=args.advise,
                          verbose=args.verbose)
    if limits is None:
        run.errors.extend(plan.errors)
        run.notes.extend(plan.notes)
        note = plan.not_run_note()
        if note:
            run.notes.append(note)
        return
    if not plan.estimates and not plan.errors and not args.verbose:
        run.notes.append(NO_ESTIMATE_CONFIGURED)
    from memlint.estimate.cli import ProgressStatus

    cache_dir = None
    if not args.no_cache:
        from memlint.lint.cache import cache_dir as lint_cache_dir

        cache_dir = lint_cache_dir(args, config)
    # Progress: a status line on a terminal; elsewhere one line per step with
    # --verbose or --advise (the advisor traces about ten times).
    with ProgressStatus("estimating...", lines=args.verbose or args.advise) as status:
        options = RunOptions(limits=limits, trusted=frozenset(args.estimate_target or ()), advise=args.advise,
                             verbose=args.verbose, cache_dir=cache_dir, progress=status.update)
        run.add_estimates(run_estimates(plan, config, options))


def _estimate_sources(run: CheckRun, every_file: bool) -> list[tuple[str, str, frozenset[str] | None]]:
    """(path, source, codes run on it) of the linted scripts that an estimate
    may concern (MEM302 runs on them, or ``every_file``): read, decoded as the
    linter decodes them, without the unparsable and the skip-file ones."""
    from memlint.lint.engine import source_text
    from memlint.lint.suppression import skips_file

    scripts = []
    from memlint.lint.notebook import is_notebook_path

    for result in run.results:
        if result.error or any(d.code == SYNTAX_ERROR_CODE for d in result.diagnostics):
            continue
        if is_notebook_path(result.path):
            continue  # estimates are configured in scripts and pyproject.toml, not in notebooks
        options = run.options.get(result.path)
        if options is not None and MEM302 not in options.codes() and not every_file:
            continue
        data = run.stdin if run.stdin is not None else read_job(Job(result.path, options or LintOptions(frozenset())))
        source = source_text(data) if isinstance(data, bytes) else None
        if source is None or skips_file(source):
            continue
        scripts.append((result.path, source, frozenset(options.codes()) if options else None))
    return scripts
