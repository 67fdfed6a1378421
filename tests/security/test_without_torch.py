"""Lint without torch (item 4 of issue 18): with only the core install,
`--estimate` is one line naming what to install, and the findings still print.

torch cannot be uninstalled for a test, so ``importlib.util.find_spec`` is
made to answer as it does where torch is not installed (None)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from memlint.cli import main

from .conftest import make_tree, script_with_target


@pytest.fixture
def no_torch(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name.split(".")[0] == "torch" else real(name, *args))


def test_check_estimate_without_torch_is_one_line_and_findings_print(no_torch, tmp_path, capsys, monkeypatch):
    root = make_tree(tmp_path / "t", {"train.py": script_with_target("models.py:build"),
                                      "models.py": "def build():\n    raise SystemExit('must not run')\n"})
    monkeypatch.chdir(root)
    code = main(["--estimate", "--no-cache", "--format", "json", "."])
    out, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err
    [line] = err.strip().splitlines()
    assert line == ("memlint: error: --estimate needs torch, which is not installed: install the estimator's "
                    "dependencies, the CPU build of torch first: pip install 'torch==2.13.0' --index-url "
                    "https://download.pytorch.org/whl/cpu && pip install 'memlint[estimate]'")
    assert [d["path"] for d in json.loads(out)["diagnostics"]] == ["./buggy.py"]


def test_estimate_command_without_torch_is_one_line(no_torch, tmp_path, capsys):
    model = tmp_path / "m.py"
    model.write_text("def build():\n    pass\n")
    assert main(["estimate", f"{model}:build"]) == 2
    err = capsys.readouterr().err
    assert err == ("memlint: error: the estimator needs torch, which is not installed: pip install 'torch==2.13.0' "
                   "--index-url https://download.pytorch.org/whl/cpu && pip install 'memlint[estimate]'\n")


def test_plain_check_without_torch_needs_nothing(no_torch, tmp_path, capsys, monkeypatch):
    root = make_tree(tmp_path / "t", {"train.py": script_with_target("models.py:build")})
    monkeypatch.chdir(root)
    assert main(["--no-cache", "--format", "concise", "."]) == 1
    out, err = capsys.readouterr()
    assert out.startswith("./buggy.py:2:9: MEM303 ") and "needs torch" not in err
