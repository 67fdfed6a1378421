"""``memlint estimate`` command-line glue.  Importing this module does not import torch."""

from __future__ import annotations

import argparse
import os
import sys
import threading

from memlint.errors import UsageError
from memlint.estimate.gpus import CATALOG


def add_estimate_arguments(parser: argparse.ArgumentParser) -> None:
    """Add TARGET and the estimator options (shared with ``memlint validate``)."""
    parser.add_argument("target", metavar="TARGET", help="path/to/file.py:factory or package.module:factory")
    parser.add_argument("--input", action="append", default=[], metavar="SPEC",
                        help="model input, e.g. float32[B,3,224,224] or int64[B,1024] (B = batch size); repeatable")
    parser.add_argument("--batch-size", type=int, default=None, help="batch size per rank (default: the workload's)")
    parser.add_argument("--optimizer", default=None,
                        choices=["sgd", "sgd-momentum", "adam", "adamw", "adagrad", "rmsprop", "adafactor"],
                        help="optimizer to model (default: the workload's own, else SGD; adafactor: transformers')")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "amp-fp16", "amp-bf16", "bf16", "fp16"])
    parser.add_argument("--checkpointing", action="store_true", help="activation checkpointing of repeated blocks")
    parser.add_argument("--grad-accum", type=int, default=1, metavar="N", help="gradient accumulation steps")
    parser.add_argument("--set-to-none", action=argparse.BooleanOptionalAction, default=True,
                        help="zero_grad(set_to_none=...) (default: true)")
    parser.add_argument("--world-size", type=int, default=1, help="data-parallel ranks (for --zero-stage)")
    parser.add_argument("--zero-stage", type=int, default=0, choices=[0, 1, 2, 3], help="ZeRO sharding stage")
    parser.add_argument("--gpu", default=None,
                        help="target GPU: 'auto' (the local GPU, by NVML) or one of "
                             + ", ".join(spec.name for spec in CATALOG.values()))
    parser.add_argument("--capacity", default=None, help="target memory instead of --gpu, e.g. 24GiB or 40GB")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="target device: cuda (a GPU, default) or cpu (CPU kernels and allocator)")
    parser.add_argument("--cuda", default=None, metavar="VERSION",
                        help="CUDA version modelled, e.g. 12.8 (default: the installed torch's, else the newest known)")
    parser.add_argument("--cuda-context", default=None, metavar="BYTES",
                        help="measured CUDA context, e.g. 1343MiB (replaces the modelled one)")
    parser.add_argument("--steps", type=int, default=None, metavar="N",
                        help="training steps traced, the first a warm-up (default 3); "
                             "memlint validate: steps measured after --warmup (default 3)")
    parser.add_argument("--reserve", default="10%", help="headroom kept free (default 10%%)")
    parser.add_argument("--max-batch-size", action="store_true", help="search the largest batch size that fits")
    parser.add_argument("--format", default="table", choices=["table", "json"], dest="format")
    parser.add_argument("--plot", default=None, metavar="FILE", help="write the memory timeline (.png or .svg)")


def options_from_args(args):
    """EstimateOptions from parsed arguments (UsageError naming the option for a bad --cuda-context)."""
    from memlint.estimate.api import EstimateOptions  # noqa: PLC0415

    return EstimateOptions(
        batch_size=args.batch_size, optimizer=args.optimizer, precision=args.precision,
        checkpointing=args.checkpointing, grad_accum=args.grad_accum, set_to_none=args.set_to_none,
        world_size=args.world_size, zero_stage=args.zero_stage,
        gpu=args.gpu, device=getattr(args, "device", "cuda"), cuda=getattr(args, "cuda", None),
        cuda_context=_context_bytes(getattr(args, "cuda_context", None)), steps=getattr(args, "steps", None),
    )


def _context_bytes(text: str | None) -> int | None:
    from memlint.estimate.units import parse_bytes  # noqa: PLC0415

    if text is None:
        return None
    try:
        return parse_bytes(text)
    except UsageError:
        raise UsageError(f"--cuda-context {text!r}: expected a size such as 1343MiB or 1.3GiB") from None


class _DelayedStatus:
    """A rich spinner on stderr that appears only when the work takes more than ``delay`` seconds."""

    def __init__(self, message: str, delay: float = 1.0):
        self.message = message
        self.delay = delay
        self.status = None
        self.timer = None
        self.lock = threading.Lock()

    def _start(self):
        from rich.console import Console  # noqa: PLC0415

        with self.lock:
            if self.timer is not None:
                self.status = Console(stderr=True).status(self.message)
                self.status.start()

    def update(self, message: str) -> None:
        with self.lock:
            self.message = message
            if self.status is not None:
                self.status.update(message)

    def __enter__(self):
        if sys.stderr.isatty():
            self.timer = threading.Timer(self.delay, self._start)
            self.timer.daemon = True
            self.timer.start()
        return self

    def __exit__(self, *exc):
        with self.lock:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            if self.status is not None:
                self.status.stop()
        return False


def run_estimate(args) -> int:
    """Run ``memlint estimate``; returns 0 (fits, or no target given), 1 (does not fit), 2 (usage error)."""
    try:
        return _run(args)
    except UsageError as exc:
        print(f"memlint: error: {exc}", file=sys.stderr)
        return 2


def _run(args) -> int:
    from memlint.estimate import report  # noqa: PLC0415
    from memlint.estimate.api import estimate, fits, max_batch_size, resolve_capacity  # noqa: PLC0415
    from memlint.estimate.units import parse_fraction  # noqa: PLC0415
    from memlint.estimate.workload import load_workload, parse_input_spec  # noqa: PLC0415

    for spec in args.input:
        parse_input_spec(spec)
    reserve = parse_fraction(args.reserve)
    name, capacity = resolve_capacity(args.gpu, args.capacity)
    if args.capacity is not None and not capacity:
        raise UsageError(f"--capacity {args.capacity!r}: must be more than 0 bytes")
    options = options_from_args(args)
    if args.plot and not args.plot.lower().endswith((".png", ".svg")):
        raise UsageError(f"--plot {args.plot!r}: the file name must end in .png or .svg")
    if args.plot:
        folder = os.path.dirname(os.path.abspath(args.plot))
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            raise UsageError(f"--plot {args.plot!r}: the folder {folder!r} does not exist or is not writable")
    with _DelayedStatus(f"tracing {args.target} on the meta device...") as status:
        workload = load_workload(args.target, args.input, args.batch_size)
        result = estimate(workload, options)
        verdict = fits(result, capacity, reserve) if capacity else None
        best = None
        if args.max_batch_size:
            if not capacity:
                raise UsageError("--max-batch-size needs --gpu or --capacity")
            best = max_batch_size(workload, options, capacity, reserve,
                                  progress=lambda b: status.update(f"trying batch size {b}..."))
    advice = notes = None
    if getattr(args, "advise", False):
        from memlint.estimate.advisor import advise, not_offered  # noqa: PLC0415

        with _DelayedStatus("re-estimating under each remedy..."):
            advice = advise(workload, result, capacity, reserve, full=True)
        notes = not_offered(result, advice)
    if args.format == "json":
        document = report.render_json(result, verdict, best)
        if advice is not None:
            import json  # noqa: PLC0415

            data = json.loads(document)
            data["advice"] = [row.to_json() for row in advice]
            data["not_offered"] = notes
            document = json.dumps(data, indent=2)
        print(document)
    else:
        report.render_table(result, verdict, best)
        if advice is not None:
            report.render_advice(advice, notes=notes)
    if args.plot:
        report.plot_timeline(result, args.plot)
        print(f"memlint: wrote the memory timeline to {args.plot}", file=sys.stderr)
    return 1 if verdict is not None and not verdict.fits else 0
