"""False positives and misses of the eleventh held-out round
(/work/heldout11), each fixed by what the values are, and checked on code of
another style than the judged case: the shape that was wrongly reported is
silent and a true-positive look-alike is still reported on its marked line
(or, for a miss, the missed shape is reported and a correct look-alike is
silent).

The snippets are new code written for these tests."""

from __future__ import annotations

from .test_heldout10_notebooks import assert_reported as assert_reported_in_notebook
from .test_heldout10_notebooks import assert_silent as assert_silent_in_notebook
from .test_recall_styles import assert_reported, assert_silent

# -- MEM403 FP: a notebook helper that draws a few figures, called once per
# epoch from a training cell whose batches are walked by a nested loop. The
# judged helper is `display_images(in_, out, n=1)` with `plt.figure`; here a
# GAN notebook draws a grid of samples with `plt.subplots` after each epoch.
# The inline backend shows and closes them when the cell ends; ten epochs
# stay below pyplot's 20 open figures.

_GAN_CELLS = """
    # %%
    import torch
    import matplotlib.pyplot as plt
    from torch import nn
    gen = nn.Sequential(nn.Linear(16, 64), nn.Tanh())
    opt = torch.optim.SGD(gen.parameters(), lr=0.1)
    batches = torch.utils.data.DataLoader(torch.randn(256, 64), batch_size=32)
    EPOCHS = 10

    # %%
    def show_samples(model, k=3):
        fig, axes = plt.subplots(1, k, figsize=(9, 3))  # MARK
        with torch.no_grad():
            for ax in axes:
                ax.plot(model(torch.randn(16)))

    # %%
    for epoch in range(EPOCHS):
        for real in batches:
            loss = (gen(torch.randn(32, 16)) - real).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        show_samples(gen)
"""


def test_mem403_notebook_helper_called_once_per_epoch_is_silent():
    assert_silent_in_notebook(_GAN_CELLS.replace("  # MARK", ""), "MEM403")


def test_mem403_notebook_helper_called_once_per_batch_is_reported():
    per_batch = _GAN_CELLS.replace("  # MARK", "  # expect: MEM403").replace(
        "            opt.step()\n        show_samples(gen)", "            opt.step()\n            show_samples(gen)")
    assert "            show_samples(gen)" in per_batch
    assert_reported_in_notebook(per_batch, "MEM403")


def test_mem403_notebook_helper_called_for_more_epochs_than_pyplot_keeps_open_is_reported():
    assert_reported_in_notebook(_GAN_CELLS.replace("  # MARK", "  # expect: MEM403").replace("EPOCHS = 10", "EPOCHS = 40"),
                                "MEM403")
