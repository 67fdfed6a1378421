"""False positives and misses of the thirteenth held-out round
(/work/heldout13), each fixed by what the values are and checked on code of
another style than the round's: every buggy snippet is reported on its marked
lines, and a correct look-alike gets no finding of that code.

The snippets are new code written for these tests."""

from __future__ import annotations

from .test_recall_styles import assert_reported, assert_silent

# -- MEM303 misses (BCQ DDPG.py:109/:113, DQN.py:145): an optimizer over
# parameters on the GPU creates its state beside them (torch 2.13.0
# torch/optim/adam.py ``_init_group``), ``Optimizer.state_dict`` packs that
# state as it is, and ``torch.load`` of the file puts it back on the saving
# GPU before ``load_state_dict`` casts it. BCQ saves and loads in methods of
# an agent class and picks the class with ``getattr(torch.optim, name)``;
# here a training function that resumes before its loop, and a trainer
# class whose class name comes from a config.

MEM303_OPTIMIZER_BUG = """
    import torch
    from torch import nn, optim


    def train(loader, steps, ckpt):
        net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1)).cuda()
        opt = optim.AdamW(net.parameters(), lr=3e-4)
        if ckpt.exists():
            opt.load_state_dict(torch.load(ckpt))  # expect: MEM303
        for _, (x, y) in zip(range(steps), loader):
            opt.zero_grad()
            nn.functional.mse_loss(net(x.cuda()), y.cuda()).backward()
            opt.step()
        torch.save(opt.state_dict(), ckpt)
"""

MEM303_OPTIMIZER_BY_NAME_BUG = """
    import torch
    import torch.nn as nn


    class Trainer:
        def __init__(self, cfg, device):
            self.policy = nn.Linear(16, 4).to(device)
            self.sgd = getattr(torch.optim, cfg.name)(self.policy.parameters(), **cfg.kwargs)

        def update(self, loss):
            self.sgd.zero_grad()
            loss.backward()
            self.sgd.step()

        def dump(self, prefix):
            torch.save(self.sgd.state_dict(), f"{prefix}.sgd")

        def restore(self, prefix):
            self.sgd.load_state_dict(torch.load(f"{prefix}.sgd"))  # expect: MEM303
"""

# The same resume of an optimizer whose model stays on the CPU (only a frozen
# scorer goes to the GPU): its state is host memory, the load restores host
# tensors.
MEM303_OPTIMIZER_OK = """
    import torch
    from torch import nn, optim


    def train(loader, steps, ckpt):
        scorer = nn.Linear(8, 1).cuda().eval()
        net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
        opt = optim.AdamW(net.parameters(), lr=3e-4)
        if ckpt.exists():
            opt.load_state_dict(torch.load(ckpt))
        for _, (x, y) in zip(range(steps), loader):
            opt.zero_grad()
            nn.functional.mse_loss(net(x), y).backward()
            opt.step()
        torch.save(opt.state_dict(), ckpt)
"""


def test_mem303_optimizer_state_of_device_parameters():
    assert_reported(MEM303_OPTIMIZER_BUG, "MEM303")


def test_mem303_optimizer_class_picked_by_name():
    assert_reported(MEM303_OPTIMIZER_BY_NAME_BUG, "MEM303")


def test_mem303_optimizer_of_host_parameters_is_silent():
    assert_silent(MEM303_OPTIMIZER_OK, "MEM303")


# -- MEM101 FPs (open_clip train.py:425, :427, :447): a step function returns
# ``losses, report, batch_size, state`` on its normal exits and ``None`` on
# an early one; the caller skips ``None`` and unpacks the rest. Only the
# first position is attached, yet the join of the tuple with ``None`` lost
# the positions and every unpacked name took the graph of ``losses``
# (``num_samples += n * world``, and a meter's ``self.sum += val * n``
# through ``update(v.item(), n)``). Here an empty-chunk exit, a dict of
# statistics and a row count from ``x.shape[0]``; the look-alike adds the
# loss itself and stays reported.

MEM101_TUPLE_OR_NONE_OK = """
    import torch
    import torch.nn.functional as F


    class Meter:
        def __init__(self):
            self.sum, self.count = 0.0, 0

        def update(self, val, n=1):
            self.sum += val * n
            self.count += n


    def micro_step(net, opt, chunk):
        if not len(chunk):
            return None
        x, y = chunk
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss, {"acc": 0.0}, x.shape[0]


    def run(net, opt, chunks):
        seen, meter = 0, Meter()
        for chunk in chunks:
            out = micro_step(net, opt, chunk)
            if out is None:
                continue
            loss, stats, rows = out
            seen += rows * 2
            meter.update(loss.item(), rows)
        return seen
"""

MEM101_TUPLE_OR_NONE_BUG = """
    import torch
    import torch.nn.functional as F


    class Meter:
        def __init__(self):
            self.sum, self.count = 0.0, 0

        def update(self, val, n=1):
            self.sum += val * n
            self.count += n


    def micro_step(net, opt, chunk):
        if not len(chunk):
            return None
        x, y = chunk
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss, {"acc": 0.0}, x.shape[0]


    def run(net, opt, chunks):
        seen, meter = 0, Meter()
        for chunk in chunks:
            out = micro_step(net, opt, chunk)
            if out is None:
                continue
            loss, stats, rows = out
            seen += loss  # expect: MEM101
            meter.update(loss.item(), rows)
        return seen
"""


def test_mem101_count_unpacked_beside_loss_is_silent():
    assert_silent(MEM101_TUPLE_OR_NONE_OK, "MEM101")


def test_mem101_loss_unpacked_from_tuple_or_none_is_reported():
    assert_reported(MEM101_TUPLE_OR_NONE_BUG, "MEM101")


# -- MEM101 FPs (rasbt mlp-fromscratch__sigmoid-mse.ipynb cell 13:51-54): a
# plain class with hand-written ``forward``/``backward`` methods and weights
# made by factories without ``requires_grad``. ``model.backward(x, a, y)``
# was read as an engine's ``backward(loss)`` (its receiver is a parameter),
# so the batch ``x`` was taken for a differentiated loss and every value
# computed from it for attached: ``model.w -= lr * grad`` looked like an
# accumulated loss. The call runs the class's own method, not autograd. Here
# a logistic regression fitted by a function; the look-alike gives the
# weights ``requires_grad=True``, backpropagates a real loss and sums it.

MEM101_OWN_BACKWARD_OK = """
    import torch


    class LogReg:
        def __init__(self, n):
            self.w = torch.zeros(n, 1)
            self.b = torch.zeros(1)

        def forward(self, x):
            return torch.sigmoid(x @ self.w + self.b)

        def backward(self, x, y, p):
            err = p - y.view(-1, 1)
            return x.t() @ err / len(y), err.mean()


    def fit(clf, batches, lr=0.5):
        for x, y in batches:
            p = clf.forward(x)
            dw, db = clf.backward(x, y, p)
            clf.w -= lr * dw
            clf.b -= lr * db


    clf = LogReg(4)
    fit(clf, torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.rand(64, 4), torch.rand(64)), batch_size=8))
"""

MEM101_OWN_BACKWARD_BUG = """
    import torch


    class LogReg:
        def __init__(self, n):
            self.w = torch.zeros(n, 1, requires_grad=True)
            self.b = torch.zeros(1, requires_grad=True)

        def forward(self, x):
            return torch.sigmoid(x @ self.w + self.b)

        def backward(self, x, y, p):
            err = p - y.view(-1, 1)
            return x.t() @ err / len(y), err.mean()


    def fit(clf, batches, lr=0.5):
        total = 0.0
        for x, y in batches:
            p = clf.forward(x)
            loss = ((p - y.view(-1, 1)) ** 2).mean()
            loss.backward()
            total += loss  # expect: MEM101
        return total


    clf = LogReg(4)
    fit(clf, torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.rand(64, 4), torch.rand(64)), batch_size=8))
"""


def test_mem101_hand_written_backward_update_is_silent():
    assert_silent(MEM101_OWN_BACKWARD_OK, "MEM101")


def test_mem101_loss_summed_beside_hand_written_backward_is_reported():
    assert_reported(MEM101_OWN_BACKWARD_BUG, "MEM101")


# -- MEM103 FP (open_clip profiler.py:227): a per-model dict of Python
# numbers and strings appended per model name. One entry was
# ``model.visual.image_size`` of a library model moved with ``.cuda()``, and
# an unknown attribute of a module took the module's device. ``.cuda()``
# moves only parameters, buffers and submodules (torch 2.13.0
# ``Module._apply``), and ``Module.__getattr__`` serves only those; any other
# attribute is a plain instance attribute, so its device is unknown. Here a
# timm model's ``patch_embed.img_size`` and a timing; the look-alike stores
# the forward output itself and stays reported.

MEM103_MODULE_ATTRIBUTE_OK = """
    import argparse
    import time

    import timm
    import torch


    def describe(name):
        net = timm.create_model(name).cuda().eval()
        info = {"name": name}
        info["input"] = net.patch_embed.img_size
        info["params"] = round(sum(p.numel() for p in net.parameters()) / 1e6, 1)
        with torch.no_grad():
            start = time.perf_counter()
            net(torch.zeros(1, 3, *info["input"], device="cuda"))
            info["seconds"] = round(time.perf_counter() - start, 4)
        return info


    def main():
        args = argparse.ArgumentParser().parse_args()
        rows = []
        for name in args.models.split(","):
            rows.append(describe(name))
        return rows
"""

MEM103_MODULE_ATTRIBUTE_BUG = """
    import argparse
    import time

    import timm
    import torch


    def describe(name):
        net = timm.create_model(name).cuda().eval()
        info = {"name": name}
        info["input"] = net.patch_embed.img_size
        info["params"] = round(sum(p.numel() for p in net.parameters()) / 1e6, 1)
        with torch.no_grad():
            start = time.perf_counter()
            info["logits"] = net(torch.zeros(1, 3, *info["input"], device="cuda"))
            info["seconds"] = round(time.perf_counter() - start, 4)
        return info


    def main():
        args = argparse.ArgumentParser().parse_args()
        rows = []
        for name in args.models.split(","):
            rows.append(describe(name))  # expect: MEM103
        return rows
"""


def test_mem103_config_attribute_of_device_model_is_silent():
    assert_silent(MEM103_MODULE_ATTRIBUTE_OK, "MEM103")


def test_mem103_forward_output_in_the_row_is_reported():
    assert_reported(MEM103_MODULE_ATTRIBUTE_BUG, "MEM103")
