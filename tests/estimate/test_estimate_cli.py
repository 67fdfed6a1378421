import argparse
import json
import subprocess
import sys

from memlint.estimate.cli import add_estimate_arguments, run_estimate

from estimate_helpers import target


def run(argv):
    parser = argparse.ArgumentParser()
    add_estimate_arguments(parser)
    return run_estimate(parser.parse_args(argv))


def test_cli_does_not_import_torch():
    code = "import sys, memlint.estimate.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_json_and_exit_codes(capsys, tmp_path):
    plot = tmp_path / "t.svg"
    assert run([target("mlp.py") + ":build", "--format", "json", "--gpu", "T4", "--plot", str(plot)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["verdict"]["fits"] is True and document["gpu"] == "T4"
    assert plot.stat().st_size > 0
    assert run([target("mlp.py") + ":build", "--capacity", "100MiB"]) == 1


def test_usage_errors_exit_2(capsys):
    assert run([target("mlp.py") + ":bare", "--input", "float32[B,oops]"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("memlint: error:") and err.count("\n") == 1
    assert run([target("mlp.py") + ":nothere"]) == 2
    assert run([target("mlp.py") + ":build", "--gpu", "GTX-9999"]) == 2


def test_advise_ranks_re_estimated_remedies(capsys):
    from memlint.cli import main

    assert main(["estimate", target("mlp.py") + ":build", "--gpu", "T4", "--advise", "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    advice = document["advice"]
    assert {row["remedy"] for row in advice} >= {"amp-fp16", "sgd", "step-in-backward", "offload"}
    assert "amp-bf16" not in {row["remedy"] for row in advice}  # a T4 (sm75) has no bf16
    assert "autocast bf16" in document["not_offered"]
    assert all(row["saved"] == document["device_used"] - row["device_used"] for row in advice)
    assert [row["saved"] for row in advice] == sorted((row["saved"] for row in advice), reverse=True)
    assert all(row["flops_change"] is not None for row in advice)


def test_advice_table_names_the_remedies_that_save_nothing(monkeypatch):
    import io

    monkeypatch.setenv("COLUMNS", "200")  # rich wraps long cells at a non-terminal's 80 columns

    from memlint.estimate.advisor import Remedy
    from memlint.estimate.report import render_advice

    rows = [Remedy("amp-bf16", "bf16 autocast", None, 3 * 2**30, 2**30, True, "none", saved_allocated=2**30),
            Remedy("sgd", "plain SGD", None, 4 * 2**30, 0, False, "convergence", saved_allocated=0),
            Remedy("checkpointing", "activation checkpointing", None, 2 * 2**30, 2**31, True, "recompute",
                   saved_allocated=2**31, flops_change=0.25, checkpointed=["blocks.0", "blocks.1"])]
    out = io.StringIO()
    render_advice(rows, out, notes={"8-bit optimizer": "no meta kernel"})
    text = out.getvalue()
    assert "bf16 autocast" in text.split("Save nothing")[0]
    assert "Save nothing for this model (not shown): plain SGD" in text
    assert "activation checkpointing: blocks.0, blocks.1" in text and "+25%" in text
    assert "Not offered: 8-bit optimizer -- no meta kernel" in text


# --- bounded work (issue 18, item 8) -------------------------------------------

import pytest  # noqa: E402


@pytest.mark.parametrize(("argv", "message"), [
    (["--batch-size", str(2**41)], f"--batch-size {2**41}: must be between 1 and 2**40"),
    (["--batch-size", "0"], "--batch-size 0: must be between 1 and 2**40"),
    (["--batch-size", "4", "--grad-accum", "8"], "--grad-accum 8 is greater than the batch size 4"),
    (["--world-size", str(2**50)], "--world-size"),
    (["--world-size", "8"], "--world-size 8 needs an engine to shard over the ranks: add --parallel ddp|fsdp"),
    (["--input", "float32[B,99999999999999]"], "a dimension is larger than 2**40"),
    (["--input", "float64[B,1048576,1048576]", "--batch-size", "2048"], "is more than 2**50 bytes"),
    (["--timeout", "0"], "--timeout 0.0: must be a positive number of seconds"),
    (["--timeout", "nan"], "--timeout nan: must be a positive number of seconds"),
    (["--steps", "1000000000"], "--steps 1000000000: at most 100"),
    (["--cuda", "abc"], "--cuda 'abc': expected MAJOR.MINOR"),
    (["--cuda", "1.0"], "--cuda '1.0': CUDA 1 is not modelled"),
    (["--capacity", "99999999999999999999TiB"], "more than 2**50 bytes (1 PiB), beyond any device"),
])
def test_inputs_that_cannot_be_honoured_are_one_line_before_anything_runs(argv, message, capsys, tmp_path):
    marker = tmp_path / "IMPORTED"
    model = tmp_path / "model.py"
    model.write_text(f"open({str(marker)!r}, 'w').close()\ndef build():\n    pass\n")
    assert run([f"{model}:build", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("memlint: error: ") and err.count("\n") == 1 and message in err, err
    assert not marker.exists()


def test_a_target_that_is_no_python_file_is_not_opened(capsys):
    assert run(["/dev/zero:f"]) == 2
    assert capsys.readouterr().err == "memlint: error: target '/dev/zero:f': /dev/zero is not a Python file (the name must end in .py)\n"


def test_the_default_batch_of_the_workload_is_checked_too(capsys):
    assert run([target("mlp.py") + ":build", "--grad-accum", "64"]) == 2
    assert "--grad-accum 64 is greater than the batch size 32" in capsys.readouterr().err


def test_timeout_stops_a_hanging_factory(capsys, tmp_path):
    import time

    model = tmp_path / "slow.py"
    model.write_text("import time\ndef build():\n    time.sleep(600)\n")
    started = time.monotonic()
    assert run([f"{model}:build", "--timeout", "1"]) == 2
    assert time.monotonic() - started < 30
    assert capsys.readouterr().err == f"memlint: error: {model}:build: stopped after 1 s (--timeout)\n"


def test_max_batch_size_and_advise_show_progress_on_stderr(capsys):
    assert run([target("mlp.py") + ":build", "--gpu", "T4", "--max-batch-size", "--format", "json"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines and all(line.startswith("memlint: largest batch: tracing batch ") for line in lines)
    assert lines[-1].endswith(" s)") and f"(step {len(lines)}, " in lines[-1]
    from memlint.cli import main

    assert main(["estimate", target("mlp.py") + ":build", "--gpu", "T4", "--advise", "--format", "json"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) >= 5 and all(line.startswith("memlint: advisor: tracing ") for line in lines)
