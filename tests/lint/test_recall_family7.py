"""Misses of the seventh, held-out recall family (fixtures/recall bug_183..bug_209:
bug_191 MEM105, bug_184 MEM101, bug_209 MEM403), each fixed by what the
values are, and checked on code of another style than the reproducer's:
every buggy snippet is reported on its marked lines, and a correct
look-alike gets no finding of that code.

The snippets are new code written for these tests."""

from __future__ import annotations

import ast
import textwrap

from memlint.lint.context import FileContext
from memlint.lint.semantic.values import Kind

from .test_recall_styles import assert_reported, assert_silent


def _semantic(source: str):
    source = textwrap.dedent(source)
    module = ast.parse(source)
    return module, FileContext("snippet.py", source, module).semantic


def _names(module: ast.Module, name: str) -> list[ast.Name]:
    return [n for n in ast.walk(module) if isinstance(n, ast.Name) and n.id == name]


# -- MEM105 (bug_191): a parameter is an instance of the file's module class when
# the attributes read from it are that class's, besides the methods every
# `nn.Module` has (`net.train()`, `net.parameters()`, `lm.to(device)`).  Here a
# truncated-BPTT training function rather than a forward-only generator.

MEM105_BY_ATTRIBUTES_BUG = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class CharModel(nn.Module):
        def __init__(self, n_chars, width=256):
            super().__init__()
            self.encoder = nn.Embedding(n_chars, width)
            self.gru = nn.GRU(width, width, batch_first=True)
            self.decoder = nn.Linear(width, n_chars)

    def fit_stream(net, chunks, lr=0.05):
        net.train()
        opt = torch.optim.SGD(net.parameters(), lr=lr)
        hidden = None
        for x, y in chunks:
            out, hidden = net.gru(net.encoder(x), hidden)  # expect: MEM105
            loss = F.cross_entropy(net.decoder(out).flatten(0, 1), y.flatten())
            opt.zero_grad()
            loss.backward(retain_graph=True)
            opt.step()
"""

MEM105_BY_ATTRIBUTES_OK = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class CharModel(nn.Module):
        def __init__(self, n_chars, width=256):
            super().__init__()
            self.encoder = nn.Embedding(n_chars, width)
            self.gru = nn.GRU(width, width, batch_first=True)
            self.decoder = nn.Linear(width, n_chars)

    def fit_stream(net, chunks, lr=0.05):
        net.train()
        opt = torch.optim.SGD(net.parameters(), lr=lr)
        hidden = None
        for x, y in chunks:
            if hidden is not None:
                hidden = hidden.detach()
            out, hidden = net.gru(net.encoder(x), hidden)
            loss = F.cross_entropy(net.decoder(out).flatten(0, 1), y.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
"""


def test_mem105_state_of_a_module_known_by_its_attributes():
    assert_reported(MEM105_BY_ATTRIBUTES_BUG, "MEM105")


def test_mem105_state_detached_each_chunk_is_silent():
    assert_silent(MEM105_BY_ATTRIBUTES_OK, "MEM105")


def test_module_methods_fit_only_a_module_class():
    """``nn.Module``'s own methods fit a module class of the file, not a plain
    class with the same attributes; and they do not count among the two
    attributes of the class's own that tell the class."""
    module, semantic = _semantic("""
        import torch.nn as nn

        class Tagger(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = nn.Embedding(100, 8)
                self.lstm = nn.LSTM(8, 8)

        class Record:
            def __init__(self, embed, lstm):
                self.embed = embed
                self.lstm = lstm

        def run(tagger, tokens, device):
            tagger.to(device)
            return tagger.lstm(tagger.embed(tokens))

        def only_moved(other, device):
            other.to(device)
            other.eval()
            return other.embed
    """)
    tagger = _names(module, "tagger")[0]
    assert semantic.value(tagger).kind is Kind.MODULE and semantic.value(tagger).klass == "Tagger"
    # `.to`/`.eval` are no attributes of Tagger's own: one own attribute does not tell the class
    assert semantic.value(_names(module, "other")[0]).klass is None


def test_module_methods_do_not_make_a_plain_class_fit():
    module, semantic = _semantic("""
        import torch.nn as nn

        class Head(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(4, 4)

        class Batch:
            def __init__(self, inputs, labels):
                self.inputs = inputs
                self.labels = labels

        def consume(batch, device):
            batch.to(device)
            return batch.inputs, batch.labels
    """)
    assert semantic.value(_names(module, "batch")[0]).kind is not Kind.MODULE


# -- MEM101 (bug_184): an item of a mapping read back with `get`/`setdefault` and
# written again with a graph-attached tensor added is an accumulation (MEM101),
# reported once: not also as a new item stored (MEM102).  Here a module-level
# script with `setdefault` on the right of the sum.

MEM101_ITEM_SUM_BUG = """
    import torch as T
    import torch.nn as nn

    net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = T.optim.Adam(net.parameters())
    running = {}
    for x, y in T.utils.data.DataLoader(T.utils.data.TensorDataset(T.randn(64, 8), T.randn(64, 1)), batch_size=8):
        pred = net(x)
        terms = {"mse": ((pred - y) ** 2).mean(), "l1": (pred - y).abs().mean()}
        opt.zero_grad()
        sum(terms.values()).backward()
        opt.step()
        for name, term in terms.items():
            running[name] = term + running.setdefault(name, 0.0)  # expect: MEM101
    print({k: float(v) for k, v in running.items()})
"""

MEM101_ITEM_SUM_OK = MEM101_ITEM_SUM_BUG.replace(
    "running[name] = term + running.setdefault(name, 0.0)  # expect: MEM101",
    "running[name] = term.item() + running.setdefault(name, 0.0)")

#: Not an accumulation: a list grows by one graph-attached item per step (MEM102's).
MEM102_ITEM_LIST_BUG = MEM101_ITEM_SUM_BUG.replace(
    "running[name] = term + running.setdefault(name, 0.0)  # expect: MEM101",
    "running[name] = running.get(name, []) + [term]  # expect: MEM102")


def test_mem101_item_read_back_and_summed():
    assert_reported(MEM101_ITEM_SUM_BUG, "MEM101")


def test_mem102_stays_silent_on_the_accumulation():
    assert_silent(MEM101_ITEM_SUM_BUG, "MEM102")


def test_item_sum_of_python_numbers_is_silent():
    assert_silent(MEM101_ITEM_SUM_OK, "MEM101")
    assert_silent(MEM101_ITEM_SUM_OK, "MEM102")


def test_item_list_concatenation_is_still_a_collection():
    assert_reported(MEM102_ITEM_LIST_BUG, "MEM102")
    assert_silent(MEM102_ITEM_LIST_BUG, "MEM101")


# -- MEM403 (bug_209): a loop over the entries of a directory listing or the
# records of a JSON/pickle file repeats with the data on disk.  Here a method
# of a plotting class over `os.listdir`, and a pickle of records.

MEM403_LISTING_BUG = """
    import os
    import pickle

    import numpy as np
    from matplotlib import pyplot as plt

    class HeatmapDump:
        def __init__(self, root, out):
            self.root, self.out = root, out

        def render_all(self):
            for entry in sorted(os.listdir(self.root)):
                grid = np.load(os.path.join(self.root, entry))
                fig = plt.figure(figsize=(4, 4))  # expect: MEM403
                fig.gca().imshow(grid)
                fig.savefig(os.path.join(self.out, entry + ".png"))

        def render_records(self, index_file):
            with open(index_file, "rb") as handle:
                records = pickle.load(handle)
            for position, record in enumerate(records["samples"]):
                fig, axes = plt.subplots(1, 2)  # expect: MEM403
                axes[0].plot(record["signal"])
                fig.savefig(os.path.join(self.out, f"{position}.png"))
"""

MEM403_LISTING_OK = """
    import os
    import pickle

    import numpy as np
    import yaml
    from matplotlib import pyplot as plt

    class HeatmapDump:
        def __init__(self, root, out):
            self.root, self.out = root, out

        def render_all(self):
            for entry in sorted(os.listdir(self.root)):
                grid = np.load(os.path.join(self.root, entry))
                fig = plt.figure(figsize=(4, 4))
                fig.gca().imshow(grid)
                fig.savefig(os.path.join(self.out, entry + ".png"))
                plt.close(fig)

        def render_records(self, index_file):
            with open(index_file, "rb") as handle:
                records = pickle.load(handle)
            for position, record in enumerate(records["samples"]):
                fig, axes = plt.subplots(1, 2)
                axes[0].plot(record["signal"])
                fig.savefig(os.path.join(self.out, f"{position}.png"))
                plt.close("all")

        def render_panels(self, config_file):
            with open(config_file) as handle:
                panels = yaml.safe_load(handle)["panels"]
            for panel in panels:
                fig = plt.figure()
                fig.savefig(os.path.join(self.out, panel["name"] + ".png"))
"""


def test_mem403_loops_over_files_and_records():
    assert_reported(MEM403_LISTING_BUG, "MEM403")


def test_mem403_closed_figures_and_a_configuration_loop_are_silent():
    assert_silent(MEM403_LISTING_OK, "MEM403")


def test_walks_file_contents_follows_names_items_and_wrappers():
    module, semantic = _semantic("""
        import glob
        import json

        def f(path, things):
            coco = json.loads(open(path).read())
            for image in coco["images"]:
                pass
            for i, name in enumerate(glob.glob("*.png")):
                pass
            for key, value in coco.items():
                pass
            for thing in things:
                pass
            for step in range(100):
                pass
    """)
    loops = [n for n in ast.walk(module) if isinstance(n, ast.For)]
    assert [semantic.walks_file_contents(loop) for loop in loops] == [True, True, True, False, False]
