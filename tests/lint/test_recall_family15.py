"""Misses of the fifteenth, held-out recall family (fixtures/recall
bug_386..bug_416, ok_103..ok_108), each fixed by what the values are, and
checked on code of another style than the recall case: every buggy snippet
is reported on its marked lines, and a correct look-alike gets no finding of
that code.

The snippets are new code written for these tests."""

from __future__ import annotations

from .test_recall_styles import assert_reported, assert_silent

# -- MEM104 miss (bug_386): a forward pass in the evaluation ``case`` of a
# ``match`` inside the training loop, after ``model.eval()``, while the
# other case trains. The names of the two cases are the same (``pred``,
# ``loss``), and the other case backpropagates them; that backward pass
# lies in a case that excludes this one. bug_386 is a function with a
# string ``match split:``; here a trainer method matches an enum member and
# an or-pattern.

MATCH_EVAL_BUG = """
    import enum
    import torch

    class Phase(enum.Enum):
        FIT = 1
        DEV = 2
        TEST = 3

    class Runner:
        def __init__(self, net, opt):
            self.net, self.opt = net.cuda(), opt

        def run(self, loader, phase: Phase):
            seen = 0.0
            for xb, yb in loader:
                xb, yb = xb.cuda(), yb.cuda()
                match phase:
                    case Phase.FIT:
                        self.net.train()
                        self.opt.zero_grad()
                        logits = self.net(xb)
                        err = torch.nn.functional.cross_entropy(logits, yb)
                        err.backward()
                        self.opt.step()
                    case Phase.DEV | Phase.TEST:
                        self.net.eval()
                        logits = self.net(xb)  # expect: MEM104
                        err = torch.nn.functional.cross_entropy(logits, yb)
                seen += err.item()
            return seen
"""

MATCH_EVAL_OK = """
    import enum
    import torch

    class Phase(enum.Enum):
        FIT = 1
        DEV = 2

    class Runner:
        def __init__(self, net, opt):
            self.net, self.opt = net.cuda(), opt

        def run(self, loader, phase: Phase):
            seen = 0.0
            for xb, yb in loader:
                xb, yb = xb.cuda(), yb.cuda()
                match phase:
                    case Phase.FIT:
                        self.net.train()
                        self.opt.zero_grad()
                        logits = self.net(xb)
                        err = torch.nn.functional.cross_entropy(logits, yb)
                        err.backward()
                        self.opt.step()
                    case Phase.DEV:
                        self.net.eval()
                        with torch.no_grad():
                            logits = self.net(xb)
                            err = torch.nn.functional.cross_entropy(logits, yb)
                seen += err.item()
            return seen
"""

# A case that switches to eval (frozen batch-norm statistics) and whose
# output is backpropagated after the ``match``: fine-tuning, not evaluation.
MATCH_FROZEN_BN_OK = """
    import torch

    def tune(model, loader, opt, mode: str):
        for x, y in loader:
            x, y = x.cuda(), y.cuda()
            opt.zero_grad()
            match mode:
                case "full":
                    model.train()
                    out = model(x)
                case "frozen_bn":
                    model.eval()
                    out = model(x)
            loss = torch.nn.functional.mse_loss(out, y)
            loss.backward()
            opt.step()
"""


def test_mem104_evaluation_case_of_a_match_in_a_training_loop():
    assert_reported(MATCH_EVAL_BUG, "MEM104")


def test_mem104_evaluation_case_under_no_grad_is_silent():
    assert_silent(MATCH_EVAL_OK, "MEM104")


def test_mem104_eval_case_backpropagated_after_the_match_is_silent():
    assert_silent(MATCH_FROZEN_BN_OK, "MEM104")


# -- MEM304 miss (bug_398): every piece of a collection moved to the
# accelerator by a list comprehension (``[g.to(device) for g in graphs]``),
# the pieces of a type the model does not know (a graph library's ``Data``),
# and the list handed to a loader whose batches a training loop draws.
# bug_398 does it in a helper that returns the list to the training
# function (PyG ``DataLoader``); here a module-level script with
# ``.to(device=...)`` and torch's ``DataLoader(dataset=...)``.

PIECES_MOVED_BUG = """
    import pickle
    import torch
    from torch.utils.data import DataLoader

    dev = torch.device("cuda:0")
    with open("records.pkl", "rb") as fh:
        records = pickle.load(fh)
    records = [r.to(device=dev) for r in records]  # expect: MEM304
    loader = DataLoader(dataset=records, batch_size=16, shuffle=True, collate_fn=collate)
    for step, batch in enumerate(loader):
        opt.zero_grad()
        net(batch).mean().backward()
        opt.step()
"""

PIECES_MOVED_OK = """
    import pickle
    import torch
    from torch.utils.data import DataLoader

    dev = torch.device("cuda:0")
    with open("records.pkl", "rb") as fh:
        records = pickle.load(fh)
    records = [r.to(device="cpu") for r in records]
    loader = DataLoader(dataset=records, batch_size=16, shuffle=True, collate_fn=collate)
    for step, batch in enumerate(loader):
        opt.zero_grad()
        net(batch.to(dev, non_blocking=True)).mean().backward()
        opt.step()
"""

# The pieces moved and handed to a loader that no loop of the file draws
# from: the file does not show that the list is the data of a run.
PIECES_NOT_DRAWN_OK = """
    import pickle
    import torch
    from torch.utils.data import DataLoader

    def cache(path, dev=torch.device("cuda")):
        with open(path, "rb") as fh:
            items = pickle.load(fh)
        items = [it.to(dev) for it in items]
        return DataLoader(items, batch_size=8)
"""


def test_mem304_list_comprehension_moving_every_piece_for_a_loader():
    assert_reported(PIECES_MOVED_BUG, "MEM304")


def test_mem304_pieces_kept_on_the_host_are_silent():
    assert_silent(PIECES_MOVED_OK, "MEM304")


def test_mem304_moved_pieces_no_loop_draws_from_are_silent():
    assert_silent(PIECES_NOT_DRAWN_OK, "MEM304")


# -- MEM303 miss (bug_401): ``torch.load`` called through a name bound to a
# keyword-only ``functools.partial`` of it, the call giving no
# ``map_location``. bug_401 is ``load = partial(T.load, weights_only=True)``
# at module level used in a resume helper; here ``partial`` is imported
# under another name and the bound loader is used in a method.

PARTIAL_LOAD_BUG = """
    from functools import partial as bind
    import torch

    read_ckpt = bind(torch.load, mmap=True, weights_only=True)

    class Resumer:
        def __init__(self, model, opt):
            self.model, self.opt = model.cuda(), opt

        def restore(self, path):
            blob = read_ckpt(path)  # expect: MEM303
            self.model.load_state_dict(blob["model"])
            self.opt.load_state_dict(blob["opt"])
"""

PARTIAL_LOAD_OK = """
    from functools import partial as bind
    import torch

    read_ckpt = bind(torch.load, mmap=True, map_location="cpu")
    read_raw = bind(torch.load, weights_only=True)

    class Resumer:
        def __init__(self, model, opt):
            self.model, self.opt = model.cuda(), opt

        def restore(self, path):
            blob = read_ckpt(path)
            self.model.load_state_dict(blob["model"])
            self.opt.load_state_dict(read_raw(path + ".opt", map_location="cpu"))
"""


def test_mem303_load_through_a_keyword_partial():
    assert_reported(PARTIAL_LOAD_BUG, "MEM303")


def test_mem303_partial_or_call_with_map_location_is_silent():
    assert_silent(PARTIAL_LOAD_OK, "MEM303")


# -- MEM502 miss (bug_408): a Keras model built in an Optuna objective that
# the file never hands to ``study.optimize`` itself (a closure returned by a
# factory, passed on through a wrapper); its parameter is annotated with
# optuna's ``Trial``, which only a study makes, once per trial. bug_408 is a
# nested ``def objective(trial: optuna.Trial)``; here a callable class's
# ``__call__(self, trial: Trial)`` with ``from optuna.trial import Trial``
# and a functional model.

TRIAL_OBJECTIVE_BUG = """
    import tensorflow as tf
    from optuna.trial import Trial

    class Objective:
        def __init__(self, data):
            self.data = data

        def __call__(self, trial: Trial) -> float:
            inputs = tf.keras.Input(shape=(32,))
            hidden = tf.keras.layers.Dense(trial.suggest_int("units", 16, 256))(inputs)
            net = tf.keras.Model(inputs=inputs, outputs=tf.keras.layers.Dense(1)(hidden))  # expect: MEM502
            net.compile(optimizer="adam", loss="mse")
            return net.fit(*self.data, epochs=2, verbose=0).history["loss"][-1]
"""

TRIAL_OBJECTIVE_OK = """
    import tensorflow as tf
    from optuna.trial import Trial

    class Objective:
        def __init__(self, data):
            self.data = data

        def __call__(self, trial: Trial) -> float:
            tf.keras.backend.clear_session()
            inputs = tf.keras.Input(shape=(32,))
            hidden = tf.keras.layers.Dense(trial.suggest_int("units", 16, 256))(inputs)
            net = tf.keras.Model(inputs=inputs, outputs=tf.keras.layers.Dense(1)(hidden))
            net.compile(optimizer="adam", loss="mse")
            return net.fit(*self.data, epochs=2, verbose=0).history["loss"][-1]
"""

# A parameter annotated with something else than a trial: a plain builder.
NOT_A_TRIAL_OK = """
    import tensorflow as tf

    def build(units: int) -> tf.keras.Model:
        inputs = tf.keras.Input(shape=(32,))
        return tf.keras.Model(inputs=inputs, outputs=tf.keras.layers.Dense(units)(inputs))
"""


def test_mem502_model_built_in_a_trial_annotated_objective():
    assert_reported(TRIAL_OBJECTIVE_BUG, "MEM502")


def test_mem502_trial_objective_clearing_the_session_is_silent():
    assert_silent(TRIAL_OBJECTIVE_OK, "MEM502")
    assert_silent(NOT_A_TRIAL_OK, "MEM502")


# -- MEM403 miss (bug_410): a plotting helper whose bare ``plt.close()``
# closes only its second figure, called from a loop over ``range(epochs)``
# where ``epochs`` is a parameter whose default (the only value the file
# gives it) is far more steps than pyplot keeps open without a warning. The
# loop trains with numpy, so it is no run loop of the model. bug_410 calls
# the helper every N epochs; here a method of a trainer class opens a figure
# directly in the loop, every 100 steps, over ``steps=5_000``.

MANY_STEPS_BUG = """
    import matplotlib.pyplot as plt
    import numpy as np

    class Fitter:
        def fit(self, X, y, w, steps=5_000, lr=0.1):
            for step in range(steps):
                w -= lr * X.T @ (X @ w - y) / len(X)
                if step % 100 == 0:
                    fig, ax = plt.subplots(figsize=(4, 3))  # expect: MEM403
                    ax.scatter(X[:, 0], X @ w)
                    fig.savefig(f"fit_{step}.png")
            return w
"""

MANY_STEPS_OK = """
    import matplotlib.pyplot as plt
    import numpy as np

    class Fitter:
        def fit(self, X, y, w, steps=5_000, lr=0.1):
            for step in range(steps):
                w -= lr * X.T @ (X @ w - y) / len(X)
                if step % 100 == 0:
                    fig, ax = plt.subplots(figsize=(4, 3))
                    ax.scatter(X[:, 0], X @ w)
                    fig.savefig(f"fit_{step}.png")
                    plt.close(fig)
            return w
"""

# The same loop over a parameter that every call of the file sets to a few steps.
FEW_STEPS_OK = """
    import matplotlib.pyplot as plt

    def panels(data, count=500):
        for i in range(count):
            fig = plt.figure()
            plt.plot(data[i])
            fig.savefig(f"panel_{i}.png")

    panels(series, count=4)
    panels(series, 6)
"""


def test_mem403_figure_per_step_of_a_long_parameter_range():
    assert_reported(MANY_STEPS_BUG, "MEM403")


def test_mem403_closed_figure_or_few_steps_is_silent():
    assert_silent(MANY_STEPS_OK, "MEM403")
    assert_silent(FEW_STEPS_OK, "MEM403")


# -- MEM108 (bug_415's shape, reported where the model knows the value is
# attached): a buffer updated in place from a layer's output chains every
# call's graph. bug_415 itself stays missed: its statistics come from the
# forward's input, whose graph the file does not show.

MEM108_IN_PLACE_BUFFER_BUG = """
    import torch
    import torch.nn as nn

    class Tracked(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.proj = nn.Linear(dim, dim)
            self.register_buffer("feature_ema", torch.zeros(dim))

        def forward(self, x):
            y = self.proj(x)
            self.feature_ema.mul_(0.99).add_(y.mean(0), alpha=0.01)  # expect: MEM108
            return y
"""


def test_mem108_buffer_written_in_place_from_a_layer_output():
    assert_reported(MEM108_IN_PLACE_BUFFER_BUG, "MEM108")


def test_mem108_buffer_written_in_place_from_a_detached_value_is_silent():
    assert_silent(MEM108_IN_PLACE_BUFFER_BUG.replace("y.mean(0), alpha", "y.mean(0).detach(), alpha")
                  .replace("  # expect: MEM108", ""), "MEM108")


# -- MEM305 miss (bug_402): a module-level `torch.set_default_device("cuda")`
# is inherited by forked workers, so a factory without `device=` in worker
# code creates a CUDA tensor there. Here the factory is in a `collate_fn`, the
# device is a `torch.device`, and the look-alike loads in the main process.

MEM305_DEFAULT_DEVICE_BUG = """
    import torch
    from torch.utils.data import DataLoader

    torch.set_default_device(torch.device("cuda:0"))

    def pad_batch(samples):
        longest = max(len(s) for s in samples)
        out = torch.zeros(len(samples), longest)  # expect: MEM305
        for row, s in enumerate(samples):
            out[row, :len(s)] = torch.as_tensor(s)  # expect: MEM305
        return out

    def make_loader(sequences):
        return DataLoader(sequences, batch_size=16, collate_fn=pad_batch, num_workers=4)
"""


def test_mem305_factory_after_a_module_level_cuda_default_device_in_a_worker():
    assert_reported(MEM305_DEFAULT_DEVICE_BUG, "MEM305")


def test_mem305_same_collate_in_the_main_process_is_silent():
    assert_silent(MEM305_DEFAULT_DEVICE_BUG.replace("num_workers=4", "num_workers=0").replace("  # expect: MEM305", ""), "MEM305")
    assert_silent(MEM305_DEFAULT_DEVICE_BUG.replace('torch.device("cuda:0")', '"cpu"').replace("  # expect: MEM305", ""), "MEM305")


# -- MEM403: a loop the file fixes to more than pyplot's 20 open figures
# (matplotlib's figure.max_open_warning) piles them up as surely as a loop
# over a parameter of that size; a few fixed samples stay silent.

MEM403_FIXED_MANY_BUG = """
    import matplotlib.pyplot as plt
    import numpy as np

    grid = np.random.default_rng(0).normal(size=(64, 28, 28))
    for index in range(0, 64):
        fig, ax = plt.subplots(figsize=(2, 2))  # expect: MEM403
        ax.imshow(grid[index])
        fig.savefig(f"digit_{index}.png")
"""


def test_mem403_loop_fixed_to_more_figures_than_pyplot_keeps_open():
    assert_reported(MEM403_FIXED_MANY_BUG, "MEM403")


def test_mem403_loop_fixed_to_a_few_figures_is_silent():
    assert_silent(MEM403_FIXED_MANY_BUG.replace("range(0, 64)", "range(0, 6)").replace("  # expect: MEM403", ""), "MEM403")
