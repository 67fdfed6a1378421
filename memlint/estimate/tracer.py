"""The ledger: every device storage of a traced training step, its life and its category.

A ``TorchDispatchMode`` (:class:`LedgerMode`) sees every aten op below
autograd.  Each output tensor's storage (``untyped_storage()``; views and
aliases share it, so they are counted once) is recorded on first sight with
its bytes, phase, step and the FQN of the innermost module running (tracked
with global forward pre/post hooks).  A ``weakref.finalize`` on the storage
object (PyTorch keeps a storage's Python object alive exactly as long as the
C++ storage) records its death, so the live-bytes timeline is exact.

Categories: parameter, buffer, gradient, optimizer_state, activation (created
in a forward pass and still alive when that forward -- loss included -- ends:
kept by the autograd graph or by the outputs), temporary, input, and
workspace (library workspaces and kernel scratch: cuBLAS, attention backward buffers), and
communication (buffers of a distributed engine's collectives: DDP gradient buckets,
FSDP all-gather / reduce-scatter buffers; memlint/estimate/distributed.py).

Traced tensors are meta tensors, or FakeTensors (the distributed trace runs
the real engines under ``FakeTensorMode``); a tensor subclass that wraps
others (DTensor) is counted through the tensors it wraps.
"""

from __future__ import annotations

import itertools
import weakref
from dataclasses import dataclass, field
from typing import Any

from memlint.estimate.messages import first_line
from memlint.estimate.placement import device_of_key, drain_adopted, op_device, tag_outputs

CATEGORIES = ("parameter", "buffer", "gradient", "optimizer_state", "activation",
              "temporary", "input", "workspace", "communication")


@dataclass
class StorageRecord:
    """One device storage: bytes (unrounded), category, where/when it was created and died (op index)."""

    sid: int
    nbytes: int
    category: str
    phase: str
    step: int
    micro: int
    module: str
    op: str
    born: int
    died: int | None = None
    #: CUDA device index (memlint/estimate/placement.py; 0 unless the workload places tensors on others)
    device: int = 0


@dataclass
class UnsupportedOp:
    """An op the tracer could not run on meta: name, module FQN, the fallback used, how often."""

    op: str
    module: str
    fallback: str
    count: int = 1


@dataclass
class Ledger:
    """Records of storages and the ordered alloc/free event list.

    events: ``(op_index, sid, is_alloc)`` in program order.
    module_classes: class name of each module label the records name.
    phases: ``(first_op_index, phase, step)`` for each phase change.
    """

    cublas_workspace: int = 0
    records: dict[int, StorageRecord] = field(default_factory=dict)
    events: list[tuple[int, int, bool]] = field(default_factory=list)
    phases: list[tuple[int, str, int]] = field(default_factory=list)
    unsupported: dict[tuple[str, str], UnsupportedOp] = field(default_factory=dict)
    unmodelled: dict[tuple[str, str], int] = field(default_factory=dict)
    scratch_probe: Any = None
    count_flops: bool = False
    flops: int = 0
    op_index: int = 0
    phase: str = "setup"
    step: int = 0
    micro: int = 0
    module_stack: list[str] = field(default_factory=list)
    #: module label (FQN; the root's class name for the root) -> its class name, for reports
    module_classes: dict[str, str] = field(default_factory=dict)
    closed: bool = False
    #: CUDA device index of the op running (placement.op_device): where workspaces and scratch go
    device: int = 0
    workspace_threads: set = field(default_factory=set)
    _live: dict[int, int] = field(default_factory=dict)
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    # -- state ---------------------------------------------------------------
    def set_phase(self, phase: str, step: int | None = None, micro: int | None = None) -> None:
        """Enter a phase (forward/backward/optimizer); also sets the step and micro-step indices."""
        if step is not None:
            self.step = step
        if micro is not None:
            self.micro = micro
        self.phase = phase
        self.phases.append((self.op_index, phase, self.step))

    @property
    def module(self) -> str:
        return self.module_stack[-1] if self.module_stack else ""

    # -- storages ------------------------------------------------------------
    def lookup(self, tensor) -> StorageRecord | None:
        """The live record of a tensor's storage, or None."""
        try:
            sid = self._live.get(tensor.untyped_storage()._cdata)
        except (RuntimeError, NotImplementedError):
            return None
        return None if sid is None else self.records[sid]

    def track(self, tensor, category: str = "temporary", op: str = "") -> StorageRecord | None:
        """Record ``tensor``'s storage if new (returns its record; None for real tensors)."""
        inner = _wrapped(tensor)
        if inner is not None:
            records = [self.track(t, category, op) for t in inner]
            return next((r for r in records if r is not None), None)
        if not _traced(tensor):
            return None
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse / nested tensors have no single storage
            self.report_unsupported(f"{tensor.layout} tensor", "no storage: not counted")
            return None
        key = storage._cdata
        sid = self._live.get(key)
        if sid is not None:
            return self.records[sid]
        sid = next(self._ids)
        record = StorageRecord(sid, int(storage.nbytes()), category, self.phase, self.step,
                               self.micro, self.module, op, self.op_index, device=device_of_key(key))
        self.records[sid] = record
        self._live[key] = sid
        self.events.append((self.op_index, sid, True))
        weakref.finalize(storage, self._on_free, key, sid)
        return record

    def relocate(self, key: int, device: int) -> None:
        """The live storage ``key`` is on ``device`` (a floating storage placed: memlint/estimate/placement.py)."""
        sid = self._live.get(key)
        if sid is not None:
            self.records[sid].device = device

    def _on_free(self, key: int, sid: int) -> None:
        if self.closed or self._live.get(key) != sid:
            return
        del self._live[key]
        self.records[sid].died = self.op_index
        self.events.append((self.op_index, sid, False))

    def resized(self, storage, category: str = "parameter") -> None:
        """A storage resized in place (``UntypedStorage.resize_``, which no dispatch mode sees).

        The old size dies and the new one is born now, as one new record in the
        old record's category (``category`` when the storage was not tracked, or was
        a temporary).  Used by the distributed trace: FSDP2 allocates and frees its
        unsharded parameters this way (torch 2.13.0,
        torch/distributed/fsdp/_fully_shard/_fsdp_param.py ``alloc_storage`` / ``free_storage``).
        """
        key = storage._cdata
        old_sid = self._live.pop(key, None)
        keep = category
        if old_sid is not None:
            old = self.records[old_sid]
            old.died = self.op_index
            self.events.append((self.op_index, old_sid, False))
            keep = category if old.category == "temporary" else old.category
        sid = next(self._ids)
        self.records[sid] = StorageRecord(sid, int(storage.nbytes()), keep, self.phase, self.step,
                                          self.micro, self.module, "resize_", self.op_index,
                                          device=device_of_key(key))
        self._live[key] = sid
        self.events.append((self.op_index, sid, True))
        weakref.finalize(storage, self._on_free, key, sid)

    def transient(self, nbytes: int, op: str, category: str = "workspace") -> None:
        """An allocation that lives only during the current op (e.g. a cuDNN workspace)."""
        record = self.persistent(nbytes, op, category)
        record.died = self.op_index
        self.events.append((self.op_index, record.sid, False))

    def persistent(self, nbytes: int, op: str, category: str = "workspace") -> StorageRecord:
        """An allocation that is never freed during the trace (e.g. a cuBLAS workspace)."""
        sid = next(self._ids)
        record = StorageRecord(sid, int(nbytes), category, self.phase, self.step, self.micro,
                               self.module, op, self.op_index, device=self.device)
        self.records[sid] = record
        self.events.append((self.op_index, sid, True))
        return record

    def retag(self, tensor, category: str) -> None:
        """Set the category of a live tensor's storage (e.g. gradient, optimizer_state, input)."""
        inner = _wrapped(tensor)
        if inner is not None:
            for value in inner:
                self.retag(value, category)
            return
        record = self.lookup(tensor) if _traced(tensor) else None
        if record is not None:
            record.category = category

    def tag_forward_survivors(self) -> None:
        """At the end of a forward pass: storages created in it and still alive are activations."""
        for sid in self._live.values():
            record = self.records[sid]
            if (record.phase == "forward" and record.category == "temporary"
                    and record.step == self.step and record.micro == self.micro):
                record.category = "activation"

    def note_unmodelled(self, what: str, module: str | None = None) -> None:
        """Record that ``module`` (default: the running one) uses a kernel whose memory is not (fully) modelled."""
        key = (what, (self.module if module is None else module) or "<root>")
        self.unmodelled[key] = self.unmodelled.get(key, 0) + 1

    def insert_transient(self, op_index: int, position: int, nbytes: int, what: str, module: str = "") -> None:
        """A buffer alive only during op ``op_index`` (already traced), category workspace.

        position: where its alloc/free events go in :attr:`events` -- right
        after the op's outputs were recorded (before the frees that follow the
        op), so the replay counts it on top of them.
        """
        sid = next(self._ids)
        phase, step = self._phase_at(op_index)
        self.records[sid] = StorageRecord(sid, int(nbytes), "workspace", phase, step, 0, module, what,
                                          op_index, died=op_index)
        self.events[position:position] = [(op_index, sid, True), (op_index, sid, False)]

    def _phase_at(self, op_index: int) -> tuple[str, int]:
        current = ("setup", 0)
        for first, phase, step in self.phases:
            if first > op_index:
                break
            current = (phase, step)
        return current

    def report_unsupported(self, op: str, fallback: str) -> None:
        key = (op, self.module)
        if key in self.unsupported:
            self.unsupported[key].count += 1
        else:
            self.unsupported[key] = UnsupportedOp(op, self.module, fallback)

    def close(self) -> None:
        """Stop recording (frees after this point are teardown, not part of the step)."""
        self.closed = True


def _traced(tensor) -> bool:
    """A tensor whose memory the ledger models: on meta, or a FakeTensor (no real storage)."""
    if tensor.device.type == "meta":
        return True
    from torch._subclasses.fake_tensor import FakeTensor  # noqa: PLC0415

    return isinstance(tensor, FakeTensor)


def _wrapped(tensor) -> list | None:
    """The inner tensors of a wrapper subclass (DTensor: its local shard), or None for a plain tensor."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass  # noqa: PLC0415

    if not is_traceable_wrapper_subclass(tensor):
        return None
    import torch  # noqa: PLC0415

    names, _ = tensor.__tensor_flatten__()
    inner = (getattr(tensor, name) for name in names)
    return [value for value in inner if isinstance(value, torch.Tensor)]


def make_ledger_mode(ledger: Ledger, target=None):
    """A TorchDispatchMode that feeds ``ledger`` (see module docstring).

    target: the :class:`memlint.estimate.target.Target`; its
    :func:`memlint.estimate.handlers.dispatch_rules` add kernel scratch,
    replace meta placeholders and note unmodelled kernels; on CUDA targets the
    first cuBLAS op of each thread allocates the cuBLAS workspace.
    """
    import torch  # noqa: PLC0415
    from torch.utils._python_dispatch import TorchDispatchMode  # noqa: PLC0415
    from torch.utils._pytree import tree_flatten  # noqa: PLC0415

    from memlint.estimate.handlers import MATMUL_OPS, DispatchRules, dispatch_rules, fallback_table  # noqa: PLC0415

    fallbacks = fallback_table()
    flop_formulas = _flop_formulas() if ledger.count_flops else {}
    rules = dispatch_rules(target) if target is not None else DispatchRules({}, {}, {})
    cublas_bytes = target.cublas_workspace if target is not None else 0
    probed = rules.probed if ledger.scratch_probe is not None else {}

    class LedgerMode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            ledger.op_index += 1
            name = func.overloadpacket.__name__
            ledger.device = op_device(name, args, kwargs, ledger.module)
            for key, index in drain_adopted():
                ledger.relocate(key, index)
            out = self._run(func, name, args, kwargs)
            tag_outputs(name, args, out, ledger.device)
            if name in rules.outputs:
                out, note = rules.outputs[name](args, out)
                if note:
                    ledger.note_unmodelled(note)
            if name in rules.unmodelled:
                ledger.note_unmodelled(rules.unmodelled[name])
            flat, _ = tree_flatten(out)
            for value in flat:
                if isinstance(value, torch.Tensor):
                    ledger.track(value, op=name)
            for nbytes, what in rules.scratch.get(name, lambda a: [])(args):
                ledger.transient(nbytes, what)
            if name in probed and probed[name](args):
                ledger.scratch_probe.collect(func, args, kwargs, ledger.op_index, len(ledger.events), ledger.module)
            if cublas_bytes and name in MATMUL_OPS:
                self._cublas_workspace(name)
            formula = flop_formulas.get(func.overloadpacket)
            if formula is not None:
                ledger.flops += formula(*args, **kwargs, out_val=out)
            return out

        def _run(self, func, name, args, kwargs):
            try:
                return func(*args, **kwargs)
            except (NotImplementedError, RuntimeError) as exc:
                handler = fallbacks.get(func.overloadpacket)
                if handler is None and not isinstance(exc, NotImplementedError):
                    raise  # an ordinary error of the model (e.g. a shape mismatch)
                if handler is None:
                    from memlint.errors import TargetError  # noqa: PLC0415

                    where = f" in module {ledger.module!r}" if ledger.module else ""
                    raise TargetError(f"op aten.{name}{where} cannot be traced on meta and has no fallback: "
                                      f"{first_line(exc)}") from None
                out, description = handler(args, kwargs)
                ledger.report_unsupported(f"aten.{name}", description)
                return out

        def _cublas_workspace(self, name):
            # CUDA runs backward on the autograd engine's device thread, which gets its
            # own cuBLAS handle and workspace; forward and optimizer share the caller's.
            thread = "backward" if ledger.phase == "backward" else "main"
            if ledger.device > 0:  # each device has its own handles (and autograd device thread)
                thread = f"{thread} cuda:{ledger.device}"
            if thread not in ledger.workspace_threads:
                ledger.workspace_threads.add(thread)
                ledger.cublas_workspace = cublas_bytes
                ledger.persistent(cublas_bytes, f"cublas workspace ({name})")

    return LedgerMode()


def _flop_formulas() -> dict:
    """FLOP formulas per aten op: ``torch.utils.flop_counter.flop_registry``, the table FlopCounterMode counts with
    (used directly: FlopCounterMode's own module tracking hooks would keep tensors alive and change the trace)."""
    from torch.utils.flop_counter import flop_registry  # noqa: PLC0415

    return dict(flop_registry)


class ModuleTracker:
    """Keeps ``ledger.module_stack`` equal to the FQNs of the modules whose forward is running.

    Per-module hooks: a forward pre-hook prepended (it runs before the
    workload's own pre-hooks) and a forward hook appended (after the
    workload's own hooks), so what a module's hooks allocate is attributed to
    that module.  Removed on exit.  Use as a context manager.
    """

    def __init__(self, root, ledger: Ledger):
        self.root = root
        self.ledger = ledger
        self.handles: list = []

    def _pre(self, name: str):
        def hook(module, args):
            self.ledger.module_stack.append(name)
        return hook

    def _post(self, module, args, output):
        if self.ledger.module_stack:
            self.ledger.module_stack.pop()

    def __enter__(self):
        for name, module in self.root.named_modules():
            label = name or type(module).__name__
            self.ledger.module_classes[label] = type(module).__name__
            self.handles.append(module.register_forward_pre_hook(self._pre(label), prepend=True))
            self.handles.append(module.register_forward_hook(self._post, always_call=True))
        return self

    def __exit__(self, *exc):
        for handle in self.handles:
            handle.remove()
        self.ledger.module_stack.clear()
        return False
