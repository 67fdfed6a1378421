"""memlint estimate --snapshot / --format summary, read back with PyTorch's own _memory_viz helpers."""

import base64
import json
import pickle
import pickletools
import re

import pytest

from estimate_helpers import target

#: The opcodes MemoryViz.js's ``unpickle`` decodes (torch/utils/viz/MemoryViz.js, pytorch main): the
#: reader of pytorch.org/memory_viz fails on any other.
VIZ_OPCODES = {"PROTO", "FRAME", "MEMOIZE", "BINPUT", "LONG_BINPUT", "BINGET", "LONG_BINGET", "MARK",
               "EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "DICT", "LIST", "TUPLE", "TUPLE1", "TUPLE2",
               "TUPLE3", "SETITEM", "SETITEMS", "APPEND", "APPENDS", "BININT", "BININT1", "BININT2", "LONG1",
               "SHORT_BINUNICODE", "BINUNICODE", "BINFLOAT", "NEWTRUE", "NEWFALSE", "NONE", "STOP"}


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    from memlint.estimate.api import EstimateOptions, estimate
    from memlint.estimate.snapshot import write_snapshot
    from memlint.estimate.workload import load_workload

    workload = load_workload(target("mlp.py") + ":build", [], None)
    result = estimate(workload, EstimateOptions(gpu="A100-80GB"))
    path = tmp_path_factory.mktemp("snap") / "mlp.pickle"
    recording = write_snapshot(result, str(path), workload.module)
    return result, recording, path


def viz_timeline_peak(snapshot, device=0, plot_segments=False):
    """The peak of the "Active Memory Timeline" (``plot_segments``: of the "Active Cached Segment
    Timeline"), replayed as MemoryViz.js's process_alloc_data does (written here from its behaviour):
    what was alive before the trace is what is freed without an alloc, and what the segments hold
    (active blocks; with plot_segments, whole segments) that the trace did not allocate; the peak is
    taken after each action."""
    alloc, free = ("segment_alloc", "segment_free") if plot_segments else ("alloc", "free_completed")
    trace = snapshot["device_traces"][device]
    open_allocs, initial = {}, 0
    for entry in trace:
        if entry["action"] == alloc:
            open_allocs[entry["addr"]] = entry["size"]
        elif entry["action"] == free:
            if open_allocs.pop(entry["addr"], None) is None:
                initial += entry["size"]
    for segment in snapshot["segments"]:
        address = segment["address"]
        if plot_segments:
            initial += segment["total_size"] if address not in open_allocs else 0
            continue
        for block in segment["blocks"]:
            if block["state"] == "active_allocated" and address not in open_allocs:
                initial += block["requested_size"]
            address += block["size"]
    if not any(entry["action"] in (alloc, free) for entry in trace):
        return initial  # no action: the visualizer shows the initial state as one flat step
    total, peak = initial, 0
    for entry in trace:
        if entry["action"] == alloc:
            total += entry["size"]
        elif entry["action"] == free:
            total -= entry["size"]
        else:
            continue
        peak = max(peak, total)
    return peak


def test_snapshot_replay_agrees_with_the_estimate(traced):
    result, recording, _ = traced
    stats = recording.memory_stats
    assert stats["allocated_bytes.all.peak"] == result.peak_allocated
    assert stats["reserved_bytes.all.peak"] == result.peak_reserved
    for key in ("allocated_bytes.all.current", "reserved_bytes.all.current", "inactive_split_bytes.all.peak"):
        assert stats[key] == result.memory_stats[key]
    assert stats["requested_bytes.all.peak"] <= stats["allocated_bytes.all.peak"]
    # the counts at the end agree with the blocks of the segments
    segments = recording.snapshot()["segments"]
    split = [b for s in segments if len(s["blocks"]) > 1 for b in s["blocks"] if b["state"] == "inactive"]
    active = [b for s in segments for b in s["blocks"] if b["state"] == "active_allocated"]
    assert (len(split), sum(b["size"] for b in split)) == (stats["inactive_split.all.current"],
                                                          stats["inactive_split_bytes.all.current"])
    assert len(active) == stats["allocation.all.current"] and len(segments) == stats["segment.all.current"]
    small = [s for s in segments if s["segment_type"] == "small"]
    assert sum(s["total_size"] for s in small) == stats["reserved_bytes.small_pool.current"]


def test_memory_viz_reads_the_pickle(traced):
    from torch.cuda import _memory_viz

    result, recording, path = traced
    data = path.read_bytes()
    assert {op.name for op, _, _ in pickletools.genops(data)} <= VIZ_OPCODES
    assert data[1] == 4  # protocol 4: MemoryViz.js refuses 5
    snapshot = pickle.loads(data)
    stats = recording.memory_stats
    # the visualizer's timeline shows requested bytes (the trace records orig_size)
    assert viz_timeline_peak(snapshot) == stats["requested_bytes.all.peak"]
    # ... and its segment timeline shows reserved memory: its peak is the estimate's peak_reserved
    assert viz_timeline_peak(snapshot, plot_segments=True) == result.peak_reserved
    # PyTorch's flamegraph data path: one line per block with its bytes
    lines = _memory_viz.memory(snapshot, format_flamegraph=lambda text: text).splitlines()
    sizes = [(line.split(";")[1], int(line.rsplit(" ", 1)[1])) for line in lines]
    assert sum(n for state, n in sizes if state == "active_allocated") == stats["allocated_bytes.all.current"]
    assert sum(n for _, n in sizes) == stats["reserved_bytes.all.current"]
    summary = _memory_viz.segsum(snapshot)  # asserts its own accounting of every segment
    assert f"segments: {stats['segment.all.current']}" in summary
    assert _memory_viz.trace(snapshot).startswith(f"Device 0 ----------------\n{len(snapshot['device_traces'][0])} entries")
    html = _memory_viz.trace_plot(snapshot)
    embedded = json.loads(re.search(r"const local_files = (\[.*\])", html).group(1))[0]["base64"]
    assert pickle.loads(base64.b64decode(embedded)) == snapshot
    assert "Allocator State History" in _memory_viz.segment_plot(snapshot)


def test_frames_name_module_op_category_and_phase(traced):
    _, recording, _ = traced
    snapshot = recording.snapshot()
    alloc = next(e for e in snapshot["device_traces"][0] if e["action"] == "alloc" and e["frames"][0]["name"] == "addmm")
    names = {f["filename"]: f for f in alloc["frames"]}
    assert names["memlint.module"]["name"] in {"0 (Linear)", "2 (Linear)", "4 (Linear)", "6 (Linear)"}
    assert names["memlint.phase"] == {"filename": "memlint.phase", "line": 1, "name": "forward"}
    assert any(f["filename"].endswith("torch/nn/modules/linear.py") and f["name"] == "forward" for f in alloc["frames"])


def test_explain_reads_memlints_own_snapshot(traced):
    from memlint.explain.analyse import analyse
    from memlint.explain.load import load_snapshot

    _, recording, path = traced
    stats = recording.memory_stats
    report = analyse(load_snapshot(str(path)))[0]
    assert report.trace_peak == stats["requested_bytes.all.peak"]
    assert report.fragmentation.inactive_split_bytes == stats["inactive_split_bytes.all.current"]
    assert report.fragmentation.reserved_bytes == stats["reserved_bytes.all.current"]
    assert len(report.iterations) == 2 and report.iterations[0].growth == 0  # steps 1 and 2, steady


def test_summary_matches_torch_memory_summary(traced, monkeypatch):
    import torch.cuda.memory

    from memlint.estimate.summary import format_summary

    stats = traced[1].memory_stats
    monkeypatch.setattr(torch.cuda.memory, "memory_stats", lambda device=None: stats)
    assert format_summary(stats).splitlines() == torch.cuda.memory.memory_summary(device=0).splitlines()
    assert format_summary(stats, abbreviated=True) == torch.cuda.memory.memory_summary(device=0, abbreviated=True)


def test_summary_units_follow_memory_summary(monkeypatch):
    import torch.cuda.memory

    from memlint.estimate.snapshot import DeviceStats
    from memlint.estimate.summary import format_summary

    stats = DeviceStats().as_memory_stats()
    stats.update({"allocated_bytes.all.peak": 80 * 2**30, "allocated_bytes.large_pool.peak": 80 * 2**30,
                  "allocation.all.allocated": 2_000_000, "allocation.small_pool.allocated": 2_000_000})
    monkeypatch.setattr(torch.cuda.memory, "memory_stats", lambda device=None: stats)
    assert format_summary(stats) == torch.cuda.memory.memory_summary(device=0)


def test_cli_summary_and_snapshot(tmp_path, capsys):
    from memlint.cli import main

    path = tmp_path / "out.pickle"
    assert main(["estimate", target("mlp.py") + ":build", "--format", "summary", "--snapshot", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("|" + "=" * 75 + "|\n") and "| Allocated memory      |" in out
    assert pickle.loads(path.read_bytes())["device_traces"][0]
    assert main(["estimate", target("mlp.py") + ":build", "--snapshot", str(tmp_path / "no" / "x.pickle")]) == 2
    assert main(["estimate", target("mlp.py") + ":build", "--format", "summary", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("memlint: error:") for line in err)
