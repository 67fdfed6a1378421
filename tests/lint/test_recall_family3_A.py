"""Misses of the third, held-out recall family (fixtures/recall bug_89..bug_112),
group A (bug_90 MEM101, bug_93 MEM103, bug_97 MEM105, bug_100 MEM201), each
fixed in the semantic model or its rule and checked on code of another style
than the reproducer's: every buggy snippet is reported on its marked lines,
and a correct look-alike gets no finding of that code.

The snippets are new code written for these tests."""

from __future__ import annotations

import pytest

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


# MEM103: a field of a forward output's named-tuple op result (bug_93:
# ``out["prediction"].median(dim=-1).values``). A str key picks a tensor out of
# a dict-like forward output; ``.values``/``.indices`` pick the fields of
# ``torch.return_types.<op>``.

MEM103_BUG = """
    import torch

    def rank_candidates(scorer, shards, k=3):
        scorer = scorer.cuda()
        chosen = []
        with torch.no_grad():
            for shard in shards:
                result = scorer(shard.cuda())
                best = result["scores"].topk(k, dim=-1).indices
                chosen.append(best)  # expect: MEM103
        return chosen
"""

MEM103_OK = """
    import torch

    def rank_candidates(scorer, shards, k=3):
        scorer = scorer.cuda()
        chosen, peaks = [], []
        with torch.no_grad():
            for shard in shards:
                result = scorer(shard.cuda())
                best = result["scores"].topk(k, dim=-1).indices
                chosen.append(best.cpu())
                peaks.append(result["scores"].max(dim=-1).values.mean().item())
        return chosen, peaks
"""


def test_mem103_named_tuple_field_of_a_keyed_output_is_on_the_device():
    assert_reported(MEM103_BUG, "MEM103")


def test_mem103_host_copy_and_python_number_are_silent():
    assert_silent(MEM103_OK, "MEM103")


def test_return_type_fields_match_the_installed_torch():
    """``torch_ops.RETURN_TYPE_FIELDS``: each op's named tuple has these
    fields, the first keeps the graph, the second only for ``aminmax``."""
    torch = pytest.importorskip("torch")
    from memlint.lint.semantic import torch_ops

    calls = {"topk": lambda x: x.topk(2, dim=0), "kthvalue": lambda x: x.kthvalue(1, dim=0), "frexp": lambda x: x.frexp()}
    assert set(torch_ops.RETURN_TYPE_FIELDS) == set(torch_ops.VALUES_AND_INDICES)
    for op, fields in torch_ops.RETURN_TYPE_FIELDS.items():
        x = torch.randn(4, 3, requires_grad=True)
        result = calls.get(op, lambda t: getattr(t, op)(dim=0))(x)
        assert type(result) is getattr(torch.return_types, op), op
        first, second = (getattr(result, field) for field in fields)
        assert first.requires_grad, op
        assert second.requires_grad is (op in torch_ops.ALL_FIELDS_DIFFERENTIABLE), op


# MEM105: a model passed in, moved in place by a discarded ``x.to(device)``
# and called (bug_97: ``encoder.to(device)`` then ``encoder(piece, state)``).
# Only a module is both moved in place and callable.

MEM105_BUG = """
    import torch
    from torch import nn

    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.core = nn.GRU(32, 64)
            self.out = nn.Linear(64, 5)

        def forward(self, x, h=None):
            y, h = self.core(x, h)
            return self.out(y), h

    def stream_tags(tagger, feed, steps):
        tagger.cuda()
        hidden = None
        tags = []
        for _ in range(steps):
            frame = next(feed).cuda()
            logits, hidden = tagger(frame, hidden)  # expect: MEM105
            tags.append(logits.argmax(-1).tolist())
        return tags
"""

MEM105_OK = """
    import torch
    from torch import nn

    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.core = nn.GRU(32, 64)
            self.out = nn.Linear(64, 5)

        def forward(self, x, h=None):
            y, h = self.core(x, h)
            return self.out(y), h

    @torch.no_grad()
    def stream_tags(tagger, feed, steps):
        tagger.cuda()
        hidden = None
        tags = []
        for _ in range(steps):
            frame = next(feed).cuda()
            logits, hidden = tagger(frame, hidden)
            tags.append(logits.argmax(-1).tolist())
        return tags
"""


def test_mem105_module_moved_in_place_and_called_carries_state():
    assert_reported(MEM105_BUG, "MEM105")


def test_mem105_grad_free_stream_is_silent():
    assert_silent(MEM105_OK, "MEM105")


def test_moved_in_place_is_a_module_only_when_also_called():
    """``net.to(dev)`` as a statement and ``net(x)``: a forward pass; a
    discarded ``batch.to(dev)`` of a name never called says nothing."""
    import ast
    import textwrap

    from memlint.lint.context import FileContext
    from memlint.lint.semantic.values import Kind

    source = textwrap.dedent('''
        def run(net, batch, dev):
            net.to(dev)
            batch.to(dev)
            out = net(batch)
            return out, batch
    ''')
    module = ast.parse(source)
    semantic = FileContext("t.py", source, module).semantic
    call = next(n for n in ast.walk(module) if isinstance(n, ast.Call) and ast.unparse(n) == "net(batch)")
    assert semantic.is_forward_call(call)
    returned = next(n for n in ast.walk(module) if isinstance(n, ast.Return)).value.elts[1]
    assert semantic.value(returned).kind is not Kind.MODULE


# MEM101: an in-file meter taken out of a dict of meters (bug_90:
# ``meter = self.stats.setdefault(name, RunningStat())``; ``meter.update(v, n)``
# where ``update`` does ``self.total += value * n``). ``setdefault`` returns the
# item already there or the default; the meter lives as long as its dict.
# bug_90 itself stays unreported: its values come out of a dict returned by a
# model of another file, whose values may be Python numbers (see the report).

MEM101_BUG = """
    class Avg:
        def __init__(self):
            self.sum = 0.0
            self.n = 0

        def add(self, x, k=1):
            self.sum = self.sum + x * k
            self.n += k

    def train(net, opt, batches, crit):
        meters = {}
        for xb, yb in batches:
            opt.zero_grad()
            err = crit(net(xb), yb)
            err.backward()
            opt.step()
            meters.setdefault("err", Avg()).add(err, len(xb))  # expect: MEM101
            tracker = meters.setdefault("seen", Avg())
            tracker.add(err)  # expect: MEM101
        return {k: m.sum / m.n for k, m in meters.items()}
"""

MEM101_OK = """
    class Avg:
        def __init__(self):
            self.sum = 0.0
            self.n = 0

        def add(self, x, k=1):
            self.sum = self.sum + x * k
            self.n += k

    def train(net, opt, batches, crit):
        meters = {}
        for xb, yb in batches:
            opt.zero_grad()
            err = crit(net(xb), yb)
            err.backward()
            opt.step()
            meters.setdefault("err", Avg()).add(err.item(), len(xb))
            step_meters = {}
            step_meters.setdefault("seen", Avg()).add(err)
        return {k: m.sum / m.n for k, m in meters.items()}
"""


def test_mem101_meter_out_of_a_dict_of_meters_sums_the_graph():
    assert_reported(MEM101_BUG, "MEM101")


def test_mem101_python_number_or_per_iteration_dict_is_silent():
    assert_silent(MEM101_OK, "MEM101")
