"""MEM201 missing-zero-grad."""

import libcst as cst

from memlint.lint.diagnostic import Severity
from memlint.lint.rule import Rule
from memlint.rules._training import calls_in, clears_grads, is_backward, is_foreign, is_optimizer_step, reaches


class MissingZeroGrad(Rule):
    """## What it does
    Reports a loop that calls `.backward()` and an optimizer step
    (`optimizer.step()`, `scaler.step(optimizer)`) but never clears the
    gradients: no `zero_grad()` on an optimizer or model, no `p.grad = None`
    loop, anywhere in the loop body or in a function of this file that the
    loop calls. The finding is reported at the loop's optimizer `.step(...)`
    call.

    ## Why is this bad?
    `.backward()` adds into `.grad`. Without clearing, every step's update
    uses the sum of all gradients since the start of training: the effective
    learning rate grows every step and the run diverges, silently.

    ## Example
    ```python
    optimizer.zero_grad()
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    ```

    ## Known problems
    A conditional `zero_grad` anywhere in the loop counts as clearing
    (gradient accumulation), even if its condition never holds. Loops whose
    `.backward()` or step happens in a called function are not inspected,
    nor are framework objects that clear gradients inside their own step
    (DeepSpeed's `engine.step()`): the rule reports only loops whose step
    receiver is named like an optimizer. Lightning's `training_step` with
    automatic optimization is not a loop and is never reported.

    ## References
    - [Zeroing out gradients in PyTorch](https://pytorch.org/tutorials/recipes/recipes/zeroing_out_gradients.html)
    - [torch.optim.Optimizer.zero_grad](https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.zero_grad.html)
    """

    CODE = "MEM201"
    NAME = "missing-zero-grad"
    MESSAGE = "the loop calls `.backward()` and an optimizer step but never clears gradients: they accumulate across iterations"
    SEVERITY = Severity.WARNING
    TRIGGERS = ("backward",)
    VALID = (
        "def train(model, loader, optimizer, crit):\n    for x, y in loader:\n        optimizer.zero_grad()\n        crit(model(x), y).backward()\n        optimizer.step()\n",
        "def train(model, loader, optimizer, crit, n):\n    for i, (x, y) in enumerate(loader):\n        (crit(model(x), y) / n).backward()\n        if (i + 1) % n == 0:\n            optimizer.step()\n            optimizer.zero_grad()\n",
        "class T:\n    def reset(self):\n        for p in self.model.parameters():\n            p.grad = None\n    def fit(self, loader):\n        while True:\n            loss = self.model(next(loader))\n            loss.backward()\n            self.optimizer.step()\n            self.reset()\n",
        "import paddle\ndef train(model, loader, opt):\n    for x in loader:\n        model(x).backward()\n        opt.step()\n        opt.clear_grad()\n",
        "def train(model, loader, scheduler):\n    for x in loader:\n        model(x).backward()\n        scheduler.step()\n",
    )
    INVALID = (
        "def train(model, loader, optimizer, crit):\n    optimizer.zero_grad()\n    for x, y in loader:\n        crit(model(x), y).backward()\n        optimizer.step()  # expect: MEM201\n",
        "def train(model, loader, opt, scaler):\n    while True:\n        x = next(loader)\n        scaler.scale(model(x)).backward()\n        scaler.step(opt)  # expect: MEM201\n        scaler.update()\n",
        "class Trainer:\n    def fit(self, loader):\n        for batch in loader:\n            self.accelerator.backward(self.model(**batch).loss)\n            self.optimizer.step()  # expect: MEM201\n            self.lr_scheduler.step()\n",
    )

    def leave_For(self, node: cst.For) -> None:
        self._check_loop(node)

    def leave_While(self, node: cst.While) -> None:
        self._check_loop(node)

    def _check_loop(self, loop: cst.CSTNode) -> None:
        if not hasattr(self, "_claimed"):
            self._claimed: set[int] = set()
        calls = calls_in(loop.body)
        steps = [call for call in calls if is_optimizer_step(call)]
        if not steps or not any(is_backward(call, self.ctx) for call in calls):
            return
        if any(id(step) in self._claimed for step in steps):
            self._claimed.update(id(step) for step in steps)  # an inner loop already decided
            return
        self._claimed.update(id(step) for step in steps)
        if reaches(loop.body, clears_grads, self.ctx.dataflow.functions) or is_foreign(self.ctx):
            return
        self.report(steps[0])
