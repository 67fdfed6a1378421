"""Misses and false alarms of MEM101, MEM102, MEM103, MEM106, MEM108, MEM109
and MEM401 found by the thirteenth recall family (/work/family13 bug_336..
bug_360, ok_90..ok_96), the twelfth family's leftover (bug_325) and the tenth
held-out round, each fixed by what the values are and checked on code of
another style than the case: every buggy snippet is reported on its marked
lines, and a correct look-alike gets no finding of that code.

The snippets are new code written for these tests."""

from __future__ import annotations

from .test_recall_styles import assert_reported, assert_silent

# -- MEM106 miss (bug_357): ``torch.autograd.backward`` and
# ``torch.autograd.grad`` name the tensors they differentiate ``tensors`` and
# ``outputs`` (torch 2.13 torch/autograd/__init__.py); passed by keyword, the
# call is still a backward. bug_357 retains the graph in an accumulation loop
# of a method; here a plain function differentiates with ``autograd.grad``
# (``outputs=``) in a ``while`` loop.

MEM106_KEYWORD_BUG = """
    from torch import autograd

    def attack(model, x, target, steps):
        step = 0
        while step < steps:
            x.requires_grad_(True)
            loss = (model(x) - target).pow(2).mean()
            (g,) = autograd.grad(outputs=loss, inputs=[x], retain_graph=True)  # expect: MEM106
            x = (x - 0.01 * g.sign()).detach()
            step += 1
"""

MEM106_KEYWORD_OK = """
    from torch import autograd

    def attack(model, x, target, steps):
        step = 0
        while step < steps:
            x.requires_grad_(True)
            loss = (model(x) - target).pow(2).mean()
            (g,) = autograd.grad(outputs=loss, inputs=[x], retain_graph=False)
            x = (x - 0.01 * g.sign()).detach()
            step += 1
"""


def test_mem106_keyword_outputs_retained_in_loop():
    assert_reported(MEM106_KEYWORD_BUG, "MEM106")


def test_mem106_keyword_outputs_released_is_silent():
    assert_silent(MEM106_KEYWORD_OK, "MEM106")
