"""The device an estimate is for: a CUDA GPU (architecture, CUDA version, module loading) or the CPU."""

from __future__ import annotations

from dataclasses import dataclass, field

from memlint.errors import UsageError
from memlint.estimate.gpus import GpuSpec, detect_gpu, lookup_gpu
from memlint.estimate.overheads import (
    Overhead,
    cuda_context,
    cublas_workspace_bytes,
    default_cuda_version,
    module_loading,
    parse_cuda_version,
)

#: Compute capability assumed when no GPU is named (A100-class).
DEFAULT_CC = (8, 0)
DEVICES = ("cuda", "cpu")


@dataclass(frozen=True)
class Target:
    """What the trace models.

    device: "cuda" or "cpu"; gpu: the catalog entry (None: unnamed, or the CPU);
    compute_capability: (major, minor), (0, 0) on the CPU; cuda_version and
    module_loading: of the modelled CUDA run (None on the CPU); cudnn_version:
    the cuDNN runtime as an integer (91500 = 9.15.0) when known, else None;
    context: the CUDA context overhead (bytes, source), None on the CPU;
    torch_version: an older torch whose known differences are modelled
    (:mod:`memlint.estimate.torch_versions`), None for the modelled torch.
    """

    device: str
    gpu: GpuSpec | None = None
    compute_capability: tuple[int, int] = (0, 0)
    cuda_version: tuple[int, int] | None = None
    module_loading: str | None = None
    cudnn_version: int | None = None
    context: Overhead | None = field(default=None, compare=False)
    torch_version: str | None = None

    @property
    def version_facts(self) -> frozenset[str]:
        """The :data:`memlint.estimate.torch_versions.VERSION_FACTS` that hold for :attr:`torch_version`."""
        from memlint.estimate.torch_versions import facts_for  # noqa: PLC0415

        return facts_for(self.torch_version)

    @property
    def is_cuda(self) -> bool:
        """Whether the estimate is for a CUDA GPU (else the CPU)."""
        return self.device == "cuda"

    @property
    def cublas_workspace(self) -> int:
        """Bytes of one cuBLAS workspace (0 on the CPU): :func:`memlint.estimate.overheads.cublas_workspace_bytes`."""
        return cublas_workspace_bytes(self.compute_capability) if self.is_cuda else 0

    def describe(self) -> str:
        """One line for reports: "A100-80GB (sm80), CUDA 12.8, lazy loading" or "CPU"."""
        if not self.is_cuda:
            return "CPU"
        name = self.gpu.name if self.gpu else "unnamed GPU"
        cc = self.compute_capability
        return (f"{name} (sm{cc[0]}{cc[1]}), CUDA {self.cuda_version[0]}.{self.cuda_version[1]}, "
                f"{self.module_loading} module loading")


def resolve_gpu(gpu: str | None) -> GpuSpec | None:
    """Catalog entry, NVML detection for "auto", or None; raises UsageError."""
    if gpu is None:
        return None
    if gpu.strip().lower() == "auto":
        return detect_gpu()
    return lookup_gpu(gpu)


def resolve_target(device: str = "cuda", gpu: str | None = None, cuda: str | None = None,
                   cuda_context_bytes: int | None = None, installed_cuda: str | None = None,
                   torch_version: str | None = None) -> Target:
    """Build the :class:`Target` of an estimate; raises UsageError (one line) naming the bad option.

    installed_cuda: ``torch.version.cuda`` of the running torch (the default of ``--cuda``).
    cuda_context_bytes: ``--cuda-context`` (a measured context replaces the modelled one).
    torch_version: an older torch to replay (see :mod:`memlint.estimate.torch_versions`).
    """
    from memlint.estimate.torch_versions import parse_version  # noqa: PLC0415

    if device not in DEVICES:
        raise UsageError(f"--device {device!r}: choose cuda or cpu")
    if torch_version is not None:
        try:
            parse_version(torch_version)
        except ValueError as exc:
            raise UsageError(f"torch_version: {exc}") from None
    if device == "cpu":
        for option, value in (("--gpu", gpu), ("--cuda", cuda), ("--cuda-context", cuda_context_bytes)):
            if value is not None:
                raise UsageError(f"--device cpu cannot be combined with {option} (the CPU is the target)")
        return Target("cpu", torch_version=torch_version)
    spec = resolve_gpu(gpu)
    cc = spec.compute_capability if spec else DEFAULT_CC
    try:
        version = parse_cuda_version(cuda) if cuda is not None else default_cuda_version(installed_cuda)
    except ValueError as exc:
        raise UsageError(f"--cuda {cuda!r}: {exc}") from None
    loading = module_loading(version)
    if cuda_context_bytes is not None:
        if cuda_context_bytes < 0:
            raise UsageError(f"--cuda-context must be >= 0 bytes (got {cuda_context_bytes})")
        context = Overhead(int(cuda_context_bytes), "given with --cuda-context")
    else:
        context = cuda_context(cc, version, loading)
    return Target("cuda", spec, cc, version, loading, None, context, torch_version)
