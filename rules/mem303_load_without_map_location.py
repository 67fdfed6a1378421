"""MEM303 load-without-map-location."""

import libcst as cst

from memlint.lint.diagnostic import Severity
from memlint.lint.rule import Rule

LOAD_FUNCTIONS = frozenset({"torch.load"})


class LoadWithoutMapLocation(Rule):
    """## What it does
    Reports `torch.load(f)` called without `map_location`.

    ## Why is this bad?
    `torch.load` restores every tensor onto the device it was saved from.
    A checkpoint written on a GPU is loaded onto that same GPU, in addition
    to the model's own copy; in distributed training every rank restores it
    onto `cuda:0`, so GPU 0 runs out of memory first.

    ## Example
    ```python
    state = torch.load("checkpoint.pt")
    model.load_state_dict(state["model"])
    ```

    ## Use instead
    ```python
    state = torch.load("checkpoint.pt", map_location="cpu")
    model.load_state_dict(state["model"])
    ```

    ## Fix safety
    Adding `map_location="cpu"` is unsafe: code that used the loaded tensors
    directly on the GPU now receives CPU tensors.

    ## Known problems
    A call that passes `map_location` through `**kwargs` is not reported.

    ## References
    - [torch.load](https://pytorch.org/docs/stable/generated/torch.load.html)
    - [Saving and loading models across devices](https://pytorch.org/tutorials/beginner/saving_loading_models.html)
    """

    CODE = "MEM303"
    NAME = "load-without-map-location"
    MESSAGE = "`torch.load` without `map_location` restores tensors onto the GPU they were saved from"
    SEVERITY = Severity.WARNING
    FIX_TITLE = 'Add `map_location="cpu"`'
    TRIGGERS = ("load",)
    NEEDS_NAMES = ("load",)
    VALID = (
        "import torch\nstate = torch.load('ckpt.pt', map_location='cpu')\n",
        "import torch\nstate = torch.load('ckpt.pt', 'cpu')\n",
        "import numpy as np\nx = np.load('data.npy')\n",
        "from mylib import load\nx = load('ckpt.pt')\n",
        "import torch\ndef f(**kw):\n    return torch.load('a.pt', **kw)\n",
    )
    INVALID = (
        "import torch\nstate = torch.load('ckpt.pt')\n",
        "import torch as T\nstate = T.load(path, weights_only=True)\n",
        "from torch import load\nstate = load(path)\n",
    )

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualified(node.func) not in LOAD_FUNCTIONS:
            return
        if len([a for a in node.args if a.keyword is None and not a.star]) >= 2:
            return  # map_location passed positionally
        if any(a.star == "**" or (a.keyword is not None and a.keyword.value == "map_location") for a in node.args):
            return
        self.report(node, fix=self._add_map_location(node))

    def _add_map_location(self, node: cst.Call):
        new_arg = cst.Arg(keyword=cst.Name("map_location"), value=cst.SimpleString('"cpu"'),
                          equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))
        args = list(node.args)
        if args:
            last = args[-1]
            if last.comma is cst.MaybeSentinel.DEFAULT or isinstance(last.comma, cst.MaybeSentinel):
                args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            else:
                new_arg = new_arg.with_changes(comma=last.comma)
                args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(new_arg)
        return self.replacement(node, node.with_changes(args=args), safe=False)
