"""MEM404 empty-cache-with-live-references."""

from __future__ import annotations

import ast

from memlint.lint.diagnostic import Severity
from memlint.lint.rule import Rule
from memlint.lint.syntax import LOOP_TYPES
from memlint.rules._notebook import names_held, quoted, released_after

EMPTY_CACHE = frozenset({"torch.cuda.empty_cache", "torch.cuda.memory.empty_cache"})
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


class EmptyCacheWithLiveReferences(Rule):
    """## What it does
    Reports, in a notebook, `torch.cuda.empty_cache()` (any import spelling)
    at a cell's top level while top-level names bound in earlier cells still
    hold what it is meant to free: model outputs, losses, batches (tensors
    that the semantic model knows to be on the GPU: `.cuda()`, `.to(device)`,
    the output of a module moved there). A tensor on the CPU, even one that
    keeps an autograd graph, holds no GPU memory and is not named. A name deleted (`del out`) or rebound to a value without tensor
    memory (`out = None`) before the call does not count. The message names
    the names that are still live.

    ## Why is this bad?
    `empty_cache()` only hands the caching allocator's *unused* blocks back
    to the driver. Every tensor that a global of the kernel still refers to,
    with the graph it keeps, stays allocated, so the cell frees nothing of
    it and `nvidia-smi` keeps showing the memory. In a notebook this is the
    usual reason why "freeing GPU memory" does not work.

    ## Example
    ```python
    # %%
    out = model(x.cuda())
    loss = out.mean()
    # %%
    torch.cuda.empty_cache()
    ```

    ## Use instead
    ```python
    # %%
    del out, loss
    gc.collect()
    torch.cuda.empty_cache()
    ```

    ## Known problems
    Only names bound at the top level of earlier cells are looked at; a
    tensor kept in IPython's output cache (see MEM113), in a list, or in an
    object's attribute is not named. Values the semantic model cannot
    decide (from another module's functions) are not reported. A call inside
    a loop is MEM401's; one inside a function is not reported (the function
    may run after the names were deleted).

    ## References
    - [CUDA memory management (torch.cuda.empty_cache)](https://pytorch.org/docs/stable/notes/cuda.html#memory-management)
    - [torch.cuda.empty_cache](https://pytorch.org/docs/stable/generated/torch.cuda.empty_cache.html)
    """

    CODE = "MEM404"
    NAME = "empty-cache-with-live-references"
    MESSAGE = ("`torch.cuda.empty_cache()` cannot free tensors that top-level names of earlier cells still hold; "
               "`del` them (and `gc.collect()`) first")
    SEVERITY = Severity.INFO
    NOTEBOOK_ONLY = True
    TRIGGERS = ("empty_cache",)
    NEEDS_NAMES = ("empty_cache",)
    FRAMEWORK = "torch"
    INVALID = (
        "# %%\nimport torch\nimport torch.nn as nn\nmodel = nn.Linear(8, 2).cuda()\nout = model(torch.randn(4, 8).cuda())\n"
        "loss = out.mean()\n# %%\ntorch.cuda.empty_cache()  # expect: MEM404\n",
        "# %%\nfrom torch.cuda import empty_cache\nimport torch\nimport torch.nn as nn\nnet = nn.Linear(8, 2).cuda()\n"
        "# %%\npred = net(torch.randn(4, 8).cuda())\n# %%\nimport gc\ngc.collect()\nempty_cache()  # expect: MEM404\n",
        "# %%\nimport torch as T\nbatch = T.randn(64, 3, 32, 32).cuda()\n# %%\ndel_me = 1\n# %%\nT.cuda.empty_cache()  # expect: MEM404\n",
    )
    VALID = (
        "# %%\nimport torch\nimport torch.nn as nn\nmodel = nn.Linear(8, 2).cuda()\nout = model(torch.randn(4, 8).cuda())\n"
        "loss = out.mean()\n# %%\nimport gc\ndel out, loss\ngc.collect()\ntorch.cuda.empty_cache()\n",
        "# %%\nimport torch\nimport torch.nn as nn\nmodel = nn.Linear(8, 2).cuda()\nloss = model(torch.randn(4, 8).cuda()).mean()\n"
        "value = loss.item()\nloss = None\n# %%\ntorch.cuda.empty_cache()\n",
        "# %%\nimport torch\nimport torch.nn as nn\nmodel = nn.Linear(8, 2).cuda()\n# %%\ntorch.cuda.empty_cache()\n",
        "# %%\nimport torch\nimport torch.nn as nn\nmodel = nn.Linear(8, 2).cuda()\nout = model(torch.randn(4, 8).cuda())\n"
        "# %%\ndef free():\n    torch.cuda.empty_cache()\n",
        "# %%\nimport torch\nwith torch.no_grad():\n    x = torch.randn(4, 8)\n# %%\ntorch.cuda.empty_cache()\n",
        "# %%\nimport torch\nimport torch.nn as nn\nnet = nn.Linear(8, 2)\npred = net(torch.randn(4, 8))\n# %%\ntorch.cuda.empty_cache()\n",
    )

    def visit_Call(self, node: ast.Call) -> None:
        ctx = self.ctx
        if ctx.notebook is None or ctx.qualified(node.func) not in EMPTY_CACHE:
            return
        semantic = ctx.semantic
        if any(isinstance(a, (*_SCOPES, *LOOP_TYPES)) for a in semantic.ancestors(node)):
            return
        cell = ctx.notebook.cell_of(node.lineno)
        if cell is None:
            return
        statements = ctx.module.body
        earlier = [s for s in statements if s.end_lineno < cell.start]
        held = names_held(ctx, earlier, device_only=True)
        if not held:
            return
        before = [s for s in statements if cell.start <= s.lineno and s.end_lineno < node.lineno]
        live = set(held) - released_after(ctx, set(held), before, device_only=True)
        if not live:
            return
        cells = sorted({ctx.notebook.cell_of(held[name].lineno).number for name in live})
        where = "cell" + ("s " + ", ".join(map(str, cells)) if len(cells) > 1 else f" {cells[0]}")
        message = (f"`torch.cuda.empty_cache()` cannot free what {quoted(live)} (bound in {where}) still "
                   f"{'hold' if len(live) > 1 else 'holds'}: only unused cached blocks are returned; `del` "
                   f"{'them' if len(live) > 1 else 'it'} (and `gc.collect()`) first")
        self.report(node, message=message)
