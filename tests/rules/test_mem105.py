"""MEM105 hidden-state-not-detached: the shapes it reports and the ones it leaves alone."""

import pytest
from _marks import assert_matches_markers, reported_lines

CODE = "MEM105"

REPORTED = {
    "single_state_cell": (
        "def f(gru_cell, loader, opt, h):\n"
        "    for x, y in loader:\n"
        "        h = gru_cell(x, h)  # expect: MEM105\n"
        "        (h - y).pow(2).mean().backward()\n"
        "        opt.step()\n"
    ),
    "nested_tuple_state_from_import": (
        "from torch.nn import LSTM\n"
        "def f(batches, opt, crit, h, c):\n"
        "    lstm = LSTM(4, 8)\n"
        "    for i, (x, y) in enumerate(batches):\n"
        "        out, (h, c) = lstm(x, (h, c))  # expect: MEM105\n"
        "        crit(out, y).backward()\n"
        "        opt.step()\n"
    ),
    "while_rollout": (
        "import torch.nn as nn\n"
        "def f(rnn: nn.GRU, env, opt, hidden):\n"
        "    obs, done = env.reset(), False\n"
        "    while not done:\n"
        "        out, hidden = rnn(obs, hidden)  # expect: MEM105\n"
        "        obs, done = env.step(out.argmax().item())\n"
    ),
    "through_local_method": (
        "import torch.nn as nn\n"
        "class Agent(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.cell = nn.GRUCell(4, 8)\n"
        "        self.policy = nn.Linear(8, 2)\n"
        "    def act(self, obs, h):\n"
        "        h = self.cell(obs, h)\n"
        "        return self.policy(h), h\n"
        "def f(agent, env, h, steps):\n"
        "    obs = env.reset()\n"
        "    for t in range(steps):\n"
        "        logits, h = agent.act(obs, h)  # expect: MEM105\n"
        "        obs = env.step(logits.argmax().item())\n"
    ),
    "self_state_across_forward_calls": (
        "import torch.nn as nn\n"
        "class LM(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.rnn = nn.LSTM(4, 4)\n"
        "        self.hidden = None\n"
        "    def forward(self, x):\n"
        "        y, self.hidden = self.rnn(x, self.hidden)  # expect: MEM105\n"
        "        return y\n"
    ),
}

SILENT = {
    "detached_before": "def f(model, loader, opt, h):\n    for x in loader:\n        h = h.detach()\n        out, h = model(x, h)\n        out.sum().backward()\n        opt.step()\n",
    "detached_in_call": "def f(lstm, loader, opt, h, c):\n    for x in loader:\n        out, (h, c) = lstm(x, (h.detach(), c.detach()))\n        out.sum().backward()\n        opt.step()\n",
    "detach_inplace_loop": "def f(lstm, loader, opt, hidden):\n    for x in loader:\n        for t in hidden:\n            t.detach_()\n        out, hidden = lstm(x, hidden)\n        out.sum().backward()\n        opt.step()\n",
    "repackage_helper_elsewhere": "from utils import repackage\ndef f(lstm, loader, opt, hidden):\n    for x in loader:\n        hidden = repackage(hidden)\n        out, hidden = lstm(x, hidden)\n        out.sum().backward()\n        opt.step()\n",
    "reinitialised_with_none": "def f(rnn, loader, opt):\n    hidden = None\n    for x in loader:\n        hidden = None\n        out, hidden = rnn(x, hidden)\n        out.sum().backward()\n        opt.step()\n",
    "no_grad_decode": "import torch\n@torch.no_grad()\ndef f(decoder, tok, h, n):\n    for _ in range(n):\n        logits, h = decoder(tok, h)\n        tok = logits.argmax(-1)\n",
    "bptt_over_sequence": "import torch\ndef forward(cell, xs, h):\n    outs = []\n    for t in range(xs.size(0)):\n        h = cell(xs[t], h)\n        outs.append(h)\n    return torch.stack(outs)\n",
    "not_a_module": "def f(loader, h, opt):\n    for x in loader:\n        h = combine(x, h)\n        opt.step()\n",
    "self_state_reset_elsewhere": "import torch.nn as nn\nclass LM(nn.Module):\n    def reset(self, n):\n        self.hidden = self.rnn.init(n)\n    def forward(self, x):\n        y, self.hidden = self.rnn(x, self.hidden)\n        return y\n",
}


@pytest.mark.parametrize("source", REPORTED.values(), ids=REPORTED.keys())
def test_reported_shapes(source):
    assert_matches_markers(CODE, source)


@pytest.mark.parametrize("source", SILENT.values(), ids=SILENT.keys())
def test_silent_shapes(source):
    assert reported_lines(CODE, source) == []


def test_message_names_the_state():
    from lint.expectations import lint_text

    source = REPORTED["nested_tuple_state_from_import"]
    [diagnostic] = lint_text("t.py", source, {CODE})
    assert "`h, c`" in diagnostic.message
