"""The traced step as a PyTorch memory snapshot (``memlint estimate --snapshot FILE.pickle``).

The ledger's alloc/free events are replayed through the caching allocator
model (:class:`memlint.estimate.allocator.CachingAllocatorModel`) once more,
this time keeping what ``torch.cuda.memory._snapshot()`` returns: the
segments and their blocks at the end of the trace, and the allocator's trace
entries (``segment_alloc``, ``alloc``, ``free_requested``, ``free_completed``).
The same replay keeps every counter of ``torch.cuda.memory_stats()`` per pool
(:func:`memlint.estimate.summary.format_summary` prints them as
``torch.cuda.memory_summary()`` does).

Format (torch 2.13.0, ``torch/cuda/memory.py``, docstring of ``_snapshot``):
``{"segments": [Segment], "device_traces": [[TraceEntry] per device]}``;
a Segment has ``device, address, total_size, allocated_size, active_size,
requested_size, stream, segment_type ('small'/'large'), segment_pool_id,
blocks``; a Block ``address, size, requested_size, state ('active_allocated'
/ 'inactive'), frames``; a TraceEntry ``action, addr, size, stream, frames``;
a Frame ``filename, line, name``.  Facts taken from PyTorch's readers:

* the trace's ``size`` of an ``alloc`` is the size *requested* (the caching
  allocator records ``orig_size``, c10/cuda/CUDACachingAllocator.cpp,
  ``alloc_found_block``), so the memory visualizer's "Active Memory
  Timeline" peaks at ``requested_bytes.all.peak``, not at
  ``max_memory_allocated()`` (which counts whole 512-byte-rounded blocks);
* pytorch.org/memory_viz (``torch/utils/viz/MemoryViz.js``, ``unpickle``)
  reads pickle protocols 2 to 4 only, so the file is written with protocol 4;
* it pairs a ``free_requested`` with the ``free_completed`` that follows it
  (``annotate_snapshot``), so both are written back to back;
* ``_memory_viz.segsum`` requires, per segment, that the blocks' sizes add
  up to ``total_size``.

What is recorded: the measured steps (step 1 on), as a user who calls
``torch.cuda.memory._record_memory_history()`` after the warm-up step would
record them; storages created before that (parameters, optimizer state, the
cuBLAS workspace) are blocks of the segments, as in a real snapshot, and
appear in the visualizer as allocated before recording began.  There are no
timestamps (``time_us``): the trace has no time, only op order.

Frames: the tracer records no Python stack, so each allocation carries
frames that say what memlint knows, innermost first:
``memlint.op:<op index>:<aten op>``, ``memlint.module:0:<module FQN> (<class>)``, the
Python frame of that module's ``forward`` (its file and the line of its
``def``) when the module's class can be found, ``memlint.category:0:<category>``
and ``memlint.phase:<step>:<phase>``.  ``memlint explain`` reads these back.
"""

from __future__ import annotations

import inspect
import pickle
from dataclasses import dataclass, field
from typing import Any

from memlint.errors import UsageError
from memlint.estimate.allocator import Block, CachingAllocatorModel

#: The first segment's made-up device address: any non-zero value would do
#: (the readers only compare addresses); this one has the high bits of a
#: typical CUDA virtual address, so it reads like a real one.
BASE_ADDRESS = 0x7F0000000000
#: Address space between devices in the snapshot of a workload placed on several (1 TiB, more than
#: any GPU holds; CUDA's unified virtual addressing gives each device's memory its own addresses). A choice of ours.
DEVICE_ADDRESS_STRIDE = 1 << 40
#: Segments are placed at multiples of 2 MiB (the granularity of cudaMalloc's
#: large allocations; ``kSmallBuffer`` in c10/cuda/CUDACachingAllocator.cpp).
ADDRESS_ALIGNMENT = 2 << 20
#: Pickle protocol: MemoryViz.js's ``unpickle`` accepts 2..4 (torch/utils/viz/MemoryViz.js).
PICKLE_PROTOCOL = 4
#: Frame file names that carry memlint's own facts (read back by ``memlint explain``).
FRAME_OP, FRAME_MODULE, FRAME_CATEGORY, FRAME_PHASE = "memlint.op", "memlint.module", "memlint.category", "memlint.phase"
POOLS = ("all", "large_pool", "small_pool")
#: The ``memory_stats()`` counters kept per pool (c10/core/CachingDeviceAllocator.h, ``DeviceStats``).
POOL_STATS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
              "active_bytes", "inactive_split_bytes", "requested_bytes")


@dataclass
class Stat:
    """One ``memory_stats()`` counter (c10/core/CachingDeviceAllocator.h ``Stat``): bytes or a count."""

    current: int = 0
    peak: int = 0
    allocated: int = 0
    freed: int = 0

    def increase(self, amount: int) -> None:
        self.current += amount
        self.allocated += amount
        self.peak = max(self.peak, self.current)

    def decrease(self, amount: int) -> None:
        self.current -= amount
        self.freed += amount

    def change(self, amount: int) -> None:
        """increase for a positive ``amount``, decrease for a negative one."""
        if amount > 0:
            self.increase(amount)
        elif amount < 0:
            self.decrease(-amount)


@dataclass
class DeviceStats:
    """The per-pool counters of ``torch.cuda.memory_stats()`` (``all``, ``large_pool``, ``small_pool``)."""

    stats: dict[tuple[str, str], Stat] = field(
        default_factory=lambda: {(name, pool): Stat() for name in POOL_STATS for pool in POOLS})

    def change(self, name: str, small: bool, amount: int) -> None:
        """Add ``amount`` to counter ``name`` of the block's pool and of ``all``."""
        self.stats[(name, "all")].change(amount)
        self.stats[(name, "small_pool" if small else "large_pool")].change(amount)

    def reset_peaks(self) -> None:
        """``torch.cuda.reset_peak_memory_stats()``: every peak restarts from its current value."""
        for stat in self.stats.values():
            stat.peak = stat.current

    def as_memory_stats(self) -> dict[str, int]:
        """The flat dict of ``torch.cuda.memory_stats()`` (``"allocated_bytes.all.peak"`` ...).

        Oversize allocations/segments are 0 (``max_split_size`` is unlimited by
        default) and so are ``num_ooms`` and ``num_alloc_retries`` (the step fits
        in the modelled allocator, which has no limit here).
        """
        flat: dict[str, int] = {}
        for (name, pool), stat in self.stats.items():
            for part in ("current", "peak", "allocated", "freed"):
                flat[f"{name}.{pool}.{part}"] = getattr(stat, part)
        for name in ("oversize_allocations", "oversize_segments"):
            for part in ("current", "peak", "allocated", "freed"):
                flat[f"{name}.{part}"] = 0
        flat.update({"num_ooms": 0, "num_alloc_retries": 0,
                     "num_device_alloc": self.stats[("segment", "all")].allocated,
                     "num_device_free": self.stats[("segment", "all")].freed})
        return flat


class RecordingAllocator(CachingAllocatorModel):
    """The caching allocator model, also keeping segments, per-pool counters and a trace.

    ``record`` (set by the caller) turns trace recording on; each entry is a
    dict in the format of ``torch.cuda.memory._snapshot()["device_traces"][0]``.
    """

    def __init__(self):
        super().__init__()
        self.device_stats = DeviceStats()
        self.heads: list[tuple[int, Block]] = []  # (address, first block) per segment, in creation order
        self.addresses: dict[int, int] = {}  # segment number -> address
        self.next_address = BASE_ADDRESS
        self.trace: list[dict] = []
        self.record = False
        self.requested: dict[int, tuple[int, list]] = {}  # id(block) -> (requested bytes, frames)
        self._frames: list = []
        self._was_split = False

    def address_of(self, block: Block) -> int:
        return self.addresses[block.segment] + block.offset

    def _new_segment(self, small: bool, size: int) -> Block:
        head = super()._new_segment(small, size)
        address = self.next_address
        self.next_address += -(-size // ADDRESS_ALIGNMENT) * ADDRESS_ALIGNMENT
        self.addresses[head.segment] = address
        self.heads.append((address, head))
        self.device_stats.change("segment", small, 1)
        self.device_stats.change("reserved_bytes", small, size)
        self._trace("segment_alloc", address, size, self._frames)
        return head

    def release_cached_segments(self) -> int:  # pragma: no cover - the snapshot replay has no limit
        raise NotImplementedError("the snapshot replay never releases segments")

    def malloc_with(self, nbytes: int, frames: list) -> Block | None:
        """``malloc(nbytes)`` recording the allocation with ``frames``; returns the block."""
        if nbytes <= 0:
            return None
        self._frames = frames
        self._was_split = False
        before = self.inactive_split
        block = self.malloc(nbytes)
        small = block.small
        # A found block that was already split is one inactive split block fewer; a
        # split leaves a free remainder right after the block (free neighbours are
        # always merged, so a free next block can only be that remainder).
        made_rest = block.next is not None and block.next.free
        stats = self.device_stats
        stats.change("inactive_split_bytes", small, self.inactive_split - before)
        stats.change("inactive_split", small, int(made_rest) - int(self._was_split))
        for name in ("allocation", "active"):
            stats.change(name, small, 1)
        for name in ("allocated_bytes", "active_bytes"):
            stats.change(name, small, block.size)
        stats.change("requested_bytes", small, nbytes)
        self.requested[id(block)] = (nbytes, frames)
        self._trace("alloc", self.address_of(block), nbytes, frames)
        return block

    def _best_fit(self, small: bool, size: int) -> Block | None:
        block = super()._best_fit(small, size)
        if block is not None:
            self._was_split = block.prev is not None or block.next is not None
        return block

    def free_with(self, block: Block | None) -> None:
        """``free(block)``, recording ``free_requested`` and ``free_completed``."""
        if block is None:
            return
        nbytes, frames = self.requested.pop(id(block))
        address, size, small = self.address_of(block), block.size, block.small
        merged = sum(1 for n in (block.prev, block.next) if n is not None and n.free)
        left = block.prev.prev if block.prev is not None and block.prev.free else block.prev
        right = block.next.next if block.next is not None and block.next.free else block.next
        before = self.inactive_split
        self.free(block)
        stats = self.device_stats
        stats.change("inactive_split_bytes", small, self.inactive_split - before)
        stats.change("inactive_split", small, (1 if left is not None or right is not None else 0) - merged)
        for name in ("allocation", "active"):
            stats.change(name, small, -1)
        for name in ("allocated_bytes", "active_bytes"):
            stats.change(name, small, -size)
        stats.change("requested_bytes", small, -nbytes)
        self._trace("free_requested", address, nbytes, frames)
        self._trace("free_completed", address, nbytes, frames)

    def _trace(self, action: str, address: int, size: int, frames: list) -> None:
        if self.record:
            self.trace.append({"action": action, "addr": address, "size": size, "stream": 0, "frames": frames})

    def segment_list(self, device: int = 0) -> list[dict]:
        """The segments in the format of ``_snapshot()["segments"]``, by address."""
        out = []
        for address, head in sorted(self.heads, key=lambda item: item[0]):
            blocks, block = [], head
            while block is not None:
                requested, frames = self.requested.get(id(block), (0, []))
                blocks.append({"address": address + block.offset, "size": block.size,
                               "requested_size": requested if not block.free else 0,
                               "state": "inactive" if block.free else "active_allocated",
                               "frames": [] if block.free else frames})
                block = block.next
            allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
            out.append({
                "device": device, "address": address, "total_size": sum(b["size"] for b in blocks),
                "allocated_size": allocated, "active_size": allocated,
                "requested_size": sum(b["requested_size"] for b in blocks),
                "stream": 0, "segment_type": "small" if head.small else "large",
                "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": blocks,
            })
        return out


@dataclass
class Recording:
    """What the snapshot replay keeps: the allocator (segments, counters) and its trace."""

    allocator: RecordingAllocator
    trace: list[dict]

    @property
    def memory_stats(self) -> dict[str, int]:
        """``torch.cuda.memory_stats()`` at the end of the trace (peaks since step 1 began)."""
        return self.allocator.device_stats.as_memory_stats()

    def snapshot(self) -> dict:
        """The ``torch.cuda.memory._snapshot()`` dict (one device, index 0)."""
        return {
            "segments": self.allocator.segment_list(),
            "device_traces": [self.trace],
            # the settings the model assumes: PyTorch's defaults (c10/core/AllocatorConfig.h)
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                                   "garbage_collection_threshold": 0.0, "expandable_segments": False},
        }


def _placed_snapshot(result, module=None) -> dict:
    """The snapshot of a workload placed on several devices: each device's segments (tagged with
    its index) and one trace per device index, as ``torch.cuda.memory._snapshot()`` lists them."""
    document, segments, traces = None, [], {}
    for entry in result.devices:
        recording = record_step(result, module, device=entry["index"])
        segments += recording.allocator.segment_list(device=entry["index"])
        traces[entry["index"]] = recording.trace
        document = document or recording.snapshot()
    document["segments"] = segments
    document["device_traces"] = [traces.get(index, []) for index in range(max(traces) + 1)]
    return document


class _FrameMaker:
    """Frames for each storage record; one list per record, shared by its entries (pickled once)."""

    def __init__(self, module=None):
        self.module = module
        self.python: dict[str, tuple[str, dict | None]] = {}

    def resolved(self, fqn: str) -> tuple[str, dict | None]:
        """(module label, Python frame of its forward or None) for the FQN ``fqn``."""
        if fqn not in self.python:
            self.python[fqn] = self._resolve(fqn)
        return self.python[fqn]

    def _resolve(self, fqn: str) -> tuple[str, dict | None]:
        label = fqn or "<root>"
        if self.module is None or not fqn:
            return label, None
        try:
            submodule = self.module if fqn == type(self.module).__name__ else self.module.get_submodule(fqn)
        except AttributeError:
            return label, None
        cls = type(submodule)
        if fqn != cls.__name__:
            label = f"{fqn} ({cls.__name__})"
        try:
            filename = inspect.getsourcefile(cls.forward)
            line = inspect.getsourcelines(cls.forward)[1]
        except (AttributeError, TypeError, OSError):
            return label, None
        if filename is None:
            return label, None
        return label, {"filename": filename, "line": line, "name": "forward"}

    def frames(self, record) -> list[dict]:
        label, python = self.resolved(record.module)
        frames = [{"filename": FRAME_OP, "line": record.born, "name": record.op or "?"},
                  {"filename": FRAME_MODULE, "line": 0, "name": label}]
        if python is not None:
            frames.append(python)
        frames.append({"filename": FRAME_CATEGORY, "line": 0, "name": record.category})
        frames.append({"filename": FRAME_PHASE, "line": record.step, "name": record.phase})
        return frames


def record_step(result, module=None, device: int | None = None) -> Recording:
    """Replay ``result``'s ledger (an :class:`memlint.estimate.api.Estimate`) keeping the snapshot.

    module: the workload's ``nn.Module`` (optional), used to add the Python
    frame of each module's ``forward``.  Bytes are sharded as in the estimate
    (``--zero-stage``).  device: replay only that device's storages (a workload
    placed on several, :mod:`memlint.estimate.placement`; addresses from
    ``device * DEVICE_ADDRESS_STRIDE`` up); None: every storage.  Raises
    UsageError for a CPU-target estimate (there is no caching allocator to
    snapshot) or one without a ledger.
    """
    from memlint.estimate.api import _shard_factor  # noqa: PLC0415
    from memlint.estimate.placement import device_ledger  # noqa: PLC0415

    ledger = result.ledger
    if ledger is None:
        raise UsageError("this estimate kept no trace (ledger) to replay")
    if result.options.device == "cpu":
        raise UsageError("--snapshot and --format summary show the CUDA caching allocator: "
                         "not available with --device cpu (no caching on the CPU)")
    if device is not None:
        ledger = device_ledger(ledger, device)
    allocator = RecordingAllocator()
    allocator.next_address += (device or 0) * DEVICE_ADDRESS_STRIDE
    steady_start = next((op for op, _, step in ledger.phases if step == 1), 0)
    maker = _FrameMaker(module)
    frames: dict[int, list] = {}
    blocks: dict[int, Any] = {}
    for op_index, sid, is_alloc in ledger.events:
        if not allocator.record and op_index >= steady_start:
            allocator.record = True
            allocator.reset_peaks()
            allocator.device_stats.reset_peaks()
        record = ledger.records[sid]
        if is_alloc:
            nbytes = -(-record.nbytes // _shard_factor(record.category, result.options))
            if sid not in frames:
                frames[sid] = maker.frames(record)
            blocks[sid] = allocator.malloc_with(nbytes, frames[sid])
        else:
            allocator.free_with(blocks.pop(sid, None))
    return Recording(allocator, allocator.trace)


def write_snapshot(result, path: str, module=None) -> Recording:
    """Write ``result``'s traced step to ``path`` as a pickled ``torch.cuda.memory._snapshot()``.

    A workload placed on several devices gets each device's segments and
    trace.  Returns the :class:`Recording` (every device in one replay).
    Raises UsageError naming the file when it cannot be written.
    """
    recording = record_step(result, module)
    document = recording.snapshot() if not result.devices else _placed_snapshot(result, module)
    try:
        with open(path, "wb") as handle:
            pickle.dump(document, handle, protocol=PICKLE_PROTOCOL)
    except OSError as exc:
        raise UsageError(f"--snapshot {path!r}: cannot write: {exc.strerror or exc}") from None
    return recording

