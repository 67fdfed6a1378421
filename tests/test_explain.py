"""memlint explain on snapshots in PyTorch's format (fixtures/snapshots/, see make_snapshots.py there)."""

import json
import pickle
from pathlib import Path

import pytest

from memlint.cli import main
from memlint.explain.analyse import analyse, leak_suspects
from memlint.explain.load import load_snapshot

SNAPSHOTS = Path(__file__).resolve().parent.parent / "fixtures" / "snapshots"
MiB = 2**20


def report_of(name):
    return analyse(load_snapshot(str(SNAPSHOTS / name)))[0]


def test_fixtures_are_what_the_script_writes():
    import sys

    sys.path.insert(0, str(SNAPSHOTS))
    try:
        import make_snapshots
    finally:
        sys.path.remove(str(SNAPSHOTS))
    for name, build in (("leak.pickle", make_snapshots.leak_snapshot),
                        ("fragmentation_oom.pickle", make_snapshots.fragmentation_snapshot)):
        assert pickle.loads((SNAPSHOTS / name).read_bytes()) == build()


def test_leak_grows_one_output_per_iteration():
    report = report_of("leak.pickle")
    assert len(report.iterations) == 5
    assert [it.growth for it in report.iterations[:-1]] == [MiB] * 4
    suspects = leak_suspects(report)
    assert list(suspects) == ["train_leak.py:19 in train"] and suspects["train_leak.py:19 in train"] == 3 * MiB


def test_fragmentation_and_oom():
    report = report_of("fragmentation_oom.pickle")
    frag = report.fragmentation
    assert (frag.reserved_bytes, frag.allocated_bytes, frag.inactive_split_bytes) == (80 * MiB, 36 * MiB, 44 * MiB)
    assert frag.largest_free_block == 8 * MiB and frag.releasable_bytes == 0
    assert report.ooms == [{"index": 28, "requested": 16 * MiB, "device_free": 10 * MiB,
                            "call_site": "train_varlen.py:41 in collate"}]
    assert report.iterations == []  # one site repeated alone is not a training step


def test_profiler_snapshot_from_pytorch():
    report = report_of("profiler_cpu.pickle")
    # cpu_leak keeps each iteration's 32 x 64 float32 output: 8 KiB per iteration
    assert len(report.iterations) == 4
    assert [it.growth for it in report.iterations[:-1]] == [32 * 64 * 4] * 3
    assert sum(leak_suspects(report).values()) == 2 * 32 * 64 * 4


def test_cli_text_names_the_leak_and_lints_the_script(capsys):
    assert main(["explain", str(SNAPSHOTS / "leak.pickle")]) == 0
    out = capsys.readouterr().out
    assert "inactive_split_bytes" in out and "reserved - allocated" in out
    assert "iterations: 5" in out
    assert "train_leak.py:24:9: MEM102" in out


def test_cli_json(capsys):
    assert main(["explain", str(SNAPSHOTS / "fragmentation_oom.pickle"), "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    device = document["devices"][0]
    assert device["fragmentation"]["reserved_minus_allocated"] == 44 * MiB
    assert device["by_call_site"][0] == {"name": "train_varlen.py:40 in collate", "bytes": 36 * MiB, "blocks": 6}
    assert document["lint"] == []  # train_varlen.py does not exist: nothing to lint


class _Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("content, words", [
    (None, "refused: it names the Python global"),
    (b"not a pickle at all", "not a readable pickle"),
    (pickle.dumps({"device_traces": []}), "no 'segments' list"),
    (pickle.dumps({"segments": [{"address": 0, "blocks": []}]}), "segments[0]: missing 'total_size'"),
])
def test_bad_snapshots_are_one_line_errors(tmp_path, capsys, content, words):
    marker = tmp_path / "pwned"
    path = tmp_path / "bad.pickle"
    path.write_bytes(content if content is not None else pickle.dumps({"segments": [_Exploit(str(marker))]}))
    assert main(["explain", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("memlint: error:") and err.count("\n") == 1 and words in err
    assert not marker.exists()


def test_segments_list_and_no_torch_import(tmp_path):
    import subprocess
    import sys

    snapshot = pickle.loads((SNAPSHOTS / "fragmentation_oom.pickle").read_bytes())
    path = tmp_path / "segments.pickle"
    path.write_bytes(pickle.dumps(snapshot["segments"], protocol=4))  # what torch.cuda.memory_snapshot() returns
    report = analyse(load_snapshot(str(path)))[0]
    assert report.fragmentation.inactive_split_bytes == 44 * MiB and report.trace_peak is None
    code = ("import sys; from memlint.cli import main; main(['explain', sys.argv[1]]); "
            "print('torch' in sys.modules, file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code, str(SNAPSHOTS / "leak.pickle")], capture_output=True,
                         text=True, check=True, timeout=60)
    assert out.stderr.strip().endswith("False")


def test_top_must_be_positive(capsys):
    assert main(["explain", str(SNAPSHOTS / "leak.pickle"), "--top", "0"]) == 2
    assert "--top 0" in capsys.readouterr().err
