"""Hostile file names and text: no format crashes, nothing reaches the terminal
unescaped, no line can be forged (item 5 of issue 18)."""

from __future__ import annotations

import json
import os
import re

import pytest

from .conftest import BUGGY, FORMATS, run_cli

ESC = "\x1b"
#: name -> how the concise/full formats must show it
NAMES = {
    f"esc{ESC}[31mred.py": "esc\\x1b[31mred.py",
    "forge\nevil.py:1:1: MEM101 forged.py": "forge\\nevil.py:1:1: MEM101 forged.py",
    "bidi\u202eyp.txt.py": "bidi\\u202eyp.txt.py",
    "tab\tbell\a.py": "tab\\tbell\\x07.py",
}
NOT_UTF8 = b"bad\xff\xfe.py"
#: a finding whose source line carries a raw ESC inside a string literal
RAW_ESC_SOURCE = f"import torch; torch.cuda.init()\nstate = torch.load('{ESC}[2J{ESC}]0;pwned{chr(7)}').cuda()\n"
FINDING = re.compile(r"^.+:\d+:\d+: MEM\d{3} ")


@pytest.fixture
def hostile_tree(tmp_path):
    root = tmp_path / "names"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'scratch'\n")
    for name in NAMES:
        (root / name).write_text(BUGGY)
    fd = os.open(os.path.join(os.fsencode(root), NOT_UTF8), os.O_WRONLY | os.O_CREAT, 0o644)
    with os.fdopen(fd, "w") as handle:
        handle.write(BUGGY)
    (root / "snippet.py").write_text(RAW_ESC_SOURCE)
    return root


def _no_raw_controls(data: bytes) -> None:
    text = data.decode("utf-8")  # strictly: every format writes valid UTF-8
    assert ESC not in text and "\x07" not in text and "\u202e" not in text and "\x9b" not in text


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_survives_and_escapes(hostile_tree, fmt):
    completed = run_cli("check", "--no-cache", "--format", fmt, ".", cwd=hostile_tree)
    assert completed.returncode == 1, completed.stderr
    assert b"Traceback" not in completed.stderr
    _no_raw_controls(completed.stdout)
    _no_raw_controls(completed.stderr)
    findings = len(NAMES) + 2  # the non-UTF-8 name and snippet.py
    text = completed.stdout.decode()
    if fmt == "concise":
        lines = text.splitlines()
        assert len(lines) == findings and all(FINDING.match(line) for line in lines)
        assert not [line for line in lines if line.startswith("evil.py")]
        for shown in NAMES.values():
            assert any(line.startswith(f"./{shown}:2:9: MEM303 ") for line in lines), shown
        assert any(line.startswith("./bad\\xff\\xfe.py:2:9: MEM303 ") for line in lines)
    elif fmt == "full":
        headers = [line for line in text.splitlines() if FINDING.match(line)]
        assert len(headers) == findings and not [line for line in headers if line.startswith("evil.py")]
        assert "\\x1b[2J\\x1b]0;pwned\\x07" in text  # the snippet line, escaped
    elif fmt == "github":
        lines = text.splitlines()
        assert len(lines) == findings and all(line.startswith("::") for line in lines)
    elif fmt == "json":
        paths = sorted(d["path"] for d in json.loads(text)["diagnostics"])
        assert "./bad\\xff\\xfe.py" in paths and f"./esc{ESC}[31mred.py" in paths  # JSON escapes ESC itself
        assert len(paths) == findings
    else:
        [run] = json.loads(text)["runs"]
        uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in run["results"]}
        assert "bad%FF%FE.py" in uris and "esc%1B%5B31mred.py" in uris and len(uris) == findings
        assert run["invocations"][0]["executionSuccessful"] is True


def test_error_lines_escape_the_path(tmp_path):
    completed = run_cli("check", f"missing{ESC}[31m\n./x.py:1:1: MEM101 forged.py", cwd=tmp_path)
    assert completed.returncode == 2
    [line] = completed.stderr.decode().splitlines()
    assert line == "memlint: error: missing\\x1b[31m\\n./x.py:1:1: MEM101 forged.py: no such file or directory"


def test_sarif_marks_a_run_with_errors_unsuccessful(hostile_tree):
    completed = run_cli("check", "--format", "sarif", "missing.py", "snippet.py", cwd=hostile_tree)
    [run] = json.loads(completed.stdout)["runs"]
    assert completed.returncode == 2 and run["invocations"][0]["executionSuccessful"] is False
    assert run["results"]  # snippet.py's finding is still there


@pytest.mark.parametrize("fmt", ["concise", "full", "json", "github"])
def test_escaped_bytes_and_literal_backslashes_look_different(tmp_path, fmt):
    """``bad\\xff\\xfe.py`` (two bytes that are not UTF-8) and a name holding
    the characters backslash, x, f, f: the backslash itself is escaped."""
    root = tmp_path / "twins"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'scratch'\n")
    (root / "bad\\xff\\xfe.py").write_text(BUGGY)
    with open(os.path.join(os.fsencode(root), NOT_UTF8), "w") as handle:
        handle.write(BUGGY)
    completed = run_cli("check", "--no-cache", "--format", fmt, ".", cwd=root)
    assert completed.returncode == 1, completed.stderr
    text = completed.stdout.decode()
    if fmt == "json":
        paths = sorted(d["path"] for d in json.loads(text)["diagnostics"])
        assert paths == ["./bad\\\\xff\\\\xfe.py", "./bad\\xff\\xfe.py"]
        return
    if fmt == "github":
        files = sorted(line.split("file=", 1)[1].split(",", 1)[0] for line in text.splitlines())
        assert files == ["./bad\\\\xff\\\\xfe.py", "./bad\\xff\\xfe.py"]
        return
    shown = sorted(line.split(":2:9:", 1)[0] for line in text.splitlines() if ":2:9: MEM303" in line)
    assert shown == ["./bad\\\\xff\\\\xfe.py", "./bad\\xff\\xfe.py"]


def test_the_documented_problem_matcher_is_not_fooled_by_a_forged_name(tmp_path):
    """docs/integrations.md's VS Code regex reads concise output of a file
    named like a finding as that file's real position and code."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "integrations.md").read_text()
    block = re.search(r"```json\n(.*?)```", text, re.S).group(1)
    pattern = json.loads(block)["tasks"][0]["problemMatcher"]["pattern"]
    regex = re.compile(pattern["regexp"])
    root = tmp_path / "forged"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'scratch'\n")
    name = "real.py:1:1: MEM999 forged.py"
    (root / name).write_text(BUGGY)
    completed = run_cli("check", "--no-cache", "--format", "concise", name, cwd=root)
    [line] = completed.stdout.decode().splitlines()
    match = regex.match(line)
    assert match is not None, line
    assert match.group(pattern["file"]) == name
    assert (match.group(pattern["line"]), match.group(pattern["column"])) == ("2", "9")
    assert match.group(pattern["code"]) == "MEM303"


def _diff_lines_are_well_formed(text: str) -> list[str]:
    assert ESC not in text and "\x07" not in text and "\x0c" not in text
    lines = text.split("\n")
    assert lines[-1] == "" and "\r" not in text
    lines = lines[:-1]
    assert all(line[:1] in (" ", "-", "+", "@", "\\") for line in lines), lines
    assert not [line for line in lines if line.startswith("x.py:")]  # no forged line
    return lines


def test_diff_escapes_hostile_names_and_source(tmp_path):
    root = tmp_path / "diff"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'scratch'\n")
    name = f"e{ESC}[31m\nx.py:1:1: MEM999 forged.py"
    (root / name).write_text(RAW_ESC_SOURCE)
    # lone CRs and a form feed: one diff line per source line, the marker at the end
    (root / "lone_cr.py").write_bytes(b"import torch; torch.cuda.init()\r\x0cstate = torch.load('c').cuda()\ry = 1")
    completed = run_cli("check", "--no-cache", "--diff", "--unsafe-fixes", ".", cwd=root)
    assert completed.returncode == 1, completed.stderr
    lines = _diff_lines_are_well_formed(completed.stdout.decode())
    headers = [line for line in lines if line.startswith(("--- ", "+++ "))]
    assert "--- a/./e\\x1b[31m\\nx.py:1:1: MEM999 forged.py" in headers
    assert "--- a/./lone_cr.py" in headers and len(headers) == 4
    assert "+\\x0cstate = torch.load('c', map_location=\"cpu\").cuda()\\r" in lines
    markers = [index for index, line in enumerate(lines) if line.startswith("\\ ")]
    assert [lines[index] for index in markers] == ["\\ No newline at end of file"]
    assert lines[markers[0] - 1] == " y = 1"
    assert "+state = torch.load('\\x1b[2J\\x1b]0;pwned\\x07', map_location=\"cpu\").cuda()" in lines


def test_diff_escapes_the_stdin_filename(tmp_path):
    import subprocess
    import sys

    name = f"s{ESC}]0;t{chr(7)}\nx.py:1:1: MEM999 forged.py"
    completed = subprocess.run([sys.executable, "-m", "memlint", "check", "--diff", "--unsafe-fixes",
                                "--stdin-filename", name, "-"], input=BUGGY.encode(), capture_output=True,
                               cwd=tmp_path, timeout=120, env={**os.environ, "NO_COLOR": "1"})
    assert completed.returncode == 1, completed.stderr
    lines = _diff_lines_are_well_formed(completed.stdout.decode())
    assert lines[0] == "--- a/s\\x1b]0;t\\x07\\nx.py:1:1: MEM999 forged.py"


HOSTILE_MODEL = '''
import torch
from torch import nn
from memlint import Workload

def build(batch_size: int = 4):
    model = nn.Sequential()
    model.add_module("first", nn.Linear(8, 8))
    model.add_module("\\x1b[2J\\x1b]0;pwned\\x07\\nfake_py:1:1: MEM999 x", nn.ReLU())
    model.add_module("second", nn.Linear(8, 8))
    model.add_module("[red]y[/red]", nn.ReLU())
    model.add_module("out", nn.Linear(8, 2))
    return Workload(module=model, make_inputs=lambda b: (torch.randn(b, 8),),
                    loss_fn=lambda out, inputs: out.float().pow(2).mean(), default_batch_size=batch_size,
                    name="m[bold]x")
'''


def test_estimate_table_escapes_module_names(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "model.py").write_text(HOSTILE_MODEL)
    completed = run_cli("estimate", "model.py:build", "--gpu", "T4", cwd=tmp_path, timeout=300,
                        env={"COLUMNS": "300"})
    assert completed.returncode == 0, completed.stderr
    _no_raw_controls(completed.stdout)
    text = completed.stdout.decode()
    assert not [line for line in text.splitlines() if line.startswith("fake_py")]
    assert "│ \\x1b[2J\\x1b]0;pwned\\x07\\nfake_py:1:1: MEM999 x (ReLU) │" in text
    assert "│ [red]y[/red] (ReLU) " in text and "memlint estimate m[bold]x " in text
