"""False positives of the twelfth held-out round (/work/heldout12), each
fixed by what the values are and checked on code of another style than the
linted case: the false-positive shape is silent, and a true-positive
look-alike is still reported.

The snippets are new code written for these tests."""

from __future__ import annotations

import json
import textwrap

from .expectations import lint_text
from .test_recall_styles import assert_reported, assert_silent

# -- MEM101 (torchtune recipes): a total of one gradient-accumulation window.
# The added loss is backpropagated in the same iteration (no retain_graph), so
# autograd frees its saved tensors, and the total is reset in the branch that
# steps the optimizer. Here: a plain function with a `while` over an iterator,
# the addend a product of the backpropagated loss, and `zero_grad` first.

MEM101_WINDOW_OK = """
    import torch.nn.functional as F

    def run(net, batches, optim, window):
        it = iter(batches)
        step, window_sum = 0, 0.0
        while step < 1000:
            inputs, targets = next(it)
            piece = F.cross_entropy(net(inputs), targets)
            window_sum = window_sum + piece * inputs.shape[0]
            piece.backward()
            step += 1
            if step % window == 0:
                optim.step()
                optim.zero_grad()
                print(float(window_sum))
                window_sum = 0.0
"""

# The same window total reset only per epoch: the chain lives all epoch.
MEM101_EPOCH_BUG = """
    import torch.nn.functional as F

    def run(net, loader, optim, window, epochs):
        for _ in range(epochs):
            epoch_sum = 0.0
            for step, (inputs, targets) in enumerate(loader):
                piece = F.cross_entropy(net(inputs), targets)
                epoch_sum = epoch_sum + piece * inputs.shape[0]  # expect: MEM101
                piece.backward()
                if (step + 1) % window == 0:
                    optim.step()
                    optim.zero_grad()
            print(float(epoch_sum))
"""

# Reset at each step, but what is added is never backpropagated (an auxiliary
# loss only logged): its whole graph stays for the window and is reported.
MEM101_UNBACKPROPAGATED_BUG = """
    import torch.nn as nn
    import torch.nn.functional as F

    def run(net, loader, optim, window):
        head = nn.Linear(16, 1)
        aux_sum = 0.0
        for step, (inputs, targets) in enumerate(loader):
            feats = net(inputs)
            F.cross_entropy(feats, targets).backward()
            aux_sum += head(inputs).pow(2).mean()  # expect: MEM101
            if (step + 1) % window == 0:
                optim.step()
                optim.zero_grad()
                aux_sum = 0.0
"""

# Reset at each step, but the backward retains the graph: reported.
MEM101_RETAINED_BUG = """
    import torch.nn.functional as F

    def run(net, loader, optim, window):
        window_sum = 0.0
        for step, (inputs, targets) in enumerate(loader):
            piece = F.cross_entropy(net(inputs), targets)
            window_sum += piece  # expect: MEM101
            piece.backward(retain_graph=True)
            if (step + 1) % window == 0:
                optim.step()
                optim.zero_grad()
                window_sum = 0.0
"""


def test_mem101_window_total_reset_at_step_is_silent():
    assert_silent(MEM101_WINDOW_OK, "MEM101")


def test_mem101_total_reset_per_epoch_is_reported():
    assert_reported(MEM101_EPOCH_BUG, "MEM101")


def test_mem101_window_total_of_unbackpropagated_loss_is_reported():
    assert_reported(MEM101_UNBACKPROPAGATED_BUG, "MEM101")


def test_mem101_window_total_with_retained_graph_is_reported():
    assert_reported(MEM101_RETAINED_BUG, "MEM101")


# -- MEM113 (d2l GPUs.ipynb): `y is y.cuda(1)` is a Python bool. Here: a
# notebook whose last cell tests membership in a GPU tensor; the look-alike
# ends with an element-wise comparison, a tensor.

def _cells(*sources: str) -> str:
    """An nbformat 4 notebook of code cells (cells 1, 2, ...)."""
    cells = [{"cell_type": "code", "execution_count": n, "metadata": {}, "outputs": [],
              "source": textwrap.dedent(source).splitlines(keepends=True)} for n, source in enumerate(sources, start=1)]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


_GPU_CELL = """
    import torch
    w = torch.randn(8, device="cuda", requires_grad=True)
"""


def _mem113(last_cell: str) -> set[tuple[int, int]]:
    found = lint_text("gpu.ipynb", _cells(_GPU_CELL, last_cell), {"MEM113"})
    return {(d.cell, d.line) for d in found if d.code == "MEM113"}


def test_mem113_identity_or_membership_value_is_silent():
    assert _mem113("w.sum() not in (w * 2)\n") == set()
    assert _mem113("w is w.cuda()\n") == set()


def test_mem113_elementwise_comparison_is_reported():
    assert _mem113("w * 2 > w\n") == {(2, 1)}
