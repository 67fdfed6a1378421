"""``memlint validate`` command-line glue.  Importing this module does not import torch.

Exit codes: 0 every compared number within ``--tolerance``; 1 a number outside it,
or the step ran out of memory; 2 usage errors (bad option, no CUDA device for
``--device cuda``, target that cannot be loaded or run).
"""

from __future__ import annotations

import argparse
import sys

from memlint.errors import UsageError


def add_validate_arguments(parser: argparse.ArgumentParser) -> None:
    """TARGET and the estimator options, plus the validator's own options."""
    from memlint.estimate.cli import add_estimate_arguments  # noqa: PLC0415

    add_estimate_arguments(parser, measuring=True)  # --device (where to measure and what to estimate), --steps (measured)
    parser.add_argument("--warmup", type=int, default=2, metavar="N", help="warm-up steps before measuring (default 2)")
    parser.add_argument("--tolerance", default="10%", help="largest |relative error| accepted (default 10%%)")
    parser.add_argument("--record", default=None, metavar="FILE", help="write a JSON validation record")


def run_validate(args) -> int:
    """Run ``memlint validate``; returns 0 (within tolerance), 1 (outside, or OOM) or 2 (usage error).

    The options and the target are checked before anything is imported
    (:func:`memlint.estimate.cli.check_command_line`); the run is bounded by
    ``--timeout``.
    """
    from memlint.estimate.cli import Deadline, TimeLimitReached, check_command_line  # noqa: PLC0415

    try:
        check_command_line(args)
        with Deadline(args.timeout, f"{args.target}: stopped after {args.timeout:g} s (--timeout; the target did not give up)"):
            return _run(args)
    except TimeLimitReached:
        print(f"memlint: error: {args.target}: stopped after {args.timeout:g} s (--timeout)", file=sys.stderr)
        return 2
    except UsageError as exc:
        print(f"memlint: error: {exc}", file=sys.stderr)
        return 2


def parse_tolerance(text: str) -> float:
    """``"10%"`` or ``"0.1"`` -> 0.1; raises UsageError naming --tolerance for anything else or a negative value."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise UsageError(f"--tolerance {text!r}: expected a percentage such as 10% or a fraction such as 0.1") from None
    if value < 0 or value != value:
        raise UsageError(f"--tolerance {text!r} must be >= 0")
    return value


#: Measured steps when --steps is not given.
DEFAULT_MEASURED_STEPS = 3


def _check_counts(args) -> None:
    if args.warmup < 0:
        raise UsageError(f"--warmup must be >= 0 (got {args.warmup})")
    if args.steps is not None and args.steps < 1:
        raise UsageError(f"--steps must be >= 1 (got {args.steps})")


def _run(args) -> int:
    from memlint.estimate.cli import options_from_args  # noqa: PLC0415
    from memlint.validate import session  # noqa: PLC0415

    _check_counts(args)
    tolerance = parse_tolerance(args.tolerance)
    measured_steps = args.steps if args.steps is not None else DEFAULT_MEASURED_STEPS
    args.steps = None
    options = options_from_args(args)
    options.steps = measured_steps + 1  # the estimate traces one warm-up step, then the measured ones
    if args.device == "cuda":
        from memlint.validate.cuda import cuda_available  # noqa: PLC0415

        if not cuda_available():
            raise UsageError("--device cuda: no CUDA device is available to torch (use --device cpu for the CPU ground truth)")
        if options.gpu is None:
            options.gpu = "auto"
    from memlint.validate.distributed import check_validate_parallel  # noqa: PLC0415

    check_validate_parallel(options, args.device)
    outcome = session.validate(args.target, args.input, options, args.device, args.warmup, measured_steps)
    if args.record:
        from memlint.validate.record import write_record  # noqa: PLC0415

        write_record(outcome.record, args.record)
    session.render(outcome, tolerance, as_json=args.format == "json")
    return 0 if outcome.within(tolerance) else 1
