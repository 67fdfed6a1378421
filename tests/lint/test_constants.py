"""Constant folding of a file's literals (memlint/lint/semantic/constants.py)
and its use by MEM204: an accumulation count that is provably 1 as the file
runs is no accumulation."""

from __future__ import annotations

import ast
import textwrap

import pytest

from memlint.lint.semantic.constants import UNKNOWN

from .test_recall_styles import assert_reported, assert_silent
from .test_semantic import model_of


def _folded(source: str, name: str):
    """The folded value of the last load of ``name`` in ``source``."""
    model, module = model_of(source)
    uses = [n for n in ast.walk(module) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]
    return model.constants.value(max(uses, key=lambda n: (n.lineno, n.col_offset)))


def test_module_literal_and_arithmetic_fold():
    assert _folded("""
        WIDTH = 8
        def f():
            cells = WIDTH * 4 - 2
            return cells
    """, "cells") == 30


def test_a_dead_branch_binding_is_ignored():
    assert _folded("""
        LIMIT = 16
        def f(cfg):
            size = int(cfg["size"])
            rounds = 1
            if size > LIMIT and cfg.get("fast"):
                rounds = size // LIMIT
            return rounds
        f({"size": 16, "fast": True})
    """, "rounds") == 1


def test_a_live_branch_makes_the_value_unknown():
    assert _folded("""
        LIMIT = 16
        def f(cfg):
            rounds = 1
            if int(cfg["size"]) > LIMIT:
                rounds = 4
            return rounds
        f({"size": 64})
    """, "rounds") is UNKNOWN


@pytest.mark.parametrize("source", [
    # a later binding in the same loop reaches the next iteration's use
    "def f(xs):\n    n = 1\n    for x in xs:\n        print(n)\n        n = 2\n",
    # a function rebinds the module name with `global`
    "N = 1\ndef g():\n    global N\n    N = 5\ndef f():\n    return N\n",
    # the function is passed on: callers the file does not show
    "def f(n):\n    return n\nf(1)\nrun_later(f)\n",
    # the dict item is changed with a key the file computes
    "def f(cfg, key):\n    cfg[key] = 9\n    return cfg['n']\nf({'n': 1}, 'n')\n",
    # the dict is handed to a library call that may change it
    "import tools\ndef f(cfg):\n    tools.patch(cfg)\n    return cfg['n']\nf({'n': 1})\n",
], ids=["loop-rebinding", "global", "passed-on", "computed-key", "handed-off"])
def test_what_may_change_does_not_fold(source):
    model, module = model_of(source)
    uses = [n for n in ast.walk(module) if isinstance(n, ast.Name) and n.id in ("n", "N") and isinstance(n.ctx, ast.Load)]
    assert all(model.constants.value(u) is UNKNOWN for u in uses)


def test_a_changed_item_is_dropped_and_the_others_kept():
    model, module = model_of("""
        def f(cfg):
            cfg["epochs"] = 2
            return cfg["epochs"], cfg["size"]
        f({"epochs": 3, "size": 16})
    """)
    ret = next(n for n in ast.walk(module) if isinstance(n, ast.Return))
    epochs, size = ret.value.elts
    assert model.constants.value(epochs) is UNKNOWN
    assert model.constants.value(size) == 16


ACCUMULATION = """
    import torch.nn.functional as F

    PER_STEP = 32

    def train(net, opt, loader, options):
        wanted = options["examples_per_update"]
        micro_steps = 1
        if wanted > PER_STEP:
            micro_steps = wanted // PER_STEP
        for i, (x, y) in enumerate(loader):
            loss = F.cross_entropy(net(x), y)
            loss.backward(){mark}
            if (i + 1) % micro_steps == 0:
                opt.step()
                opt.zero_grad()

    if __name__ == "__main__":
        train(build(), make_opt(), make_loader(), {{"examples_per_update": {examples}}})
"""


def test_mem204_count_provably_one_is_silent():
    assert_silent(ACCUMULATION.format(mark="", examples=32), "MEM204")


def test_mem204_count_above_one_is_reported():
    assert_reported(ACCUMULATION.format(mark="  # expect: MEM204", examples=128), "MEM204")


def test_mem204_count_from_the_command_line_is_reported():
    source = ACCUMULATION.format(mark="  # expect: MEM204", examples="int(sys.argv[1])")
    assert_reported(source, "MEM204")
