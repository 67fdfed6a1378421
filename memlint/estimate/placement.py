"""Model parallel by placement: which CUDA device each traced storage is on, one ledger per device.

A workload may place its modules on several GPUs by hand -- the "naive"
model-parallel split of PyTorch's tutorial "Single-Machine Model Parallel
Best Practices": ``self.seq1 = nn.Sequential(...).to("cuda:0")``,
``self.seq2 = nn.Sequential(...).to("cuda:1")`` and ``x.to("cuda:1")`` in
``forward``.  The trace runs every tensor on the ``meta`` device, which has no
index, so the device index is kept beside the tensors:

* **Tags**: :data:`_TAGS` maps a storage (``untyped_storage()._cdata``) to its
  CUDA device index.  A storage without a tag is on device 0 (what
  ``torch.cuda.current_device()`` returns unless ``torch.cuda.set_device`` is
  called, which the trace cannot do on a CPU-only machine).  A tag is dropped
  when its storage dies (``weakref.finalize``, as the ledger records deaths).
* **Moves** (:func:`move`): ``Tensor.cuda(i)`` / ``.to("cuda:i")`` / ``.to(i)`` /
  ``.to(torch.device("cuda", i))`` / ``.to(other_tensor)`` of a traced tensor on
  another device returns a new storage on device ``i``, and its backward copies
  the gradient back to the source device (as ``ToCopyBackward0`` does,
  torch 2.13.0 tools/autograd/derivatives.yaml ``_to_copy``: ``grad.to(self.options())``);
  a move to the device the tensor is already on returns it unchanged (as
  ``Tensor.to`` does).  Module ``.cuda(i)`` / ``.to(...)`` apply the same move
  to every parameter and buffer (``nn.Module._apply``).
* **Factory calls** with ``device=`` (``"cuda:i"``, ``torch.device("cuda", i)``,
  an int) run under :func:`explicit_device`: every storage the call creates is
  on device ``i``.
* **Ops** (:func:`op_device`): outputs go on the device of their traced
  inputs; inputs on two devices raise :class:`memlint.errors.TargetError`
  naming the op and both devices, as PyTorch raises "Expected all tensors to
  be on the same device".  Exceptions as in PyTorch: ``copy_`` (its
  destination's device) and the ``_foreach_*`` ops (element ``k`` of the
  output lists on the device of element ``k`` of the inputs; the optimizers
  and ``clip_grad_norm_`` group tensors by ``t.device``, which reads ``meta``
  for every traced tensor, so one group can hold several devices).

:func:`per_device` replays each device's storages through its own allocator
model (one caching allocator per device, as ``c10/cuda/CUDACachingAllocator.cpp``
keeps one ``DeviceCachingAllocator`` per device) and adds each device's own
CUDA context and library overheads.

``.to(t.device)`` reads ``meta`` (a traced tensor's device): a 0-dim tensor
moved so becomes a floating copy that serves any device (:func:`floating_scalar`,
what ``clip_grad_norm_`` needs); a larger one stays where it is.  Not followed:
``torch.cuda.set_device`` / ``with torch.cuda.device(i)``.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from dataclasses import dataclass, field
from typing import Any, Iterator

from memlint.errors import TargetError, UsageError

#: storage key (``untyped_storage()._cdata``) -> CUDA device index; absent = device 0.
_TAGS: dict[int, int] = {}
#: the device of the factory call or move running now (innermost last).
_EXPLICIT: list[int] = []
#: how many live storages are on a device other than 0 (placement in use: floating tags on).
_PLACED: list[int] = [0]
#: (storage key, device) of floating storages placed by the last op, for the ledger's records.
_ADOPTED: list[tuple[int, int]] = []
#: the tag of a storage made with ``device=t.device`` (which reads ``meta`` in the trace): its
#: device is learnt when it first meets a placed tensor in an op (device 0 if it never does).
FLOATING = -1
#: ops that may read tensors of another device: the destination's device decides.
CROSS_DEVICE_OPS = frozenset({"copy_", "_copy_from", "_copy_from_and_resize", "set_"})


def placing() -> bool:
    """Whether a live traced storage is on a device other than 0 (placement in use)."""
    return _PLACED[0] > 0


def _set_tag(key: int, index: int) -> None:
    old = _TAGS.get(key, 0)
    if index:
        _TAGS[key] = index
    else:
        _TAGS.pop(key, None)
    _PLACED[0] += (index > 0) - (old > 0)


def _forget(key: int) -> None:
    """The storage ``key`` died: its tag goes."""
    if _TAGS.pop(key, 0) > 0:
        _PLACED[0] -= 1


def device_label(index: int) -> str:
    """``cuda:1`` for index 1."""
    return f"cuda:{index}"


#: Most CUDA devices one process can see: torch's device index is an int8 (c10/core/Device.h
#: ``DeviceIndex``), so torch wraps larger indices (``cuda:99999`` becomes ``cuda:-97``).
MAX_DEVICE_INDEX = 127


def cuda_index(value) -> int | None:
    """The CUDA device index a device argument names, or None if it names no CUDA device.

    ``"cuda"`` and ``torch.device("cuda")`` -> 0 (the current device); ``"cuda:1"``,
    ``torch.device("cuda", 1)`` and the int ``1`` -> 1.  Raises UsageError for a
    malformed ``"cuda:x"`` string or an index above :data:`MAX_DEVICE_INDEX`.
    """
    import torch  # noqa: PLC0415

    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return _checked_index(value, value) if value >= 0 else None
    if isinstance(value, torch.device):
        return _checked_index(value.index or 0, value) if value.type == "cuda" else None
    if isinstance(value, str) and (value == "cuda" or value.startswith("cuda:")):
        suffix = value[5:]
        if value == "cuda":
            return 0
        if not suffix.isdigit():
            raise UsageError(f"device {value!r}: expected cuda or cuda:N")
        return _checked_index(int(suffix), value)
    return None


def _checked_index(index: int, named) -> int:
    if not 0 <= index <= MAX_DEVICE_INDEX:
        raise UsageError(f"device {named!r}: a CUDA device index is 0 to {MAX_DEVICE_INDEX}")
    return index


def _storage_key(tensor) -> int | None:
    try:
        return tensor.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):
        return None


def _is_traced(tensor) -> bool:
    from memlint.estimate.tracer import _traced  # noqa: PLC0415

    return _traced(tensor)


def device_of(tensor) -> int:
    """The CUDA device index of a traced tensor's storage (0 when untagged; :data:`FLOATING` when not yet known)."""
    if not _TAGS:
        return 0
    key = _storage_key(tensor)
    return _TAGS.get(key, 0) if key is not None else 0


def device_of_key(key: int) -> int:
    """The CUDA device index of the storage ``key`` (``untyped_storage()._cdata``)."""
    return _TAGS.get(key, 0) if _TAGS else 0


def tag(tensor, index: int) -> None:
    """Put a traced tensor's storage on device ``index`` (device 0 needs no tag; FLOATING only once placing)."""
    if not index or not _is_traced(tensor) or (index == FLOATING and not placing()):
        return
    try:
        storage = tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return
    key = storage._cdata
    if key not in _TAGS:
        weakref.finalize(storage, _forget, key)
    _set_tag(key, index)


@contextlib.contextmanager
def explicit_device(index: int) -> Iterator[None]:
    """Every storage created inside is on device ``index`` (a factory call with ``device=``, a move)."""
    _EXPLICIT.append(index)
    try:
        yield
    finally:
        _EXPLICIT.pop()


@contextlib.contextmanager
def keep_devices(module) -> Iterator[None]:
    """Each parameter and buffer of ``module`` keeps its device (by FQN) while code outside the trace's
    modes gives it a new storage (a dtype cast: ``nn.Module._apply`` replaces buffers by new tensors)."""
    import itertools  # noqa: PLC0415

    def named():
        return itertools.chain(module.named_parameters(), module.named_buffers())

    devices = {name: device_of(tensor) for name, tensor in named()} if _TAGS else {}
    yield
    if devices:
        for name, tensor in named():
            tag(tensor, devices.get(name, 0))


def _traced_tensors(value) -> Iterator[Any]:
    import torch  # noqa: PLC0415

    if isinstance(value, torch.Tensor):
        if _is_traced(value):
            yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _traced_tensors(item)


def _mixed(op: str, first: int, second: int, module: str) -> TargetError:
    where = f" in module {module!r}" if module else ""
    return TargetError(f"op aten.{op}{where} mixes tensors on {device_label(first)} and {device_label(second)}: "
                       "PyTorch raises 'Expected all tensors to be on the same device' here; move them to one device")


def _common_device(op: str, tensors, module: str, adopt: bool = True) -> int | None:
    """The one device of ``tensors`` (floating ones adopt it unless ``adopt`` is False);
    FLOATING if all float; None if there are none."""
    device = None
    floating = []
    for tensor in tensors:
        index = device_of(tensor)
        if index == FLOATING:
            floating.append(tensor)
        elif device is None:
            device = index
        elif index != device:
            raise _mixed(op, device, index, module)
    if device is None:
        return FLOATING if floating else None
    for tensor in floating if adopt else ():
        if tensor.dim():  # a floating scalar stays a wildcard: it may serve several devices in turn
            _adopt(tensor, device)
    return device


def _adopt(tensor, index: int) -> None:
    key = _storage_key(tensor)
    if key is None:
        return
    _set_tag(key, index)
    _ADOPTED.append((key, index))


def drain_adopted() -> list[tuple[int, int]]:
    """(storage key, device) of the floating storages the last ops placed; the list is emptied."""
    if not _ADOPTED:
        return _ADOPTED
    adopted = list(_ADOPTED)
    _ADOPTED.clear()
    return adopted


def op_device(op: str, args: tuple, kwargs: dict, module: str = "") -> int:
    """The device the outputs of aten op ``op`` go on (see the module docstring).

    Raises TargetError when the op's traced inputs are on two devices.
    """
    if _EXPLICIT:
        return _EXPLICIT[-1]
    if not _TAGS:
        return 0
    if op in CROSS_DEVICE_OPS:
        return device_of(args[0]) if args else 0
    values = list(args) + list(kwargs.values())
    if op.startswith("_foreach_"):
        _check_foreach(op, values, module)
        return 0
    device = _common_device(op, (t for value in values for t in _traced_tensors(value)), module)
    return device or 0


def _check_foreach(op: str, values: list, module: str) -> None:
    """Element k of every list argument (and every plain tensor argument) on one device."""
    import torch  # noqa: PLC0415

    lists = [v for v in values if isinstance(v, (list, tuple)) and v and isinstance(v[0], torch.Tensor)]
    singles = [v for v in values if isinstance(v, torch.Tensor) and _is_traced(v)]
    for k in range(max((len(v) for v in lists), default=0)):
        column = [v[k] for v in lists if k < len(v) and isinstance(v[k], torch.Tensor) and _is_traced(v[k])]
        _common_device(op, column + singles, module, adopt=False)  # a floating scalar serves every element


def tag_outputs(op: str, args: tuple, out, device: int) -> None:
    """Tag the traced tensors ``out`` of op ``op`` with ``device`` (foreach ops: per element)."""
    if not device and not _TAGS:
        return
    import torch  # noqa: PLC0415

    if op.startswith("_foreach_") and not _EXPLICIT and isinstance(out, (list, tuple)):
        source = next((a for a in args if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor)),
                      None)
        for k, tensor in enumerate(out):
            if isinstance(tensor, torch.Tensor) and source is not None and k < len(source):
                tag(tensor, device_of(source[k]))
        return
    if device:
        for tensor in _traced_tensors(out if isinstance(out, (list, tuple)) else [out]):
            tag(tensor, device)


@functools.cache
def _device_copy_class():
    """The autograd Function of a copy between devices (built once, on first use: torch is imported late)."""
    import torch  # noqa: PLC0415

    class DeviceCopy(torch.autograd.Function):
        """A copy between two CUDA devices; its backward copies the gradient back (ToCopyBackward0)."""

        @staticmethod
        def forward(ctx, tensor, source: int, target: int):
            ctx.source = source
            return call_on(target, tensor.clone, (), {})

        @staticmethod
        def backward(ctx, grad):
            return call_on(ctx.source, grad.clone, (), {}), None, None

    return DeviceCopy


def move(tensor, index: int):
    """``tensor`` on device ``index``: itself when it is already there, else a new traced copy (see module doc).

    A floating tensor (made with ``device=`` a traced tensor's ``.device``, or an
    input the workload builds under ``torch.device("meta")``) is put on
    ``index`` without a copy.
    """
    if not _is_traced(tensor):
        return call_on(index, tensor.to, ("meta",), {})
    source = device_of(tensor)
    if source == index:
        return tensor
    if source == FLOATING:  # its device was not known: it is where it is moved (no copy)
        _adopt(tensor, index)
        return tensor
    return _device_copy_class().apply(tensor, source, index)


def to_arguments(args: tuple, kwargs: dict) -> tuple[int, tuple, dict] | None:
    """For ``Tensor.to(*args, **kwargs)``: ``(device index, args, kwargs)`` with the device made ``"meta"``,
    or None when the call names no CUDA device (a dtype-only cast, a host copy).

    The device comes from a positional or ``device=`` argument, or from a
    traced tensor argument (``x.to(y)``: y's device and dtype).
    """
    import torch  # noqa: PLC0415

    index = None
    rest = [args[0]]
    for value in args[1:]:
        if isinstance(value, torch.Tensor) and _is_traced(value):
            if device_of(value) != FLOATING:  # a tensor whose device is not known yet moves nothing
                index = device_of(value)
            rest.extend(["meta", value.dtype])
        elif cuda_index(value) is not None:
            index = cuda_index(value)
            rest.append("meta")
        else:
            rest.append(value)
    if "device" in kwargs and cuda_index(kwargs["device"]) is not None:
        index = cuda_index(kwargs["device"])
        kwargs = dict(kwargs, device="meta")
    return None if index is None else (index, tuple(rest), kwargs)


def placed_to(func, tensor, args: tuple, kwargs: dict, index: int):
    """``func(*args, **kwargs)`` (``Tensor.to`` with the device made meta), its result on device ``index``.

    A dtype change runs on the source device first, then the result moves (one
    transient copy more on the source device than PyTorch's single ``_to_copy``).
    """
    if not _is_traced(tensor):
        return call_on(index, func, args, kwargs)
    return move(func(*args, **kwargs), index)


def is_scalar_to_meta(tensor, args: tuple, kwargs: dict) -> bool:
    """``Tensor.to(t.device)`` of a traced 0-dim tensor while placing (``t.device`` reads ``meta``)."""
    import torch  # noqa: PLC0415

    def is_meta(value) -> bool:
        return value == "meta" or (isinstance(value, torch.device) and value.type == "meta")

    return (placing() and _is_traced(tensor) and tensor.dim() == 0
            and (any(is_meta(a) for a in args[1:]) or is_meta(kwargs.get("device"))))


def floating_scalar(func, tensor, args: tuple, kwargs: dict):
    """``Tensor.to(t.device)`` of a 0-dim tensor: a floating copy, which takes the device of what it meets.

    The trace cannot tell where ``t.device`` is; a scalar moved this way (the
    norms ``clip_grad_norm_`` gathers onto one device and the clip coefficient
    it sends back to each, torch 2.13.0 torch/nn/utils/clip_grad.py
    ``_get_total_norm`` / ``_clip_grads_with_norm_``) is copied (a few bytes) and
    serves every device it meets (a floating scalar is never pinned to one).
    """
    out = func(*args, **kwargs)
    if out.untyped_storage()._cdata == tensor.untyped_storage()._cdata:
        out = out.clone()
    tag(out, FLOATING)
    return out


def call_on(index: int, func, args: tuple, kwargs: dict):
    """``func(*args, **kwargs)`` with every storage it creates on device ``index`` (a factory's ``device=``).

    The result's tensors are tagged here too: outside the ledger's dispatch mode
    (the workload's build) no op sees :func:`explicit_device`.
    """
    with explicit_device(index):
        out = func(*args, **kwargs)
    for tensor in _traced_tensors(out if isinstance(out, (list, tuple)) else [out]):
        tag(tensor, index)
    return out


# ---------------------------------------------------------------------------
# One ledger per device


@dataclass
class DeviceMemory:
    """One device's three numbers (bytes) and its categories at its own peak_allocated instant.

    device_used = peak_reserved + this device's CUDA context and library
    overheads (each device used has its own context); on the CPU target it is
    peak_allocated.
    """

    index: int
    peak_allocated: int
    peak_reserved: int
    device_used: int
    by_category: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict:
        """``{device, index, peak_allocated, peak_reserved, device_used, by_category}`` (bytes)."""
        return {"device": device_label(self.index), "index": self.index, "peak_allocated": self.peak_allocated,
                "peak_reserved": self.peak_reserved, "device_used": self.device_used,
                "by_category": dict(self.by_category)}


def devices_used(ledger) -> list[int]:
    """Sorted device indices that hold at least one storage of the trace (a storage still floating: 0)."""
    return sorted({max(record.device, 0) for record in ledger.records.values()})


def device_ledger(ledger, index: int):
    """A :class:`memlint.estimate.tracer.Ledger` holding only device ``index``'s storages and events."""
    from memlint.estimate.tracer import Ledger  # noqa: PLC0415

    records = {sid: r for sid, r in ledger.records.items() if max(r.device, 0) == index}
    part = Ledger(records=records, phases=list(ledger.phases), op_index=ledger.op_index, closed=True)
    part.events = [event for event in ledger.events if event[1] in records]
    part.module_classes = ledger.module_classes
    return part


def per_device(ledger, options, overhead_bytes: int, cpu: bool) -> list[DeviceMemory]:
    """Each used device's numbers, from its own allocator model replay; [] when one device is used.

    overhead_bytes: the CUDA context and library bytes one device adds to its
    reserved memory (:func:`memlint.estimate.api._overheads`: the context is
    :func:`memlint.estimate.overheads.cuda_context`, a published measurement
    whose source each row of that table names, or ``--cuda-context``); 0 on the
    CPU target.  Every device a process uses creates its own context, so each
    pays it.
    """
    from memlint.estimate.api import _replay  # noqa: PLC0415

    indices = devices_used(ledger)
    if len(indices) < 2:
        return []
    result = []
    for index in indices:
        replay = _replay(device_ledger(ledger, index), options, cpu=cpu)
        allocator = replay.allocator
        result.append(DeviceMemory(index, allocator.peak_allocated, allocator.peak_reserved,
                                   allocator.peak_reserved + overhead_bytes, replay.snapshot))
    return result


def largest_requirement(result, usable: int) -> tuple[int, bool, int]:
    """``(required_bytes, cache_released, device index)`` of the device that needs the most.

    As :func:`memlint.estimate.api.fits` does for one device: a device whose
    device_used exceeds ``usable`` is replayed with its allocator limited to
    ``usable`` minus its overheads; if the step then runs (fully free cached
    segments released), its requirement is that replay's.
    """
    from memlint.estimate.allocator import AllocatorOOM  # noqa: PLC0415
    from memlint.estimate.api import _replay  # noqa: PLC0415

    best = (-1, False, 0)
    cpu = result.options.device == "cpu"
    for entry in result.devices:
        required, released = entry["device_used"], False
        overhead = entry["device_used"] - entry["peak_reserved"]
        if required > usable and result.ledger is not None and not cpu and usable - overhead > 0:
            try:
                part = device_ledger(result.ledger, entry["index"])
                allocator = _replay(part, result.options, limit=usable - overhead).allocator
            except AllocatorOOM:
                pass
            else:
                required, released = allocator.peak_reserved + overhead, True
        if required > best[0]:
            best = (required, released, entry["index"])
    return best


def check_not_distributed(module, options) -> None:
    """UsageError when ``--parallel`` meets a module placed on several devices (not modelled together)."""
    if options.parallel is None:
        return
    import itertools  # noqa: PLC0415

    indices = {max(device_of(t), 0) for t in itertools.chain(module.parameters(), module.buffers())}
    if len(indices) > 1:
        names = ", ".join(device_label(i) for i in sorted(indices))
        raise UsageError(f"--parallel {options.parallel} with a model placed on several devices ({names}) is not "
                         "modelled: estimate the placement without --parallel, or place the model on one device")


def largest_device_used(result) -> int:
    """device_used (bytes) of the device that needs the most: ``result.devices``' largest, or
    ``result.device_used`` for a workload on one device (what the verdict compares)."""
    if not result.devices:
        return result.device_used
    return max(entry["device_used"] for entry in result.devices)
