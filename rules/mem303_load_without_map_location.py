"""MEM303 load-without-map-location."""

import ast
import re

from memlint.lint.diagnostic import Severity
from memlint.lint.rule import Rule

LOAD_FUNCTIONS = frozenset({"torch.load"})
MAP_LOCATION = 'map_location="cpu"'
#: Line ends as ``ast`` counts lines.
_LINE_END = re.compile(r"\r\n|\r|\n")


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

    def visit_Call(self, node: ast.Call) -> None:
        if self.ctx.qualified(node.func) not in LOAD_FUNCTIONS:
            return
        if len([arg for arg in node.args if not isinstance(arg, ast.Starred)]) >= 2:
            return  # map_location passed positionally
        if any(keyword.arg in (None, "map_location") for keyword in node.keywords):
            return  # `map_location=` or `**kwargs`
        self.report(node, fix=self.replacement(node, self._with_map_location(node), safe=False))

    def _with_map_location(self, call: ast.Call) -> str:
        """The call's code with ``map_location="cpu"`` added as its last argument.
        ``, `` follows the last argument directly; what stood between that
        argument and the ``)`` (spaces, comments, line breaks) goes after the
        new argument when it holds a trailing comma, before it otherwise."""
        code = self.ctx.code(call)
        close = len(code) - 1  # the call's `)`
        last = _last_argument(call)
        if last is None:
            return code[:close] + MAP_LOCATION + code[close:]
        start = self.ctx.span(call)[0]
        # a sole generator argument's span includes the call's parentheses
        end = min(_offset_in(code, start, self.ctx.span(last)[1]), close)
        end, trailing_comma = _end_of_argument(code, end, close)
        between = code[end:close]
        if trailing_comma:
            return code[:end] + ", " + MAP_LOCATION + between + code[close:]
        return code[:end] + ", " + between + MAP_LOCATION + code[close:]


def _last_argument(call: ast.Call) -> ast.expr | None:
    """The call's last argument in source order (a keyword argument's value)."""
    arguments = [*call.args, *(keyword.value for keyword in call.keywords)]
    return max(arguments, key=lambda node: (node.end_lineno, node.end_col_offset), default=None)


def _offset_in(code: str, start: tuple[int, int], position: tuple[int, int]) -> int:
    """Offset in ``code`` (text beginning at 1-based ``start``) of the 1-based ``position``."""
    line, col = position
    if line == start[0]:
        return col - start[1]
    line_starts = [match.end() for match in _LINE_END.finditer(code)]
    return line_starts[line - start[0] - 1] + col - 1


def _end_of_argument(code: str, end: int, close: int) -> tuple[int, bool]:
    """Where the last argument ends in ``code``, with its own closing
    parentheses (``ast`` spans leave them out), and whether a trailing comma
    follows it: between ``end`` and the call's ``)`` there are only those
    parentheses, at most one comma, whitespace and comments."""
    after_parentheses = end
    trailing_comma = in_comment = False
    for offset in range(end, close):
        char = code[offset]
        if char in "\r\n":
            in_comment = False
        elif in_comment:
            continue
        elif char == "#":
            in_comment = True
        elif char == ")":
            after_parentheses = offset + 1
        elif char == ",":
            trailing_comma = True
    return after_parentheses, trailing_comma
