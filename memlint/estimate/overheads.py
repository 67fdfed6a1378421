"""Device memory outside the caching allocator: the CUDA context and library memory (no torch import).

What ``nvidia-smi`` (NVML "used") shows for a training process is the
caching allocator's reserved memory plus memory the CUDA driver and the
libraries hold outside it.  This module models the outside part by GPU
architecture, CUDA version and module loading, each figure with its source:

* **CUDA context** -- driver state plus the kernel images loaded into the
  context.  With *eager* module loading every kernel of every loaded library
  is loaded at context creation (>1 GiB for PyTorch); with *lazy* loading
  (CUDA >= 11.7, ``CUDA_MODULE_LOADING=LAZY``, which PyTorch sets when the
  variable is unset since torch 1.13) only what runs is loaded.  The figure
  is the nearest published measurement in :data:`CONTEXT_MEASUREMENTS`
  (same loading mode, then same architecture, then nearest CUDA version);
  ``--cuda-context BYTES`` replaces it with a measured one.
* **cuBLAS / cuBLASLt workspace** -- allocated *through* the caching allocator
  (so inside peak_allocated/peak_reserved, category ``workspace``), one per
  (handle, stream): :func:`cublas_workspace_bytes`.
* **cuDNN library memory** -- not modelled: no published figure was found; it
  is listed with 0 bytes and a note whenever the step runs cuDNN kernels.

Sizes are bytes; MiB = 2**20.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

MiB = 2**20

#: First CUDA version with lazy module loading.  Source: NVIDIA CUDA C++
#: Programming Guide, "Lazy Loading" (introduced in CUDA 11.7); ptrblck in
#: pytorch/pytorch#107667 ("Starting with 11.7 CUDA implemented lazy
#: kernel/module loading").
LAZY_LOADING_SINCE = (11, 7)

#: CUDA versions PyTorch wheels were built for, newest last (the default of
#: ``--cuda`` when the installed torch has no CUDA).  Source: the CUDA
#: variants of the pytorch.org install matrix for torch 2.x (11.8 ... 13.0).
KNOWN_CUDA_VERSIONS = ((11, 8), (12, 1), (12, 4), (12, 6), (12, 8), (12, 9), (13, 0))


@dataclass(frozen=True)
class ContextMeasurement:
    """A published measurement of a PyTorch process's CUDA context (bytes, as NVML/cudaMemGetInfo shows it).

    cc: compute capability of the GPU; cuda: CUDA (major, minor) of the run;
    loading: "lazy" or "eager"; gpu: the board; what: what was measured; source: where.
    """

    cc: tuple[int, int]
    cuda: tuple[int, int]
    loading: str
    nbytes: int
    gpu: str
    what: str
    source: str


CONTEXT_MEASUREMENTS: tuple[ContextMeasurement, ...] = (
    ContextMeasurement(
        (7, 0), (11, 2), "eager", 1343 * MiB, "Tesla V100-SXM2-16GB",
        "NVML used after torch.ones((1, 1)).to('cuda') (driver 460.91.03)",
        "Hugging Face transformers docs, 'Efficient Training on a Single GPU' (January 2022): "
        "https://github.com/huggingface/transformers/blob/0016acf7ef421c7fe8eff7945de52c71896c3b01/"
        "docs/source/en/perf_train_gpu_one.mdx"),
    ContextMeasurement(
        (8, 0), (12, 2), "lazy", 426 * MiB, "NVIDIA PG509-210 (A100 80GB SXM)",
        "nvidia-smi per-process memory of an idle PyTorch process (driver 535.183.06)",
        "meta-pytorch/torchrec pull request #3580 (nvidia-smi output in the description)"),
    ContextMeasurement(
        (8, 9), (13, 0), "lazy", 426 * MiB, "NVIDIA RTX 6000 Ada",
        "nvidia-smi after torch.cuda.mem_get_info(0), PyTorch 2.10.0+cu130",
        "unslothai/unsloth-zoo pull request #1053 (live measurements table)"),
)


@dataclass(frozen=True)
class Overhead:
    """One part of device_used outside the caching allocator: bytes, whether it is modelled, and its source."""

    nbytes: int
    source: str
    modelled: bool = True
    note: str = ""

    def to_json(self) -> dict:
        data = {"bytes": self.nbytes, "source": self.source, "modelled": self.modelled}
        if self.note:
            data["note"] = self.note
        return data


def parse_cuda_version(text: str) -> tuple[int, int]:
    """``"12.8"`` -> (12, 8).  Raises ValueError for anything else (the CLI turns it into a UsageError)."""
    parts = str(text).strip().split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        raise ValueError(f"expected MAJOR.MINOR such as 12.8, got {text!r}")
    return int(parts[0]), int(parts[1])


def default_cuda_version(installed: str | None) -> tuple[int, int]:
    """The installed torch's ``torch.version.cuda`` when it has one, else the newest of :data:`KNOWN_CUDA_VERSIONS`."""
    if installed:
        try:
            return parse_cuda_version(installed)
        except ValueError:
            pass
    return KNOWN_CUDA_VERSIONS[-1]


def module_loading(cuda: tuple[int, int], environ: dict | None = None) -> str:
    """``"lazy"`` or ``"eager"``: how the modelled run loads CUDA modules.

    Lazy needs CUDA >= 11.7 (:data:`LAZY_LOADING_SINCE`).  ``CUDA_MODULE_LOADING``
    from ``environ`` (default ``os.environ``) decides: ``EAGER`` -> eager,
    ``LAZY`` -> lazy, unset -> lazy (torch >= 1.13 sets LAZY when it is unset:
    pytorch/pytorch#86509), ``DEFAULT`` -> lazy from CUDA 12.3 on, where the
    NVIDIA CUDA Programming Guide makes lazy the default, eager before.
    """
    if cuda < LAZY_LOADING_SINCE:
        return "eager"
    value = (environ if environ is not None else os.environ).get("CUDA_MODULE_LOADING", "").strip().upper()
    if value == "EAGER":
        return "eager"
    if value == "DEFAULT":
        return "lazy" if cuda >= (12, 3) else "eager"
    return "lazy"


def _distance(row: ContextMeasurement, cc: tuple[int, int], cuda: tuple[int, int]) -> tuple:
    arch = 0 if row.cc == cc else (1 if row.cc[0] == cc[0] else 2 + abs(row.cc[0] - cc[0]))
    version = abs((row.cuda[0] * 10 + row.cuda[1]) - (cuda[0] * 10 + cuda[1]))
    return (arch, version)


def cuda_context(cc: tuple[int, int], cuda: tuple[int, int], loading: str) -> Overhead:
    """The CUDA context of a PyTorch process (bytes): the nearest published measurement.

    Nearest = same loading mode, then the same compute capability (else the
    same major, else the closest major), then the closest CUDA version.  The
    source names the measurement and, when it is not an exact match, says so.
    """
    rows = [r for r in CONTEXT_MEASUREMENTS if r.loading == loading] or list(CONTEXT_MEASUREMENTS)
    best = min(rows, key=lambda r: _distance(r, cc, cuda))
    exact = best.cc == cc and best.cuda[0] == cuda[0]
    where = (f"{best.gpu} (sm{best.cc[0]}{best.cc[1]}), CUDA {best.cuda[0]}.{best.cuda[1]}, "
             f"{best.loading} loading: {best.what}; {best.source}")
    note = "" if exact else (f"no published measurement for sm{cc[0]}{cc[1]} CUDA {cuda[0]}.{cuda[1]} {loading} "
                             "loading: nearest used; give --cuda-context with a measured figure")
    return Overhead(best.nbytes, where, modelled=True, note=note)


def cublas_workspace_bytes(cc: tuple[int, int]) -> int:
    """One cuBLAS workspace (bytes) as the modelled torch allocates it through the caching allocator.

    Source: ``aten/src/ATen/cuda/CublasHandlePool.cpp`` (``parseChosenWorkspaceSize``):
    ``:4096:2:16:8`` = 4096 KiB x 2 + 16 KiB x 8 = 8.125 MiB by default, 32 MiB
    (``4096 KiB x 8``) for compute capability major 9, 10 and 12 (Hopper and
    Blackwell).  cuBLASLt shares the cuBLAS workspace of the same handle and
    stream (``TORCH_CUBLASLT_UNIFIED_WORKSPACE``, on by default), so it adds nothing.
    """
    if cc[0] in (9, 10, 12):
        return 4096 * 1024 * 8
    return 4096 * 1024 * 2 + 16 * 1024 * 8


CUDNN_LIBRARY = Overhead(
    0, "no published measurement of cuDNN's library/handle device memory was found", modelled=False,
    note="the step runs cuDNN kernels; their library memory is not in device_used "
         "(measure with memlint validate, or include it in --cuda-context)")
