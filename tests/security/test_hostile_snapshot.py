"""``memlint explain`` on hostile snapshots: out-of-range numbers and
shared-reference "billion laughs" are one-line errors, fast (hostile-input
issue, item 3)."""

from __future__ import annotations

import pickle
import time

import pytest

from memlint.cli import main
from memlint.explain import load

BLOCK = {"address": 0, "size": 512, "requested_size": 512, "state": "active_allocated",
         "frames": [{"filename": "train.py", "line": 3, "name": "step"}]}


def _segment(**changes):
    return {"device": 0, "address": 0, "total_size": 2 << 20, "segment_type": "small",
            "blocks": [dict(BLOCK)], **changes}


def _explain(tmp_path, data, *args) -> tuple[int, str]:
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(data))
    code = main(["explain", str(path), *args])
    return code, str(path)


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize("data, key", [
    ({"segments": [_segment(total_size=10**5000)]}, "segments[0].total_size"),
    ({"segments": [_segment(address=-1)]}, "segments[0].address"),
    ({"segments": [_segment(blocks=[dict(BLOCK, size=-512)])]}, "segments[0].blocks[0].size"),
    ({"segments": [_segment(blocks=[dict(BLOCK, requested_size=2**64)])]}, "segments[0].blocks[0].requested_size"),
    ({"segments": [], "device_traces": [[{"action": "alloc", "addr": 0, "size": 10**5000}]]},
     "device_traces[0][0].size"),
    ({"segments": [], "device_traces": [[{"action": "oom", "size": 1, "device_free": -5}]]},
     "device_traces[0][0].device_free"),
    ({"segments": [_segment(blocks=[dict(BLOCK, frames=[{"filename": "a.py", "line": 10**5000, "name": "f"}])])]},
     "segments[0].blocks[0].frames[0].line"),
])
def test_out_of_range_numbers_are_one_line_errors(tmp_path, capsys, data, key, fmt):
    code, path = _explain(tmp_path, data, "--format", fmt)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.count("\n") == 0 and f"{path}: {key}: expected" in err and "out of range" in err, err


def test_shared_references_hit_the_entry_budget_fast(tmp_path, capsys, monkeypatch):
    n = 2000
    frame = {"filename": "train.py", "line": 3, "name": "step"}
    block = dict(BLOCK, frames=[frame] * n)
    segment = _segment(blocks=[block] * n)
    data = {"segments": [segment] * n, "device_traces": [[{"action": "alloc", "addr": 0, "size": 1,
                                                            "frames": [frame] * n}] * n]}
    assert len(pickle.dumps(data)) < 32_000  # n**3 = 8e9 frames in a ~20 KB file
    started = time.monotonic()
    code, path = _explain(tmp_path, data)
    assert time.monotonic() - started < 15
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        f"memlint: error: {path}: snapshot too large: more than {load.MAX_ENTRIES} entries "
        "(segments, blocks, trace entries and frames, each counted every time it is referred to)")


def test_the_budget_counts_every_reference(tmp_path, monkeypatch):
    monkeypatch.setattr(load, "MAX_ENTRIES", 1000)
    frames = [{"filename": "train.py", "line": 3, "name": "step"}] * 10
    ok = {"segments": [_segment(blocks=[dict(BLOCK, frames=frames)] * 40)] * 2}  # 2 + 80 + 800 entries
    path = tmp_path / "ok.pickle"
    path.write_bytes(pickle.dumps(ok))
    snapshot = load.load_snapshot(str(path))
    assert sum(len(s.blocks) for s in snapshot.segments) == 80
    over = {"segments": [_segment(blocks=[dict(BLOCK, frames=frames)] * 40)] * 3}  # 3 + 120 + 1200
    path.write_bytes(pickle.dumps(over))
    with pytest.raises(load.UsageError, match="snapshot too large: more than 1000 entries"):
        load.load_snapshot(str(path))


def test_many_devices_analyse_in_linear_time(tmp_path, capsys):
    from memlint.explain.analyse import analyse

    n = 20_000
    data = {"segments": [_segment(device=i) for i in range(n)]}
    path = tmp_path / "devices.pickle"
    path.write_bytes(pickle.dumps(data))
    snapshot = load.load_snapshot(str(path))
    started = time.monotonic()
    reports = analyse(snapshot)
    assert len(reports) == n
    assert time.monotonic() - started < 3  # measured: 0.3 s; 6.7 s with one scan of the segments per device
