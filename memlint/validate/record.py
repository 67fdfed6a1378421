"""Validation records: one JSON document per measured workload (``memlint validate --record FILE``).

The schema is memlint/validate/record_schema.json (JSON Schema draft 2020-12) and is
documented in docs/validator.md.  Bytes throughout.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import tempfile
from dataclasses import asdict
from pathlib import Path

from memlint.errors import UsageError

SCHEMA_VERSION = 2
SCHEMA_PATH = Path(__file__).with_name("record_schema.json")
NUMBERS = ("peak_allocated", "peak_reserved", "device_used")


def environment(device: str) -> dict:
    """Software and device facts for a record: torch/CUDA versions, GPU name, memory, CC, driver.

    ``device``: "cuda" (reads torch.cuda and NVML when available) or "cpu".
    """
    import torch  # noqa: PLC0415

    from memlint import __version__  # noqa: PLC0415

    env = {"memlint_version": __version__, "torch_version": torch.__version__,
           "cuda_version": torch.version.cuda, "python_version": platform.python_version(),
           "device": device, "gpu_name": None, "total_memory": None, "compute_capability": None,
           "driver_version": None, "host": platform.machine()}
    if device == "cpu":
        env["cpu_kernels"] = cpu_kernels()
    if device == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        env.update(gpu_name=props.name, total_memory=int(props.total_memory),
                   compute_capability=[props.major, props.minor], driver_version=_driver_version())
    return env


def cpu_kernels() -> str:
    """The kernel set oneDNN picks on this CPU: torch's CPU capability
    (``"AVX512"``, ``"AVX2"``, ...) and ``"+AMX"`` when AMX tiles are
    supported (bf16 convolutions then run on AMX kernels, whose scratch
    differs: measured 2.4-5.7% on the amp-bf16 CNN records, 2026-12-01)."""
    import torch  # noqa: PLC0415

    capability = torch.backends.cpu.get_cpu_capability()
    amx = getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)()
    return capability + ("+AMX" if amx else "")


def _driver_version() -> str | None:
    try:
        import pynvml  # noqa: PLC0415

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # noqa: BLE001 - NVML is optional; the record says null
        return None


def workload_identity(target: str, inputs, options, warmup: int, steps: int, input_shapes=None) -> dict:
    """What was run: the target, the ``--input`` specs, the resolved input shapes and the options."""
    return {"target": target, "inputs": list(inputs), "input_shapes": input_shapes or [],
            "options": asdict(options), "warmup": warmup, "steps": steps}


def estimated_numbers(result) -> dict:
    """The estimate's numbers for a record (from an ``Estimate``; bytes).

    On the CPU target peak_allocated is the CPU allocator's peak (compared with
    the measured cpu_peak) and peak_tensor_bytes the tensors' own (compared
    with cpu_tensor_peak).
    """
    return {"peak_allocated": result.peak_allocated, "peak_reserved": result.peak_reserved,
            "device_used": result.device_used, "peak_tensor_bytes": result.peak_tensor_bytes,
            "fragmentation_bytes": result.fragmentation_bytes, "target": result.target, "optimizer": result.optimizer,
            "gpu": result.gpu, "compute_capability": list(result.compute_capability)}


def make_record(env: dict, workload: dict, estimated: dict, measured: dict | None, outcome: str,
                note: str | None = None) -> dict:
    """Assemble a record (see docs/validator.md).  outcome: measured, oom, failed or dry-run."""
    return {
        "schema_version": SCHEMA_VERSION,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "environment": env,
        "workload": workload,
        "estimated": estimated,
        "measured": measured,
        "outcome": outcome,
        "note": note,
    }


def write_record(record: dict, path: str | os.PathLike) -> Path:
    """Write ``record`` as indented JSON, atomically (temp file + rename).  Raises UsageError."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w") as handle:
            json.dump(record, handle, indent=2, sort_keys=True)
            handle.write("\n")
        os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(f"--record {str(path)!r}: cannot write: {exc.strerror or exc}") from None
    return path


def load_schema() -> dict:
    """The record JSON Schema (a dict)."""
    return json.loads(SCHEMA_PATH.read_text())


def check_record(record: dict) -> None:
    """Validate ``record`` against the schema; raises ValueError naming the first problem.

    A record whose ``schema_version`` is not :data:`SCHEMA_VERSION` is rejected with
    its own message (a replayer must not guess at another version's meaning).
    """
    import jsonschema  # noqa: PLC0415

    version = record.get("schema_version") if isinstance(record, dict) else None
    if version != SCHEMA_VERSION:
        raise ValueError(f"unknown record schema_version {version!r} (this memlint reads {SCHEMA_VERSION})")
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(load_schema()).iter_errors(record))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "<root>"
        raise ValueError(f"record does not match the schema at {where}: {error.message}")
