"""MEM103 device-tensor-collected-in-loop: the shapes it reports and the ones it leaves alone."""

import pytest
from _marks import assert_matches_markers, reported_lines

from lint.expectations import lint_text
from memlint.fix import resolve

CODE = "MEM103"

REPORTED = {
    "alias_no_grad_decorator": (
        "import torch as T\n"
        "@T.no_grad()\n"
        "def embed(encoder, batches):\n"
        "    encoder = encoder.cuda()\n"
        "    bank = []\n"
        "    for b in batches:\n"
        "        bank.append(encoder(b.cuda()))  # expect: MEM103\n"
        "    return bank\n"
    ),
    "nested_dict_tuple": (
        "import torch\n"
        "def f(model, loader, device):\n"
        "    model.eval()\n"
        "    hist = []\n"
        "    for x in loader:\n"
        "        out = model(x.to(device)).detach()\n"
        "        hist.append((x.shape, {'out': out}))  # expect: MEM103\n"
    ),
    "while_loop_dict_by_step": (
        "import torch\n"
        "def f(model, it):\n"
        "    model.eval()\n"
        "    cache = {}\n"
        "    step = 0\n"
        "    while step < 100:\n"
        "        with torch.inference_mode():\n"
        "            cache[step] = model(next(it).cuda())  # expect: MEM103\n"
        "        step += 1\n"
    ),
    "self_container_in_method_loop": (
        "import torch\n"
        "class Probe:\n"
        "    def run(self, loader):\n"
        "        for x in loader:\n"
        "            self.acts.append(x.cuda() + 1)  # expect: MEM103\n"
    ),
}

SILENT = {
    "moved_to_cpu": "import torch\ndef f(m, loader):\n    out = []\n    with torch.no_grad():\n        for x in loader:\n            out.append(m(x.cuda()).cpu())\n",
    "scalar": "import torch\ndef f(m, loader):\n    out = []\n    with torch.no_grad():\n        for x in loader:\n            out.append(m(x.cuda()).sum().item())\n",
    "attached_is_mem102": "def f(model, loader):\n    outs = []\n    for x in loader:\n        outs.append(model(x.cuda()))\n",
    "container_inside_loop": "import torch\ndef f(m, loader):\n    for x in loader:\n        tmp = []\n        tmp.append(x.cuda())\n",
    "fixed_key": "import torch\ndef f(m, loader):\n    last = {}\n    for x in loader:\n        last['x'] = x.cuda()\n",
    "ring_buffer_key": "import torch\ndef f(buf, loader):\n    for i, x in enumerate(loader):\n        buf[i % 8] = x.cuda()\n",
    "small_literal_range": "import torch\ndef f():\n    bufs = []\n    for _ in range(4):\n        bufs.append(torch.empty(8, device='cuda'))\n",
    "cleared_each_window": "import torch\ndef f(loader):\n    acc = []\n    for x in loader:\n        acc.append(x.cuda())\n        if len(acc) == 8:\n            acc.clear()\n",
    "look_alike_device_unknown": "def f(loader):\n    acc = []\n    for x in loader:\n        acc.append(x.to_device())\n",
}


@pytest.mark.parametrize("source", REPORTED.values(), ids=REPORTED.keys())
def test_reported_shapes(source):
    assert_matches_markers(CODE, source)


@pytest.mark.parametrize("source", SILENT.values(), ids=SILENT.keys())
def test_silent_shapes(source):
    assert reported_lines(CODE, source) == []


def test_fix_moves_the_stored_leaf_to_cpu():
    source = "import torch\ndef f(model, loader):\n    model.eval()\n    s = []\n    for x in loader:\n        model(x)\n        s.append(x.cuda().detach())\n"
    [diagnostic] = lint_text("t.py", source, {CODE})
    [edit] = resolve(source, [diagnostic])[0].fix.edits
    assert edit.content == ".cpu()" and edit.start_col == edit.end_col == len("        s.append(x.cuda().detach()") + 1
    assert diagnostic.fix.applicability.name == "UNSAFE"


def test_nested_value_has_no_fix():
    source = "import torch\ndef f(model, loader):\n    model.eval()\n    s = []\n    for x in loader:\n        model(x)\n        s.append({'a': x.cuda(), 'b': x.to('cuda')})\n"
    [diagnostic] = lint_text("t.py", source, {CODE})
    assert diagnostic.fix is None


def test_k_draft_tokens_of_one_decoding_call_are_the_output_asked_for():
    source = (
        "import torch\n"
        "def draft(model, token, k):\n"
        "    tokens, probs = [], []\n"
        "    for _ in range(k):\n"
        "        logits = model(token.cuda())\n"
        "        token = torch.argmax(logits, -1)\n"
        "        tokens.append(token)\n"
        "        probs.append(torch.softmax(logits, -1))\n"
        "    return torch.cat(tokens), probs\n"
        "with torch.no_grad():\n"
        "    draft(torch.nn.Linear(4, 4).cuda(), torch.ones(1, 4), 4)\n"
    )
    assert lint_text("t.py", source, {CODE}) == []


def test_device_snapshots_of_a_counted_training_loop_are_reported():
    source = (
        "import torch\n"
        "def fit(x, steps):\n"
        "    model = torch.nn.Linear(4, 1).cuda()\n"
        "    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    snapshots = []\n"
        "    for _ in range(steps):\n"
        "        model(x.cuda()).sum().backward()\n"
        "        opt.step()\n"
        "        snapshots.append(model.weight.detach().clone())\n"
    )
    assert [d.line for d in lint_text("t.py", source, {CODE})] == [9]
