"""Where a rule cannot tell that its unsafe fix leaves a working program, it
offers no fix and the finding stays.

``fixtures/fixwithheld/`` holds scripts in the shapes of real code where such
a fix broke the program (a corpus review of ``--diff --unsafe-fixes``). Each
runs in milliseconds on the CPU, is reported by its rule, comes out of
``--fix --unsafe-fixes`` byte for byte unchanged, and runs. For the three
whose hazard shows on the CPU, the fix that used to be offered is applied
by hand and the script must then fail: the fixture does model the hazard.
The snippets below check the edges of each rule's condition, both ways.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memlint.cli import main

pytest.importorskip("torch")

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "fixwithheld"
RUNNER = Path(__file__).with_name("fix_proof_runner.py")
#: script -> the rule whose fix is withheld there
WITHHELD = {
    "param_server_grad_sum.py": "MEM203",
    "optimizer_per_iteration.py": "MEM201",
    "layered_lstm_pairs.py": "MEM105",
    "whole_model_pickled.py": "MEM303",
    "latents_kept_on_device.py": "MEM103",
}
#: script -> (text the earlier fix replaced, its replacement, what the fixed run raises)
EARLIER_FIX = {
    "param_server_grad_sum.py": ("optimizer.zero_grad(set_to_none=False)", "optimizer.zero_grad()", "TypeError"),
    "optimizer_per_iteration.py": ("    for _ in range(steps):\n",
                                   "    for _ in range(steps):\n        optimizer.zero_grad()\n",
                                   "UnboundLocalError"),
    "layered_lstm_pairs.py": ("for x in stream:\n",
                              "for x in stream:\n    if hidden is not None:\n        hidden = hidden.detach() if "
                              "hasattr(hidden, \"detach\") else tuple(s.detach() for s in hidden)\n",
                              "AttributeError"),
}


def _memlint(*args: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        main(["check", "--no-cache", *args])
    return out.getvalue()


def _findings(path: Path, code: str) -> list[dict]:
    """The diagnostics of ``code`` on ``path``, each with its fix (or None) as JSON gives it."""
    report = json.loads(_memlint("--format", "json", "--select", code, str(path)))
    return [d for d in report["diagnostics"] if d["code"] == code]


@pytest.fixture(scope="module")
def withheld(tmp_path_factory) -> dict:
    """name -> (findings, whether ``--fix --unsafe-fixes`` left the copy
    unchanged, its run, the run of the copy with the earlier fix or None);
    all scripts run in one interpreter (:mod:`fix_proof_runner`)."""
    root = tmp_path_factory.mktemp("fix-withheld")
    prepared, runnable = {}, []
    for name, code in WITHHELD.items():
        script = root / name
        shutil.copy(FIXTURES / name, script)
        before = script.read_bytes()
        findings = _findings(script, code)
        _memlint("--fix", "--unsafe-fixes", "--select", code, str(script))
        earlier = None
        if name in EARLIER_FIX:
            old, new, _ = EARLIER_FIX[name]
            text = before.decode("utf-8")
            assert text.count(old) == 1, f"{name}: the earlier fix's anchor is not unique"
            earlier = root / f"earlier_{name}"
            earlier.write_text(text.replace(old, new), encoding="utf-8")
            runnable.append(str(earlier))
        runnable.append(str(script))
        prepared[name] = (findings, script.read_bytes() == before, str(script), earlier and str(earlier))
    done = subprocess.run([sys.executable, str(RUNNER), *runnable], capture_output=True, text=True,
                          timeout=300, cwd=root)
    assert done.returncode == 0, done.stderr
    runs = json.loads(done.stdout)
    return {name: (findings, unchanged, runs[script], earlier and runs[earlier])
            for name, (findings, unchanged, script, earlier) in prepared.items()}


def test_every_fixture_is_listed():
    assert sorted(p.name for p in FIXTURES.glob("*.py")) == sorted(WITHHELD)


@pytest.mark.parametrize("name", sorted(WITHHELD))
def test_reported_without_a_fix_and_left_unchanged(withheld, name):
    findings, unchanged, ran, _ = withheld[name]
    assert findings, f"{WITHHELD[name]} does not report the fixture"
    assert all(d["fix"] is None for d in findings)
    assert unchanged, "--fix --unsafe-fixes changed the file"
    assert ran["ok"], ran["error"]
    assert ran["stdout"].strip()


@pytest.mark.parametrize("name", sorted(EARLIER_FIX))
def test_the_earlier_fix_breaks_the_fixture(withheld, name):
    ran = withheld[name][3]
    assert not ran["ok"] and EARLIER_FIX[name][2] in ran["error"], ran


def _fixes(tmp_path: Path, code: str, source: str, name: str = "train.py") -> list[str | None]:
    """For each ``code`` finding on ``source``: the text its fix inserts (None: no fix)."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return ["".join(e["content"] for e in d["fix"]["edits"]) if d["fix"] else None for d in _findings(path, code)]


GPU = "import torch\nmodel = model.cuda()\n"
MAP_CPU = ', map_location="cpu"'
MEM303_CASES = {
    "whole model used as loaded": (GPU + "def best(f):\n    net = torch.load(f)\n    return net(x)\n", [None]),
    "model, criterion, optimizer unpacked": (GPU + "def best(f):\n    net, crit, opt = torch.load(f)\n", [None]),
    "straight into load_state_dict": (GPU + "def resume(net, p):\n    net.load_state_dict(torch.load(p))\n", [MAP_CPU]),
    "entry into a state-dict loader by keyword": (
        GPU + "def resume(net, p):\n    sd = torch.load(p)['state_dict']\n"
        "    load_from_full_model_state_dict(model=net, full_sd=sd)\n", [MAP_CPU]),
    "assigned in one branch, loaded after the if": (
        GPU + "def resume(net, p, main):\n    if main:\n        sd = torch.load(p)\n    else:\n        sd = {}\n"
        "    net.load_state_dict(sd)\n", [MAP_CPU]),
    "rebound before the load_state_dict": (
        GPU + "def resume(net, p):\n    sd = torch.load(p)\n    sd = fresh()\n    net.load_state_dict(sd)\n", [None]),
    "moved after loading": (GPU + "def best(f):\n    net = torch.load(f)\n    net.cuda()\n    return net\n", [MAP_CPU]),
    "re-assigned from its own move": (
        GPU + "def best(f, device, accel):\n    net = torch.load(f)\n    if accel:\n        net = net.to(device)\n"
        "    return net\n", [MAP_CPU]),
    "moved on the result": (GPU + "def best(f, device):\n    return torch.load(f).to(device)\n", [MAP_CPU]),
}


@pytest.mark.parametrize("case", sorted(MEM303_CASES))
def test_map_location_only_where_the_loaded_tensors_are_placed(tmp_path, case):
    source, expected = MEM303_CASES[case]
    assert _fixes(tmp_path, "MEM303", source) == expected


def test_no_map_location_fix_in_a_test_that_asserts_devices(tmp_path):
    test = ("import unittest, torch\nclass TestResume(unittest.TestCase):\n"
            "    @unittest.skipUnless(torch.cuda.is_available(), 'gpu')\n"
            "    def test_on_gpu(self):\n        state = torch.load(self.path)\n"
            "        self.net.load_state_dict(state)\n{check}")
    on_device = "        assert state['w'].device.type == 'cuda'\n"
    assert _fixes(tmp_path, "MEM303", test.format(check=on_device), "test_resume.py") == [None]
    on_values = "        assert state['w'].sum() > 0\n"
    assert _fixes(tmp_path, "MEM303", test.format(check=on_values), "test_resume.py") == [MAP_CPU]


MEM203_CASES = {
    "no gradient arithmetic": ("def step(opt):\n    opt.zero_grad(set_to_none=False)\n", [""]),
    "scaled in place in another method": (
        "class Server:\n    def average(self, n):\n        for p in self.params:\n            p.grad.data.mul_(1 / n)\n"
        "    def step(self):\n        self.opt.step()\n        self.opt.zero_grad(set_to_none=False)\n", [None]),
    "an item of the gradient added into": (
        "def step(opt, params, mask, g):\n    opt.zero_grad(False)\n    for p in params:\n        p.grad[mask] += g\n",
        [None]),
}


@pytest.mark.parametrize("case", sorted(MEM203_CASES))
def test_set_to_none_fix_not_where_grads_are_updated_in_place(tmp_path, case):
    source, expected = MEM203_CASES[case]
    assert _fixes(tmp_path, "MEM203", source) == expected


def test_no_set_to_none_fix_in_a_test_that_asserts_the_argument(tmp_path):
    source = ("from unittest import mock\nimport torch\ndef test_forwarding(wrapped):\n"
              "    with mock.patch('torch.optim.SGD.zero_grad') as zero_grad:\n"
              "        wrapped.zero_grad(set_to_none=False)\n        zero_grad.assert_called_with(set_to_none=False)\n")
    assert _fixes(tmp_path, "MEM203", source, "test_wrappers.py") == [None]


ZERO_GRAD = "opt.zero_grad()\n"
MEM201_CASES = {
    "optimizer bound before the loop": (
        "import torch\ndef fit(model, loader):\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for x in loader:\n        model(x).sum().backward()\n        opt.step()\n", [ZERO_GRAD]),
    "module-level optimizer used in a function": (
        "import torch\nopt = torch.optim.SGD(params, lr=0.1)\ndef fit(model, loader):\n"
        "    for x in loader:\n        model(x).sum().backward()\n        opt.step()\n", [ZERO_GRAD]),
    "optimizer re-bound in the body": (
        "import torch\ndef fit(model, loader):\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for x in loader:\n        model(x).sum().backward()\n        opt.step()\n"
        "        opt = torch.optim.SGD(model.parameters(), lr=0.01)\n", [None]),
    "attribute optimizer assigned in the body": (
        "import torch\nclass T:\n    def fit(self, loader):\n        for x in loader:\n"
        "            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)\n"
        "            self.model(x).sum().backward()\n            self.opt.step()\n", [None]),
}


@pytest.mark.parametrize("case", sorted(MEM201_CASES))
def test_zero_grad_fix_only_for_an_optimizer_bound_before_the_loop(tmp_path, case):
    source, expected = MEM201_CASES[case]
    found = _fixes(tmp_path, "MEM201", source)
    assert [f if f is None else f.strip() + "\n" for f in found] == expected


MEM105_CASES = {
    "GRU state, None at first": (
        "import torch.nn as nn\ngru = nn.GRU(3, 4)\nh = None\nfor x in loader:\n    out, h = gru(x, h)\n"
        "    out.sum().backward(retain_graph=True)\n", ["if h is not None:\n    h = h.detach()\n"]),
    "LSTM cell state unpacked": (
        "import torch\nimport torch.nn as nn\ncell = nn.LSTMCell(3, 4)\nh = torch.zeros(1, 4)\nc = torch.zeros(1, 4)\n"
        "for x in loader:\n    h, c = cell(x, (h, c))\n    h.sum().backward(retain_graph=True)\n",
        ["h = h.detach()\nc = c.detach()\n"]),
    "a model's own state structure": (
        "import torch.nn as nn\nclass Net(nn.Module):\n    pass\nnet = Net()\nhidden = net.init_hidden(1)\n"
        "for x in loader:\n    out, hidden = net(x, hidden)\n    out.sum().backward(retain_graph=True)\n", [None]),
}


@pytest.mark.parametrize("case", sorted(MEM105_CASES))
def test_detach_follows_the_known_structure_of_the_state(tmp_path, case):
    source, expected = MEM105_CASES[case]
    found = _fixes(tmp_path, "MEM105", source)
    assert [f if f is None else textwrap.dedent(f) for f in found] == expected


SNAPSHOTS = ("import torch\ndef track(steps):\n    x = torch.zeros(3, device='cuda', requires_grad=True)\n"
             "    opt = torch.optim.SGD([x], lr=0.1)\n    snaps = []\n    for _ in range(steps):\n"
             "        (x ** 2).sum().backward()\n        opt.step()\n        snaps.append({stored})\n")
MEM103_CASES = {
    "moved to the device as it is stored": (SNAPSHOTS.format(stored="x.detach().to('cuda')"), [None]),
    "moved with .cuda() as it is stored": (SNAPSHOTS.format(stored="x.detach().clone().cuda()"), [None]),
    "a device tensor stored as it is": (SNAPSHOTS.format(stored="x.detach().clone()"), [".cpu()"]),
}


@pytest.mark.parametrize("case", sorted(MEM103_CASES))
def test_cpu_fix_not_for_an_explicit_move(tmp_path, case):
    source, expected = MEM103_CASES[case]
    assert _fixes(tmp_path, "MEM103", source) == expected
