"""The pre-parse facts (memlint.lint.facts): which identifiers count, and
what is a graph source."""

from __future__ import annotations

import ast

import pytest

from memlint.lint.facts import CodeFacts
from memlint.lint.registry import RuleInfo
from memlint.lint.walk import NodeIndex


def facts(source: str) -> CodeFacts:
    return CodeFacts.of(NodeIndex(ast.parse(source)))


def test_identifiers_come_from_code_only():
    source = (
        "import torch.nn.functional as F\n"
        "from torch.cuda.amp import GradScaler as Scaler\n"
        "class Trainer:\n"
        "    def fit(self, loader, *, epochs=1):\n"
        "        '''calls loss.backward() and zero_grad'''\n"
        "        # optimizer.zero_grad()\n"
        "        self.opt.step(closure=None)\n"
        "        return 'empty_cache'\n"
    )
    found = facts(source).identifiers
    for name in ("torch", "nn", "functional", "F", "cuda", "amp", "GradScaler", "Scaler", "Trainer", "fit",
                 "self", "loader", "epochs", "opt", "step", "closure"):
        assert name in found, name
    for name in ("backward", "zero_grad", "empty_cache", "loss", "optimizer"):
        assert name not in found, name


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("out = model(x)\n", False),  # a name is no evidence of a module
        ("def f(encoder, x):\n    return encoder(x)\n", False),
        ("y = self.backbone(x)\n", False),
        ("model.eval()\nout = model(x)\n", True),  # used as a module
        ("opt = SGD(net.parameters())\n", True),
        ("from torch import nn\nlayer = nn.Linear(2, 2)\n", True),
        ("import torch\nw = torch.zeros(3, requires_grad=True)\n", True),
        ("t.backward()\n", True),
        ("from transformers import AutoModel\n", True),
        ("out = thing.training_step(batch)\n", True),  # a framework hook name: its arguments are modules
        # a `.to()`/`.cuda()` result that is called is a module (operations._bound_from_move_and_called)
        ("import torch\nx = torch.zeros(3).cuda()\ntotal = 0\nfor v in x:\n    total += v\n", True),
        ("import torch\nx = torch.zeros(3)\ntotal = 0\nfor v in x:\n    total += v\n", False),
        ("path = build_model(config)\n", False),
        ("'''model(x).backward()'''\n", False),
    ],
)
def test_graph_source(source, expected):
    assert facts(source).has_graph_source is expected


def test_rule_info_applies_to():
    zero_grad = RuleInfo("MEM900", "m", True, ("zero_grad",), ("zero_grad",), False)
    graph = RuleInfo("MEM901", "m", True, ("+",), (), True)
    both = RuleInfo("MEM902", "m", True, ("x",), ("backward",), True)
    plain = facts("opt.zero_grad()\ntotal = 1 + 2\n")
    assert zero_grad.applies_to(plain)
    assert not graph.applies_to(plain)
    assert not both.applies_to(plain)
    trained = facts("loss = model(x)\nloss.backward()\n")
    assert not zero_grad.applies_to(trained)
    assert graph.applies_to(trained) and both.applies_to(trained)
