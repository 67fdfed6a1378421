"""Per-rank estimates traced through the real distributed engines on a fake process group.

``--parallel ddp|fsdp|tp|fsdp+tp --world-size N``: the workload is wrapped by the engine
itself -- ``torch.nn.parallel.DistributedDataParallel``, FSDP2
``torch.distributed.fsdp.fully_shard`` (per repeated block, then at the root), or
tensor parallel (``parallelize_module``, memlint/estimate/tensor_parallel.py; FSDP2 on
the "dp" mesh dimension after it for fsdp+tp) -- and its training step is traced by the estimator's ledger, as rank 0 of a
world of N ranks.  No peer exists: the process group is torch's fake backend
(``torch.testing._internal.distributed.fake_pg``, torch 2.13.0: every
collective returns at once, its output tensors allocated but not written), so
one process simulates any world size.

Why FakeTensorMode and not the meta device.  FSDP2 refuses parameters on
meta (torch 2.13.0, torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py
``_validate_no_meta_params``), and DDP's reducer copies bucket indices to the
host (torch/csrc/distributed/c10d/reducer.cpp ``sync_bucket_indices``).  Under
``torch._subclasses.fake_tensor.FakeTensorMode`` the parameters are "cpu"
FakeTensors: the engines run their own code, no memory is touched, and the
ledger (memlint/estimate/tracer.py) records every storage as on meta.

What the trace changes in the engines, and why (each is a no-op for memory):

* DDP is built with ``init_sync=False``: the start-up broadcast of parameters
  reads their values (``_verify_param_shape_across_processes`` calls
  ``.item()``); it happens before the first step, outside the steady state.
* DDP gets a communication hook (``register_comm_hook``) that returns the bucket
  itself, as the built-in all-reduce does in place
  (torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py
  ``allreduce_hook`` divides the bucket and all-reduces it in place); the fake
  group's own all-reduce future carries no value, which the reducer rejects.
* DDP's bucket rebuild after the first step (reducer ``_rebuild_buckets``) is
  skipped: it exchanges bucket indices through host memory.  The buckets keep
  the construction order (parameters in reverse order, ``bucket_cap_mb`` each);
  their total size is the gradients' total either way.
* ``torch.UntypedStorage.resize_`` -- FSDP2 allocates and frees unsharded
  parameters with it, and no dispatch mode sees it -- is reported to the ledger
  while the trace runs (the method torch's own
  torch/distributed/_tools/mem_tracker.py ``_track_resize`` uses).

Categories: the engines' buffers for collectives are ``communication`` (DDP
gradient buckets; FSDP2 all-gather inputs/outputs and reduce-scatter
inputs/outputs); FSDP2's unsharded parameters are ``parameter``.

Communication per step (bytes each rank sends): every collective of the
measured step is counted from its tensors, with the ring algorithms' traffic
per rank (NCCL's nccl-tests doc/PERFORMANCE.md, "bus bandwidth": all-reduce
2(n-1)/n of the buffer, all-gather and reduce-scatter (n-1)/n of the full
buffer).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from memlint.errors import TargetError, UsageError
from memlint.estimate.messages import one_line

#: The engines ``--parallel`` names.
PARALLEL_MODES = ("ddp", "fsdp", "tp", "fsdp+tp")
#: DDP's default bucket size in MiB (torch 2.13.0, torch/nn/parallel/distributed.py ``_DEFAULT_BUCKET_CAP_MB``).
DDP_DEFAULT_BUCKET_CAP_MB = 25
#: Largest simulated world: a bound on the option, not a fact of torch -- 64x the 1024 ranks issue 16
#: asks for (FSDP2 makes one chunk per rank of every parameter, so the setup grows with the world).
MAX_WORLD_SIZE = 1 << 16

#: Ring-algorithm bytes each rank sends, as a fraction of the collective's full buffer, for n ranks
#: (nccl-tests doc/PERFORMANCE.md, "bus bandwidth" factors; broadcast: busbw = algbw, factor 1).
TRAFFIC_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0 if n > 1 else 0.0,
}


@dataclass
class Communication:
    """Collectives of one measured step of rank 0 (bytes).

    calls: {kind: number of collectives}; buffer_bytes: {kind: bytes of the full buffers
    (all-gather output, reduce-scatter input, all-reduce buffer)}; sent_bytes: {kind:
    bytes each rank sends with the ring algorithms (:data:`TRAFFIC_FACTOR`)}.
    """

    world_size: int
    calls: dict[str, int] = field(default_factory=dict)
    buffer_bytes: dict[str, int] = field(default_factory=dict)
    sent_bytes: dict[str, int] = field(default_factory=dict)
    largest_buffer: int = 0

    def add(self, kind: str, nbytes: int, group_size: int | None = None) -> None:
        """Count one collective of ``nbytes`` (full buffer) over ``group_size`` ranks (default: the world)."""
        self.calls[kind] = self.calls.get(kind, 0) + 1
        self.buffer_bytes[kind] = self.buffer_bytes.get(kind, 0) + nbytes
        sent = int(nbytes * TRAFFIC_FACTOR[kind](group_size or self.world_size))
        self.sent_bytes[kind] = self.sent_bytes.get(kind, 0) + sent
        self.largest_buffer = max(self.largest_buffer, nbytes)

    def split_all_reduces(self, bucket_bytes: list[int]) -> None:
        """Count the all-reduces as DDP's steady state runs them: one per bucket of ``bucket_bytes``
        (:func:`steady_state_buckets`) for every all-reduce of the traced first-iteration layout.
        The bytes, full and sent, do not change: the same gradients in more, smaller buffers."""
        traced = self.calls.get("all_reduce", 0)
        if not traced or len(bucket_bytes) <= 1:
            return
        self.calls["all_reduce"] = traced * len(bucket_bytes)
        others = [n for kind, n in self.buffer_bytes.items() if kind != "all_reduce"]
        self.largest_buffer = max([max(bucket_bytes), *others]) if others else max(bucket_bytes)

    @property
    def total_sent(self) -> int:
        return sum(self.sent_bytes.values())

    def to_json(self) -> dict:
        return {"world_size": self.world_size, "calls": dict(self.calls), "buffer_bytes": dict(self.buffer_bytes),
                "sent_bytes": dict(self.sent_bytes), "sent_bytes_total": self.total_sent,
                "largest_buffer_bytes": self.largest_buffer}


def describe_communication(comm: dict) -> str:
    """One line: the bytes each rank sends per step and the collectives behind them (from ``Communication.to_json``)."""
    from memlint.estimate.units import format_bytes  # noqa: PLC0415

    names = {"all_reduce": "all-reduce", "all_gather": "all-gather", "reduce_scatter": "reduce-scatter",
             "broadcast": "broadcast"}
    parts = [f"{comm['calls'][kind]} {names[kind]} of {format_bytes(comm['buffer_bytes'][kind])}"
             for kind in sorted(comm["calls"])]
    return (f"needs {comm['world_size']} GPUs; sends {format_bytes(comm['sent_bytes_total'])} per rank per step "
            f"(ring: {', '.join(parts) or 'no collectives'})")


#: The engine options and the engines they belong to (the CLI flag names).
ENGINE_OPTIONS = {"bucket_cap_mb": ("ddp",), "gradient_as_bucket_view": ("ddp",),
                  "reshard_after_forward": ("fsdp", "fsdp+tp"), "fsdp_param_dtype": ("fsdp", "fsdp+tp"),
                  "fsdp_cpu_offload": ("fsdp", "fsdp+tp")}
#: Largest DDP bucket accepted, in MiB: 2**20 MiB = 1 TiB, beyond any device (the reducer takes bytes as int64).
MAX_BUCKET_CAP_MB = 2**20


def _flag(name: str, value) -> str:
    flag = "--" + name.replace("_", "-")
    if name == "reshard_after_forward" and value is False:
        return "--no-reshard-after-forward"
    return flag if isinstance(value, bool) else f"{flag} {value}"


def _check_engine_options(options) -> None:
    """UsageError for an engine option given without its engine (it would be silently ignored):
    one whose value is not EstimateOptions' default."""
    import dataclasses  # noqa: PLC0415

    defaults = {f.name: f.default for f in dataclasses.fields(options) if f.name in ENGINE_OPTIONS}
    for name, engines in ENGINE_OPTIONS.items():
        value = getattr(options, name)
        if value == defaults[name] or options.parallel in engines:
            continue
        needs = " or ".join(f"--parallel {engine}" for engine in engines)
        raise UsageError(f"{_flag(name, value)} applies to {needs} only (got "
                         f"{'--parallel ' + options.parallel if options.parallel else 'no --parallel'})")


def check_parallel_options(options) -> None:
    """Raise UsageError (one line, naming the option) for an invalid distributed configuration."""
    _check_engine_options(options)
    if options.parallel is None:
        return
    if options.parallel not in PARALLEL_MODES:
        raise UsageError(f"--parallel {options.parallel!r}: choose from {', '.join(PARALLEL_MODES)}")
    if not 1 <= options.world_size <= MAX_WORLD_SIZE:
        raise UsageError(f"--world-size must be between 1 and {MAX_WORLD_SIZE} with --parallel (got {options.world_size})")
    if options.zero_stage:
        raise UsageError("--zero-stage and --parallel exclude each other: --parallel fsdp is ZeRO-3, "
                         "--parallel fsdp --no-reshard-after-forward ZeRO-2 (docs/estimator.md \"Distributed\")")
    for name in ("step_in_backward", "offload_activations"):
        if getattr(options, name):
            raise UsageError(f"--parallel {options.parallel}: {name.replace('_', '-')} is not traced with an engine")
    if options.bucket_cap_mb is not None and not 0 < options.bucket_cap_mb <= MAX_BUCKET_CAP_MB:
        raise UsageError(f"--bucket-cap-mb must be > 0 and at most {MAX_BUCKET_CAP_MB} (got {options.bucket_cap_mb})")
    if options.fsdp_cpu_offload:
        raise UsageError("--fsdp-cpu-offload is not modelled: the engines are traced on CPU FakeTensors, where "
                         "CPUOffloadPolicy's host copies and the device cannot be told apart "
                         "(docs/estimator.md \"Distributed\")")
    if options.fsdp_param_dtype not in (None, "bf16", "fp16"):
        raise UsageError(f"--fsdp-param-dtype {options.fsdp_param_dtype!r}: choose bf16 or fp16")
    from memlint.estimate.tensor_parallel import check_tp_options  # noqa: PLC0415

    check_tp_options(options)


@contextlib.contextmanager
def fake_world(world_size: int) -> Iterator[None]:
    """torch.distributed's fake process group of ``world_size`` ranks, this process rank 0; destroyed on exit.

    Raises UsageError when a process group already exists in this process.
    """
    import torch.distributed as dist  # noqa: PLC0415
    from torch.testing._internal.distributed.fake_pg import FakeStore  # noqa: PLC0415 - registers "fake"

    if dist.is_initialized():
        raise UsageError("--parallel: a torch.distributed process group already exists in this process")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()


@contextlib.contextmanager
def report_resizes(ledger, device_type: str | None = "meta") -> Iterator[None]:
    """Tell ``ledger.resized`` of every ``UntypedStorage.resize_`` (FSDP2 frees and
    re-allocates unsharded parameters that way; see the module docstring) of a
    storage on ``device_type`` (None: any device) while active."""
    import torch  # noqa: PLC0415

    original = torch.UntypedStorage.resize_

    def resize_(storage, size):
        result = original(storage, size)
        if device_type is None or storage.device.type == device_type:
            ledger.resized(storage)
        return result

    torch.UntypedStorage.resize_ = resize_
    try:
        yield
    finally:
        torch.UntypedStorage.resize_ = original


#: Collectives seen by :func:`_collective_mode`: aten/c10d op name -> (kind, which tensor is the full buffer).
_C10D_OPS = {
    "_allgather_base_": ("all_gather", 0),        # (output, input): output is the full buffer
    "allgather_into_tensor_coalesced_": ("all_gather", 0),
    "_reduce_scatter_base_": ("reduce_scatter", 1),  # (output, input): input is the full buffer
    "reduce_scatter_tensor_coalesced_": ("reduce_scatter", 1),
    "allreduce_": ("all_reduce", 0),
    "broadcast_": ("broadcast", 0),
}
#: torch.distributed's functional collectives (DTensor's redistribute issues them: tensor parallel), torch
#: 2.13.0 torch/distributed/_functional_collectives.py: op name -> kind; the full buffer is the output of an
#: all-gather and the input otherwise; the group is the op's last argument.
_FUNCTIONAL_OPS = {"all_reduce": "all_reduce", "all_gather_into_tensor": "all_gather",
                   "reduce_scatter_tensor": "reduce_scatter"}
#: ``_c10d_functional.wait_tensor`` returns its input once the collective is done (checked on torch
#: 2.13.0+cpu: ``torch.ops._c10d_functional.wait_tensor(t) is t``); under FakeTensorMode its kernel returns
#: a tensor with a new storage, which would count a second full buffer per collective, so the trace
#: answers it with the input itself.
#: FSDP2's custom ops whose outputs are communication buffers (torch 2.13.0,
#: torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py).
_FSDP_BUFFER_OPS = ("all_gather_copy_in", "chunk_cat")


def _nbytes(value) -> int:
    import torch  # noqa: PLC0415

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    return 0


#: Intra-op threads of one rank on the CPU target, with which its kernels' scratch is measured:
#: torchrun sets OMP_NUM_THREADS=1 for every process when it starts more than one per node and
#: the variable is unset (torch/distributed/run.py, torch 2.13.0), and the validator's ranks run
#: with 1 (memlint/validate/distributed.py).
RANK_INTRA_OP_THREADS = 1


#: Scratch the gloo backend (the CPU target's collectives) allocates inside one collective, as a
#: fraction of the collective's full buffer.  Measured on torch 2.13.0+cpu, 2 ranks:
#: all_gather_into_tensor and reduce_scatter_tensor each allocate one full-size temporary for the
#: duration of the call, all_reduce works in place (tests/benchmarks/gloo_scratch.py).  NCCL works on
#: the caller's buffers (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp), so CUDA targets get none.
GLOO_SCRATCH_FRACTION = {"all_gather": 1.0, "reduce_scatter": 1.0, "all_reduce": 0.0, "broadcast": 0.0}
#: Whether that scratch is a tensor storage an aten op returns (so counted in peak_tensor_bytes, as a
#: tensor ledger of the real run counts it) rather than memory only the allocator sees.  gloo's
#: ``_reduce_scatter_base_`` splits a full-size copy of its input with ``aten.split`` (a dispatch-mode
#: log shows the split's storage); all_gather's temporary never reaches an aten op.  Measured on torch
#: 2.13.0+cpu, 2 ranks (tests/benchmarks/gloo_scratch.py: "tensor ledger scratch").
GLOO_SCRATCH_IS_TENSOR = {"all_gather": False, "reduce_scatter": True, "all_reduce": False, "broadcast": False}


#: Batch-norm ops whose saved statistics (outputs 1 and 2) FakeTensorMode types from the input alone:
#: its decomposition (torch/_decomp/decompositions.py ``native_batch_norm_helper``, torch 2.13.0) casts
#: them to the input's dtype on "cpu" tensors.  The real CPU kernel keeps them in float32 when the
#: input is bf16/fp16 and a parameter or running statistic is float32 (autocast: a bf16 convolution
#: output into a float32 BatchNorm); checked against the kernel in tests/estimate/test_distributed.py.
MIXED_BATCH_NORM_OPS = ("native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
                        "_native_batch_norm_legit_no_training")


def _mixed_batch_norm_mode():
    """A TorchDispatchMode directly above FakeTensorMode: batch-norm statistics in the real kernel's dtype."""
    import torch  # noqa: PLC0415
    from torch.utils._python_dispatch import TorchDispatchMode  # noqa: PLC0415

    reduced = (torch.bfloat16, torch.float16)

    class MixedBatchNormStats(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.namespace != "aten" or func.overloadpacket.__name__ not in MIXED_BATCH_NORM_OPS:
                return out
            tensors = [a for a in args[1:5] if isinstance(a, torch.Tensor)]
            if args[0].dtype not in reduced or not any(t.dtype == torch.float32 for t in tensors):
                return out
            stats = [torch.empty(o.shape, dtype=torch.float32, device=o.device) if o.dtype in reduced else o
                     for o in out[1:3]]
            return (out[0], *stats, *out[3:])

    return MixedBatchNormStats()


@contextlib.contextmanager
def _libraries_see_a_real_run() -> Iterator[None]:
    """Library checks that take a FakeTensor for graph tracing answer as for a real tensor.

    transformers (5.24.0, utils/import_utils.py ``is_tracing``) counts a FakeTensor as tracing,
    and then masking_utils ``_ignore_causal_mask_sdpa`` builds a 4-D attention mask instead of
    SDPA's ``is_causal``: the engines' FakeTensors would trace a mask per layer (fp32
    [batch, 1, seq, seq], saved for backward) that a real run and the meta trace do not have.
    Only a transformers the workload already imported is touched.
    """
    import sys  # noqa: PLC0415

    module = sys.modules.get("transformers.utils.import_utils")
    original = getattr(module, "is_fake_tensor", None)
    if original is None:
        yield
        return
    module.is_fake_tensor = lambda tensor: False
    try:
        yield
    finally:
        module.is_fake_tensor = original


def _collective_mode(ledger, counter: dict, gloo: bool):
    """A TorchDispatchMode above the ledger: tags collective buffers ``communication`` and counts them.

    counter["step"] is the step being counted (others are ignored); counter["comm"] the Communication.
    gloo: the collectives run on gloo (the CPU target): add its scratch (:data:`GLOO_SCRATCH_FRACTION`).
    """
    import torch  # noqa: PLC0415
    from torch.utils._python_dispatch import TorchDispatchMode  # noqa: PLC0415
    from torch.utils._pytree import tree_flatten  # noqa: PLC0415

    class CollectiveMode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            namespace = func.namespace
            name = func.overloadpacket.__name__
            if namespace == "_c10d_functional" and name == "wait_tensor":
                return args[0]  # see _FUNCTIONAL_OPS: the real op returns its input; the fake kernel a copy
            out = func(*args, **kwargs)
            if namespace == "c10d" and name in _C10D_OPS:
                kind, which = _C10D_OPS[name]
                buffers = args[which] if which < len(args) else args[0]
                for value in tree_flatten(buffers)[0]:
                    if isinstance(value, torch.Tensor):
                        ledger.retag(value, "communication")
                if counter["step"] == ledger.step:
                    counter["comm"].add(kind, _nbytes(buffers))
                scratch = int(_nbytes(buffers) * GLOO_SCRATCH_FRACTION[kind]) if gloo else 0
                if scratch:
                    category = "communication" if GLOO_SCRATCH_IS_TENSOR[kind] else "workspace"
                    ledger.transient(scratch, f"gloo {kind} scratch", category)
            elif namespace == "_c10d_functional" and name in _FUNCTIONAL_OPS:
                kind = _FUNCTIONAL_OPS[name]
                buffer = out if kind == "all_gather" else args[0]
                ledger.retag(buffer, "communication")
                if counter["step"] == ledger.step:
                    counter["comm"].add(kind, _nbytes(buffer), _group_size(args[-1]))
                scratch = int(_nbytes(buffer) * GLOO_SCRATCH_FRACTION[kind]) if gloo else 0
                if scratch:
                    category = "communication" if GLOO_SCRATCH_IS_TENSOR[kind] else "workspace"
                    ledger.transient(scratch, f"gloo {kind} scratch", category)
            elif namespace == "fsdp" and name in _FSDP_BUFFER_OPS:
                for value in tree_flatten((out, kwargs.get("out")))[0]:
                    if isinstance(value, torch.Tensor):
                        ledger.retag(value, "communication")
            return out

    return CollectiveMode()


def _group_size(group_name) -> int | None:
    """Ranks of the process group a functional collective names (None when it cannot be resolved)."""
    from torch.distributed.distributed_c10d import _resolve_process_group  # noqa: PLC0415

    try:
        return _resolve_process_group(group_name).size()
    except Exception:  # noqa: BLE001 - the world's size is counted instead
        return None


class _KeepBuckets:
    """DDP's reducer with ``_rebuild_buckets`` answered "nothing rebuilt" (see the module docstring)."""

    def __init__(self, reducer):
        self._reducer = reducer

    def __getattr__(self, name):
        return getattr(self._reducer, name)

    def _rebuild_buckets(self) -> bool:
        return False


def _fake_materialize(module) -> None:
    """Replace every meta parameter and buffer of ``module`` by an empty "cpu" tensor (FakeTensor mode active).

    Tied parameters stay tied (one replacement per original tensor).
    """
    import torch  # noqa: PLC0415

    done: dict[int, Any] = {}

    def fresh(tensor):
        if id(tensor) not in done:
            empty = torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device="cpu")
            if isinstance(tensor, torch.nn.Parameter):
                empty = torch.nn.Parameter(empty, requires_grad=tensor.requires_grad)
            done[id(tensor)] = empty
        return done[id(tensor)]

    for sub in module.modules():
        for name, value in list(sub._parameters.items()):
            if value is not None:
                sub._parameters[name] = fresh(value)
        for name, value in list(sub._buffers.items()):
            if value is not None:
                sub._buffers[name] = fresh(value)


def steady_state_buckets(params, cap_mb: float) -> list[int]:
    """Bytes of each gradient bucket DDP uses after its first iteration, when it rebuilds its
    buckets by ``bucket_cap_mb`` in the order the gradients became ready (the trace keeps the
    first iteration's layout: see the module docstring).  The ready order is taken as the reverse
    of the parameters' order (backward visits layers last to first); the assignment is torch's own
    ``dist._compute_bucket_assignment_by_size`` (torch/nn/parallel/distributed.py ``_ddp_init_helper``,
    torch 2.13.0), run on meta tensors of the parameters' shapes."""
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415

    tensors = [torch.empty(p.shape, dtype=p.dtype, device="meta") for p in params][::-1]
    if not tensors:
        return []
    cap = int(cap_mb * 2**20)
    # the rebuilt first bucket is capped at dist._DEFAULT_FIRST_BUCKET_BYTES (1 MiB), as the reducer's
    # rebuild does (torch/csrc/distributed/c10d/reducer.cpp rebuild_buckets), then bucket_cap_mb
    limits = [min(dist._DEFAULT_FIRST_BUCKET_BYTES, cap), cap]
    indices, _ = dist._compute_bucket_assignment_by_size(tensors, limits, [False] * len(tensors),
                                                         list(range(len(tensors))))
    return [sum(tensors[i].numel() * tensors[i].element_size() for i in bucket) for bucket in indices]


def _ddp(module, options, ledger, comm_counter: dict):
    """``DistributedDataParallel`` around ``module`` (already fake-materialized); see the module docstring."""
    import torch  # noqa: PLC0415
    from torch.nn.parallel import DistributedDataParallel  # noqa: PLC0415

    cap = options.bucket_cap_mb if options.bucket_cap_mb is not None else DDP_DEFAULT_BUCKET_CAP_MB
    wrapped = DistributedDataParallel(module, bucket_cap_mb=cap, init_sync=False,
                                      gradient_as_bucket_view=options.gradient_as_bucket_view)

    def allreduce_in_place(state, bucket):
        buffer = bucket.buffer()
        ledger.retag(buffer, "communication")
        if comm_counter["step"] == ledger.step:
            comm_counter["comm"].add("all_reduce", _nbytes(buffer))
        future = torch.futures.Future()
        future.set_result(buffer)
        return future

    wrapped.register_comm_hook(None, allreduce_in_place)
    wrapped.reducer = _KeepBuckets(wrapped.reducer)
    return wrapped


def apply_fully_shard(module, options, mesh):
    """FSDP2 ``fully_shard`` on each repeated block of ``module`` (on meta), then on the root; returns the FQNs."""
    import torch  # noqa: PLC0415
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard  # noqa: PLC0415

    from memlint.estimate.step import repeated_blocks  # noqa: PLC0415

    kwargs: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": options.reshard_after_forward}
    if options.fsdp_param_dtype:
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[options.fsdp_param_dtype]
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    if options.fsdp_cpu_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=False)
    units = []
    for name, block in repeated_blocks(module):
        fully_shard(block, **kwargs)
        units.append(name)
    fully_shard(module, **kwargs)
    return units + ["<root>"]


def _emulation(target, note_unmodelled):
    """memlint.estimate.emulation.KernelEmulation for this trace's "cpu" FakeTensors.

    Its CUDA kernels (SDPA backends, fused dropout, cuDNN RNNs) are registered at
    ``AutogradMeta`` for meta tensors; on a CUDA target they are registered at
    ``AutogradCPU`` too, where the FakeTensors of the engines dispatch.  On the CPU
    target the FakeTensors take the CPU kernels themselves.
    """
    from memlint.estimate.emulation import KernelEmulation  # noqa: PLC0415

    class FakeCpuEmulation(KernelEmulation):
        def _register_kernels(self) -> None:
            if not self.target.is_cuda:
                return super()._register_kernels()
            library = self._library
            register = library.impl

            def on_both_keys(name, kernel, key):
                register(name, kernel, key)
                if key == "AutogradMeta":
                    register(name, kernel, "AutogradCPU")

            library.impl = on_both_keys
            try:
                return super()._register_kernels()
            finally:
                del library.impl

    return FakeCpuEmulation(target, note_unmodelled)


def _meta_inputs(workload, micro_batch: int):
    """The workload's inputs for ``micro_batch`` on meta, built outside every mode (nothing recorded)."""
    import torch  # noqa: PLC0415
    from torch.utils._python_dispatch import _disable_current_modes  # noqa: PLC0415

    with _disable_current_modes(), torch.device("meta"):
        try:
            return workload.make_inputs(micro_batch)
        except (TargetError, UsageError):
            raise
        except Exception as exc:  # noqa: BLE001
            raise TargetError(f"make_inputs({micro_batch}) of {workload.name!r} raised {one_line(exc)}") from None


def _to_fake(value, dtype):
    """Inputs (tensor / tuple / dict) recreated as "cpu" FakeTensors (FakeTensor mode active), floats cast to dtype."""
    import torch  # noqa: PLC0415

    if isinstance(value, torch.Tensor):
        cast = dtype if dtype is not None and value.is_floating_point() else value.dtype
        return torch.empty(value.shape, dtype=cast, device="cpu")
    if isinstance(value, dict):
        return {k: _to_fake(v, dtype) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_fake(v, dtype) for v in value)
    return value


def _tag_setup(ledger, module) -> None:
    """After the engine is built: parameters and buffers by name; every other survivor of setup is communication."""
    for param in module.parameters():
        ledger.track(param, "parameter", op="parameter")
        ledger.retag(param, "parameter")
    for buffer in module.buffers():
        ledger.track(buffer, "buffer", op="buffer")
        ledger.retag(buffer, "buffer")
    for sid in ledger._live.values():
        record = ledger.records[sid]
        if record.phase == "setup" and record.category == "temporary":
            record.category = "communication"


def _own_copy(workload):
    """The module the engines may change (they replace its parameters and class): a deep copy of the
    workload's meta module when the workload has no factory to build a fresh one (meta tensors copy no data)."""
    import copy  # noqa: PLC0415

    if workload.factory is not None:
        return workload.module  # api.estimate built this workload fresh for this trace
    try:
        return copy.deepcopy(workload.module)
    except Exception as exc:  # noqa: BLE001
        raise TargetError(f"--parallel: the module of {workload.name!r} cannot be copied for the engine "
                          f"({one_line(exc)}); give the workload a factory") from None


def trace_distributed(workload, options, ledger, target) -> dict:
    """Trace ``options.trace_steps`` steps of rank 0 under ``options.parallel``; the facts of step.trace_training.

    Extra fact: ``communication`` (:meth:`Communication.to_json` of the first measured step),
    ``fsdp_units`` (FQNs sharded as one unit, ``--parallel fsdp`` and ``fsdp+tp``) and ``tp_plan``
    (``--parallel tp|fsdp+tp``: :meth:`memlint.estimate.tensor_parallel.TPPlan.to_json`, else None).
    Raises UsageError / TargetError (a model without a plan, or whose forward is not tensor-parallel-ready).
    """
    import torch  # noqa: PLC0415
    from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: PLC0415

    from memlint.estimate import step as steps  # noqa: PLC0415
    from memlint.estimate.tracer import ModuleTracker, make_ledger_mode  # noqa: PLC0415

    check_parallel_options(options)
    batch = options.batch_size or workload.default_batch_size
    if batch % options.grad_accum:
        raise UsageError(f"--batch-size {batch} is not a multiple of --grad-accum {options.grad_accum}")
    micro_batch = batch // options.grad_accum
    module = _own_copy(workload)
    module.train()
    if options.precision in ("bf16", "fp16"):
        module.to(torch.bfloat16 if options.precision == "bf16" else torch.float16)
    checkpointed = steps.apply_checkpointing(module) if options.checkpointing else []
    counter = {"step": 1, "comm": Communication(options.world_size)}
    emulation = _emulation(target, ledger.note_unmodelled)
    if not target.is_cuda:
        from memlint.estimate.cpu_scratch import ScratchProbe  # noqa: PLC0415

        ledger.scratch_probe = ScratchProbe(threads=RANK_INTRA_OP_THREADS)
    units: list[str] = []
    plan = None
    with fake_world(options.world_size), ExitStackWithErrors(workload) as stack:
        mesh = None
        if options.parallel == "fsdp":
            from torch.distributed.device_mesh import init_device_mesh  # noqa: PLC0415

            mesh = init_device_mesh("cpu", (options.world_size,))  # before FakeTensorMode: its ranks are real
            # fully_shard on the meta module outside every mode: it chunks each parameter into one piece
            # per rank (1024 ranks: ~80,000 meta ops) and allocates nothing; to_empty below materializes
            units = apply_fully_shard(module, options, mesh)
        elif options.parallel in ("tp", "fsdp+tp"):
            plan, units = _tensor_parallel(workload, module, options, micro_batch)
        stack.enter_context(FakeTensorMode(allow_non_fake_inputs=True))
        stack.enter_context(_mixed_batch_norm_mode())
        stack.enter_context(_libraries_see_a_real_run())
        stack.enter_context(make_ledger_mode(ledger, target))
        stack.enter_context(_collective_mode(ledger, counter, gloo=not target.is_cuda))
        stack.enter_context(report_resizes(ledger))
        ledger.set_phase("setup", step=0)
        if options.parallel == "ddp":
            _fake_materialize(module)
            engine = _ddp(module, options, ledger, counter)
        else:
            module.to_empty(device="cpu")
            engine = module
        _tag_setup(ledger, module)
        params = [p for p in module.parameters() if p.requires_grad]
        if not params:
            raise TargetError(f"workload {workload.name!r} has no trainable parameters")
        optimizer = steps.build_optimizer(options.optimizer, params, workload.optimizer_factory, ledger)
        handles = steps._retag_hooks(params, ledger)
        stack.callback(lambda: [h.remove() for h in handles])
        stack.enter_context(ModuleTracker(module, ledger))
        stack.enter_context(emulation)
        input_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(options.precision)
        for index in range(options.trace_steps):
            try:
                _one_step(workload, engine, module, optimizer, options, micro_batch, ledger, index, input_dtype)
            except TargetError as exc:
                if plan is None:
                    raise
                from memlint.estimate.tensor_parallel import not_tp_ready  # noqa: PLC0415

                raise not_tp_ready(exc, workload.name) from None
        ledger.close()
    if options.parallel == "ddp":
        cap = options.bucket_cap_mb if options.bucket_cap_mb is not None else DDP_DEFAULT_BUCKET_CAP_MB
        counter["comm"].split_all_reduces(steady_state_buckets(params, cap))
    steps.remove_checkpointing(module, checkpointed)
    if ledger.scratch_probe is not None:
        from memlint.estimate.cpu_scratch import add_measured_scratch  # noqa: PLC0415

        try:
            add_measured_scratch(ledger, ledger.scratch_probe)
        except RuntimeError as exc:  # a probed call whose traced dtypes a real CPU kernel rejects
            ledger.report_unsupported("CPU kernel scratch probe", f"not measured ({one_line(exc)})")
    return {"checkpointed": checkpointed, "micro_batch": micro_batch, "batch_size": batch,
            "optimizer": steps._optimizer_label(optimizer), "kernel_choices": dict(emulation.choices),
            "unmodelled": [{"kernel": what, "module": fqn, "count": n}
                           for (what, fqn), n in sorted(ledger.unmodelled.items())],
            "communication": counter["comm"].to_json(), "fsdp_units": units,
            "tp_plan": plan.to_json() if plan is not None else None}


def _tensor_parallel(workload, module, options, micro_batch: int):
    """Tensor parallel on the meta ``module`` (then FSDP2 on the "dp" dim for fsdp+tp), outside every mode.

    Returns (the TPPlan, the FSDP2 unit FQNs).  See memlint/estimate/tensor_parallel.py.
    """
    from memlint.estimate import tensor_parallel as tp  # noqa: PLC0415

    mesh = tp.device_mesh(options)  # before FakeTensorMode: its ranks are real
    plan = tp.find_plan(module, _meta_inputs(workload, micro_batch), workload.name)
    return plan, tp.shard_module(module, plan, options, mesh)


class ExitStackWithErrors(contextlib.ExitStack):
    """An ExitStack that turns an engine's or the model's failure inside it into a one-line TargetError."""

    def __init__(self, workload):
        super().__init__()
        self.workload = workload

    def __exit__(self, kind, exc, tb):
        suppressed = super().__exit__(kind, exc, tb)
        if exc is not None and not isinstance(exc, (TargetError, UsageError)) and isinstance(exc, Exception):
            raise TargetError(f"distributed trace of {self.workload.name!r} failed: {one_line(exc)}") from None
        return suppressed


def _one_step(workload, engine, module, optimizer, options, micro_batch, ledger, index, input_dtype) -> None:
    """One training step through the engine, the statement order of memlint/estimate/step.py."""
    from memlint.estimate import step as steps  # noqa: PLC0415

    ledger.set_phase("forward", step=index, micro=0)
    optimizer.zero_grad(set_to_none=options.set_to_none)
    for micro in range(options.grad_accum):
        ledger.set_phase("forward", micro=micro)
        inputs = _to_fake(_meta_inputs(workload, micro_batch), input_dtype)
        for tensor in steps._tensors(inputs):
            ledger.retag(tensor, "input")
        del tensor  # the loop's name would keep the last input alive through the optimizer step
        steps.forward_backward(workload, engine, inputs, options, ledger)
        del inputs
        for param in module.parameters():
            if param.grad is not None:
                ledger.retag(param.grad, "gradient")
    ledger.set_phase("optimizer")
    optimizer.step()
