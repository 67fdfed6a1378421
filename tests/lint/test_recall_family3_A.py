"""Misses of the third, held-out recall family (fixtures/recall bug_89..bug_112),
group A (bug_90 MEM101, bug_93 MEM103, bug_97 MEM105, bug_100 MEM201), each
fixed in the semantic model or its rule and checked on code of another style
than the reproducer's: every buggy snippet is reported on its marked lines,
and a correct look-alike gets no finding of that code.

The snippets are new code written for these tests."""

from __future__ import annotations

from .test_recall_styles import assert_reported, assert_silent


# MEM201: an optimizer known only by use, stepped beside a scheduler (bug_100).
# The step that first follows the backward pass is the optimizer's: PyTorch
# requires ``optimizer.step()`` before ``lr_scheduler.step()``.

MEM201_BUG = """
    def fit(net, opt, warmup, batches, loss_fn, epochs):
        for epoch in range(epochs):
            for inputs, labels in batches:
                out = net(inputs)
                err = loss_fn(out, labels)
                err.backward()
                if epoch > 0:
                    opt.step()  # expect: MEM201
                warmup.step()
"""

MEM201_OK = """
    def fit(net, opt, warmup, batches, loss_fn, epochs):
        for epoch in range(epochs):
            for inputs, labels in batches:
                out = net(inputs)
                err = loss_fn(out, labels)
                err.backward()
                if epoch > 0:
                    opt.step()
                    net.zero_grad(set_to_none=True)
                warmup.step()
"""


def test_mem201_first_step_after_backward_is_the_optimizer():
    assert_reported(MEM201_BUG, "MEM201")


def test_mem201_cleared_through_the_model_is_silent():
    assert_silent(MEM201_OK, "MEM201")
