"""MEM106 retain-graph-in-loop: the shapes it reports and the ones it leaves alone."""

import pytest
from _marks import assert_matches_markers, reported_lines

CODE = "MEM106"

REPORTED = {
    "method_keyword": "def f(model, loader, opt):\n    for x in loader:\n        model(x).sum().backward(retain_graph=True)  # expect: MEM106\n        opt.step()\n",
    "tensor_backward_positional": "def f(model, loader, g):\n    for x in loader:\n        model(x).backward(g, True)  # expect: MEM106\n",
    "autograd_alias": "import torch.autograd as A\ndef f(model, loader, ps):\n    for x in loader:\n        A.backward(model(x).sum(), None, True)  # expect: MEM106\n",
    "torch_autograd_grad_keyword": "import torch\ndef f(model, it, ps):\n    while True:\n        torch.autograd.grad(model(next(it)).sum(), ps, retain_graph=True)  # expect: MEM106\n",
    "earlier_plain_backward_does_not_count": "def f(model, loader):\n    for x in loader:\n        a = model(x)\n        a.mean().backward()\n        a.sum().backward(retain_graph=True)  # expect: MEM106\n",
    "lightning_manual_backward_in_loop": "def f(self, batches, opt):\n    for b in batches:\n        self.manual_backward(self.model(b).loss, retain_graph=True)  # expect: MEM106\n        opt.step()\n",
}

SILENT = {
    "later_release": "def f(e, a, b, loader):\n    for x in loader:\n        z = e(x)\n        a(z).sum().backward(retain_graph=True)\n        b(z).sum().backward()\n",
    "later_autograd_grad_release": "import torch\ndef f(m, loader, ps):\n    for x in loader:\n        l = m(x).sum()\n        l.backward(retain_graph=True)\n        torch.autograd.grad(l, ps)\n",
    "outside_loop": "def f(m, x):\n    m(x).sum().backward(retain_graph=True)\n",
    "variable_flag": "def f(m, loader, keep):\n    for x in loader:\n        m(x).sum().backward(retain_graph=keep)\n",
    "false_literal": "def f(m, loader):\n    for x in loader:\n        m(x).sum().backward(retain_graph=False)\n",
    "create_graph_only": "import torch\ndef f(m, loader, ps):\n    for x in loader:\n        torch.autograd.grad(m(x).sum(), ps, create_graph=True)\n",
    "look_alike": "import mylib\ndef f(loader):\n    for x in loader:\n        mylib.grad(x, None, None, True)\n",
    "released_after_inner_loop": "def f(m, heads, loader):\n    for x in loader:\n        z = m(x)\n        for h in heads:\n            h(z).sum().backward(retain_graph=True)\n        z.sum().backward()\n",
}


@pytest.mark.parametrize("source", REPORTED.values(), ids=REPORTED.keys())
def test_reported_shapes(source):
    assert_matches_markers(CODE, source)


@pytest.mark.parametrize("source", SILENT.values(), ids=SILENT.keys())
def test_silent_shapes(source):
    assert reported_lines(CODE, source) == []
