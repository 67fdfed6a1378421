"""Reading a memory snapshot safely: a restricted unpickler and a checked, typed view of its contents.

A snapshot is untrusted input (a file from a colleague, an issue, a CI
artifact), and ``pickle.load`` runs whatever callables a pickle names.  The
unpickler here resolves no global at all (``find_class`` refuses every
one), so only what pickle builds from its own opcodes comes out: dicts,
lists, tuples, sets, strings, bytes, ints, floats, booleans and None.  That
is everything ``torch.cuda.memory._snapshot()`` contains.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import NamedTuple

from memlint.errors import UsageError

#: Block states of ``_snapshot()`` (torch/cuda/memory.py, torch 2.13.0); older
#: snapshots say ``active_pending_free`` (read by torch/utils/viz/MemoryViz.js).
ACTIVE_STATES = ("active_allocated",)
AWAITING_FREE_STATES = ("active_awaiting_free", "active_pending_free")


#: Sizes and addresses are unsigned 64-bit in the allocator (size_t and
#: pointers, c10/cuda/CUDACachingAllocator.h, torch 2.13.0): anything outside
#: [0, 2**64) is not from a snapshot (and a 5000-digit int cannot be printed).
BYTES_LIMIT = 2**64
#: Line numbers and device indices are C ints / int64 in torch's records.
SIGNED_LIMIT = 2**63
#: Most entries -- segments, blocks, trace entries and frames, each counted
#: every time the snapshot refers to it -- that a snapshot may hold: a bound
#: of ours on the work (the hostile-input issue's suggestion). Measured
#: 2026-12-01 on the 2-core machine: 3,000,001 entries (100,000 blocks of 19
#: frames each, 50,000 trace entries, every frame list its own) load in
#: 3.1 s and analyse in 0.7 s, so the bound is ~25 s of work at most.
#: Shared references (``segments=[s] * n``) make a 20 KB pickle stand for
#: billions.
MAX_ENTRIES = 20_000_000


class _NoGlobalsUnpickler(pickle.Unpickler):
    """An unpickler that refuses every global (class, function) a pickle names."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"it names the Python global {module}.{name}")


class Frame(NamedTuple):
    """One stack frame: file name, line, function name (as ``_snapshot()`` records them)."""

    filename: str
    line: int
    name: str


Frames = tuple  # a tuple of Frame, innermost first; equal stacks are one shared tuple


@dataclass
class SnapshotBlock:
    """A block of a segment: address, size and requested size in bytes, state, allocation frames."""

    address: int
    size: int
    requested_size: int
    state: str
    frames: Frames


@dataclass
class SnapshotSegment:
    """A segment (one cudaMalloc): device, address, total_size (bytes), pool, blocks."""

    device: int
    address: int
    total_size: int
    segment_type: str
    blocks: list[SnapshotBlock]


@dataclass
class TraceEntry:
    """An allocator event of ``device_traces``: action, address, size (bytes), frames; device_free for an OOM."""

    action: str
    addr: int
    size: int
    frames: Frames
    device_free: int | None = None


@dataclass
class Snapshot:
    """A snapshot read by :func:`load_snapshot`: segments and per-device traces."""

    path: str
    segments: list[SnapshotSegment] = field(default_factory=list)
    traces: list[list[TraceEntry]] = field(default_factory=list)


def load_snapshot(path: str) -> Snapshot:
    """Read and check the pickled snapshot at ``path``.

    Accepts the dict of ``torch.cuda.memory._snapshot()`` or a bare list of
    segments (``torch.cuda.memory_snapshot()``).

    Raises:
        UsageError: one line naming the file: it cannot be read, is not a
            pickle, names a Python global (refused, never resolved), lacks
            a key the snapshot format requires, has a size or address outside
            [0, 2**64) (the key is named), or holds more than
            :data:`MAX_ENTRIES` entries.
    """
    try:
        with open(path, "rb") as handle:
            data = _NoGlobalsUnpickler(handle).load()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except pickle.UnpicklingError as exc:
        if str(exc).startswith("it names the Python global"):
            raise UsageError(f"{path}: refused: {exc}; a memory snapshot holds only dicts, lists, strings "
                             "and numbers") from None
        raise UsageError(f"{path}: not a readable pickle ({exc})") from None
    except (EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError, MemoryError,
            RecursionError, OverflowError) as exc:
        raise UsageError(f"{path}: not a readable pickle ({type(exc).__name__})") from None
    return _checked(path, data)


def _checked(path: str, data) -> Snapshot:
    if isinstance(data, list):
        data = {"segments": data, "device_traces": []}
    if not isinstance(data, dict) or not isinstance(data.get("segments"), list):
        raise UsageError(f"{path}: not a memory snapshot: no 'segments' list "
                         "(expected what torch.cuda.memory._snapshot() returns)")
    snapshot = Snapshot(path)
    interned = _Interned(path)
    interned.count(len(data["segments"]))
    for index, segment in enumerate(data["segments"]):
        snapshot.segments.append(_segment(path, f"segments[{index}]", segment, interned))
    traces = data.get("device_traces", [])
    if not isinstance(traces, list):
        raise UsageError(f"{path}: 'device_traces' is not a list")
    for device, trace in enumerate(traces):
        where = f"device_traces[{device}]"
        if not isinstance(trace, list):
            raise UsageError(f"{path}: {where} is not a list")
        interned.count(len(trace))
        snapshot.traces.append([_entry(path, f"{where}[{i}]", entry, interned) for i, entry in enumerate(trace)])
    return snapshot


def _field(path: str, where: str, item, key: str, kind, default=None):
    if not isinstance(item, dict):
        raise UsageError(f"{path}: {where} is not a dict")
    value = item.get(key, default)
    if value is None and default is None:
        raise UsageError(f"{path}: {where}: missing {key!r}")
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        raise UsageError(f"{path}: {where}.{key}: expected {kind.__name__}, got {type(value).__name__}")
    return value


def _bounded(path: str, where: str, item, key: str, default=None, signed: bool = False) -> int:
    """An int field within [0, 2**64) (``signed``: (-2**63, 2**63)); else a one-line error naming the key."""
    value = _field(path, where, item, key, int, default)
    if signed and -SIGNED_LIMIT < value < SIGNED_LIMIT or not signed and 0 <= value < BYTES_LIMIT:
        return value
    kind = "a signed 64-bit int" if signed else "a byte count or address in [0, 2**64)"
    raise UsageError(f"{path}: {where}.{key}: expected {kind}, got an int out of range")


class _Interned:
    """Equal frame lists of a snapshot become one tuple (a snapshot repeats
    the same stacks); a frame list object met again is not checked again.
    Counts the entries against :data:`MAX_ENTRIES`."""

    def __init__(self, path: str):
        self.path = path
        self.stacks: dict[tuple, Frames] = {}
        #: id of a frame list already checked -> (the list, kept alive so the id stays its own; its tuple)
        self.checked: dict[int, tuple[list, Frames]] = {}
        self.entries = 0

    def count(self, entries: int) -> None:
        """Add ``entries``; raises UsageError past :data:`MAX_ENTRIES`."""
        self.entries += entries
        if self.entries > MAX_ENTRIES:
            raise UsageError(f"{self.path}: snapshot too large: more than {MAX_ENTRIES} entries "
                             "(segments, blocks, trace entries and frames, each counted every time it is referred to)")


def _frames(path: str, where: str, frames, interned: _Interned) -> Frames:
    if not isinstance(frames, list):
        raise UsageError(f"{path}: {where}.frames is not a list")
    interned.count(len(frames))
    seen = interned.checked.get(id(frames))
    if seen is not None:
        return seen[1]
    items = []
    for index, frame in enumerate(frames):
        if type(frame) is dict:
            filename, line, name = frame.get("filename", ""), frame.get("line", 0), frame.get("name", "")
            if type(filename) is str and type(line) is int and type(name) is str and -SIGNED_LIMIT < line < SIGNED_LIMIT:
                items.append((filename, line, name))
                continue
        at = f"{where}.frames[{index}]"
        items.append((_field(path, at, frame, "filename", str, ""), _bounded(path, at, frame, "line", 0, signed=True),
                      _field(path, at, frame, "name", str, "")))
    key = tuple(items)
    stack = interned.stacks.get(key)
    if stack is None:
        stack = interned.stacks[key] = tuple(Frame(*item) for item in items)
    interned.checked[id(frames)] = (frames, stack)
    return stack


def _segment(path: str, where: str, segment, interned: _Interned) -> SnapshotSegment:
    address = _bounded(path, where, segment, "address")
    total = _bounded(path, where, segment, "total_size")
    blocks_data = _field(path, where, segment, "blocks", list)
    interned.count(len(blocks_data))
    blocks, offset = [], address
    for index, block in enumerate(blocks_data):
        at = f"{where}.blocks[{index}]"
        size = _bounded(path, at, block, "size")
        state = _field(path, at, block, "state", str)
        requested = _bounded(path, at, block, "requested_size", size if state != "inactive" else 0)
        frames = block.get("frames")
        if frames is None and isinstance(block.get("history"), list) and block["history"]:
            frames = block["history"][0].get("frames", []) if isinstance(block["history"][0], dict) else []
        blocks.append(SnapshotBlock(_bounded(path, at, block, "address", offset % BYTES_LIMIT), size, requested,
                                    state, _frames(path, at, frames or [], interned)))
        offset += size
    segment_type = segment.get("segment_type")
    if not isinstance(segment_type, str):
        segment_type = "small" if total <= 2 << 20 else "large"
    device = segment.get("device", 0)
    if not isinstance(device, int):
        device = 0
    return SnapshotSegment(_bounded(path, where, {"device": device}, "device", signed=True), address, total,
                           segment_type, blocks)


def _entry(path: str, where: str, entry, interned: _Interned) -> TraceEntry:
    action = _field(path, where, entry, "action", str)
    size = _bounded(path, where, entry, "size", 0)
    addr = _bounded(path, where, entry, "addr", 0)
    device_free = _bounded(path, where, entry, "device_free") if isinstance(entry.get("device_free"), int) else None
    return TraceEntry(action, addr, size, _frames(path, where, entry.get("frames") or [], interned), device_free)
