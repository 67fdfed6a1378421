"""MEM110 tensor-grown-by-cat-in-loop: which loops grow the tensor, on which device."""

from rule_helpers import lines


def test_alias_and_stack_spelling():
    assert lines("MEM110", """
        import torch as T
        from torch import stack as st
        def f(model, loader):
            model.cuda().eval()
            acc = T.zeros(0, 4, device="cuda")
            for x in loader:
                acc = st((acc, model(x.cuda())))
    """) == [8]


def test_graph_attached_pieces_say_so():
    from memlint.lint.engine import LintOptions, lint_source
    source = (
        "import torch\n"
        "def f(model, loader):\n"
        "    model.train()\n"
        "    outs = torch.empty(0)\n"
        "    for x in loader:\n"
        "        outs = torch.cat((outs, model(x)))\n"
    )
    found = [d for d in lint_source("a.py", source.encode(), LintOptions(frozenset({"MEM110"}))).diagnostics]
    assert [d.line for d in found] == [6]
    assert "graph-attached" in found[0].message


def test_reset_every_epoch_still_grows_over_the_batches():
    assert lines("MEM110", """
        import torch
        def f(model, loader, epochs):
            model.cuda().eval()
            for epoch in range(epochs):
                preds = torch.empty(0, device="cuda")
                for x in loader:
                    preds = torch.cat((preds, model(x.cuda())))
    """) == [8]


def test_rebound_every_iteration_is_not_grown():
    assert lines("MEM110", """
        import torch
        def f(model, loader):
            model.cuda().eval()
            preds = torch.empty(0, device="cuda")
            for x in loader:
                preds = torch.empty(0, device="cuda")
                preds = torch.cat((preds, model(x.cuda())))
    """) == []


def test_lookalike_cat_of_another_library():
    assert lines("MEM110", """
        import numpy as np
        def f(model, loader):
            acc = np.zeros(0)
            for x in loader:
                acc = np.concatenate((acc, model(x)))
    """) == []


def test_tensorflow_twin_in_a_graph_building_loop_is_not_reported():
    assert lines("MEM110", """
        import tensorflow as tf
        def build(x, n):
            for i in range(n):
                x = tf.concat([x, tf.ones([1])], 0)
            return x
    """) == []
