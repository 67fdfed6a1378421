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
