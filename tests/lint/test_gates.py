"""The pre-parse gate (memlint.lint.facts) never changes a result.

Each rule's ``NEEDS_NAMES``/``NEEDS_GRAPH_SOURCE`` claims to be a necessary
condition for a finding. These tests lint real and example code with every
rule enabled twice, with the gate and with it switched off, and require
identical diagnostics; and they check that the gate does skip the rules
where it should.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest

from memlint.lint import engine
from memlint.lint.engine import LintOptions, lint_source
from memlint.lint.registry import all_rules, rule_index

REPO = Path(__file__).resolve().parents[2]
EVERY_RULE = LintOptions(enabled=frozenset(rule_index()))
#: Installed library sources sampled for the check: every k-th file, sorted.
LIBRARY_SAMPLE = {"torch": 60, "transformers": 60}


def _library_sample() -> list[Path]:
    site = Path(sysconfig.get_paths()["purelib"])
    chosen: list[Path] = []
    for package, stride in LIBRARY_SAMPLE.items():
        files = sorted((site / package).rglob("*.py")) if (site / package).is_dir() else []
        chosen.extend(files[::stride])
    return chosen


def _repository_files() -> list[Path]:
    roots = [REPO / "fixtures" / "lint", REPO / "fixtures" / "scripts", REPO / "fixtures" / "cases"]
    return sorted(path for root in roots for path in root.rglob("*.py"))


def _examples() -> list[tuple[str, str]]:
    return [
        (f"{rule.CODE}_{kind}_{i}.py", source)
        for rule in all_rules()
        for kind, sources in (("valid", rule.VALID), ("invalid", rule.INVALID))
        for i, source in enumerate(sources)
    ]


def _lint_both_ways(monkeypatch, path: str, data: bytes):
    gated = lint_source(path, data, EVERY_RULE)
    with monkeypatch.context() as patch:
        patch.setattr(engine, "applicable_codes", lambda codes, facts: codes)
        ungated = lint_source(path, data, EVERY_RULE)
    return gated, ungated


def test_rule_examples_lint_the_same_with_and_without_the_gate(monkeypatch):
    for name, source in _examples():
        gated, ungated = _lint_both_ways(monkeypatch, name, source.encode("utf-8"))
        assert gated.diagnostics == ungated.diagnostics, name


def test_repository_files_lint_the_same_with_and_without_the_gate(monkeypatch):
    files = _repository_files()
    assert len(files) > 50
    for path in files:
        gated, ungated = _lint_both_ways(monkeypatch, str(path), path.read_bytes())
        assert gated.diagnostics == ungated.diagnostics, path


def test_library_sources_lint_the_same_with_and_without_the_gate(monkeypatch):
    files = _library_sample()
    if not files:
        pytest.skip("torch/transformers sources are not installed")
    for path in files:
        gated, ungated = _lint_both_ways(monkeypatch, str(path), path.read_bytes())
        assert gated.diagnostics == ungated.diagnostics, path


def _rule_runs(monkeypatch, source: str) -> int:
    """How many times linting ``source`` runs the rules (0 when the gate drops them all)."""
    calls = []
    real = engine._run_rules

    def counting(ctx, classes):
        calls.append(ctx.path)
        return real(ctx, classes)

    monkeypatch.setattr(engine, "_run_rules", counting)
    lint_source("f.py", source.encode("utf-8"), EVERY_RULE)
    return len(calls)


def test_words_in_docstrings_and_comments_do_not_run_the_rules(monkeypatch):
    source = (
        "def total(xs):\n"
        "    '''Sum like a loss before loss.backward(); see torch.load and zero_grad.'''\n"
        "    result = 0\n"
        "    for x in xs:  # not a model: no graph\n"
        "        result += x\n"
        "    return result\n"
    )
    assert _rule_runs(monkeypatch, source) == 0


def test_code_that_a_rule_can_report_runs_the_rules(monkeypatch):
    source = "import torch; torch.cuda.init()\nstate = torch.load('ckpt.pt')\n"
    assert _rule_runs(monkeypatch, source) == 1
    found = lint_source("f.py", source.encode("utf-8"), EVERY_RULE).diagnostics
    assert [d.code for d in found] == ["MEM303"]


def test_syntax_errors_are_reported_without_running_the_rules(monkeypatch):
    source = "def f(:\n    pass  # backward\n"
    assert _rule_runs(monkeypatch, source) == 0
    found = lint_source("f.py", source.encode("utf-8"), EVERY_RULE).diagnostics
    assert [d.code for d in found] == ["MEM001"]


def test_a_long_and_chain_is_linted(monkeypatch):
    """10,000 operands: flat in CPython's ast (libcst, memlint's earlier
    parser, nested one level per operand and crashed near 7,000)."""
    chain = " and ".join(["a"] * 10_000)
    source = f"def f(model, loader, total):\n    model.train()\n    for b in loader:\n        total += model(b)\n    return {chain}\n"
    assert _rule_runs(monkeypatch, source) == 1
    result = lint_source("f.py", source.encode("utf-8"), EVERY_RULE)
    assert not result.internal_errors
    assert [d.code for d in result.diagnostics] == ["MEM101"]
