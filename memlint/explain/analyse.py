"""What a memory snapshot says: memory by module and call site, fragmentation, growth per iteration.

All sizes are bytes.  Names follow ``torch.cuda.memory_stats()``:
``reserved_bytes`` (segments), ``allocated_bytes`` (blocks handed out, whole
blocks), ``requested_bytes`` (what the program asked for),
``inactive_split_bytes`` (free blocks inside segments that also hold
allocated blocks: the allocator cannot release them, and a request larger
than each of them needs a new segment).

Attribution of a block or trace entry, from its frames:

* module -- memlint's own snapshots name it (``memlint.module`` frame);
  otherwise the innermost Python frame of a ``forward`` (the module code that
  made the tensor: ``linear.py:125 forward`` for every ``nn.Linear``);
* call site -- the innermost Python frame outside installed libraries and
  the standard library (the line of the user's code), else the innermost
  Python frame; memlint's snapshots say ``op in module (phase)``.

Iterations: training repeats the same allocations in the same order, so the
call site that occurs once per iteration marks where each one begins (see
:func:`find_iterations`).
"""

from __future__ import annotations

import bisect
import functools
import os
import re
import sysconfig
from collections import Counter
from dataclasses import dataclass, field

from memlint.explain.load import ACTIVE_STATES, AWAITING_FREE_STATES, Frame, Snapshot

MEMLINT_PREFIX = "memlint."
#: Frames of snapshots converted from the PyTorch profiler
#: (``torch.cuda._memory_viz._profile_to_snapshot``) have filename "none" and
#: the profiler's event name, e.g. ``train.py(12): step``.
#: At most 18 digits: a line number is a C int (a longer run of digits is
#: not one, and int() refuses more than 4300 digits).
PROFILER_NAME = re.compile(r"^(?P<file>.+\.py)\((?P<line>\d{1,18})\): (?P<func>.+)$")
LIBRARY_PARTS = ("site-packages", "dist-packages")
#: The profiler's frame for a module call (``nn.Module: Linear_0``) and its
#: file names of installed code, relative to site-packages (``torch/nn/modules/linear.py``).
PROFILER_MODULE = "nn.Module: "
PROFILER_LIBRARY_PREFIXES = ("torch/",)


@functools.lru_cache(maxsize=1 << 16)
def python_frames(frames: tuple) -> tuple:
    """The Python frames of a frame tuple (innermost first), profiler-style names unpacked (memoized)."""
    out = []
    for frame in frames:
        if frame.filename.endswith(".py"):
            out.append(frame)
        elif frame.filename == "none":
            match = PROFILER_NAME.match(frame.name)
            if match:
                out.append(Frame(match["file"], int(match["line"]), match["func"]))
    return tuple(out)


def _memlint(frames: tuple, kind: str) -> Frame | None:
    return next((f for f in frames if f.filename == MEMLINT_PREFIX + kind), None)


def _stdlib() -> tuple[str, ...]:
    paths = {sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("platstdlib")}
    return tuple(os.path.normpath(p) + os.sep for p in paths if p)


STDLIB = _stdlib()


def is_library(filename: str) -> bool:
    """Whether a frame's file is installed code (site-packages, the standard library), not the user's."""
    parts = filename.replace("\\", "/").split("/")
    return any(p in LIBRARY_PARTS for p in parts) or os.path.normpath(filename).startswith(STDLIB) \
        or filename.startswith(("<",) + PROFILER_LIBRARY_PREFIXES)


@functools.lru_cache(maxsize=1 << 16)
def module_of(frames: tuple) -> str:
    """The module a block is attributed to (see the module docstring)."""
    named = _memlint(frames, "module")
    if named is not None:
        return named.name
    profiled = next((f.name[len(PROFILER_MODULE):] for f in frames
                     if f.filename == "none" and f.name.startswith(PROFILER_MODULE)), None)
    if profiled is not None:
        return profiled
    forward = next((f for f in python_frames(frames) if f.name == "forward"), None)
    if forward is None:
        return "<no module forward on the stack>"
    return f"{_short(forward.filename)}:{forward.line} forward"


@functools.lru_cache(maxsize=1 << 16)
def call_site(frames: tuple) -> str:
    """The call site a block is attributed to (see the module docstring)."""
    op = _memlint(frames, "op")
    if op is not None:
        phase = _memlint(frames, "phase")
        where = f" ({phase.name})" if phase is not None else ""
        return f"{op.name} in {module_of(frames)}{where}"
    python = python_frames(frames)
    if not python:
        return "<no Python frame recorded>"
    user = next((f for f in python if not is_library(f.filename)), python[0])
    return f"{user.filename}:{user.line} in {user.name}"


def _short(filename: str) -> str:
    parts = filename.replace("\\", "/").split("/")
    return "/".join(parts[-2:]) if len(parts) > 1 else filename


@functools.lru_cache(maxsize=1 << 16)
def site_key(frames: tuple) -> tuple:
    """A key equal for the same allocation in two iterations: its Python stack (and memlint's
    op/module/phase), without op indices and step numbers."""
    key = []
    for frame in frames:
        if frame.filename.startswith(MEMLINT_PREFIX):
            if frame.filename != MEMLINT_PREFIX + "phase":
                key.append((frame.filename, frame.name, 0 if frame.filename == MEMLINT_PREFIX + "op" else frame.line))
            else:
                key.append((frame.filename, frame.name))
    key.extend((f.filename, f.line, f.name) for f in python_frames(frames))
    return tuple(key)


@dataclass
class Fragmentation:
    """The allocator state at the snapshot (bytes), under ``memory_stats()`` names."""

    reserved_bytes: int = 0
    allocated_bytes: int = 0
    active_bytes: int = 0
    requested_bytes: int = 0
    inactive_split_bytes: int = 0
    releasable_bytes: int = 0  # fully free segments: what empty_cache() would give back
    segments: int = 0
    largest_free_block: int = 0

    @property
    def reserved_minus_allocated(self) -> int:
        return self.reserved_bytes - self.allocated_bytes

    def to_json(self) -> dict:
        data = dict(vars(self))
        data["reserved_minus_allocated"] = self.reserved_minus_allocated
        data["rounding_bytes"] = self.allocated_bytes - self.requested_bytes
        return data


@dataclass
class Iteration:
    """One repetition of the training step found in the trace (trace indices; bytes)."""

    index: int
    start: int
    live_at_start: int
    growth: int | None = None  # live at the next iteration's start minus live at this one's
    survivors: dict[str, int] = field(default_factory=dict)  # call site -> bytes born here, live at the end


@dataclass
class DeviceReport:
    """Everything reported for one device (bytes)."""

    device: int
    fragmentation: Fragmentation
    by_module: list[tuple[str, int, int]]  # (module, bytes, blocks) at the snapshot
    by_call_site: list[tuple[str, int, int]]
    trace_entries: int = 0
    trace_peak: int | None = None  # requested bytes live at the trace's peak
    peak_by_module: list[tuple[str, int, int]] = field(default_factory=list)
    peak_by_call_site: list[tuple[str, int, int]] = field(default_factory=list)
    ooms: list[dict] = field(default_factory=list)
    iterations: list[Iteration] = field(default_factory=list)
    anchor: str | None = None


def fragmentation(segments) -> Fragmentation:
    """Reserved, allocated, requested, inactive split and releasable bytes of ``segments``."""
    result = Fragmentation(segments=len(segments))
    for segment in segments:
        result.reserved_bytes += segment.total_size
        if all(b.state == "inactive" for b in segment.blocks):
            result.releasable_bytes += segment.total_size
        for block in segment.blocks:
            if block.state in ACTIVE_STATES:
                result.allocated_bytes += block.size
                result.requested_bytes += block.requested_size
            if block.state in ACTIVE_STATES + AWAITING_FREE_STATES:
                result.active_bytes += block.size
            elif len(segment.blocks) > 1:
                result.inactive_split_bytes += block.size
            if block.state == "inactive":
                result.largest_free_block = max(result.largest_free_block, block.size)
    return result


def _group(items, top: int) -> list[tuple[str, int, int]]:
    sizes, counts = Counter(), Counter()
    for name, nbytes in items:
        sizes[name] += nbytes
        counts[name] += 1
    return [(name, nbytes, counts[name]) for name, nbytes in sizes.most_common(top)]


def analyse(snapshot: Snapshot, top: int = 10) -> list[DeviceReport]:
    """One :class:`DeviceReport` per device that has segments or trace entries."""
    by_device: dict[int, list] = {}  # one pass: linear in the segments however many devices they name
    for segment in snapshot.segments:
        by_device.setdefault(segment.device, []).append(segment)
    devices = sorted(set(by_device) | {i for i, t in enumerate(snapshot.traces) if t})
    reports = []
    for device in devices:
        segments = by_device.get(device, [])
        live = [b for s in segments for b in s.blocks if b.state in ACTIVE_STATES]
        report = DeviceReport(device, fragmentation(segments),
                              _group(((module_of(b.frames), b.size) for b in live), top),
                              _group(((call_site(b.frames), b.size) for b in live), top))
        trace = snapshot.traces[device] if 0 <= device < len(snapshot.traces) else []
        if trace:
            _analyse_trace(report, trace, live, top)
        reports.append(report)
    return reports


def _preexisting(trace, live_at_end) -> dict[int, tuple[int, list]]:
    """Blocks alive before the trace began: freed in it without an alloc, or alive at the end and never
    allocated in it (as MemoryViz.js reconstructs them)."""
    allocated, before = set(), {}
    for entry in trace:
        if entry.action == "alloc":
            allocated.add(entry.addr)
        elif entry.action == "free_completed":
            if entry.addr in allocated:
                allocated.discard(entry.addr)
            else:
                before[entry.addr] = (entry.size, entry.frames)
    for block in live_at_end:
        if block.address not in allocated and block.address not in before:
            before[block.address] = (block.requested_size, block.frames)
    return before


def _replay(trace, start: dict, stop: int | None = None):
    """Live requested bytes after each entry; yields (index, live_total, live dict) up to ``stop``."""
    live = dict(start)
    total = sum(value[0] for value in live.values())
    for index, entry in enumerate(trace):
        if stop is not None and index > stop:
            return
        if entry.action == "alloc":
            live[entry.addr] = (entry.size, entry.frames, index)
            total += entry.size
        elif entry.action == "free_completed" and entry.addr in live:
            total -= live.pop(entry.addr)[0]
        yield index, total, live


def _analyse_trace(report: DeviceReport, trace, live_at_end, top: int) -> None:
    report.trace_entries = len(trace)
    report.ooms = [{"index": i, "requested": e.size, "device_free": e.device_free, "call_site": call_site(e.frames)}
                   for i, e in enumerate(trace) if e.action == "oom"]
    start = {addr: (size, frames, -1) for addr, (size, frames) in _preexisting(trace, live_at_end).items()}
    before = []  # live bytes before each entry
    peak, peak_index, current = sum(v[0] for v in start.values()), -1, None
    current = peak
    for index, total, _ in _replay(trace, start):
        before.append(current)
        current = total
        if total > peak:
            peak, peak_index = total, index
    report.trace_peak = peak
    at_peak = dict(start)
    if peak_index >= 0:
        for _, _, live in _replay(trace, start, stop=peak_index):
            at_peak = live
    report.peak_by_module = _group(((module_of(f), s) for s, f, _ in at_peak.values()), top)
    report.peak_by_call_site = _group(((call_site(f), s) for s, f, _ in at_peak.values()), top)
    _iterations(report, trace, before, current, start)


def find_iterations(trace) -> tuple[list[int], tuple | None]:
    """Trace indices where each repetition of the step begins, and the key of the marking allocation.

    A training step allocates the same call sites (:func:`site_key`) in the
    same order every iteration, so the step is found as a site that splits
    the allocations into equal windows: candidate sites (occurring at least
    twice) are tried from the fewest occurrences up (the longest period
    first), and the first one is taken whose windows between consecutive
    occurrences -- the first window left out when there are more, as the
    first iteration may create state -- (a) have one length
    (:data:`STEADY_SHARE` of them), (b) cover at least half of the
    allocations from the site's first occurrence on, (c) leave a tail no
    longer than 1.5 windows (the step in flight), and (d) hold the same
    sequence of sites (:data:`STEADY_SHARE` of them), more than one site.  Returns ([], None) when no site
    qualifies (fewer than two iterations, no frames, no repetition).
    """
    allocs = [(i, site_key(e.frames)) for i, e in enumerate(trace) if e.action == "alloc"]
    keys = [key for _, key in allocs]
    positions: dict[tuple, list[int]] = {}
    for index, key in enumerate(keys):
        if key:
            positions.setdefault(key, []).append(index)
    candidates = sorted((p for p in positions.values() if len(p) >= 2), key=lambda p: (len(p), p[0]))
    for found in candidates[:MAX_ITERATION_CANDIDATES]:
        if _periodic(found, keys):
            anchor = keys[found[0]]
            return [allocs[i][0] for i in found], anchor
    return [], None


#: Candidate sites tried by :func:`find_iterations` (a bound of ours on its
#: time: each costs one pass over the trace's allocations).
MAX_ITERATION_CANDIDATES = 200


#: Share of the windows after the first that must agree (length, then sites) for
#: :func:`find_iterations` (a choice of ours: a steady training loop repeats exactly;
#: the first window differs when it creates the optimizer state).
STEADY_SHARE = 0.75


def _periodic(found: list[int], keys: list) -> bool:
    lengths = [b - a for a, b in zip(found, found[1:])]
    steady = lengths[1:] or lengths
    length, count = Counter(steady).most_common(1)[0]
    tail = len(keys) - found[-1]
    if count < STEADY_SHARE * len(steady) or sum(lengths) * 2 < len(keys) - found[0] or tail > 1.5 * length:
        return False
    windows = [tuple(keys[a:b]) for a, b in zip(found, found[1:])]
    window, same = Counter(windows[1:] or windows).most_common(1)[0]
    return same >= STEADY_SHARE * len(steady) and len(set(window)) > 1


def _iterations(report: DeviceReport, trace, before: list[int], end_live: int, start: dict) -> None:
    starts, anchor = find_iterations(trace)
    if len(starts) < 2:
        return
    anchor_entry = trace[starts[0]]
    report.anchor = call_site(anchor_entry.frames)
    live_at_end = {}
    for _, _, live in _replay(trace, start):
        live_at_end = live
    iterations = [Iteration(n, s, before[s]) for n, s in enumerate(starts)]
    for current, following in zip(iterations, iterations[1:]):
        current.growth = following.live_at_start - current.live_at_start
    for size, frames, born in live_at_end.values():
        number = bisect.bisect_right(starts, born) - 1
        if number >= 0:
            survivors = iterations[number].survivors
            site = call_site(frames)
            survivors[site] = survivors.get(site, 0) + size
    report.iterations = iterations


def leak_suspects(report: DeviceReport) -> dict[str, int]:
    """Call site -> bytes allocated in a complete iteration after the first and still allocated
    when the trace ends (the first iteration's survivors include one-time state such as the
    optimizer's; the last one's are the step still in flight)."""
    totals: dict[str, int] = {}
    for iteration in report.iterations[1:-1]:
        for site, nbytes in iteration.survivors.items():
            totals[site] = totals.get(site, 0) + nbytes
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def frame_files(snapshot: Snapshot, base: str) -> dict[str, set[int]]:
    """Existing user ``.py`` files named by the snapshot's frames -> the lines named in them.

    Relative names are tried against the current directory, then the
    snapshot's folder ``base``; library and standard-library files are left out.
    """
    named: dict[str, set[int]] = {}
    stacks = {b.frames for s in snapshot.segments for b in s.blocks}
    stacks |= {e.frames for trace in snapshot.traces for e in trace}
    frames = {frame for stack in stacks for frame in python_frames(stack)}
    seen: dict[str, str | None] = {}
    for frame in sorted(frames):
        if frame.filename not in seen:
            seen[frame.filename] = _resolve(frame.filename, base)
        path = seen[frame.filename]
        if path is not None:
            named.setdefault(path, set()).add(frame.line)
    return named


def _resolve(filename: str, base: str) -> str | None:
    if is_library(filename):
        return None
    candidates = [filename] if os.path.isabs(filename) else [os.path.join(os.getcwd(), filename),
                                                              os.path.join(base, filename)]
    for candidate in candidates:
        if os.path.isfile(candidate) and not is_library(os.path.realpath(candidate)):
            return os.path.normpath(candidate)
    return None


__all__ = ["analyse", "call_site", "find_iterations", "fragmentation", "frame_files", "leak_suspects",
           "module_of", "python_frames"]
