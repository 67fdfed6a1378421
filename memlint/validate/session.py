"""One validation: estimate, measure on a device, compare, build the record, render the table.

Compared numbers (signed relative error = (estimated - measured) / measured):

* ``--device cuda``: peak_allocated, peak_reserved, device_used (the Estimate's
  meanings, see docs/estimator.md);
* ``--device cpu``: the estimate is made for the CPU target (``--device cpu``:
  CPU kernels, the CPU allocator); cpu_peak -- the CPU allocator's peak from the
  profiler vs the estimate's peak_allocated; cpu_tensor_peak -- the peak of the
  storages of tensors ops returned in the real run vs the estimate's
  peak_tensor_bytes (informational: their difference is kernel scratch).  In an
  FSDP2 gloo run the profiler misses frees (memlint.validate.distributed.PROFILER_GAP):
  there cpu_tensor_peak is the gated number and cpu_peak is recorded as null, the
  profiler's number kept as cpu_peak_profiler.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Row:
    """One compared number (bytes); measured None when it could not be measured."""

    name: str
    estimated: int
    measured: int | None
    gated: bool = True

    @property
    def error(self) -> float | None:
        if not self.measured:
            return None
        return (self.estimated - self.measured) / self.measured


@dataclass
class Outcome:
    """Result of :func:`validate`: the rows, the OOM info (CUDA) and the record to write."""

    rows: list[Row]
    record: dict
    oom: dict | None = None
    notes: list[str] = field(default_factory=list)

    def within(self, tolerance: float) -> bool:
        """True when no OOM happened and every gated number's |error| <= tolerance."""
        if self.oom is not None:
            return False
        return all(row.error is None or abs(row.error) <= tolerance for row in self.rows if row.gated)


def input_shapes(workload, batch_size: int) -> list[dict]:
    """[{name, dtype, shape}] of the inputs ``make_inputs(batch_size)`` builds (on meta)."""
    import torch  # noqa: PLC0415

    with torch.device("meta"):
        inputs = workload.make_inputs(batch_size)
    items = inputs.items() if isinstance(inputs, dict) else enumerate(
        inputs if isinstance(inputs, (tuple, list)) else [inputs])
    return [{"name": str(name), "dtype": str(value.dtype).replace("torch.", ""), "shape": list(value.shape)}
            for name, value in items if isinstance(value, torch.Tensor)]


def estimate_only(target: str, inputs, options, device: str = "cuda", warmup: int = 2, steps: int = 3):
    """(Estimate, record with measured = null, workload): the dry-run half of :func:`validate`."""
    from memlint.estimate.api import estimate  # noqa: PLC0415
    from memlint.estimate.workload import load_workload  # noqa: PLC0415
    from memlint.validate import record as records  # noqa: PLC0415

    workload = load_workload(target, inputs, options.batch_size)
    result = estimate(workload, options)
    shapes = input_shapes(workload, result.micro_batch)
    identity = records.workload_identity(target, inputs, options, warmup, steps, shapes)
    return result, identity, workload


def validate(target: str, inputs, options, device: str, warmup: int, steps: int) -> Outcome:
    """Estimate and measure ``target`` on ``device`` ("cuda" or "cpu"); raises UsageError/TargetError."""
    from memlint.validate import record as records  # noqa: PLC0415

    if (options.device == "cpu") != (device == "cpu"):
        from dataclasses import replace  # noqa: PLC0415

        options = replace(options, device=device, gpu=None if device == "cpu" else options.gpu)
    result, identity, workload = estimate_only(target, inputs, options, device, warmup, steps)
    if result.devices:  # model parallel by placement (memlint/estimate/placement.py)
        from memlint.errors import UsageError  # noqa: PLC0415

        names = ", ".join(entry["device"] for entry in result.devices)
        raise UsageError(f"validate: {target} places tensors on several devices ({names}); the validator measures "
                         "one device, so it is not compared (memlint estimate gives each device's numbers)")
    if device == "cpu":
        return _validate_cpu(target, inputs, options, warmup, steps, result, identity, workload)
    from memlint.validate.cuda import measure_cuda  # noqa: PLC0415

    env = records.environment("cuda")
    measured = measure_cuda(target, inputs, options, warmup, steps)
    rows = [Row("peak_allocated", result.peak_allocated, measured.peak_allocated),
            Row("peak_reserved", result.peak_reserved, measured.peak_reserved),
            Row("device_used", result.device_used, measured.device_used)]
    if measured.oom is not None:
        rows = [Row(r.name, r.estimated, None) for r in rows]
    outcome_name = "oom" if measured.oom is not None else "measured"
    record = records.make_record(env, identity, records.estimated_numbers(result), measured.to_json(), outcome_name)
    return Outcome(rows, record, measured.oom)


def _validate_cpu(target, inputs, options, warmup, steps, result, identity, workload) -> Outcome:
    from memlint.validate import record as records  # noqa: PLC0415
    from memlint.validate.cpu import measure_cpu  # noqa: PLC0415

    del workload
    if options.parallel is not None:
        from memlint.validate.distributed import measure_distributed  # noqa: PLC0415

        measured = measure_distributed(target, inputs, options, warmup, steps)
    else:
        measured = measure_cpu(target, inputs, options, warmup, steps)
    allocator_gap = "cpu_peak" in measured.unmeasured
    rows = [Row("cpu_peak", result.peak_allocated, measured.peak_allocator_bytes, gated=not allocator_gap),
            Row("cpu_tensor_peak", result.peak_tensor_bytes, measured.peak_tensor_bytes, gated=allocator_gap)]
    numbers = {"cpu_peak": None if allocator_gap else measured.peak_allocator_bytes,
               "cpu_tensor_peak": measured.peak_tensor_bytes,
               "kernel_scratch_bytes": measured.kernel_scratch_bytes, "baseline_bytes": measured.baseline_bytes,
               "step_peaks": measured.step_peaks, "seconds": round(measured.seconds, 3),
               "peak_allocated": None, "peak_reserved": None, "device_used": None}
    if allocator_gap:
        numbers["cpu_peak_profiler"] = measured.peak_allocator_bytes
        numbers["unmeasured"] = dict(measured.unmeasured)
    record = records.make_record(records.environment("cpu"), identity, records.estimated_numbers(result), numbers,
                                 "measured")
    return Outcome(rows, record)


def _gib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**30:.4f} GiB" if value >= 2**28 else f"{value / 2**20:.2f} MiB"


def render(outcome: Outcome, tolerance: float, as_json: bool = False) -> None:
    """Print estimate vs measurement (rich table, or the record as JSON)."""
    import json  # noqa: PLC0415

    if as_json:
        print(json.dumps(outcome.record, indent=2, sort_keys=True))
        return
    from rich.console import Console  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415

    identity = outcome.record["workload"]
    env = outcome.record["environment"]
    where = env.get("gpu_name") or env["device"]
    options = identity.get("options") or {}
    engine = (f", rank 0 of {options['world_size']} ({options['parallel']})" if options.get("parallel") else "")
    table = Table(title=f"memlint validate {identity['target']} on {where}{engine}")
    for column in ("number", "estimated", "measured", "error", ""):
        table.add_column(column, justify="right" if column in ("estimated", "measured", "error") else "left")
    for row in outcome.rows:
        error = row.error
        status = "" if error is None else ("ok" if abs(error) <= tolerance else "OUT") if row.gated else "info"
        table.add_row(row.name, _gib(row.estimated), _gib(row.measured),
                      "-" if error is None else f"{error:+.2%}", status)
    console = Console()
    console.print(table)
    if outcome.oom is not None:
        oom = outcome.oom
        console.print(f"does not fit: CUDA out of memory in {oom['phase']} of step {oom['step']} "
                      f"with {_gib(oom['allocated_bytes'])} allocated ({_gib(oom['reserved_bytes'])} reserved)")
    else:
        console.print(f"tolerance {tolerance:.0%}: {'within' if outcome.within(tolerance) else 'OUTSIDE'}")
