"""memlint's own failures are its own: a rule (or the semantic model under
it) that raises, even with RecursionError, is an internal error naming the
rule, never the user's MEM001; the other rules' findings on the file stay."""

from __future__ import annotations

import subprocess
import sys

from memlint.lint.engine import LintOptions, lint_source
from memlint.lint.registry import rule_classes

SOURCE = (
    "import torch\n"
    "def train(model, loader, opt):\n"
    "    model.train()\n"
    "    total = 0.0\n"
    "    for x in loader:\n"
    "        loss = model(x).sum()\n"
    "        loss.backward()\n"
    "        opt.step()\n"
    "        total += loss\n"
    "        torch.cuda.empty_cache()\n"
)


def _lint(codes):
    return lint_source("t.py", SOURCE.encode(), LintOptions(frozenset(codes)))


def test_a_recursing_rule_is_an_internal_error_naming_it(monkeypatch):
    rule = rule_classes(["MEM401"])["MEM401"]

    def recurse(self, node):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(rule, "visit_Call", recurse)
    result = _lint(["MEM101", "MEM401"])
    assert [d.code for d in result.diagnostics] == ["MEM101"]  # the other rule's finding is kept
    [error] = result.internal_errors
    assert "rule MEM401 crashed" in error and "RecursionError" in error and "MEM001" not in error
    assert "Traceback" in result.internal_details[0]


def test_a_crash_inside_the_semantic_model_names_the_model_and_the_rule(monkeypatch):
    from memlint.lint.semantic import model

    def broken(self, unit, context):
        raise ValueError("boom")

    monkeypatch.setattr(model.SemanticModel, "analyse", broken)
    result = _lint(["MEM101"])
    [error] = result.internal_errors
    assert "semantic model crashed while rule MEM101 asked it" in error and "ValueError: boom" in error
    assert not any(d.code == "MEM001" for d in result.diagnostics)


def test_debug_prints_the_traceback(tmp_path):
    script = tmp_path / "t.py"
    script.write_text(SOURCE)
    plugin = tmp_path / "breakrule.py"
    plugin.write_text(
        "import sys\n"
        "from memlint.lint.registry import rule_classes\n"
        "rule = rule_classes(['MEM401'])['MEM401']\n"
        "rule.visit_Call = lambda self, node: (_ for _ in ()).throw(KeyError('x'))\n"
        "from memlint.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    quiet = subprocess.run([sys.executable, str(plugin), "check", "--no-cache", "--jobs", "1", str(script)], capture_output=True, text=True)
    loud = subprocess.run([sys.executable, str(plugin), "check", "--no-cache", "--jobs", "1", "--debug", str(script)], capture_output=True, text=True)
    assert quiet.returncode == loud.returncode == 2
    assert "rule MEM401 crashed (KeyError" in quiet.stderr and "Traceback" not in quiet.stderr
    assert "Traceback (most recent call last)" in loud.stderr and "KeyError" in loud.stderr
