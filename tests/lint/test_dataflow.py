"""The shared dataflow analysis (memlint/lint/dataflow.py): each documented
rule of what is graph-attached, on the accelerator, a model or a forward
pass, checked on small functions."""

import ast

import pytest

from memlint.lint.context import FileContext
from memlint.lint.dataflow import Tri


def _flow(source: str):
    module = ast.parse(source)
    return FileContext("t.py", source, module).dataflow, module


def _in_source_order(nodes):
    """``ast.walk`` goes breadth-first: sort what it found by position."""
    return sorted(nodes, key=lambda node: (node.lineno, node.col_offset))


def value_of(source: str, name: str):
    """The value bound to ``name`` by its last assignment in ``source``."""
    flow, module = _flow(source)
    targets = [
        leaf
        for node in ast.walk(module)
        if isinstance(node, ast.Assign)
        for target in node.targets
        for leaf in ast.walk(target)
        if isinstance(leaf, ast.Name) and leaf.id == name
    ]
    assert targets, name
    return flow.value(_in_source_order(targets)[-1])


HEADER = "import torch\nimport torch.nn.functional as F\n"

ATTACHED = {
    "model output": "def f(model, x):\n    y = model(x)\n",
    "attribute of output": "def f(model, x):\n    y = model(x).loss\n",
    "self submodule": "class A:\n    def f(self, x):\n        y = self.encoder(x)\n",
    "loss function": "def f(logits, t):\n    y = F.cross_entropy(logits, t)\n",
    "criterion object": "def f(model, criterion, x, t):\n    y = criterion(model(x), t)\n",
    "arithmetic": "def f(model, x, n):\n    out = model(x)\n    y = out.mean() / n\n",
    "backward receiver": "def f(thing, x):\n    y = thing.compute(x)\n    y.backward()\n",
    "requires_grad factory": "def f():\n    y = torch.zeros(3, requires_grad=True)\n",
    "local helper": "def helper(model, x):\n    return model(x)\ndef f(model, x):\n    y = helper(model, x)\n",
    "tuple unpacking": "def f(model, x):\n    logits, y = model(x)\n",
}

DETACHED = {
    "item": "def f(model, x):\n    y = model(x).item()\n",
    "detach": "def f(model, x):\n    y = model(x).detach()\n",
    "float()": "def f(model, x):\n    y = float(model(x))\n",
    "argmax": "def f(model, x):\n    y = model(x).argmax(-1)\n",
    "comparison sum": "def f(model, x, t):\n    y = (model(x).argmax(1) == t).sum()\n",
    "no_grad block": "def f(model, x):\n    with torch.no_grad():\n        y = model(x)\n",
    "inference_mode decorator": "@torch.inference_mode()\ndef f(model, x):\n    y = model(x)\n",
    "set_grad_enabled(False)": "def f(model, x):\n    with torch.set_grad_enabled(False):\n        y = model(x)\n",
    "shape": "def f(model, x):\n    y = model(x).shape\n",
    "plain factory": "def f():\n    y = torch.zeros(3)\n",
}

UNKNOWN = {
    "unknown callable": "def f(thing, x):\n    y = thing.compute(x)\n",
    "getter is not a model": "def f(model):\n    y = model.get_encoder()\n",
    "private getter": "class A:\n    def f(self):\n        y = self._get_resized_lm_head(self.dense)\n",
}


@pytest.mark.parametrize("source", ATTACHED.values(), ids=ATTACHED.keys())
def test_attached(source):
    assert value_of(HEADER + source, "y").graph is Tri.YES


@pytest.mark.parametrize("source", DETACHED.values(), ids=DETACHED.keys())
def test_not_attached(source):
    assert value_of(HEADER + source, "y").graph is Tri.NO


@pytest.mark.parametrize("source", UNKNOWN.values(), ids=UNKNOWN.keys())
def test_undecided_stays_silent(source):
    assert value_of(HEADER + source, "y").graph is Tri.MAYBE


@pytest.mark.parametrize(
    "source, expected",
    [
        ("def f(x):\n    y = x.cuda()\n", Tri.YES),
        ("def f(x, device):\n    y = x.to(device)\n", Tri.YES),
        ("def f(x):\n    y = x.to('cuda:0')\n", Tri.YES),
        ("def f(x):\n    y = x.cuda().cpu()\n", Tri.NO),
        ("def f():\n    y = torch.randn(3, device='cuda')\n", Tri.YES),
        ("def f():\n    y = torch.randn(3, device='cpu')\n", Tri.NO),
        ("def f(model, x):\n    y = model(x.cuda())\n", Tri.YES),
        ("def f(x):\n    y = x.cuda().tolist()\n", Tri.NO),
    ],
)
def test_device(source, expected):
    assert value_of(HEADER + source, "y").device is expected


def test_loop_carried_values_are_seen_on_the_second_pass():
    source = HEADER + "def f(model, loader):\n    total = 0\n    for x in loader:\n        total = total + model(x)\n    y = total\n"
    assert value_of(source, "y").graph is Tri.YES


def test_branches_join_to_attached_when_either_is():
    source = HEADER + "def f(model, x, c):\n    if c:\n        y = model(x)\n    else:\n        y = 0.0\n    z = y\n"
    assert value_of(source, "z").graph is Tri.YES


def test_forward_calls_grad_disabled_and_loops():
    source = HEADER + (
        "def f(model, loader):\n"
        "    for x in loader:\n"
        "        with torch.no_grad():\n"
        "            a = model(x)\n"
        "        b = model(x)\n"
    )
    flow, module = _flow(source)
    calls = _in_source_order(
        n for n in ast.walk(module) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "model"
    )
    assert [flow.is_forward_call(c) for c in calls] == [True, True]
    assert [flow.grad_disabled(c) for c in calls] == [True, False]
    assert all(len(flow.enclosing_loops(c)) == 1 for c in calls)


def test_names_resolve_through_import_aliases():
    source = "import torch as T\ndef f(model, x):\n    with T.no_grad():\n        y = model(x)\n"
    assert value_of(source, "y").graph is Tri.NO
