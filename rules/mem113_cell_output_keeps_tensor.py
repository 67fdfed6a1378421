"""MEM113 cell-output-keeps-tensor."""

from __future__ import annotations

import ast

from memlint.lint.diagnostic import Applicability, Severity
from memlint.lint.rule import Rule
from memlint.rules._notebook import (cell_span, cell_statements, holds_tensor_memory, last_token, method_result_known,
                                     module_storage, what_it_keeps)


class CellOutputKeepsTensor(Rule):
    """## What it does
    Reports a notebook code cell whose last statement is a bare expression
    that evaluates to a tensor, a model output or a loss that keeps an
    autograd graph or GPU memory (`loss`, `model(x)`, `logits[:4]`), as the
    semantic model knows the value. A cell that ends with `;`, and a value
    that holds neither a graph nor GPU memory (`loss.item()`, a CPU tensor
    made under `no_grad`, a parameter-free layer such as `nn.MaxPool2d` or
    `nn.ReLU` applied to a CPU tensor that needs no grad, a tensor made with
    `device=x.device` of a CPU `x`, a number, an identity or membership test (`y is y.cuda(1)`, `x in t`: a Python bool), a dict of Python numbers and
    strings such as `model.__class__.__name__`), are not reported. A cell starting with
    `%%time` is reported like a plain cell (IPython caches the value the
    magic returns); `%%timeit`, `%%capture` and other cell magics are not.

    ## Why is this bad?
    IPython keeps the value of a cell's last expression in its output cache
    (`Out[n]`, `_`, `__`, `___`) for the life of the kernel, and also shows
    it. A graph-attached loss in `Out` keeps its whole autograd graph, every
    saved activation of that step included; a GPU tensor keeps its device
    memory. `del loss` later frees nothing, because `Out` still refers to it,
    and `torch.cuda.empty_cache()` cannot give the memory back either.

    ## Example
    ```python
    # %%
    loss = criterion(model(x), y)
    loss.backward()
    loss
    ```

    ## Use instead
    ```python
    # %%
    loss = criterion(model(x), y)
    loss.backward()
    loss.item()  # or end the cell with `loss;`, or print(loss.item())
    ```

    ## Fix safety
    The fix ends the cell with `;`, so IPython neither shows nor caches the
    value. It is unsafe: the cell's output disappears from the notebook.

    ## Known problems
    A module displayed as a cell's last value (`model`) is not reported: its
    repr is the usual way to look at an architecture, and the name that
    holds the module keeps its weights anyway; note that `del model` then
    does not free the weights while `Out` holds the module
    (`%reset -f out` clears the cache). The same holds for the module's own
    storage shown: `model.state_dict()`, `model.parameters()`,
    `named_parameters()`, `buffers()`, also copied into a `list` or `dict`
    (the module's parameters and detached views of them, no graph); a
    parameter built at top level (`nn.Parameter(...)`) is a leaf, so a CPU
    one is not reported, while one on the GPU is, as any GPU tensor.

    A cell whose stored outputs (the `outputs` saved in the `.ipynb`) hold
    an `error` and no `execute_result` is not reported: as its authors ran
    it, it raised, and nothing reached `Out` (error demonstrations in
    course notebooks). This reads the notebook as its authors last ran
    it; a notebook saved without outputs gives no such evidence, and a cell
    that raised only because of an earlier bug is skipped until it is run
    again. Values the semantic model cannot
    decide (a function of another module, `helpers.f(model, x)` with
    `import helpers`, included, an object's attribute, a method
    called on a model output whose type is not known, such as
    `results.print()`) are not reported. IPython's `InteractiveShell.cache_size = 0` turns the cache
    off; the rule does not read the IPython configuration.

    ## References
    - [IPython: output caching system](https://ipython.readthedocs.io/en/stable/interactive/reference.html#output-caching-system)
    - [PyTorch FAQ: don't accumulate history across your training loop](https://pytorch.org/docs/stable/notes/faq.html#my-model-reports-cuda-runtime-error-2-out-of-memory)
    """

    CODE = "MEM113"
    NAME = "cell-output-keeps-tensor"
    MESSAGE = ("the cell's last expression is a tensor that IPython keeps in its output cache (`Out`, `_`) for the "
               "life of the kernel; assign it, end the cell with `;`, or show `.item()`")
    SEVERITY = Severity.WARNING
    FIX_TITLE = "End the cell with `;` (its value is neither shown nor cached)"
    FIX_APPLICABILITY = Applicability.UNSAFE
    NOTEBOOK_ONLY = True
    TRIGGERS = ("torch", "from_pretrained")
    FRAMEWORK = "torch"
    INVALID = (
        "# %%\nimport torch\nimport torch.nn as nn\nmodel = nn.Linear(8, 2)\nx = torch.randn(4, 8)\n"
        "# %%\nloss = model(x).pow(2).mean()\nloss.backward()\nloss  # expect: MEM113\n",
        "# %%\nimport torch\nimport torch.nn as nn\nnet = nn.Sequential(nn.Linear(8, 8), nn.ReLU()).cuda()\n"
        "# %%\nnet(torch.randn(2, 8, device='cuda'))  # expect: MEM113\n",
        "# %%\nimport torch\nfrom torchvision.models import resnet18\nmodel = resnet18().cuda().eval()\n"
        "# %%\nwith torch.no_grad():\n    logits = model(torch.randn(1, 3, 224, 224).cuda())\nlogits  # expect: MEM113\n",
        "# %%\n%%time\nimport torch\nimport torch.nn as nn\nm = nn.Linear(3, 1)\nout = m(torch.ones(1, 3))\nout  # expect: MEM113\n",
    )
    VALID = (
        "# %%\nimport torch\nimport torch.nn as nn\nmodel = nn.Linear(8, 2)\nx = torch.randn(4, 8)\n"
        "# %%\nloss = model(x).pow(2).mean()\nloss.backward()\nloss.item()\n",
        "# %%\nimport torch\nimport torch.nn as nn\nmodel = nn.Linear(8, 2)\nx = torch.randn(4, 8)\n"
        "# %%\nloss = model(x).pow(2).mean()\nloss;\n",
        "# %%\nimport torch\nimport torch.nn as nn\nmodel = nn.Linear(8, 2).cuda()\nmodel\n",
        "# %%\nimport torch\nimport torch.nn as nn\nmodel = nn.Linear(8, 2)\n"
        "# %%\nwith torch.no_grad():\n    out = model(torch.randn(4, 8))\nout\n",
        "# %%\nimport torch\nimport torch.nn as nn\nmodel = nn.Linear(8, 2)\nloss = model(torch.randn(4, 8)).sum()\nloss\nprint(loss.item())\n",
        "# %%\nfrom transformers import AutoModelForCausalLM\nmodel = AutoModelForCausalLM.from_pretrained('gpt2').cuda()\n"
        "# %%\nmodel.save_pretrained('out')\n",
        "# %%\nfrom transformers import AutoModelForCausalLM\nmodel = AutoModelForCausalLM.from_pretrained('gpt2').cuda()\n"
        "# %%\nmodel.add_weighted_adapter(['a', 'b'], [0.5, 0.5], 'merged')\n",
        "# %%\nimport torch\nimport torch.nn as nn\nnet = nn.Sequential(nn.Linear(4, 4)).cuda()\n"
        "# %%\nresults = net(torch.randn(2, 4).cuda())\nresults.print()\n",
        "# %%\n%%timeit\nimport torch\nimport torch.nn as nn\nm = nn.Linear(3, 1)\nm(torch.ones(1, 3))\n",
    )

    def visit_Expr(self, node: ast.Expr) -> None:
        if self.ctx.notebook is None or self.ctx.semantic.parents.get(node) is not self.ctx.module:
            return
        cell = self.ctx.notebook.cell_of(node.lineno)
        if cell is None or cell.magic not in (None, "time") or cell.raised:
            return  # `raised`: as its authors ran it, the cell raised and stored no value in `Out`
        statements = self._by_cell().get(cell.number, [])
        if not statements or statements[-1] is not node:
            return
        value = self.ctx.semantic.value(node.value)
        if not holds_tensor_memory(value) or not method_result_known(self.ctx, node.value):
            return
        if module_storage(self.ctx, node.value):
            return  # the module's own parameters or state dict, as for a module shown
        last = last_token(self.ctx, cell_span(self.ctx, cell.number))
        if last is None or last[0] == ";":
            return
        message = (f"the cell's last expression is a tensor that IPython keeps in its output cache (`Out`, `_`), "
                   f"{what_it_keeps(value)} included, for the life of the kernel; assign it, end the cell with `;`, "
                   "or show `.item()`")
        # libcst puts the `;` after the statement's last token, a closing parenthesis included
        self.report(node, message=message, fix=self.fix(self.plan("append_semicolon", node)))

    def _by_cell(self) -> dict[int, list[ast.stmt]]:
        found = self.__dict__.get("_cells")
        if found is None:
            found = self.__dict__["_cells"] = cell_statements(self.ctx)
        return found
