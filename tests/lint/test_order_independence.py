"""A file's findings do not depend on what the semantic model was asked
first. Rules ask in traversal order; here the model is first asked for
the canonical analysis of every function, leaves first or last, and the
findings must be the same as without that warm-up.

The snippets are new code written for these tests."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from memlint.lint import engine
from memlint.lint.registry import rules_by_code
from memlint.lint.semantic.model import UNIT_TYPES
from memlint.lint.semantic.values import Tri

from .test_semantic import model_of, node_at

ROOT = Path(__file__).resolve().parents[2]

#: A three-level call chain (``main -> train -> make_loader``) in a file that
#: uses ``no_grad``: asking for the leaf first used to settle ``train``'s
#: grad mode from a caller analysed with its context cut off (MAYBE), which
#: hid the MEM102 on line 19.
CHAIN = """\
import torch


def make_loader(n):
    return torch.utils.data.DataLoader(torch.randn(n, 8), batch_size=4)


def train(model, opt, n):
    loader = make_loader(n)
    for x in loader:
        loss = model(x.cuda()).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
    kept = []
    for x in loader:
        with torch.no_grad():
            model(x.cuda())
        kept.append(loss * 2)
    return kept


def main():
    model = torch.nn.Linear(8, 1).cuda()
    train(model, torch.optim.SGD(model.parameters(), 0.1), 3)


if __name__ == "__main__":
    main()
"""


def _findings(source: str, warm_up: str | None) -> set[tuple[int, str]]:
    """(line, code) of every finding with all rules on; ``warm_up`` "leaves
    first" / "callers first" asks for each function's canonical analysis in
    reverse / source order before the rules run."""
    original = engine._run_rules

    def run_rules(ctx, classes):
        if warm_up is not None:
            from memlint.lint.walk import indexed

            units = sorted(ctx.index.of_type(*UNIT_TYPES), key=lambda n: (n.lineno, n.col_offset),
                           reverse=warm_up == "leaves first")
            with indexed(ctx.index):
                for unit in units:
                    ctx.semantic.canonical(unit)
        return original(ctx, classes)

    engine._run_rules = run_rules
    try:
        result = engine.lint_source("t.py", source.encode("utf-8"), engine.LintOptions(enabled=frozenset(rules_by_code())))
    finally:
        engine._run_rules = original
    return {(d.line, d.code) for d in result.diagnostics}


@pytest.mark.parametrize("warm_up", ["leaves first", "callers first"])
def test_a_call_chain_gets_the_same_findings_whatever_is_asked_first(warm_up):
    plain = _findings(CHAIN, None)
    assert (19, "MEM102") in plain
    assert _findings(CHAIN, warm_up) == plain


def _fixture_files() -> list[Path]:
    return sorted((ROOT / "fixtures" / "recall").glob("*.py"))


def test_every_recall_fixture_gets_the_same_findings_whatever_is_asked_first():
    files = _fixture_files()
    assert len(files) > 200
    differing = []
    for path in files:
        source = path.read_text(encoding="utf-8")
        plain = _findings(source, None)
        for warm_up in ("leaves first", "callers first"):
            if _findings(source, warm_up) != plain:
                differing.append(f"{path.name} ({warm_up})")
    assert differing == []


# -- a parameter's placement across the file's calls -----------------------------------
PLACEMENT = """\
import torch

def snapshot(model):
    return model

def train():
    snapshot(torch.nn.Linear(2, 2).cuda())

def test_on_cpu():
    snapshot(torch.nn.Linear(2, 2))

def train_twice():
    snapshot_gpu(torch.nn.Linear(2, 2).cuda())
    snapshot_gpu(torch.nn.Linear(2, 2).to("cuda"))

def snapshot_gpu(model):
    return model
"""


def test_a_parameter_passed_host_and_device_modules_is_of_unknown_placement():
    model, module = model_of(PLACEMENT)
    returned = node_at(module, 4, ast.Return).value
    assert model.value(returned).device is Tri.MAYBE


def test_a_parameter_every_call_passes_on_the_device_is_on_the_device():
    model, module = model_of(PLACEMENT)
    returned = node_at(module, 17, ast.Return).value
    assert model.value(returned).device is Tri.YES


def test_one_function_keeps_a_device_value_of_either_branch():
    source = textwrap.dedent("""\
        import torch
        def f(flag):
            x = torch.ones(2)
            if flag:
                x = torch.ones(2).cuda()
            return x
        f(True)
        """)
    model, module = model_of(source)
    assert model.value(node_at(module, 6, ast.Return).value).device is Tri.YES


#: ``Trainer.fit`` calls ``_step`` once, through ``self``: the canonical
#: analysis of ``_step`` is the summary ``fit``'s call already made (its
#: context is the call's own, receiver included), not a second interpretation.
CALLED_ONCE = """\
import torch


class Trainer:
    def __init__(self, model):
        self.model = model

    def _step(self, batch):
        loss = self.model(batch).sum()
        loss.backward()
        return loss.item()

    def fit(self, loader):
        for batch in loader:
            self._step(batch)
"""


def test_a_method_called_once_is_not_interpreted_again_for_its_canonical_analysis():
    model, module = model_of(CALLED_ONCE)
    klass = next(n for n in module.body if isinstance(n, ast.ClassDef))
    step, fit = (n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name in ("_step", "fit"))
    model.canonical(fit)
    work = model._work
    analysis = model.canonical(step)
    assert model._work == work
    assert analysis.trains and analysis.context.param("self") is not None
