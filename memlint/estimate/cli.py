"""``memlint estimate`` command-line glue.  Importing this module does not import torch.

Before anything is imported or traced, the options are checked
(:func:`check_estimate_inputs`: sizes that no device could hold or that
overflow torch's int64 sizes, accumulation steps larger than the batch) and
the target (a path must be a regular ``.py`` file). The whole command --
loading, tracing, ``--max-batch-size``'s search and ``--advise``'s
re-estimates -- is bounded by ``--timeout`` and shows its progress on
standard error (a status line on a terminal, else one line per trace of the
search and the advisor).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import threading
import time

from memlint.errors import UsageError
from memlint.estimate.gpus import CATALOG
from memlint.report.text import printable

#: Largest batch size, accumulation or world size, and input dimension
#: accepted: 2**40. No device holds 2**40 samples even at one byte each (the
#: largest GPU of the catalog, H200-141GB, has 1.41e11 bytes < 2**40 = 1.1e12).
MAX_DIMENSION = 2**40
#: Largest input tensor accepted at the requested batch, in bytes: 2**50
#: (1 PiB, thousands of times the largest GPU); it also keeps element counts
#: far below torch's int64 limit (2**63 - 1).
MAX_INPUT_BYTES = 2**50
#: Bytes per element of the dtypes ``--input`` accepts (torch's element sizes).
DTYPE_BYTES = {
    "float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float64": 8, "double": 8,
    "int64": 8, "long": 8, "int32": 4, "int": 4, "int16": 2, "short": 2, "int8": 1, "uint8": 1, "bool": 1,
    "complex64": 8, "complex128": 16,
}
#: Default ``--timeout`` (seconds): the same 600 s as ``memlint check --estimate-timeout``
#: (see memlint.integrate.isolation.DEFAULT_TIMEOUT_SECONDS for why).
DEFAULT_TIMEOUT_SECONDS = 600.0


def check_estimate_inputs(batch_size: int | None, grad_accum: int, world_size: int, inputs: list[str],
                          names: tuple[str, str, str, str] = ("--batch-size", "--grad-accum", "--world-size",
                                                               "--input")) -> None:
    """Refuse inputs that cannot be honoured, before anything is traced.

    ``batch_size`` is the global batch (None: not known yet); ``names`` are
    the option or key names used in the messages.

    Raises:
        UsageError: one line naming the option: a size outside
            1..:data:`MAX_DIMENSION`, more accumulation steps than samples, an
            input larger than :data:`MAX_INPUT_BYTES`.
    """
    from memlint.estimate.workload import check_input_names, parse_input_spec  # noqa: PLC0415 - no torch

    for name, value in zip(names, (batch_size, grad_accum)):
        if value is not None and not 1 <= value <= MAX_DIMENSION:
            raise UsageError(f"{name} {value}: must be between 1 and 2**40 (no device holds more samples)")
    if not 1 <= world_size <= MAX_DIMENSION:
        raise UsageError(f"{names[2]} {world_size}: must be at least 1 (ranks)" if world_size < 1 else
                         f"{names[2]} {world_size}: must be at most 2**40")
    if batch_size is not None and grad_accum > batch_size:
        raise UsageError(f"{names[1]} {grad_accum} is greater than the batch size {batch_size}: "
                         "some micro-batches would be empty")
    check_input_names([parse_input_spec(text) for text in inputs])
    for text in inputs:
        spec = parse_input_spec(text)
        if any(d != "B" and d > MAX_DIMENSION for d in spec.shape):
            raise UsageError(f"{names[3]} {text!r}: a dimension is larger than 2**40")
        elements = math.prod(batch_size or 1 if d == "B" else d for d in spec.shape)
        if elements * DTYPE_BYTES.get(spec.dtype, 8) > MAX_INPUT_BYTES:
            raise UsageError(f"{names[3]} {text!r}: {elements} elements at batch {batch_size or 1} is more than "
                             "2**50 bytes, beyond any device")


def reporting(estimate_function, report, stage: str = "advisor"):
    """``estimate_function(workload, options)`` that first reports, in one
    line, which options it traces (the advisor's progress)."""
    def traced(workload, options):
        report(f"{stage}: tracing precision {options.precision}, optimizer {options.optimizer}, "
               f"accumulation {options.grad_accum}, zero-{options.zero_stage}")
        return estimate_function(workload, options)

    return traced


def check_timeout(seconds: float, option: str) -> float:
    """``seconds`` if it is a positive finite number; raises UsageError naming ``option``."""
    if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0):
        raise UsageError(f"{option} {seconds}: must be a positive number of seconds")
    return float(seconds)


class TimeLimitReached(BaseException):
    """Raised in the main thread when ``--timeout`` has passed. A BaseException,
    so that a target's ``except Exception`` cannot swallow it."""


#: Seconds a target gets, after ``--timeout`` has raised in it, to unwind before
#: the process ends itself: a factory that swallows every exception (a bare
#: ``except: continue`` in a loop) cannot outlive its limit by more (a choice of ours).
HARD_STOP_GRACE_SECONDS = 5.0


class Deadline:
    """Raise :class:`TimeLimitReached` after ``seconds`` of wall-clock time
    (``SIGALRM``; main thread of a POSIX process only), and end the process
    with exit status 2 and ``message`` on stderr
    :data:`HARD_STOP_GRACE_SECONDS` later if the code has not returned."""

    def __init__(self, seconds: float, message: str = "stopped (--timeout)") -> None:
        self.seconds = seconds
        self.message = message
        self.previous = None
        self.armed = False
        self.hard_stop: threading.Timer | None = None

    def __enter__(self) -> "Deadline":
        usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
        if usable:
            self.previous = signal.signal(signal.SIGALRM, self._expire)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
            self.armed = True
        self.hard_stop = threading.Timer(self.seconds + HARD_STOP_GRACE_SECONDS, self._stop_process)
        self.hard_stop.daemon = True
        self.hard_stop.start()
        return self

    def _expire(self, signum, frame):
        raise TimeLimitReached()

    def _stop_process(self) -> None:
        print(f"memlint: error: {self.message}", file=sys.stderr, flush=True)
        os._exit(2)

    def __exit__(self, *exc) -> bool:
        if self.hard_stop is not None:
            self.hard_stop.cancel()
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)
        return False


def add_estimate_arguments(parser: argparse.ArgumentParser, measuring: bool = False) -> None:
    """Add TARGET and the estimator options (shared with ``memlint validate``,
    which passes ``measuring=True``: its ``--steps`` are the steps measured)."""
    parser.add_argument("target", metavar="TARGET", help="path/to/file.py:factory or package.module:factory")
    parser.add_argument("--input", action="append", default=[], metavar="SPEC",
                        help="model input, e.g. float32[B,3,224,224] or int64[B,1024] (B = batch size), or by keyword: "
                             "input_ids=int64[B,512]; repeatable")
    parser.add_argument("--batch-size", type=int, default=None, help="batch size per rank (default: the workload's)")
    parser.add_argument("--optimizer", default=None,
                        choices=["sgd", "sgd-momentum", "adam", "adamw", "adagrad", "rmsprop", "adafactor"],
                        help="optimizer to model (default: the workload's own, else SGD; adafactor: transformers')")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "amp-fp16", "amp-bf16", "bf16", "fp16"],
                        help="fp32; autocast with fp32 weights (amp-fp16 with a GradScaler, amp-bf16); or the "
                             "whole model in bf16/fp16 (default fp32)")
    parser.add_argument("--checkpointing", action="store_true", help="activation checkpointing of repeated blocks")
    parser.add_argument("--grad-accum", type=int, default=1, metavar="N", help="gradient accumulation steps")
    parser.add_argument("--set-to-none", action=argparse.BooleanOptionalAction, default=True,
                        help="zero_grad(set_to_none=...) (default: true)")
    parser.add_argument("--world-size", type=int, default=1, help="ranks (with --parallel or --zero-stage; rank 0 is estimated)")
    parser.add_argument("--zero-stage", type=int, default=0, choices=[0, 1, 2, 3], help="ZeRO sharding stage")
    add_parallel_arguments(parser)
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
                        help="steps measured after --warmup (default 3)" if measuring
                        else "training steps traced, the first a warm-up (default 3)")
    parser.add_argument("--reserve", default="10%", help="headroom kept free: 10%%, 0.1 or 10 (a bare number of 1 or more is a percentage; default 10%%)")
    parser.add_argument("--max-batch-size", action="store_true", help="search the largest batch size that fits")
    formats = ["table", "json"] if measuring else ["table", "json", "summary"]
    parser.add_argument("--format", default="table", choices=formats, dest="format",
                        help=None if measuring else "table, json, or summary (as torch.cuda.memory_summary())")
    if not measuring:
        parser.add_argument("--snapshot", default=None, metavar="FILE.pickle",
                            help="write the traced step as a torch.cuda.memory._snapshot() pickle "
                                 "(opens in pytorch.org/memory_viz)")
    parser.add_argument("--plot", default=None, metavar="FILE", help="write the memory timeline (.png or .svg)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_SECONDS, metavar="SECONDS",
                        help="stop the whole command (tracing, --max-batch-size, --advise) after this many "
                             "seconds (default 600)")


def options_from_args(args):
    """EstimateOptions from parsed arguments (UsageError naming the option for a bad --cuda-context)."""
    from memlint.estimate.api import EstimateOptions  # noqa: PLC0415

    parallel = parallel_options_from_args(args)  # first: it maps --zero-stage 2/3 onto FSDP2
    return EstimateOptions(
        batch_size=args.batch_size, optimizer=args.optimizer, precision=args.precision,
        checkpointing=args.checkpointing, grad_accum=args.grad_accum, set_to_none=args.set_to_none,
        world_size=args.world_size, zero_stage=args.zero_stage,
        gpu=args.gpu, device=getattr(args, "device", "cuda"), cuda=getattr(args, "cuda", None),
        cuda_context=_context_bytes(getattr(args, "cuda_context", None)), steps=getattr(args, "steps", None),
        **parallel,
    )


def add_parallel_arguments(parser: argparse.ArgumentParser) -> None:
    """``--parallel`` and the engines' settings (memlint/estimate/distributed.py; docs/estimator.md "Distributed")."""
    parser.add_argument("--parallel", default=None, choices=["ddp", "fsdp", "tp", "fsdp+tp"],
                        help="trace rank 0 of --world-size ranks through the real engine: DistributedDataParallel, "
                             "FSDP2 fully_shard, tensor parallel (parallelize_module), or FSDP2 over tensor "
                             "parallel (with --tp-size), on a fake process group")
    parser.add_argument("--tp-size", type=int, default=None, metavar="T",
                        help="--parallel fsdp+tp: the tensor parallel degree (--world-size / T FSDP2 ranks)")
    parser.add_argument("--bucket-cap-mb", type=float, default=None, metavar="MiB",
                        help="DDP gradient bucket size (default: DDP's 25 MiB)")
    parser.add_argument("--gradient-as-bucket-view", action="store_true",
                        help="DDP gradient_as_bucket_view=True (gradients are views of the buckets)")
    parser.add_argument("--reshard-after-forward", action=argparse.BooleanOptionalAction, default=True,
                        help="FSDP2 reshard_after_forward (default: true; false is ZeRO-2-like)")
    parser.add_argument("--fsdp-param-dtype", default=None, choices=["bf16", "fp16"],
                        help="FSDP2 MixedPrecisionPolicy(param_dtype=...), reduce in fp32")
    parser.add_argument("--fsdp-cpu-offload", action="store_true",
                        help="FSDP2 CPUOffloadPolicy: not modelled yet (an error says why)")


def _check_world_size_has_an_engine(args) -> None:
    """``--world-size N`` alone would estimate one GPU: say what it needs (UsageError)."""
    if getattr(args, "world_size", 1) > 1 and getattr(args, "parallel", None) is None and not getattr(args, "zero_stage", 0):
        raise UsageError(f"--world-size {args.world_size} needs an engine to shard over the ranks: "
                         "add --parallel ddp|fsdp|tp|fsdp+tp or --zero-stage 1|2|3")


def parallel_options_from_args(args) -> dict:
    """The EstimateOptions fields of :func:`add_parallel_arguments` (defaults when a parser lacks them).

    ``--zero-stage 2|3 --world-size N`` without ``--parallel`` is traced through FSDP2: stage 3 is
    ``fully_shard`` (parameters, gradients and optimizer state sharded, parameters freed after
    forward), stage 2 the same with ``reshard_after_forward=False`` (parameters stay gathered from
    forward to backward, as ZeRO-2 keeps them).  Stage 1 (optimizer state only) has no FSDP2
    form and stays the divisor model (docs/estimator.md "Distributed").
    """
    stage, world = getattr(args, "zero_stage", 0), getattr(args, "world_size", 1)
    if getattr(args, "parallel", None) is None and stage in (2, 3) and world > 1:
        args.parallel, args.zero_stage = "fsdp", 0
        if stage == 2:
            args.reshard_after_forward = False
    return {"parallel": getattr(args, "parallel", None), "bucket_cap_mb": getattr(args, "bucket_cap_mb", None),
            "gradient_as_bucket_view": getattr(args, "gradient_as_bucket_view", False),
            "reshard_after_forward": getattr(args, "reshard_after_forward", True),
            "fsdp_param_dtype": getattr(args, "fsdp_param_dtype", None),
            "fsdp_cpu_offload": getattr(args, "fsdp_cpu_offload", False),
            "tp_size": getattr(args, "tp_size", None)}


def _context_bytes(text: str | None) -> int | None:
    from memlint.estimate.units import parse_bytes  # noqa: PLC0415

    if text is None:
        return None
    try:
        return parse_bytes(text)
    except UsageError:
        raise UsageError(f"--cuda-context {text!r}: expected a size such as 1343MiB or 1.3GiB") from None


class ProgressStatus:
    """Progress on stderr: on a terminal, a rich spinner that appears only when
    the work takes more than ``delay`` seconds; elsewhere, with ``lines``,
    one ``memlint: ...`` line per :meth:`update` (CI logs show progress too)."""

    def __init__(self, message: str, delay: float = 1.0, lines: bool = False):
        from memlint.estimate.capture import real_stderr  # noqa: PLC0415

        self.stream = real_stderr()  # not the model's warnings, which are captured meanwhile
        self.message = message
        self.delay = delay
        self.lines = lines and not self.stream.isatty()
        self.started = time.monotonic()
        self.updates = 0
        self.status = None
        self.timer = None
        self.lock = threading.Lock()

    def _start(self):
        from rich.console import Console  # noqa: PLC0415
        from rich.live import Live  # noqa: PLC0415
        from rich.spinner import Spinner  # noqa: PLC0415

        with self.lock:
            if self.timer is not None:
                # rich's console.status() would swap sys.stderr for its own proxy, past the warnings capture
                self.spinner = Spinner("dots", text=self.message)
                self.status = Live(self.spinner, console=Console(file=self.stream), transient=True,
                                   redirect_stdout=False, redirect_stderr=False, refresh_per_second=12.5)
                self.status.start()

    def update(self, message: str) -> None:
        """Show ``message`` as the current step."""
        with self.lock:
            self.message = message
            self.updates += 1
            if self.status is not None:
                self.spinner.update(text=message)
        if self.lines:
            elapsed = time.monotonic() - self.started
            print(f"memlint: {message} (step {self.updates}, {elapsed:.1f} s)", file=self.stream, flush=True)

    def __enter__(self):
        if self.stream.isatty():
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


def require_torch() -> None:
    """Raises UsageError (one line naming the extra to install) when torch is not installed."""
    import importlib.util  # noqa: PLC0415

    if importlib.util.find_spec("torch") is None:
        raise UsageError("the estimator needs torch, which is not installed: pip install 'torch==2.13.0' --index-url https://download.pytorch.org/whl/cpu && pip install 'memlint[estimate]'")


#: Most training steps one estimate traces: the caching allocator model settles
#: within a few steps (docs/estimator.md, "Steady state"), and the trace time
#: grows with each step (a bound of ours).
MAX_STEPS = 100


def _check_steps_and_cuda(steps: int | None, cuda: str | None) -> None:
    """``--steps`` at most :data:`MAX_STEPS`; ``--cuda`` a MAJOR.MINOR whose
    major version the overhead tables know."""
    from memlint.estimate.overheads import KNOWN_CUDA_VERSIONS, parse_cuda_version  # noqa: PLC0415 - no torch

    if steps is not None and steps > MAX_STEPS:
        raise UsageError(f"--steps {steps}: at most {MAX_STEPS} (the allocator model settles within a few steps)")
    if cuda is not None:
        try:
            major, _ = parse_cuda_version(cuda)
        except ValueError as exc:
            raise UsageError(f"--cuda {cuda!r}: {exc}") from None
        majors = sorted({version[0] for version in KNOWN_CUDA_VERSIONS})
        if major not in majors:
            raise UsageError(f"--cuda {cuda!r}: CUDA {major} is not modelled (known: {', '.join(map(str, majors))})")


def check_command_line(args) -> None:
    """The checks every estimator command makes before importing anything:
    torch installed, the target well formed (a path: a regular ``.py``
    file), the sizes and the timeout sane.

    Raises:
        UsageError: one line naming the option or the target.
    """
    from memlint.integrate.targets import check_target_text  # noqa: PLC0415

    check_timeout(getattr(args, "timeout", DEFAULT_TIMEOUT_SECONDS), "--timeout")
    check_estimate_inputs(args.batch_size, args.grad_accum, args.world_size, args.input)
    _check_world_size_has_an_engine(args)
    _check_steps_and_cuda(getattr(args, "steps", None), getattr(args, "cuda", None))
    check_target_text(args.target)
    require_torch()


def run_estimate(args) -> int:
    """Run ``memlint estimate``; returns 0 (fits, or no target given), 1 (does not fit), 2 (usage error)."""
    seconds = getattr(args, "timeout", DEFAULT_TIMEOUT_SECONDS)
    try:
        check_command_line(args)
        with Deadline(seconds, f"{args.target}: stopped after {seconds:g} s (--timeout; the target did not give up)"):
            return _run(args)
    except TimeLimitReached:
        print(f"memlint: error: {printable(args.target)}: stopped after {seconds:g} s (--timeout)", file=sys.stderr)
        return 2
    except UsageError as exc:
        print(f"memlint: error: {printable(str(exc))}", file=sys.stderr)
        return 2


def _check_output_file(path: str | None, option: str) -> None:
    """Refuse, before tracing, an output file whose folder does not exist or is not writable."""
    if not path:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise UsageError(f"{option} {path!r}: the folder {folder!r} does not exist or is not writable")
    if os.path.isdir(path):
        raise UsageError(f"{option} {path!r}: is a directory")


def _run(args) -> int:
    from memlint.estimate import report  # noqa: PLC0415
    from memlint.estimate.api import estimate, fits, max_batch_size, resolve_capacity  # noqa: PLC0415
    from memlint.estimate.capture import CapturedWarnings  # noqa: PLC0415
    from memlint.estimate.units import parse_fraction  # noqa: PLC0415
    from memlint.estimate.workload import load_workload  # noqa: PLC0415

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
    _check_output_file(getattr(args, "snapshot", None), "--snapshot")
    if (getattr(args, "snapshot", None) or args.format == "summary") and options.device == "cpu":
        raise UsageError("--snapshot and --format summary show the CUDA caching allocator: "
                         "not available with --device cpu (no caching on the CPU)")
    if args.max_batch_size and not capacity:
        raise UsageError("--max-batch-size needs --gpu or --capacity")
    captured = CapturedWarnings()  # the model's and its libraries' warnings, summarised once below
    with captured, ProgressStatus(f"tracing {args.target} on the meta device...", lines=args.max_batch_size) as status:
        workload = load_workload(args.target, args.input, args.batch_size)
        if args.batch_size is None:
            check_estimate_inputs(workload.default_batch_size, args.grad_accum, args.world_size, args.input,
                                  names=("the workload's default_batch_size", "--grad-accum", "--world-size",
                                         "--input"))
        result = estimate(workload, options)
        verdict = fits(result, capacity, reserve) if capacity else None
        best = None
        if args.max_batch_size:
            best = max_batch_size(workload, options, capacity, reserve,
                                  progress=lambda b: status.update(f"largest batch: tracing batch {b}"))
    advice = notes = None
    if getattr(args, "advise", False):
        from memlint.estimate.advisor import advise, not_offered  # noqa: PLC0415

        from memlint.estimate.advisor import with_flops  # noqa: PLC0415

        with captured, ProgressStatus("re-estimating under each remedy...", lines=True) as status:
            skipped: dict[str, str] = {}
            advice = advise(workload, result, capacity, reserve, run=reporting(with_flops, status.update), full=True,
                            skipped=skipped)
        notes = {**not_offered(result, advice), **skipped}
    if captured.summary():
        print(f"memlint: {printable(captured.summary())}", file=sys.stderr)
    if getattr(args, "snapshot", None):
        from memlint.estimate.snapshot import write_snapshot  # noqa: PLC0415

        write_snapshot(result, args.snapshot, workload.module)
        print(f"memlint: wrote the memory snapshot to {printable(args.snapshot)} (open it at pytorch.org/memory_viz)",
              file=sys.stderr)
    if args.format == "summary":
        from memlint.estimate.snapshot import record_step  # noqa: PLC0415
        from memlint.estimate.summary import format_summary  # noqa: PLC0415

        for index in [entry["index"] for entry in result.devices] or [None]:  # placed: one summary per device
            print(format_summary(record_step(result, device=index).memory_stats, device=index or 0), end="")
    elif args.format == "json":
        document = report.render_json(result, verdict, best)
        if advice is not None:
            import json  # noqa: PLC0415

            data = json.loads(document)
            data["advice"] = [row.to_json() for row in advice]
            data["not_offered"] = notes
            document = json.dumps(data, indent=2)
        print(_with_warnings(document, captured))
    else:
        report.render_table(result, verdict, best)
        if result.communication is not None:
            from memlint.estimate.distributed import describe_communication  # noqa: PLC0415

            print(f"rank 0 of {options.world_size} ({options.parallel}): "
                  f"{describe_communication(result.communication).split('; ', 1)[1]}")
        if result.tensor_parallel is not None:
            from memlint.estimate.tensor_parallel import describe_plan  # noqa: PLC0415

            print(describe_plan(result.tensor_parallel))
        if advice is not None:
            report.render_advice(advice, notes=notes)
    if args.plot:
        report.plot_timeline(result, args.plot, verdict, name)
        print(f"memlint: wrote the memory timeline to {args.plot}", file=sys.stderr)
    return 1 if verdict is not None and not verdict.fits else 0


def _with_warnings(document: str, captured) -> str:
    """The JSON document with ``captured_warnings``: the distinct messages captured, with their counts."""
    import json  # noqa: PLC0415

    data = json.loads(document)
    data["captured_warnings"] = [item.to_json() for item in captured.items]
    return json.dumps(data, indent=2)
