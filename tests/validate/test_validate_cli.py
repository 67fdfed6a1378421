"""``memlint validate`` command line: lazy imports, one-line errors, the CPU path end to end."""

import json
import subprocess
import sys

import pytest
from validate_helpers import ROOT

from memlint.cli import main


def test_importing_the_validate_cli_does_not_import_torch():
    code = "import sys, memlint.validate.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(("argv", "message"), [
    (["--tolerance", "ten"], "--tolerance 'ten'"),
    (["--steps", "0"], "--steps must be >= 1"),
    (["--warmup", "-1"], "--warmup must be >= 0"),
    (["--device", "cpu", "--input", "float32[B,x]"], "bad dimension"),
])
def test_bad_options_are_one_line_errors(argv, message, capsys):
    assert main(["validate", "fixtures/models/mlp.py:build", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_device_cuda_without_cuda_exits_2(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["validate", "fixtures/models/mlp.py:build"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("memlint: error: --device cuda: no CUDA device") and len(err.splitlines()) == 1


def test_cpu_validate_writes_a_record(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    record = tmp_path / "r.json"
    code = main(["validate", "fixtures/models/validation_tiny.py:mlp", "--device", "cpu", "--optimizer", "adam",
                 "--warmup", "1", "--steps", "2", "--tolerance", "5%", "--record", str(record)])
    assert code == 0
    data = json.loads(record.read_text())
    from memlint.validate.record import check_record

    check_record(data)
    assert data["environment"]["device"] == "cpu" and data["measured"]["peak_allocated"] is None
    assert len(data["measured"]["step_peaks"]) == 2
    assert data["workload"]["input_shapes"] == [{"name": "0", "dtype": "float32", "shape": [8, 784]}]
    assert "cpu_peak" in capsys.readouterr().out


def test_cpu_validate_tolerance_gate(monkeypatch, capsys):
    """A zero tolerance fails (exit 1) unless estimate and measurement agree to the byte."""
    monkeypatch.chdir(ROOT)
    code = main(["validate", "fixtures/models/validation_tiny.py:mlp", "--device", "cpu", "--warmup", "1",
                 "--steps", "1", "--tolerance", "0", "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    exact = data["measured"]["cpu_peak"] == data["estimated"]["peak_allocated"]
    assert code == (0 if exact else 1)


def test_profiler_banner_is_dropped_and_other_stderr_kept(capfd):
    import os

    from memlint.validate.cpu import _without_profiler_banner

    with _without_profiler_banner():
        os.write(2, b"USDT:2026-11-30 SyncActivityProfilerHandler.cpp:52] profiler_start\nreal warning\n")
    err = capfd.readouterr().err
    assert "USDT:" not in err and "real warning" in err


def test_cpu_validate_prints_no_profiler_banner(monkeypatch, capfd):
    monkeypatch.chdir(ROOT)
    code = main(["validate", "fixtures/models/validation_tiny.py:mlp", "--device", "cpu", "--warmup", "1", "--steps", "1"])
    assert code in (0, 1)
    assert "USDT:" not in capfd.readouterr().err


def test_validate_checks_its_target_and_bounds_before_importing(capsys):
    assert main(["validate", "/dev/zero:f", "--device", "cpu"]) == 2
    assert "is not a Python file" in capsys.readouterr().err
    assert main(["validate", "fixtures/models/mlp.py:build", "--device", "cpu", "--batch-size", "4",
                 "--grad-accum", "8"]) == 2
    assert "--grad-accum 8 is greater than the batch size 4" in capsys.readouterr().err


def test_validate_timeout(capsys, tmp_path):
    model = tmp_path / "slow.py"
    model.write_text("import time\ndef build():\n    time.sleep(600)\n")
    assert main(["validate", f"{model}:build", "--device", "cpu", "--timeout", "1"]) == 2
    assert capsys.readouterr().err == f"memlint: error: {model}:build: stopped after 1 s (--timeout)\n"
