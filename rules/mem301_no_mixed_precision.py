"""MEM301 no-mixed-precision."""

from __future__ import annotations

import ast

from memlint.lint.diagnostic import Severity
from memlint.lint.rule import Rule
from memlint.lint.syntax import ends_in_break
from memlint.rules._training import calls_in, is_backward, is_optimizer_step, loops_in

#: Identifiers (names, attributes, keywords, imports) that mean precision is
#: (or may be) handled: autocast, a low-precision model or dtype, apex or
#: DeepSpeed, a framework flag (Accelerate ``mixed_precision``, Lightning
#: ``precision``, HF ``fp16``/``bf16``/``torch_dtype``). Read from the code,
#: never from comments or strings.
_PRECISION_IDENTIFIERS = frozenset({
    "autocast", "GradScaler", "half", "bfloat16", "float16", "fp16", "bf16", "mixed_precision", "precision",
    "amp", "deepspeed", "fp8", "float8_e4m3fn", "float8_e5m2", "torch_dtype", "apex",
})

class NoMixedPrecision(Rule):
    """## What it does
    Reports, once per file, a CUDA training loop (a loop with `.backward()`
    and an optimizer step, in a file that moves work to CUDA with `.cuda()`,
    `"cuda"` devices or `torch.cuda.is_available()`) when nothing in the file
    enables lower precision: no `autocast`, no `.half()`/`.bfloat16()` model
    or float16/bfloat16 dtype, no framework flag (`Accelerator(mixed_precision=...)`,
    `Trainer(precision=...)`, `fp16=True`/`bf16=True`), no apex or DeepSpeed.
    The finding is at the `.backward()` call of the first such loop.

    ## Why is this bad?
    In float32 every activation saved for backward takes 4 bytes per element;
    autocast keeps most of them in 2 bytes, which typically cuts activation
    memory by 30-50% and lets a larger batch fit (and Tensor Cores run 2-8x
    faster). This is an opportunity, not a bug: some models need float32.

    ## Example
    ```python
    model = model.cuda()
    for x, y in loader:
        loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    ```

    ## Use instead
    ```python
    model = model.cuda()
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    ```

    ## Known problems
    A loop whose body ends in an unconditional `break` takes one step and
    is not a training run. The check is per file: any use of a precision setting in the code (not
    in comments or strings) silences it, and a training loop whose
    precision is configured in another module is reported (suppress with
    `# noqa: MEM301`). In a notebook, a loop of a cell's top-level code
    counts only when a cell up to its own shows the accelerator (a device
    first chosen in a later cell does not place it); a loop in a function
    counts wherever the evidence is.

    ## References
    - [Automatic Mixed Precision recipe](https://pytorch.org/tutorials/recipes/recipes/amp_recipe.html)
    - [torch.amp](https://pytorch.org/docs/stable/amp.html)
    """

    CODE = "MEM301"
    NAME = "no-mixed-precision"
    MESSAGE = "CUDA training loop in float32: `torch.autocast` (bf16/fp16) typically cuts activation memory 30-50%"
    SEVERITY = Severity.INFO
    TRIGGERS = ("backward",)
    NEEDS_NAMES = ("backward", "manual_backward")
    FRAMEWORK = "torch"
    VALID = (
        "import torch\nprint(torch.version.cuda)\ncuda = False\nfor x in loader:\n    loss = model(x)\n    loss.backward()\n    opt.step()\n",
        "import torch\nmodel = model.cuda()\nfor x in loader:\n    with torch.autocast('cuda'):\n        loss = model(x.cuda())\n    loss.backward()\n    opt.step()\n",
        "import torch\nmodel = model.cuda().bfloat16()\nfor x in loader:\n    loss = model(x.cuda())\n    loss.backward()\n    opt.step()\n",
        "from accelerate import Accelerator\nacc = Accelerator(mixed_precision='bf16')\nfor x in loader:\n    acc.backward(model(x))\n    optimizer.step()\n    device = 'cuda'\n",
        "import torch\nfor x in loader:\n    loss = model(x)\n    loss.backward()\n    opt.step()\n",
        "import torch\nmodel = model.cuda()\nfor x in loader:\n    loss = model(x.cuda())\n    loss.backward()\n",
    )
    INVALID = (
        "import torch\nmodel = model.cuda()\nfor x in loader:\n    loss = model(x.cuda())\n    loss.backward()  # expect: MEM301\n    opt.step()\n",
        "import torch\ndef train(model, loader, optimizer):\n    device = torch.device('cuda')\n    model.to(device)\n    while True:\n        x = next(loader).to(device)\n        model(x).sum().backward()  # expect: MEM301\n        optimizer.step()\n        optimizer.zero_grad()\n",
        "import torch as T\nclass Trainer:\n    def fit(self):\n        dev = 'cuda' if T.cuda.is_available() else 'cpu'\n        for b in self.loader:\n            self.log_step(b)\n            loss = self.model(b.to(dev))\n            loss.backward()  # expect: MEM301\n            self.optim.step()\n",
    )

    def visit_Module(self, node: ast.Module) -> None:
        if _identifiers(self.ctx.index) & _PRECISION_IDENTIFIERS:
            return
        if not self.ctx.semantic.uses_accelerator(self.ctx.module, explicit=True):
            return  # the code itself moves nothing to an accelerator (a variable named `cuda` is no evidence)
        units = [node, *(f.body for f in self.ctx.semantic.functions)]
        first = None
        for unit in units:
            for loop in loops_in(unit):
                if unit is node and not self._accelerator_shown_by(loop) or ends_in_break(loop):
                    continue  # a loop ending in `break` takes one step: no training run for AMP to speed
                calls = calls_in(loop.body)
                backwards = [c for c in calls if is_backward(c, self.ctx)]
                if backwards and any(is_optimizer_step(c, self.ctx.semantic) for c in calls):
                    first = self._earlier(first, backwards[0])
                    break
        if first is not None:
            self.report(first)

    def _accelerator_shown_by(self, loop: ast.AST) -> bool:
        """For a loop of a notebook's top-level code: a cell up to the loop's
        own shows the accelerator. The kernel runs cells in order, so a
        `device = "cuda"` first written in a later cell does not place the
        loop's work (True outside notebooks, and for loops in functions,
        which run wherever their callers are)."""
        layout = self.ctx.notebook
        if layout is None:
            return True
        cell = layout.cell_of(loop.lineno)
        first = self._first_accelerator_line()
        return cell is not None and first is not None and first <= cell.end

    def _first_accelerator_line(self) -> int | None:
        """The first line of the first top-level statement whose code shows the accelerator."""
        if "_first_accelerator" not in self.__dict__:
            semantic = self.ctx.semantic
            self.__dict__["_first_accelerator"] = next(
                (statement.lineno for statement in self.ctx.module.body
                 if semantic.uses_accelerator(statement, explicit=True)), None)
        return self.__dict__["_first_accelerator"]

    def _earlier(self, current: ast.Call | None, candidate: ast.Call) -> ast.Call:
        if current is None:
            return candidate
        return candidate if self.ctx.span(candidate)[0] < self.ctx.span(current)[0] else current


def _identifiers(index) -> set[str]:
    """Names, attributes, keyword and import names of the module's code."""
    found = {node.id for node in index.of_type(ast.Name)} | {node.attr for node in index.of_type(ast.Attribute)}
    found |= {node.arg for node in index.of_type(ast.keyword) if node.arg}
    for alias in index.of_type(ast.alias):
        found.update(alias.name.split("."))
    for statement in index.of_type(ast.ImportFrom):
        if statement.module:
            found.update(statement.module.split("."))
    return found
