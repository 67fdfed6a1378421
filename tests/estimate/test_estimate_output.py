"""What ``memlint estimate`` prints: the published JSON schema, module classes, captured warnings,
unwrapped tables when piped, keyword ``--input``s, the advisor's table without remedies that save nothing."""

import argparse
import io
import json
import logging
import subprocess
import sys
import warnings
from pathlib import Path

import jsonschema
import pytest

from memlint.estimate.capture import CapturedWarnings, package_of
from memlint.estimate.cli import add_estimate_arguments, run_estimate

from estimate_helpers import ROOT, target

SCHEMA = json.loads((ROOT / "docs" / "schemas" / "memlint-estimate-v2.schema.json").read_text())


def run(argv):
    parser = argparse.ArgumentParser()
    add_estimate_arguments(parser)
    parser.add_argument("--advise", action="store_true")
    return run_estimate(parser.parse_args(argv))


def validated(text: str) -> dict:
    document = json.loads(text)
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.validate(document, SCHEMA)
    undocumented = set(document) - set(SCHEMA["properties"])
    assert not undocumented, f"fields missing from docs/schemas/memlint-estimate-v2.schema.json: {undocumented}"
    return document


@pytest.fixture(scope="module")
def gpt2_json():
    """A transformers model's estimate as JSON, with what went to stderr, from a fresh
    interpreter: transformers logs some warnings once per process (``warning_once``),
    so a model built earlier in the test session would have used them up."""
    pytest.importorskip("transformers")
    done = subprocess.run(
        [sys.executable, "-m", "memlint", "estimate", target("hf_models.py") + ":gpt2", "--gpu", "T4", "--format", "json"],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    return done.returncode, done.stdout, done.stderr


def test_transformers_output_validates_and_its_warnings_are_summarised_once(gpt2_json):
    pytest.importorskip("transformers")
    code, out, err = gpt2_json
    assert code == 0
    document = validated(out)
    captured = document["captured_warnings"]
    assert captured and all(item["source"] == "transformers" for item in captured)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"memlint: {len(captured)} warning")
    assert "from transformers while building and tracing the model" in lines[0]
    assert f"first: {captured[0]['message']}" in lines[0]
    classes = {entry["module"]: entry["class"] for entry in document["by_module"]}
    assert classes["lm_head"] == "Linear" and classes["GPT2LMHeadModel"] == "GPT2LMHeadModel"


def test_advice_and_largest_batch_validate_against_the_schema(capsys):
    assert run([target("mlp.py") + ":build", "--capacity", "2GiB", "--advise", "--max-batch-size",
                "--format", "json"]) == 0
    document = validated(capsys.readouterr().out)
    assert document["advice"] and document["max_batch_size"] > 0 and "not_offered" in document
    assert document["captured_warnings"] == []


def test_the_schema_rejects_what_the_estimate_never_writes(gpt2_json):
    document = json.loads(gpt2_json[1])
    for key, bad in (("peak_allocated", -1), ("schema_version", 1), ("verdict", {"fits": True}),
                     ("by_category", {"parameter": 1})):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**document, key: bad}, SCHEMA)


def test_keyword_inputs_reach_the_model_and_its_loss():
    pytest.importorskip("transformers")
    from memlint.estimate.api import EstimateOptions, estimate
    from memlint.estimate.workload import load_workload

    options = EstimateOptions(batch_size=2, optimizer="adamw")
    keyword = estimate(load_workload(target("hf_models.py") + ":gpt2_module",
                                     ["input_ids=int64[B,64]", "labels=int64[B,64]"]), options)
    # the workload passes the same tensor as input_ids and labels; the specs make two (2 x 64 int64 = 1 KiB more)
    reference = estimate(load_workload(target("hf_models.py") + ":gpt2"), options)
    assert keyword.by_category["activation"] == reference.by_category["activation"]
    assert keyword.peak_allocated == reference.peak_allocated + 2 * 64 * 8


@pytest.mark.parametrize(("inputs", "message"), [
    (["input_ids=int64[B,64]", "int64[B,64]"], "has no name while others have one"),
    (["x=int64[B,64]", "x=int64[B,64]"], "the input 'x' is given twice"),
])
def test_keyword_inputs_are_all_named_or_none(inputs, message, capsys):
    argv = [target("mlp.py") + ":bare"] + [f"--input={spec}" for spec in inputs]
    assert run(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("memlint: error: --input ") and message in err and err.count("\n") == 1


def test_piped_tables_do_not_wrap_and_modules_carry_their_class(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    from memlint.estimate.api import EstimateOptions, estimate
    from memlint.estimate.report import render_table
    from memlint.estimate.workload import load_workload

    result = estimate(load_workload(target("mlp.py") + ":build"), EstimateOptions(gpu="T4"))
    out = io.StringIO()
    render_table(result, file=out)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("memlint estimate mlp") and "target=T4" in lines[0]
    assert any("reserved - allocated at the allocated peak (inactive_split_bytes.all.peak" in line
               and line.rstrip().endswith("│") for line in lines)
    assert "Top modules by activation bytes" in lines  # the title on one line
    # nn.Sequential's children: their index and class (the ReLUs keep the activations; the last Linear its output)
    assert [line.split("│")[1].strip() for line in lines if "(ReLU)" in line] == ["1 (ReLU)", "3 (ReLU)", "5 (ReLU)"]
    assert any(line.startswith("│ 6 (Linear) ") for line in lines)


def test_advice_hides_remedies_that_save_no_device_memory():
    from memlint.estimate.advisor import Remedy
    from memlint.estimate.report import render_advice

    rows = [Remedy("sgd", "plain SGD", None, 4 * 2**30, 2**30, True, "convergence", saved_allocated=2**30,
                   required_bytes=4 * 2**30),
            Remedy("checkpointing", "activation checkpointing", None, 5 * 2**30, 0, True, "recompute",
                   saved_allocated=2**20),
            Remedy("amp-fp16", "autocast fp16", None, 5 * 2**30, 0, True, "scaler", saved_allocated=0)]
    out = io.StringIO()
    render_advice(rows, out)
    table, _, footer = out.getvalue().partition("Lower peak_allocated only")
    assert "plain SGD" in table and "0 B" not in table and "activation checkpointing" not in table
    assert "activation checkpointing (-1.00 MiB)" in footer
    assert "Save nothing for this model (not shown): autocast fp16" in footer
    out = io.StringIO()
    render_advice(rows[2:], out)
    assert out.getvalue().startswith("No remedy lowers device_used for this model")


def test_capture_attributes_warnings_and_logging_and_lets_memlint_through(capsys):
    logger = logging.getLogger("somelib.sub")
    with CapturedWarnings() as captured:
        handler = logging.StreamHandler()  # made inside, as a library's first import makes it
        logger.addHandler(handler)
        try:
            logger.warning("config value ignored")
            logger.warning("config value ignored")
            warnings.warn("deprecated call", FutureWarning)
            print("raw text", file=sys.stderr)
            memlint_code = {"__name__": "memlint.example", "sys": sys}
            exec("def say():\n    print('memlint: progress', file=sys.stderr)\n", memlint_code)
            memlint_code["say"]()  # memlint's own lines pass through
        finally:
            logger.removeHandler(handler)
    assert [(i.source, i.message, i.count) for i in captured.items] == [
        (package_of(__file__), "FutureWarning: deprecated call", 1), ("somelib", "config value ignored", 2),
        ("stderr", "raw text", 1)]
    assert captured.summary().startswith("3 warnings (1 from test_estimate_output.py, 1 from somelib, "
                                         "1 written to stderr) while building")
    assert capsys.readouterr().err == "memlint: progress\n"
    assert package_of("/x/lib/python3.12/site-packages/transformers/configuration_utils.py") == "transformers"
    assert Path(__file__).name == package_of(__file__)


def test_a_failing_trace_still_says_what_was_captured(capsys, tmp_path):
    model = tmp_path / "noisy.py"
    model.write_text("import warnings\n\ndef build():\n    warnings.warn('config looks odd')\n"
                     "    raise ValueError('bad')\n")
    assert run([f"{model}:build"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("memlint: 1 warning from noisy.py while building")
    assert "UserWarning: config looks odd" in err[0]
    assert err[1].startswith("memlint: error: ") and "raised ValueError: bad" in err[1] and len(err) == 2


def test_the_check_report_does_not_wrap_its_tables_when_piped(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    from rich.console import Console

    from memlint.report.estimate_section import PIPED_WIDTH, _unwrapped

    console = Console(file=io.StringIO())
    with _unwrapped(console) as wide:
        assert wide.width == PIPED_WIDTH
    assert console.width == 80
    monkeypatch.setenv("COLUMNS", "120")
    console = Console(file=io.StringIO())
    with _unwrapped(console) as kept:
        assert kept.width == 120
