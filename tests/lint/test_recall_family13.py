"""Misses of the thirteenth, held-out recall family (fixtures/recall
bug_336..bug_360, ok_90..ok_96) and of the twelfth still open, each fixed
by what the values are, and checked on code of another style than the
recall case: every buggy snippet is reported on its marked lines, and a
correct look-alike gets no finding of that code.

The snippets are new code written for these tests."""

from __future__ import annotations

from .test_recall_styles import assert_reported, assert_silent

# -- MEM403 misses (bug_347, bug_323): a loop over the entries of a directory
# listed with ``pathlib.Path.glob``/``rglob``/``iterdir`` (CPython 3.11
# Lib/pathlib.py), or over the rows of an array ``numpy.load`` read (numpy
# 1.26 numpy/lib/npyio.py), runs once per file or record on disk. bug_347
# globs pickles in a function and bug_323 plots in a helper called from a
# loop over a parallel-assigned ``.npz`` member; here a module-level
# ``iterdir`` loop, and a method called per row of an ``.npy`` array.

MEM403_ITERDIR_BUG = """
    from pathlib import Path
    import matplotlib.pyplot as plt
    import numpy as np

    out = Path("runs") / "curves"
    for entry in out.iterdir():
        values = np.loadtxt(entry)
        fig = plt.figure(figsize=(4, 3))  # expect: MEM403
        plt.plot(values)
        fig.savefig(entry.with_suffix(".png"))
"""

MEM403_ITERDIR_OK = """
    from pathlib import Path
    import matplotlib.pyplot as plt
    import numpy as np

    out = Path("runs") / "curves"
    for entry in out.iterdir():
        values = np.loadtxt(entry)
        fig = plt.figure(figsize=(4, 3))
        plt.plot(values)
        fig.savefig(entry.with_suffix(".png"))
        plt.close(fig)
"""

MEM403_ARRAY_ROWS_BUG = """
    import numpy
    from matplotlib import pyplot

    class Report:
        def draw(self, row, index):
            figure, axes = pyplot.subplots(ncols=2)  # expect: MEM403
            axes[0].bar(range(len(row)), row)
            figure.savefig(f"row_{index}.png")

        def build(self, path):
            scores, labels = numpy.load(path), None
            for index, row in enumerate(scores):
                self.draw(row, index)
"""

MEM403_ARRAY_ROWS_OK = """
    import numpy
    from matplotlib import pyplot

    class Report:
        def draw(self, row, index):
            figure, axes = pyplot.subplots(ncols=2)
            axes[0].bar(range(len(row)), row)
            figure.savefig(f"row_{index}.png")
            pyplot.close(figure)

        def build(self, path):
            scores, labels = numpy.load(path), None
            for index, row in enumerate(scores):
                self.draw(row, index)
"""


def test_mem403_figure_per_directory_entry_of_a_path():
    assert_reported(MEM403_ITERDIR_BUG, "MEM403")


def test_mem403_figure_per_directory_entry_closed_is_silent():
    assert_silent(MEM403_ITERDIR_OK, "MEM403")


def test_mem403_figure_per_row_of_a_loaded_array():
    assert_reported(MEM403_ARRAY_ROWS_BUG, "MEM403")


def test_mem403_figure_per_row_closed_in_the_helper_is_silent():
    assert_silent(MEM403_ARRAY_ROWS_OK, "MEM403")


# -- MEM304 misses (bug_353; heldout10 SentEval relatedness.py:61-66 and
# classifier.py:53-56): the whole tensor is moved before the loop and the loop
# hands it to a function of the file that walks it in batches (a sampler
# slicing windows in a comprehension, a ``trainepoch(X, y)`` method indexing
# ``X[idx]`` per batch). Here a module-level script passes the moved table to
# an epoch function by keyword, and a method hands a series to a sampler by keyword.

MEM304_CALLEE_BUG = """
    import numpy as np
    import torch

    def run_epoch(net, opt, *, table, size=64):
        for start in range(0, len(table), size):
            loss = net(table[start:start + size]).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    dev = torch.device("cuda")
    net = torch.nn.Linear(16, 1).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    feats = torch.as_tensor(np.load("feats.npy")).to(device=dev, dtype=torch.float32)  # expect: MEM304
    for epoch in range(10):
        run_epoch(net, opt, table=feats)
"""

MEM304_CALLEE_OK = """
    import numpy as np
    import torch

    def describe(table):
        return table.mean().item(), table.std().item()

    dev = torch.device("cuda")
    net = torch.nn.Linear(16, 1).to(dev)
    feats = torch.as_tensor(np.load("feats.npy")).to(device=dev, dtype=torch.float32)
    for epoch in range(10):
        print(epoch, describe(feats))
"""

MEM304_SAMPLER_METHOD_BUG = """
    import torch

    def windows(series, starts, width):
        return torch.stack([series[s:s + width] for s in starts])

    class Fitter:
        def fit(self, model, opt, series, steps):
            series = torch.from_numpy(series).float().cuda()  # expect: MEM304
            for _ in range(steps):
                batch = windows(width=32, series=series, starts=torch.randint(0, len(series) - 32, (8,)))
                loss = model(batch).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
"""

MEM304_SAMPLER_METHOD_OK = """
    import torch

    def windows(series, starts, width):
        return torch.stack([series[s:s + width] for s in starts])

    class Fitter:
        def fit(self, model, opt, series, steps):
            series = torch.from_numpy(series).float().pin_memory()
            for _ in range(steps):
                batch = windows(width=32, series=series, starts=torch.randint(0, len(series) - 32, (8,))).cuda(non_blocking=True)
                loss = model(batch).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
"""


def test_mem304_moved_table_walked_by_an_epoch_function():
    assert_reported(MEM304_CALLEE_BUG, "MEM304")


def test_mem304_moved_table_only_summarised_by_a_function_is_silent():
    assert_silent(MEM304_CALLEE_OK, "MEM304")


def test_mem304_moved_series_sliced_by_a_sampler_method():
    assert_reported(MEM304_SAMPLER_METHOD_BUG, "MEM304")


def test_mem304_pinned_series_moved_per_batch_is_silent():
    assert_silent(MEM304_SAMPLER_METHOD_OK, "MEM304")


# -- MEM306 misses (bug_354; heldout10 SentEval classifier.py:77). bug_354 copies
# the device model once per selected client and keeps every trained copy in a
# list: in any loop that is no literal display, a copy handed to ``append`` (or
# stored under a key) of a container made before the loop is one more device
# copy per iteration. SentEval's base class deep-copies ``self.model`` in its
# early-stopping loop while the subclass's ``__init__`` builds it with
# ``.cuda()``: an attribute the base never assigns is what its file's
# subclasses assign. Here a fold loop keeps copies in a dict, and a base
# trainer snapshots the network its subclass puts on the GPU.

MEM306_KEPT_COPIES_BUG = """
    from copy import deepcopy
    import torch

    def fold_members(folds, train_fold):
        base = torch.nn.LSTM(8, 8).to("cuda")
        members = {}
        for index, fold in enumerate(folds):
            members[index] = train_fold(deepcopy(base), fold)  # expect: MEM306
        return members
"""

MEM306_KEPT_COPIES_OK = """
    from copy import deepcopy
    import torch

    def fold_scores(folds, train_fold):
        base = torch.nn.LSTM(8, 8).to("cuda")
        scores = {}
        for index, fold in enumerate(folds):
            trial = deepcopy(base)
            scores[index] = float(train_fold(trial, fold))
        return scores
"""

MEM306_SUBCLASS_MODEL_BUG = """
    import copy
    import torch
    from torch import nn

    class Trainer:
        def __init__(self, patience):
            self.patience = patience

        def fit(self, batches, score):
            best, waited, kept = -1.0, 0, None
            while waited < self.patience:
                for x, y in batches:
                    loss = nn.functional.mse_loss(self.net(x), y)
                    self.opt.zero_grad()
                    loss.backward()
                    self.opt.step()
                current = score(self.net)
                if current > best:
                    best, waited = current, 0
                    kept = copy.deepcopy(self.net)  # expect: MEM306
                else:
                    waited += 1
            return kept

    class GpuRegressor(Trainer):
        def __init__(self, width, patience=3):
            super().__init__(patience)
            self.net = nn.Sequential(nn.Linear(width, 1)).cuda()
            self.opt = torch.optim.Adam(self.net.parameters())
"""

MEM306_SUBCLASS_MODEL_OK = MEM306_SUBCLASS_MODEL_BUG.replace("  # expect: MEM306", "").replace(
    "nn.Sequential(nn.Linear(width, 1)).cuda()", "nn.Sequential(nn.Linear(width, 1))")


def test_mem306_copies_kept_per_fold():
    assert_reported(MEM306_KEPT_COPIES_BUG, "MEM306")


def test_mem306_copy_per_fold_reduced_to_a_score_is_silent():
    assert_silent(MEM306_KEPT_COPIES_OK, "MEM306")


def test_mem306_base_class_copies_the_subclass_gpu_model():
    assert_reported(MEM306_SUBCLASS_MODEL_BUG, "MEM306")


def test_mem306_base_class_copies_a_cpu_model_is_silent():
    assert_silent(MEM306_SUBCLASS_MODEL_OK, "MEM306")


# -- MEM305 misses (bug_352 L35/L36): torchdata's ``DataLoader2`` with a
# ``MultiProcessingReadingService(num_workers>0)`` runs the datapipe graph in
# worker processes (pytorch/data @27e3c2d torchdata/dataloader2/reading_service.py),
# so the callables of its ``.map``/``.collate`` steps run there. bug_352 hands
# a module-level collate function to ``.collate``; here a pipeline built step
# by step hands a loader function to ``.map`` by keyword, and the reading
# service is bound to a name with a positional worker count.

MEM305_DATAPIPE_BUG = """
    import torch
    from torchdata.datapipes.iter import IterableWrapper
    from torchdata.dataloader2 import DataLoader2, MultiProcessingReadingService

    def load(path):
        return torch.load(path, map_location="cpu").pin_memory().cuda(non_blocking=True)  # expect: MEM305

    def build(paths):
        pipe = IterableWrapper(paths).shuffle().sharding_filter()
        pipe = pipe.map(fn=load)
        service = MultiProcessingReadingService(8)
        return DataLoader2(pipe, reading_service=service)
"""

MEM305_DATAPIPE_OK = """
    import torch
    from torchdata.datapipes.iter import IterableWrapper
    from torchdata.dataloader2 import DataLoader2, MultiProcessingReadingService

    def load(path):
        return torch.load(path, map_location="cpu").pin_memory().cuda(non_blocking=True)

    def build(paths):
        pipe = IterableWrapper(paths).shuffle().sharding_filter()
        pipe = pipe.map(fn=load)
        service = MultiProcessingReadingService(num_workers=0)
        return DataLoader2(pipe, reading_service=service)
"""


def test_mem305_datapipe_map_run_by_worker_processes():
    assert_reported(MEM305_DATAPIPE_BUG, "MEM305")


def test_mem305_datapipe_map_run_in_process_is_silent():
    assert_silent(MEM305_DATAPIPE_OK, "MEM305")


# -- MEM304 miss (bug_326, twelfth family): a plain scene class uploads each
# image it finds with ``os.scandir`` in its ``__init__`` loop and keeps it in
# the cameras it appends to ``self``: a loop over what is on disk that keeps
# every moved piece assembles the whole dataset on the device. Here a
# function reads a JSON manifest and stores each clip under its id in a
# dict made before the loop.

MEM304_FILE_LOOP_BUG = """
    import json
    import numpy as np
    import torch

    def load_bank(manifest, device):
        with open(manifest) as fh:
            records = json.load(fh)
        bank = {}
        for rec in records["clips"]:
            wav = torch.as_tensor(np.load(rec["path"])).to(device=device)  # expect: MEM304
            bank[rec["id"]] = wav
        return bank
"""

MEM304_FILE_LOOP_OK = """
    import json
    import numpy as np
    import torch

    def loudness(manifest, device):
        with open(manifest) as fh:
            records = json.load(fh)
        levels = {}
        for rec in records["clips"]:
            wav = torch.as_tensor(np.load(rec["path"])).to(device=device)
            levels[rec["id"]] = wav.pow(2).mean().sqrt().item()
        return levels
"""


def test_mem304_every_file_moved_and_kept():
    assert_reported(MEM304_FILE_LOOP_BUG, "MEM304")


def test_mem304_every_file_moved_and_reduced_to_a_number_is_silent():
    assert_silent(MEM304_FILE_LOOP_OK, "MEM304")


# -- MEM403 miss (bug_345): a figure per item of a list that a parameter
# receives, where every call of the file passes more items than pyplot's
# ``figure.max_open_warning`` (20; matplotlib 3.11.2 mpl-data/matplotlibrc).
# bug_345 plots in a dataclass method called per scenario; here the loop
# itself makes the figures, over a list comprehension of 64 seeds.

MEM403_MANY_ITEMS_BUG = """
    import matplotlib.pyplot as plt
    import numpy as np

    def draw_all(seeds, out):
        for seed in seeds:
            rng = np.random.default_rng(seed)
            fig, ax = plt.subplots(1, 2)  # expect: MEM403
            ax[0].hist(rng.normal(size=500))
            fig.savefig(f"{out}/seed_{seed}.png")

    draw_all([1000 + k for k in range(64)], "plots")
"""

MEM403_FEW_ITEMS_OK = """
    import matplotlib.pyplot as plt
    import numpy as np

    def draw_all(seeds, out):
        for seed in seeds:
            rng = np.random.default_rng(seed)
            fig, ax = plt.subplots(1, 2)
            ax[0].hist(rng.normal(size=500))
            fig.savefig(f"{out}/seed_{seed}.png")

    draw_all([1000 + k for k in range(4)], "plots")
"""


def test_mem403_figure_per_item_of_a_long_list():
    assert_reported(MEM403_MANY_ITEMS_BUG, "MEM403")


def test_mem403_figure_per_item_of_a_short_list_is_silent():
    assert_silent(MEM403_FEW_ITEMS_OK, "MEM403")


# -- MEM304 miss (bug_328, twelfth family): a data manager's setup method
# stacks every item of its dataset (``[ds[i][key] for i in range(len(ds))]``)
# and keeps the dict of stacks on ``self`` after moving each entry: the whole
# dataset on the device, whatever the method. Here a frame cache joins every
# item with ``torch.cat`` and moves the join in one expression.

MEM304_WHOLE_COLLECTION_BUG = """
    import torch

    class FrameCache:
        def __init__(self, source):
            self.source = source
            self.frames = None

        def warm(self):
            self.frames = torch.cat([self.source[j]["pixels"] for j in range(len(self.source))]).cuda()  # expect: MEM304

        def sample(self, n):
            return self.frames[torch.randint(0, len(self.frames), (n,), device="cuda")]
"""

MEM304_FEW_ITEMS_OK = """
    import torch

    class FrameCache:
        def __init__(self, source):
            self.source = source
            self.frames = None

        def warm(self):
            self.frames = torch.cat([self.source[j]["pixels"] for j in range(min(4, len(self.source)))]).cuda()

        def sample(self, n):
            return self.frames[torch.randint(0, len(self.frames), (n,), device="cuda")]
"""


def test_mem304_every_item_joined_and_kept_on_the_device():
    assert_reported(MEM304_WHOLE_COLLECTION_BUG, "MEM304")


def test_mem304_first_items_joined_for_a_preview_is_silent():
    assert_silent(MEM304_FEW_ITEMS_OK, "MEM304")
