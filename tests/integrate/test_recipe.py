"""Static recipe extraction: every source of each value, and its position."""

from __future__ import annotations

import textwrap

import pytest

from memlint.integrate.recipe import extract_recipe


def recipe(code: str):
    return extract_recipe("train.py", textwrap.dedent(code))


@pytest.mark.parametrize(("code", "value", "line"), [
    ("from torch.utils.data import DataLoader\nloader = DataLoader(ds, batch_size=48)\n", 48, 2),
    ("from torch.utils.data import DataLoader\nBATCH = 24\nloader = DataLoader(ds, batch_size=BATCH)\n", 24, 2),
    ("import argparse\nfrom torch.utils.data import DataLoader\np = argparse.ArgumentParser()\n"
     "p.add_argument('--batch-size', type=int, default=64)\nargs = p.parse_args()\n"
     "loader = DataLoader(ds, batch_size=args.batch_size)\n", 64, 4),
    ("import argparse\np = argparse.ArgumentParser()\np.add_argument('-b', '--batch_size', default=12, type=int)\n", 12, 3),
    ("from dataclasses import dataclass\nfrom torch.utils.data import DataLoader\n@dataclass\nclass Cfg:\n"
     "    lr: float = 1e-3\n    batch_size: int = 96\ncfg = Cfg()\nloader = DataLoader(ds, batch_size=cfg.batch_size)\n", 96, 6),
    ("from torch.utils.data import DataLoader\nconfig = {'batch_size': 40}\n"
     "loader = DataLoader(ds, batch_size=config['batch_size'])\n", 40, 2),
    ("from torch.utils.data import DataLoader\ndef main(batch_size=20):\n"
     "    return DataLoader(ds, batch_size=batch_size)\n", 20, 2),
    ("BATCH_SIZE = 256\n", 256, 1),
    ("import torch\nval_loader = torch.utils.data.DataLoader(v, batch_size=1000)\n"
     "train_loader = torch.utils.data.DataLoader(t, batch_size=32)\n", 32, 3),
])
def test_batch_size_sources(code, value, line):
    found = recipe(code).batch_size
    assert found is not None and (found.value, found.line) == (value, line), found


def test_batch_size_points_at_the_literal():
    found = recipe("from torch.utils.data import DataLoader\nX = DataLoader(ds, batch_size=128)\n").batch_size
    assert (found.line, found.col, found.end_line, found.end_col) == (2, 31, 2, 34)


def test_no_batch_size():
    assert recipe("import torch\nx = torch.zeros(3)\n").batch_size is None


@pytest.mark.parametrize(("code", "name"), [
    ("import torch\nopt = torch.optim.AdamW(model.parameters(), lr=1e-4)\n", "adamw"),
    ("from torch.optim import Adam\nopt = Adam(model.parameters())\n", "adam"),
    ("import torch.optim as optim\nopt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)\n", "sgd-momentum"),
    ("import torch\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n", "sgd"),
    ("import torch\nopt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.0)\n", "sgd"),
    ("import torch\nopt = torch.optim.RMSprop(model.parameters())\n", "rmsprop"),
    ("import torch\nopt = torch.optim.Adagrad(model.parameters())\n", "adagrad"),
])
def test_optimizer(code, name):
    r = recipe(code)
    assert r.optimizer.value == name and r.optimizer.line == 2
    assert r.optimizer_call.startswith("torch.optim.")


def test_unmodelled_optimizer_is_noted():
    r = recipe("import torch\nopt = torch.optim.LBFGS(model.parameters())\n")
    assert r.optimizer is None and "LBFGS" in r.notes[0]


def test_scheduler_is_not_an_optimizer():
    assert recipe("import torch\ns = torch.optim.lr_scheduler.StepLR(opt, 10)\n").optimizer is None


@pytest.mark.parametrize(("code", "precision"), [
    ("import torch\nwith torch.autocast('cuda', dtype=torch.bfloat16):\n    pass\n", "amp-bf16"),
    ("import torch\nwith torch.autocast(device_type='cuda', dtype=torch.float16):\n    pass\n", "amp-fp16"),
    ("import torch\nwith torch.amp.autocast('cuda'):\n    pass\n", "amp-fp16"),
    ("import torch\nwith torch.cuda.amp.autocast():\n    pass\n", "amp-fp16"),
    ("from torch import autocast\nimport torch\nwith autocast('cuda', torch.bfloat16):\n    pass\n", "amp-bf16"),
    ("import torch\nwith torch.autocast('cpu', dtype=torch.bfloat16):\n    pass\n", None),
    ("import torch\nwith torch.autocast('cuda', enabled=False):\n    pass\n", None),
])
def test_autocast(code, precision):
    found = recipe(code).precision
    assert (found.value if found else None) == precision


def test_grad_scaler_and_checkpointing():
    r = recipe("import torch\nfrom torch.utils.checkpoint import checkpoint\nscaler = torch.amp.GradScaler('cuda')\n"
               "y = checkpoint(block, x, use_reentrant=False)\n")
    assert r.grad_scaler.value is True and r.grad_scaler.line == 3
    assert r.checkpointing.value is True and r.checkpointing.line == 4


def test_hf_gradient_checkpointing():
    assert recipe("model.gradient_checkpointing_enable()\n").checkpointing.value is True


@pytest.mark.parametrize(("code", "steps", "line"), [
    ("ACCUM = 4\nfor i, b in enumerate(loader):\n    loss.backward()\n    if (i + 1) % ACCUM == 0:\n"
     "        optimizer.step()\n", 4, 1),
    ("for i, b in enumerate(loader):\n    loss.backward()\n    if i % 8 == 0:\n        optimizer.step()\n", 8, 3),
    ("import argparse\np = argparse.ArgumentParser()\n"
     "p.add_argument('--gradient-accumulation-steps', type=int, default=16)\n", 16, 3),
    ("grad_accum_steps = 2\n", 2, 1),
])
def test_grad_accumulation(code, steps, line):
    found = recipe(code).grad_accum
    assert (found.value, found.line) == (steps, line)


def test_modulo_without_step_is_not_accumulation():
    code = "for i, b in enumerate(loader):\n    if i % 100 == 0:\n        print(i)\n"
    assert recipe(code).grad_accum is None


@pytest.mark.parametrize(("code", "value"), [
    ("optimizer.zero_grad(set_to_none=False)\n", False),
    ("optimizer.zero_grad(set_to_none=True)\n", True),
    ("optimizer.zero_grad()\n", True),
    ("model.zero_grad(False)\n", False),
    ("optimizer.zero_grad()\nmodel.zero_grad(set_to_none=False)\n", False),
])
def test_set_to_none(code, value):
    assert recipe(code).set_to_none.value is value


def test_no_zero_grad_keeps_the_gradients():
    code = ("import torch\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "for x in loader:\n    model(x).sum().backward()\n    opt.step()\n")
    found = recipe(code).set_to_none
    assert found.value is False and found.line == 4 and "no zero_grad()" in found.how
    assert recipe("loss.backward()\n").set_to_none is None  # no optimizer here: not a training loop


def test_recipe_to_json_round_trip():
    data = recipe("BATCH_SIZE = 8\n").to_json()
    assert data["batch_size"] == {"value": 8, "line": 1, "how": "constant BATCH_SIZE"}


@pytest.mark.parametrize("start", [1, 2, 5, 37, 100, 999])
@pytest.mark.parametrize("limit_b", [0, 1, 3, 36, 37, 38, 500, 4096])
def test_largest_fitting_matches_a_linear_scan(start, limit_b):
    """The interpolating search (memlint.estimate.search, which integrate uses)
    finds the same limit as scanning every batch (step-shaped memory model)."""
    from memlint.estimate.search import Probe, largest_fitting

    def required(b):  # affine with 2 MiB-style rounding steps, like the allocator
        return -(-(1000 + 37 * b) // 64) * 64

    usable = required(limit_b) if limit_b else 999

    def probe(b):
        return Probe(required(b) <= usable, required(b), usable)

    expected = max((b for b in range(1, 4097) if probe(b).fits), default=0)
    calls = []
    counted = lambda b: calls.append(b) or probe(b)  # noqa: E731
    assert largest_fitting(counted, 4096, start=start, known={start: probe(start)}) == expected
    assert len(calls) <= 2 * 12 + 4  # never worse than doubling + bisection over 4096
    if 16 <= start and 8 <= limit_b < 4000:
        assert len(calls) <= 6  # interpolation lands next to the limit
