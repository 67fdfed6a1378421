"""GPU catalog and NVML detection (no torch import).  Device overheads: memlint/estimate/overheads.py.

``GpuSpec.memory_total`` is the total the driver reports through NVML
(``nvmlDeviceGetMemoryInfo().total``, the "MiB total" of ``nvidia-smi``), which
is a little below the marketing capacity on some boards (ECC / reserved
memory).  Each entry says where its figure comes from:

* "datasheet" -- the vendor datasheet capacity (NVIDIA product pages); used as
  the NVML total only where the boards report exactly that size;
* "nvidia-smi (public logs)" -- the MiB figure commonly shown by ``nvidia-smi``
  for that board in public bug reports / cloud documentation; it varies by a
  few hundred MiB with driver and ECC mode, so it is an approximation that
  ``memlint validate --record`` measurements should replace.
"""

from __future__ import annotations

from dataclasses import dataclass

from memlint.errors import UsageError
from memlint.suggest import did_you_mean

MiB = 2**20


@dataclass(frozen=True)
class GpuSpec:
    """One catalog entry.

    name: catalog key (e.g. ``"A100-80GB"``); memory_total: bytes NVML reports;
    compute_capability: (major, minor); source: where memory_total comes from;
    mig: True for a MIG slice (compute capability of the parent GPU).
    """

    name: str
    memory_total: int
    compute_capability: tuple[int, int]
    source: str
    mig: bool = False


_SMI = "nvidia-smi (public logs), approximate"
_DS = "vendor datasheet"

CATALOG: dict[str, GpuSpec] = {
    spec.name.lower(): spec
    for spec in [
        GpuSpec("A100-40GB", 40960 * MiB, (8, 0), f"{_DS}: 40 GB HBM2; nvidia-smi shows 40960 MiB (SXM4)"),
        GpuSpec("A100-80GB", 81920 * MiB, (8, 0), f"{_DS}: 80 GB HBM2e; nvidia-smi shows 81920 MiB (SXM4)"),
        GpuSpec("H100-80GB", 81559 * MiB, (9, 0), f"{_SMI}: 81559 MiB for H100 80GB HBM3 (SXM5)"),
        GpuSpec("H200-141GB", 143771 * MiB, (9, 0), f"{_SMI}: 143771 MiB for H200 (141 GB HBM3e)"),
        GpuSpec("L4", 23034 * MiB, (8, 9), f"{_SMI}: 23034 MiB (24 GB GDDR6)"),
        GpuSpec("T4", 15360 * MiB, (7, 5), f"{_SMI}: 15360 MiB (16 GB GDDR6, ECC on)"),
        GpuSpec("V100-16GB", 16384 * MiB, (7, 0), f"{_SMI}: 16384 MiB (SXM2 16 GB HBM2; some boards 16160 MiB)"),
        GpuSpec("V100-32GB", 32768 * MiB, (7, 0), f"{_SMI}: 32768 MiB (SXM2 32 GB HBM2; some boards 32510 MiB)"),
        GpuSpec("RTX-3090", 24576 * MiB, (8, 6), f"{_SMI}: 24576 MiB (24 GB GDDR6X)"),
        GpuSpec("RTX-4090", 24564 * MiB, (8, 9), f"{_SMI}: 24564 MiB (24 GB GDDR6X)"),
        GpuSpec("A10G", 23028 * MiB, (8, 6), f"{_SMI}: 23028 MiB (AWS g5, 24 GB GDDR6)"),
        GpuSpec("L40S", 46068 * MiB, (8, 9), f"{_SMI}: 46068 MiB (48 GB GDDR6, ECC on)"),
        GpuSpec("A100-80GB-MIG-1g.10gb", 9728 * MiB, (8, 0), f"{_SMI}: MIG 1g.10gb instance, 9728 MiB", mig=True),
        GpuSpec("A100-80GB-MIG-2g.20gb", 19968 * MiB, (8, 0), f"{_SMI}: MIG 2g.20gb instance, 19968 MiB", mig=True),
        GpuSpec("A100-80GB-MIG-3g.40gb", 40192 * MiB, (8, 0), f"{_SMI}: MIG 3g.40gb instance, 40192 MiB", mig=True),
        GpuSpec("A100-40GB-MIG-1g.5gb", 4864 * MiB, (8, 0), f"{_SMI}: MIG 1g.5gb instance, 4864 MiB", mig=True),
        GpuSpec("A100-40GB-MIG-3g.20gb", 19968 * MiB, (8, 0), f"{_SMI}: MIG 3g.20gb instance, 19968 MiB", mig=True),
        GpuSpec("H100-80GB-MIG-1g.10gb", 9984 * MiB, (9, 0), f"{_SMI}: MIG 1g.10gb instance, 9984 MiB", mig=True),
        GpuSpec("H100-80GB-MIG-3g.40gb", 40448 * MiB, (9, 0), f"{_SMI}: MIG 3g.40gb instance, 40448 MiB", mig=True),
    ]
}


def lookup_gpu(name: str) -> GpuSpec:
    """Catalog entry by name (case-insensitive); raises UsageError listing the known names."""
    spec = CATALOG.get(name.strip().lower())
    if spec is None:
        known = ", ".join(s.name for s in CATALOG.values())
        hint = did_you_mean(gpu_suggestions(name))
        raise UsageError(f"unknown GPU {name!r}; {hint + ' ' if hint else ''}known: {known}, or 'auto'")
    return spec


def gpu_suggestions(name: str, limit: int = 4) -> list[str]:
    """Catalog names close to a mistyped ``name``: those it starts (``A100``
    -> ``A100-40GB``, ``A100-80GB``; MIG slices only for a name with
    ``mig``), then difflib's closest; spaces, ``-`` and ``_`` do not count."""
    from memlint.suggest import close_matches

    def key(text: str) -> str:
        return "".join(char for char in text.lower() if char.isalnum())

    wanted = key(name)
    # MIG slices only when the name asks for one: `A100` means a whole GPU.
    specs = [spec for spec in CATALOG.values() if spec.mig == ("mig" in wanted)]
    found = [spec.name for spec in specs if wanted and key(spec.name).startswith(wanted)]
    for close in close_matches(name.strip(), [spec.name for spec in specs], limit):
        if close not in found:
            found.append(close)
    return found[:limit]


def detect_gpu(index: int = 0) -> GpuSpec:
    """Read GPU ``index`` through NVML (pynvml from nvidia-ml-py, imported lazily).

    Raises UsageError (one line) when pynvml is missing or no NVIDIA GPU/driver is found.
    """
    try:
        import pynvml  # noqa: PLC0415
    except ImportError:
        raise UsageError("--gpu auto needs nvidia-ml-py (pip install nvidia-ml-py)") from None
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        name = pynvml.nvmlDeviceGetName(handle)
        name = name.decode() if isinstance(name, bytes) else name
        total = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
        try:
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        except Exception:  # noqa: BLE001 - older drivers
            major, minor = 8, 0
    except Exception as exc:  # noqa: BLE001 - pynvml raises NVMLError subclasses
        raise UsageError(f"--gpu auto: no NVIDIA GPU found through NVML ({exc})") from None
    return GpuSpec(name, total, (int(major), int(minor)), "NVML (this machine)")
