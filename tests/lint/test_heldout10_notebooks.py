"""False positives of the tenth held-out round in notebooks (MEM113,
MEM001), each fixed by what the values are or by how IPython runs a cell,
and checked on code of another style than the judged case: the shape that
was wrongly reported is silent, and a true-positive look-alike is still
reported on its marked line.

The snippets are new code written for these tests."""

from __future__ import annotations

import json
import textwrap

from memlint.lint.engine import LintOptions
from memlint.lint.fixes import fix_notebook

from .expectations import describe, lint_text, parse_expectations


def _notebook(*cells, dedent: bool = True) -> str:
    """An nbformat 4.4 notebook of code cells, each ``source`` or
    ``(source, outputs)`` (dedented unless ``dedent`` is false); a markdown
    cell first, so code cells are 2, 3..."""
    document = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": ["Notes"]}],
                "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
                "nbformat": 4, "nbformat_minor": 4}
    for count, cell in enumerate(cells, start=1):
        source, outputs = cell if isinstance(cell, tuple) else (cell, [])
        document["cells"].append({"cell_type": "code", "execution_count": count, "metadata": {}, "outputs": outputs,
                                  "source": (textwrap.dedent(source) if dedent else source).splitlines(keepends=True)})
    return json.dumps(document, indent=1)


def _found(text: str, code: str) -> set[tuple[int, int]]:
    return {(d.cell, d.line) for d in lint_text("nb.ipynb", text, {code}) if d.code == code}


def _percent(source: str, code: str):
    return [d for d in lint_text("nb.ipynb", textwrap.dedent(source), {code}) if d.code == code]


def assert_reported(source: str, code: str) -> None:
    """Every ``# expect: CODE`` line of the percent-format ``source`` is reported, and no other line."""
    source = textwrap.dedent(source)
    expected = {line for line, c in parse_expectations(source).pairs() if c == code}
    assert expected, "the snippet marks no line"
    found = _percent(source, code)
    assert {d.line for d in found} == expected, describe(found)


def assert_silent(source: str, code: str) -> None:
    found = _percent(source, code)
    assert found == [], describe(found)


# -- MEM113 FP (a): a cell that raised when its authors ran it (its stored
# outputs hold an `error` and no `execute_result`) stored nothing in `Out`.
# The judged cases are shape-mismatch demonstrations in a course notebook;
# here a decoder runs out of GPU memory on a too-large batch.

_SETUP = """
    import torch
    from torch import nn
    decoder = nn.TransformerDecoderLayer(d_model=64, nhead=4).cuda()
    memory = torch.randn(10, 2, 64, device="cuda")
"""
_RUN = """
    tokens = torch.randn(4096, 2, 64, device="cuda")
    decoder(tokens, memory)
"""
_OOM = [{"output_type": "stream", "name": "stdout", "text": ["decoding\n"]},
        {"output_type": "error", "ename": "OutOfMemoryError", "evalue": "CUDA out of memory.",
         "traceback": ["OutOfMemoryError: CUDA out of memory."]}]
_SHOWN = [{"output_type": "execute_result", "execution_count": 2, "metadata": {},
           "data": {"text/plain": ["tensor([[...]], device='cuda:0', grad_fn=<NativeLayerNormBackward0>)"]}}]


def test_mem113_cell_whose_stored_run_raised_is_silent():
    assert _found(_notebook(_SETUP, (_RUN, _OOM)), "MEM113") == set()


def test_mem113_same_cell_stored_with_its_value_or_without_outputs_is_reported():
    assert _found(_notebook(_SETUP, (_RUN, _SHOWN)), "MEM113") == {(3, 3)}
    assert _found(_notebook(_SETUP, (_RUN, [])), "MEM113") == {(3, 3)}


# -- MEM113 FP (b): a dict of Python values returned by a helper of the
# notebook (the judged `eval_model` returns `model.__class__.__name__`,
# `loss.item()` and sums of another module's accuracy function): the
# semantic model now knows `__name__` and `__qualname__` are strings, not
# values on the model's device. Here a summary names the network by its
# class's qualified name and averages an imported F1 score.

METRICS_DICT_OK = """
    # %%
    import torch
    from torch import nn
    from scoring import macro_f1
    head = nn.Linear(16, 3).cuda()
    batches = [(torch.randn(4, 16), torch.randint(0, 3, (4,))) for _ in range(8)]

    # %%
    def summarize(net, data, metric):
        total, f1 = 0.0, 0.0
        with torch.no_grad():
            for feats, labels in data:
                logits = net(feats.cuda())
                total += nn.functional.cross_entropy(logits, labels.cuda()).item()
                f1 += metric(labels.cuda(), logits.argmax(-1))
        return {"net": net.__class__.__qualname__, "loss": total / len(data), "f1": f1 / len(data)}

    report = summarize(head, batches, macro_f1)

    # %%
    report
"""

# the same summary keeps the last batch's GPU probabilities
METRICS_DICT_BUG = """
    # %%
    import torch
    from torch import nn
    head = nn.Linear(16, 3).cuda()
    batches = [(torch.randn(4, 16), torch.randint(0, 3, (4,))) for _ in range(8)]

    # %%
    def summarize(net, data):
        total, probs = 0.0, None
        with torch.no_grad():
            for feats, labels in data:
                logits = net(feats.cuda())
                total += nn.functional.cross_entropy(logits, labels.cuda()).item()
                probs = logits.softmax(-1)
        return {"loss": total / len(data), "probs": probs}

    report = summarize(head, batches)

    # %%
    report  # expect: MEM113
"""


def test_mem113_dict_of_a_class_name_and_numbers_is_silent():
    assert_silent(METRICS_DICT_OK, "MEM113")


def test_mem113_dict_holding_a_gpu_tensor_is_reported():
    assert_reported(METRICS_DICT_BUG, "MEM113")


# -- MEM113 FP (c): a module's own storage shown (`state_dict()`,
# `list(model.parameters())`), and a CPU `nn.Parameter` built at top level:
# no graph, nothing the module does not hold. Here buffers of a GPU
# BatchNorm model, a GPU state dict, and a CPU bias with its shape.

MODULE_STORAGE_OK = """
    # %%
    import torch
    from torch import nn
    enc = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)).to("cuda")

    # %%
    dict(enc.named_buffers())

    # %%
    enc.state_dict()

    # %%
    bias = nn.Parameter(torch.zeros(8))
    bias, bias.shape
"""

# computing with the parameters makes new GPU tensors (and a graph)
MODULE_STORAGE_BUG = """
    # %%
    import torch
    from torch import nn
    enc = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)).to("cuda")

    # %%
    [p * 2 for p in enc.parameters()]  # expect: MEM113

    # %%
    bias = nn.Parameter(torch.zeros(8))
    bias * 2, bias.shape  # expect: MEM113
"""


def test_mem113_module_storage_and_cpu_parameter_shown_are_silent():
    assert_silent(MODULE_STORAGE_OK, "MEM113")


def test_mem113_tensors_computed_from_parameters_are_reported():
    assert_reported(MODULE_STORAGE_BUG, "MEM113")


# -- MEM001 FP: a cell whose every line starts with the same indentation
# runs in IPython (its `leading_indent` transform strips it). The judged
# cells start with one space; here two spaces, with a block, a magic and a
# comment, and the findings in it keep the cell's own columns.

INDENTED_CELL = """\
  %matplotlib inline
  import torch
  # the whole cell is indented by two spaces
  scaler = torch.cuda.amp.GradScaler()
  for step in range(3):
      print(step)
"""


def test_mem001_cell_indented_as_a_whole_is_no_syntax_error_and_keeps_columns():
    diagnostics = lint_text("nb.ipynb", _notebook(INDENTED_CELL, dedent=False), {"MEM001", "MEM206"})
    assert [(d.code, d.cell, d.line, d.col) for d in diagnostics] == [("MEM206", 2, 4, 12)], describe(diagnostics)
    assert INDENTED_CELL.splitlines()[3][11:].startswith("torch.cuda.amp.GradScaler")


def test_mem001_cell_whose_later_line_is_indented_more_is_reported():
    cell = "import torch\n  x = torch.ones(2)\n"
    assert _found(_notebook(cell, dedent=False), "MEM001") == {(2, 2)}


def test_fix_in_an_indented_cell_writes_the_cells_own_indentation():
    loop_cell = "".join(" " + line + "\n" for line in (
        "from torch import nn",
        "net = nn.Linear(4, 2)",
        "opt = torch.optim.SGD(net.parameters(), lr=0.1)",
        "for x in torch.randn(5, 3, 4):",
        "    net(x).sum().backward()",
        "    opt.step()"))
    text = _notebook(INDENTED_CELL, loop_cell, dedent=False)
    outcome, problem = fix_notebook("nb.ipynb", text.encode("utf-8"),
                                    LintOptions(enabled=frozenset({"MEM201", "MEM206"})), unsafe=True)
    assert problem is None and outcome.fixed_count == 2, outcome.skipped
    cells = json.loads(outcome.fixed)["cells"]
    assert "".join(cells[1]["source"]).splitlines()[3] == '  scaler = torch.amp.GradScaler("cuda")'
    assert "".join(cells[2]["source"]).splitlines()[3:5] == [" for x in torch.randn(5, 3, 4):",
                                                             "     opt.zero_grad()"]


# -- MEM403 FP: figures made in a loop of a notebook cell under Jupyter's
# inline backend, which closes the cell's figures when the cell ends. The
# judged cell plots five test images with their predictions at its top
# level; here a helper of the notebook plots sample reconstructions and a
# cell calls it once.

_PLOT_HELPER = """
    # %%
    %matplotlib inline
    import torch
    import matplotlib.pyplot as plt
    from torch import nn
    autoencoder = nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.Linear(32, 784))
    digits = torch.rand(6, 1, 28, 28)

    # %%
    def show_reconstructions(net, images):
        for image in images:
            fig = plt.figure(figsize=(2, 2))  # MARK
            with torch.no_grad():
                plt.imshow(net(image.unsqueeze(0)).view(28, 28))
            plt.axis("off")

    # %%
    show_reconstructions(autoencoder, digits)
"""


def test_mem403_notebook_figures_closed_by_the_inline_backend_are_silent():
    assert_silent(_PLOT_HELPER.replace("  # MARK", ""), "MEM403")


def test_mem403_notebook_that_switches_to_a_window_backend_is_reported():
    assert_reported(_PLOT_HELPER.replace("%matplotlib inline", "%matplotlib qt")
                    .replace("  # MARK", "  # expect: MEM403"), "MEM403")


# more figures than pyplot opens without a warning (20, matplotlib's
# figure.max_open_warning) stay open together until the cell ends, inline or not
MANY_FIGURES_CELL_BUG = _PLOT_HELPER.replace("  # MARK", "  # expect: MEM403").replace(
    "show_reconstructions(autoencoder, digits)", "show_reconstructions(autoencoder, [digits[k % 6] for k in range(48)])")


def test_mem403_notebook_helper_given_more_images_than_pyplot_keeps_open_is_reported():
    assert "range(48)" in MANY_FIGURES_CELL_BUG
    assert_reported(MANY_FIGURES_CELL_BUG, "MEM403")


# the figures of a training loop pile up until its cell ends, inline backend or not
TRAINING_CELL_BUG = """
    # %%
    %matplotlib inline
    import torch
    import matplotlib.pyplot as plt
    from torch import nn
    net = nn.Linear(4, 1)
    opt = torch.optim.Adam(net.parameters())

    # %%
    for epoch in range(200):
        loss = net(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        plt.figure()  # expect: MEM403
        plt.plot(net.weight.detach().flatten())
"""


def test_mem403_training_loop_in_a_notebook_cell_is_reported():
    assert_reported(TRAINING_CELL_BUG, "MEM403")


# one figure per file of a directory: as many open figures as files until the cell ends
FILES_CELL_BUG = """
    # %%
    %matplotlib inline
    import os
    import matplotlib.pyplot as plt
    from PIL import Image

    # %%
    for name in os.listdir("scans"):
        plt.figure()  # expect: MEM403
        plt.imshow(Image.open(os.path.join("scans", name)))
"""


def test_mem403_loop_over_a_directory_in_a_notebook_cell_is_reported():
    assert_reported(FILES_CELL_BUG, "MEM403")


# -- MEM301 FP (info): a CPU training loop at a cell's top level, in a
# notebook that first picks the GPU in a later cell (the judged course
# notebook trains on the CPU first and adds device-agnostic code 25 cells
# later). Here a `while` loop fits a line on the CPU, and a later cell only
# prints which device a next part would use.

LATER_DEVICE_OK = """
    # %%
    import torch
    w = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)
    step = 0
    while step < 50:
        loss = ((w * 2.0 - 4.0) ** 2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1

    # %%
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(dev)
"""

# the later cell trains on that device: its loop is the one reported
LATER_DEVICE_BUG = """
    # %%
    import torch
    w = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)
    step = 0
    while step < 50:
        loss = ((w * 2.0 - 4.0) ** 2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1

    # %%
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    v = torch.zeros(1, device=dev, requires_grad=True)
    opt_v = torch.optim.SGD([v], lr=0.1)
    for _ in range(50):
        loss = ((v * 2.0 - 4.0) ** 2).sum()
        opt_v.zero_grad()
        loss.backward()  # expect: MEM301
        opt_v.step()
"""


def test_mem301_cpu_loop_before_the_notebook_picks_a_device_is_silent():
    assert_silent(LATER_DEVICE_OK, "MEM301")


def test_mem301_loop_in_the_cell_that_picks_the_device_is_reported():
    assert_reported(LATER_DEVICE_BUG, "MEM301")
