"""MEM303 load-without-map-location."""

import ast

from memlint.lint.diagnostic import Applicability, Severity
from memlint.lint.names import dotted_name
from memlint.lint.rule import Rule
from memlint.lint.semantic.values import Kind, Tri
from memlint.rules._call_text import CallText

LOAD_FUNCTIONS = frozenset({"torch.load"})
SAVE_FUNCTIONS = frozenset({"torch.save"})
MAP_LOCATION = 'map_location="cpu"'


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
    A call with `**kwargs` or `*args` is not reported: `map_location` may be
    among them. Nor is a load of a file that the same file writes with
    `torch.save` (the same path expression or literal) from host-only data:
    `.cpu()` tensors, numpy arrays, plain Python values, a CPU model's or a
    `GradScaler`'s `state_dict()`. A file written elsewhere is not seen.

    ## References
    - [torch.load](https://pytorch.org/docs/stable/generated/torch.load.html)
    - [Saving and loading models across devices](https://pytorch.org/tutorials/beginner/saving_loading_models.html)
    """

    CODE = "MEM303"
    NAME = "load-without-map-location"
    MESSAGE = "`torch.load` without `map_location` restores tensors onto the GPU they were saved from"
    SEVERITY = Severity.WARNING
    FIX_TITLE = 'Add `map_location="cpu"`'
    FIX_APPLICABILITY = Applicability.UNSAFE
    TRIGGERS = ("load",)
    NEEDS_NAMES = ("load",)
    FRAMEWORK = "torch"
    VALID = (
        "import torch\nstate = torch.load('ckpt.pt', map_location='cpu')\n",
        "import torch\nstate = torch.load('ckpt.pt', 'cpu')\n",
        "import numpy as np\nx = np.load('data.npy')\n",
        "from mylib import load\nx = load('ckpt.pt')\n",
        "import torch\ndef f(**kw):\n    return torch.load('a.pt', **kw)\n",
        "import torch\ndef f(*args):\n    return torch.load(*args)\n",
        "import torch\ndef cache(features, path='feats.pt'):\n    torch.save({k: v.cpu() for k, v in features.items()}, path)\n    return torch.load(path)\n",
        "import torch\nscaler = torch.amp.GradScaler('cuda')\ntorch.save(scaler.state_dict(), 'scaler.pt')\nscaler.load_state_dict(torch.load('scaler.pt'))\n",
    )
    INVALID = (
        "import torch\nstate = torch.load('ckpt.pt')\n",
        "import torch\ndef save(model, path):\n    torch.save(model.cuda().state_dict(), path)\ndef load(path):\n    return torch.load(path)  # expect: MEM303\n",
        "import torch as T\nstate = T.load(path, weights_only=True)\n",
        "from torch import load\nstate = load(path)\n",
    )

    def visit_Call(self, node: ast.Call) -> None:
        if self.ctx.qualified(node.func) not in LOAD_FUNCTIONS:
            return
        if len(node.args) >= 2 or any(isinstance(arg, ast.Starred) for arg in node.args):
            return  # map_location passed positionally, or maybe among `*args`
        if any(keyword.arg in (None, "map_location") for keyword in node.keywords):
            return  # `map_location=` or `**kwargs`
        if self._written_here_from_host(node):
            return
        self.report(node, fix=self.replacement(node, self._with_map_location(node)))

    def _written_here_from_host(self, load: ast.Call) -> bool:
        """A ``torch.save`` of this file writes the same path, and only host data."""
        path = _path_argument(load, "f")
        if path is None:
            return False
        key = self._path_key(path)
        semantic = self.ctx.semantic
        saves = [call for call in self._saves() if (target := _path_argument(call, "f", 1)) is not None and self._path_key(target) == key]
        return bool(saves) and all(_host_only(semantic.value(_path_argument(call, "obj", 0))) for call in saves
                                   if _path_argument(call, "obj", 0) is not None)

    def _saves(self) -> list[ast.Call]:
        found = self.__dict__.get("_save_calls")
        if found is None:
            found = self.__dict__["_save_calls"] = [
                call for call in self.ctx.index.of_type(ast.Call) if self.ctx.qualified(call.func) in SAVE_FUNCTIONS]
        return found

    def _path_key(self, path: ast.expr) -> str:
        """What identifies a path: its literal, or the code of the expression (``args.ckpt``, ``path``)."""
        if isinstance(path, ast.Constant) and isinstance(path.value, str):
            return "literal:" + path.value
        name = dotted_name(path)
        return "code:" + (name if name is not None else self.ctx.code(path))

    def _with_map_location(self, call: ast.Call) -> str:
        """The call's code with ``map_location="cpu"`` added as its last argument.
        ``, `` follows the last argument directly; what stood between that
        argument and the ``)`` (spaces, comments, line breaks) goes after the
        new argument when it holds a trailing comma, before it otherwise."""
        call_text = CallText.of(self.ctx.code(call))
        if not call_text.arguments:
            return call_text.callee + call_text.opening + MAP_LOCATION + ")"
        *earlier, last = call_text.arguments
        between = call_text.separators[-1]
        before = call_text.callee + call_text.opening
        before += "".join(argument + separator for argument, separator in zip(earlier, call_text.separators)) + last
        if call_text.trailing_comma:
            return before + ", " + MAP_LOCATION + between + ")"
        return before + ", " + between + MAP_LOCATION + ")"


def _path_argument(call: ast.Call, keyword: str, index: int = 0) -> ast.expr | None:
    for named in call.keywords:
        if named.arg == keyword:
            return named.value
    positional = [a for a in call.args if not isinstance(a, ast.Starred)]
    return positional[index] if index < len(positional) else None


def _host_only(value) -> bool:
    """Saved data that holds no accelerator tensor."""
    if value.device is Tri.NO:
        return True
    return value.kind is Kind.PLAIN
