"""Misses of the eleventh, held-out recall family (fixtures/recall
bug_290..bug_313, ok_78..ok_83), each fixed by what the values are, and
checked on code of another style than the recall case: every buggy snippet
is reported on its marked lines, and a correct look-alike gets no finding of
that code.

The snippets are new code written for these tests."""

from __future__ import annotations

from .test_recall_styles import assert_reported, assert_silent

# -- MEM201 miss (bug_304): horovod's ``DistributedOptimizer(optimizer, ...)``
# returns an optimizer (a subclass of the wrapped one's class, horovod 0.28.1
# horovod/torch/optimizer.py), so stepping it in a loop that never zeroes the
# gradients lets them accumulate.  bug_304 holds it as ``self._optimizer`` in a
# trainer class; here a module-level loop that imports the factory by name.

MEM201_HOROVOD_BUG = """
    import torch
    from horovod.torch import DistributedOptimizer, init

    init()
    net = torch.nn.Linear(16, 2)
    opt = DistributedOptimizer(torch.optim.Adam(net.parameters()), named_parameters=net.named_parameters())
    while True:
        xb, yb = next(stream)
        torch.nn.functional.mse_loss(net(xb), yb).backward()
        opt.step()  # expect: MEM201
"""

MEM201_HOROVOD_OK = """
    import torch
    from horovod.torch import DistributedOptimizer, init

    init()
    net = torch.nn.Linear(16, 2)
    opt = DistributedOptimizer(torch.optim.Adam(net.parameters()), named_parameters=net.named_parameters())
    while True:
        xb, yb = next(stream)
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(xb), yb).backward()
        opt.step()
"""


def test_mem201_horovod_distributed_optimizer_never_zeroed():
    assert_reported(MEM201_HOROVOD_BUG, "MEM201")


def test_mem201_horovod_distributed_optimizer_zeroed_is_silent():
    assert_silent(MEM201_HOROVOD_OK, "MEM201")


# -- MEM403 miss (bug_297): an argument that only holds the result of a call
# made on the figure (``figure_to_array(fig)``, a function of the file that
# renders it and returns an array) does not hand the figure to the outer call
# (``writer.add_image``), so that call cannot close it.  bug_297 is a helper
# called per evaluation batch; here a `while` loop over a stream with an
# external logger and a nested method call on the canvas.

MEM403_RENDERED_BUG = """
    import matplotlib.pyplot as plt
    import numpy as np

    def pixels(figure):
        figure.canvas.draw()
        return np.asarray(figure.canvas.buffer_rgba())

    while True:
        batch = next(stream)
        fig, axes = plt.subplots(1, 2)  # expect: MEM403
        axes[0].imshow(batch["image"])
        run.log_image(pixels(fig))
"""

MEM403_RENDERED_OK = """
    import matplotlib.pyplot as plt
    import numpy as np

    def pixels(figure):
        figure.canvas.draw()
        return np.asarray(figure.canvas.buffer_rgba())

    while True:
        batch = next(stream)
        fig, axes = plt.subplots(1, 2)
        axes[0].imshow(batch["image"])
        run.log_image(pixels(fig))
        plt.close(fig)
"""

#: A function of the file that hands the figure back: the outer call gets the
#: figure itself, and an unseen logger may close it (not reported).
MEM403_HANDED_BACK_OK = """
    import matplotlib.pyplot as plt

    def styled(figure):
        figure.tight_layout()
        return figure

    while True:
        batch = next(stream)
        fig = plt.figure()
        plt.imshow(batch["image"])
        run.log_figure(styled(fig))
"""


def test_mem403_figure_rendered_by_a_helper_for_a_logger():
    assert_reported(MEM403_RENDERED_BUG, "MEM403")


def test_mem403_figure_rendered_and_closed_is_silent():
    assert_silent(MEM403_RENDERED_OK, "MEM403")


def test_mem403_figure_handed_back_by_a_helper_to_an_unseen_logger_is_silent():
    assert_silent(MEM403_HANDED_BACK_OK, "MEM403")


# -- MEM103 miss (bug_305): the variable of a comprehension that iterates the
# loop's item (``(t.to(device) for t in tensors)``) is a part of that item, so
# moving it to the device marks the loop as one over batches.  bug_305 unpacks a
# generator in a ``@torch.no_grad()`` method; here a module-level
# ``inference_mode`` block with a list comprehension over a dict's values.

MEM103_COMPREHENSION_BUG = """
    import torch

    kept = []
    with torch.inference_mode():
        for record in source:
            image, mask = [v.cuda() for v in record.values()]
            kept.append(image)  # expect: MEM103
"""

MEM103_COMPREHENSION_OK = """
    import torch

    kept = []
    with torch.inference_mode():
        for record in source:
            image, mask = [v.cuda() for v in record.values()]
            kept.append(image.cpu())
"""


def test_mem103_part_moved_by_a_comprehension_over_the_item():
    assert_reported(MEM103_COMPREHENSION_BUG, "MEM103")


def test_mem103_part_moved_back_to_the_host_is_silent():
    assert_silent(MEM103_COMPREHENSION_OK, "MEM103")


# -- MEM304 anchor (bug_299): a dataset attribute built by a list
# comprehension that moves each piece is reported on the comprehension's
# element, the expression that moves it, even when the comprehension starts
# on an earlier line.  bug_299 reads HDF5 in ``Dataset.__init__``; here a
# module-level list of numpy arrays sliced by a later training loop.

MEM304_COMPREHENSION_BUG = """
    import numpy as np
    import torch

    shards = [
        torch.from_numpy(np.load(p)).to("cuda")  # expect: MEM304
        for p in paths
    ]

    def train(model, opt):
        for epoch in range(10):
            for shard in shards:
                opt.zero_grad()
                model(shard).sum().backward()
                opt.step()
"""

MEM304_COMPREHENSION_OK = """
    import numpy as np
    import torch

    shards = [
        torch.from_numpy(np.load(p))
        for p in paths
    ]

    def train(model, opt):
        for epoch in range(10):
            for shard in shards:
                opt.zero_grad()
                model(shard.to("cuda", non_blocking=True)).sum().backward()
                opt.step()
"""


def test_mem304_comprehension_reported_on_the_moving_element():
    assert_reported(MEM304_COMPREHENSION_BUG, "MEM304")


def test_mem304_comprehension_kept_on_the_host_is_silent():
    assert_silent(MEM304_COMPREHENSION_OK, "MEM304")


# -- MEM502 miss (bug_308): a helper of the file that builds, fits and returns
# its model in a record (``{"loss": ..., "model": model}``) under a key the
# file never reads: the records kept across the search are no ensemble, and
# the model is trained, not a part.  bug_308 is a ``ParameterSampler`` loop
# appending the records; here a ``while`` loop over a queue of settings that
# stores them in a dict by trial number, functional Keras API.

MEM502_RECORD_BUG = """
    from tensorflow import keras

    def trial(width):
        inputs = keras.Input((8,))
        net = keras.Model(inputs, keras.layers.Dense(width)(inputs))
        net.compile("adam", "mse")
        history = net.fit(xs, ys, verbose=0)
        return {"score": history.history["loss"][-1], "net": net}

    results = {}
    while pending:
        width = pending.pop()
        results[width] = trial(width)  # expect: MEM502
    print(min(r["score"] for r in results.values()))
"""

#: The same search that uses the kept models afterwards: an ensemble on purpose.
MEM502_RECORD_OK = """
    from tensorflow import keras

    def trial(width):
        inputs = keras.Input((8,))
        net = keras.Model(inputs, keras.layers.Dense(width)(inputs))
        net.compile("adam", "mse")
        history = net.fit(xs, ys, verbose=0)
        return {"score": history.history["loss"][-1], "net": net}

    results = {}
    while pending:
        width = pending.pop()
        results[width] = trial(width)
    votes = [r["net"](xs) for r in results.values()]
"""


def test_mem502_trained_models_left_in_unread_records():
    assert_reported(MEM502_RECORD_BUG, "MEM502")


def test_mem502_models_kept_and_used_after_the_search_is_silent():
    assert_silent(MEM502_RECORD_OK, "MEM502")
