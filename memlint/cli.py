"""The ``memlint`` command line.

Subcommands: ``check`` (the default: ``memlint train.py`` = ``memlint check
train.py``; ``memlint`` alone checks ``.``), ``rule CODE``, ``rules``,
``estimate``, ``validate``, ``explain SNAPSHOT`` (a PyTorch memory snapshot),
``server`` (the language server, with the ``lsp`` extra). A sub-command is
added to :data:`SUBCOMMANDS`, to :func:`build_parser` and to
:func:`_dispatch`; a mistyped one (``memlint chek``) gets the closest names
of :data:`SUBCOMMANDS` suggested.

Exit codes: 0 nothing reported; 1 findings (``--exit-zero`` forces 0);
2 usage, configuration, parse or estimate errors. Errors are one line on
stderr with one ``memlint: error:`` prefix, never a traceback.

``check`` never imports or runs code of the linted tree; ``--estimate``
(and the ``estimate`` and ``validate`` commands) do, see docs/security.md.
"""

from __future__ import annotations

import argparse
import sys

from memlint import __version__
from memlint.errors import UsageError

SUBCOMMANDS = ("check", "rule", "rules", "estimate", "validate", "explain", "server")
FORMATS = ("full", "concise", "json", "github", "sarif")


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of exiting, so errors stay one
    line; ``main`` prints it after the one ``memlint: error:`` prefix (the
    parser's own ``prog`` is not repeated)."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(message)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser; the estimate/validate options are only added when
    ``command`` is one of them, so linting never imports the estimator."""
    parser = _Parser(prog="memlint", description="Catch GPU-memory problems in training code before a GPU hour is spent.",
                     epilog="`memlint PATH ...` is `memlint check PATH ...`: see `memlint check --help` for "
                            "--fix, --diff, --format, --select and --estimate (which runs the configured model factory).")
    parser.add_argument("--version", action="version", version=f"memlint {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    check = sub.add_parser("check", help="lint files (the default command)")
    add_check_arguments(check)

    rule = sub.add_parser("rule", help="print a rule's documentation")
    rule.add_argument("code", metavar="CODE")

    rules = sub.add_parser("rules", help="list all rules")
    rules.add_argument("--format", choices=("table", "json"), default="table")

    estimate = sub.add_parser("estimate", help="estimate peak GPU memory of a training step (imports torch)")
    if command == "estimate":
        from memlint.estimate.cli import add_estimate_arguments

        add_estimate_arguments(estimate)
        estimate.add_argument("--advise", action="store_true",
                              help="re-estimate under each remedy (mixed precision, checkpointing, accumulation, "
                                   "lighter optimizer, sharding) and rank them by memory saved")

    validate = sub.add_parser("validate", help="measure a training step on a device and compare with the estimate")
    if command == "validate":
        from memlint.validate.cli import add_validate_arguments

        add_validate_arguments(validate)

    explain = sub.add_parser("explain", help="explain a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot)")
    if command == "explain":
        from memlint.explain.cli import add_explain_arguments

        add_explain_arguments(explain)

    sub.add_parser("server", help="run the language server (LSP over stdio) for editors; needs the 'lsp' extra")
    return parser


def add_check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", metavar="PATH",
                        help="files or directories (default: the current directory); '-' reads stdin")
    parser.add_argument("--select", action="append", metavar="CODES", help="only these codes or prefixes (comma-separated)")
    parser.add_argument("--ignore", action="append", metavar="CODES", help="skip these codes or prefixes")
    parser.add_argument("--extend-select", action="append", metavar="CODES", help="add these codes to the selection")
    parser.add_argument("--format", "--output-format", dest="format", choices=FORMATS, default=None,
                        help="output format (default: full on a terminal, else concise)")
    parser.add_argument("--output-file", "-o", metavar="FILE",
                        help="write the report to FILE (a regular file is replaced atomically) instead of stdout")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="print the findings only: no summary line, no notes")
    parser.add_argument("--statistics", action="store_true", help="print a count per code instead of the findings")
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even when findings are reported")
    parser.add_argument("--config", metavar="FILE", help="pyproject.toml (or a TOML file with memlint's keys) to use")
    parser.add_argument("--stdin-filename", metavar="PATH", help="the path to report for source read from stdin")
    parser.add_argument("--fix", action="store_true", help="apply safe fixes in place")
    parser.add_argument("--unsafe-fixes", action="store_true", help="with --fix or --diff, apply unsafe fixes too")
    parser.add_argument("--diff", action="store_true", help="show the fixes as a unified diff; write nothing")
    parser.add_argument("--show-fixes", action="store_true",
                        help="list, per file, the fixes applied by --fix (without --fix: the fixes it would apply)")
    parser.add_argument("--add-noqa", action="store_true",
                        help="add `# noqa: CODE` to every line with a finding (merged into an existing `# noqa:`)")
    parser.add_argument("--no-cache", action="store_true", help="do not read or write the results cache")
    parser.add_argument("--cache-dir", metavar="DIR", help="results cache directory (default: .memlint_cache/ at the project root)")
    parser.add_argument("--jobs", type=int, default=None, metavar="N", help="worker processes (default: one per core)")
    parser.add_argument("-v", "--verbose", action="store_true", help="say which rules were skipped and why")
    parser.add_argument("--debug", action="store_true", help="print the traceback of memlint's own internal errors")
    estimate = parser.add_argument_group(
        "estimates", "run the estimates configured in the scripts or [tool.memlint.estimate]: this imports and runs "
                     "the targets' code, each in a child process with a time and a memory limit")
    estimate.add_argument("--estimate", action="store_true",
                          help="run the configured estimates (MEM302 and the memory summary)")
    estimate.add_argument("--estimate-timeout", type=float, default=None, metavar="SECONDS",
                          help="wall-clock limit of each estimate (default 600)")
    estimate.add_argument("--estimate-memory", default=None, metavar="SIZE",
                          help="memory limit of each estimate, e.g. 8GiB (default: half of the host's memory)")
    estimate.add_argument("--estimate-target", action="append", default=None, metavar="TARGET",
                          help="allow this configured target although it is outside the project (an installed or "
                               "standard-library callable, an absolute path); repeatable")
    estimate.add_argument("--advise", action="store_true", help="with --estimate: always run the advisor")


def _normalise_argv(argv: list[str]) -> list[str]:
    """``memlint PATH ...`` is ``memlint check PATH ...``; ``memlint`` alone checks ``.``.

    Raises:
        UsageError: the first word is no sub-command and no existing path
            but looks like a mistyped sub-command (``memlint chek``).
    """
    if not argv:
        return ["check"]
    first = argv[0]
    if first in SUBCOMMANDS or first in ("-h", "--help", "--version"):
        return argv
    _check_not_a_mistyped_command(first)
    return ["check", *argv]


def _check_not_a_mistyped_command(word: str) -> None:
    """A word like a sub-command name (letters and ``-`` only) that is not an
    existing path gets the closest sub-commands suggested instead of a
    "no such file" error; an existing file or directory of that name is linted."""
    import os
    import re

    if not re.fullmatch(r"[A-Za-z][A-Za-z-]*", word) or os.path.lexists(word):
        return
    from memlint.suggest import close_matches, did_you_mean

    close = close_matches(word, SUBCOMMANDS)
    if close:
        raise UsageError(f"unknown command {word!r} (and no file or directory of that name); {did_you_mean(close)} "
                         f"(commands: {', '.join(SUBCOMMANDS)})")


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0, 1 or 2).

    From the command line (``argv`` None), ``estimate`` and ``validate`` run in an isolated child
    process (memlint.integrate.isolated_command); a caller that passes ``argv`` runs them here.
    """
    try:
        args_list = _normalise_argv(list(sys.argv[1:] if argv is None else argv))
        try:
            args = build_parser(args_list[0]).parse_args(args_list)
        except UsageError as exc:
            fmt = _machine_format(args_list)
            if fmt is None:
                raise
            # ``check --format sarif`` with a bad option: still a valid document
            # on stdout (or in --output-file).
            from memlint.check import CheckRun, render_run

            render_run(CheckRun(errors=[str(exc)]), argparse.Namespace(format=fmt, output_file=_option_value(
                args_list, ("--output-file", "-o"))))
            return exc.exit_code
        if args.command in ("estimate", "validate") and argv is None:  # the command line, not a caller's argv
            from memlint.integrate.isolated_command import run_isolated, should_isolate

            if should_isolate():
                return run_isolated(args_list, args.command, args.target, _command_timeout(args))
        return _dispatch(args)
    except UsageError as exc:
        from memlint.report.text import printable

        print(f"memlint: error: {printable(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("memlint: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


def _command_timeout(args: argparse.Namespace) -> float:
    """The ``--timeout`` of ``estimate``/``validate`` in seconds (their default when not given)."""
    from memlint.estimate.cli import DEFAULT_TIMEOUT_SECONDS

    value = getattr(args, "timeout", None)
    return float(value) if value else DEFAULT_TIMEOUT_SECONDS


def _machine_format(args_list: list[str]) -> str | None:
    """``json`` or ``sarif`` when a ``check`` command line asks for it (last
    ``--format`` wins, as in argparse), else None."""
    if args_list[0] != "check":
        return None
    fmt = _option_value(args_list, ("--format", "--output-format"))
    return fmt if fmt in ("json", "sarif") else None


def _option_value(args_list: list[str], names: tuple[str, ...]) -> str | None:
    """The value of the last of the options ``names`` (``--opt V`` or
    ``--opt=V``) before ``--``, as argparse takes it; None when absent."""
    value = None
    for index, arg in enumerate(args_list):
        if arg == "--":
            break
        if arg in names and index + 1 < len(args_list):
            value = args_list[index + 1]
        elif arg.startswith("--") and arg.split("=", 1)[0] in names and "=" in arg:
            value = arg.split("=", 1)[1]
    return value


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "check":
        from memlint.check import run_check

        return run_check(args)
    if args.command == "rule":
        from memlint.report.rule_docs import print_rule

        return print_rule(args.code)
    if args.command == "rules":
        from memlint.report.rule_docs import print_rule_table

        return print_rule_table(args.format)
    if args.command == "estimate":
        from memlint.estimate.cli import run_estimate

        return run_estimate(args)
    if args.command == "validate":
        from memlint.validate.cli import run_validate

        return run_validate(args)
    if args.command == "explain":
        from memlint.explain.cli import run_explain

        return run_explain(args)
    if args.command == "server":
        return _serve()
    raise UsageError("no command given")


def _serve() -> int:
    """``memlint server``: the LSP server of :mod:`memlint.server` (pygls)."""
    try:
        import pygls  # noqa: F401
    except ImportError:
        raise UsageError("`memlint server` needs pygls: pip install 'memlint[lsp]'") from None
    from memlint.server import main as serve

    return serve()  # pragma: no cover - argparse requires one
