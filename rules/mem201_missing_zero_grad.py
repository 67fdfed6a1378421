"""MEM201 missing-zero-grad."""

import ast

from memlint.lint.diagnostic import Applicability, Fix, Severity
from memlint.lint.names import dotted_name
from memlint.lint.rule import Rule
from memlint.lint.semantic.frameworks import CONTEXT_OPTIMIZERS
from memlint.lint.semantic.values import Kind
from memlint.rules._training import (
    calls_in, clears_grads, is_backward, is_optimizer_step, local_callees, method_name, positional_args,
    reaches, receiver_name, walk,
)

Loop = ast.For | ast.AsyncFor | ast.While


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

    With several optimizers (GANs), an optimizer that is stepped but never
    cleared while the others are is reported too.

    ## Fix safety
    The fix inserts `optimizer.zero_grad()` (the optimizer the loop steps,
    as the code names it) as the first statement of the loop body. It is
    unsafe: the updates change (each step now sees one iteration's
    gradients instead of the running sum), which is the point, but also
    what code that accumulated gradients across iterations on purpose
    relied on. There is no fix when the step is conditional inside the loop
    (`if (i + 1) % k == 0:`, gradient accumulation), when the stepped
    optimizer is not a plain name, when the body is on the header line, or
    when the optimizer's name is not bound at the top of the body: the body
    assigns it (an optimizer built per iteration, where `zero_grad()` first
    would raise `UnboundLocalError` or clear the previous one), or a local
    of the function is bound only after the loop starts.

    ## Known problems
    A conditional `zero_grad` anywhere in the loop counts as clearing
    (gradient accumulation), even if its condition never holds. Loops whose
    `.backward()` or step happens in a called function are not inspected,
    nor are framework objects that clear gradients inside their own step:
    DeepSpeed's `engine.step()`, and any object that is both handed the
    loss (`x.backward(loss)`) and stepped (`x.step()`), the engine's API,
    wherever the engine is kept (`holder.net, *_ = deepspeed.initialize(...)`
    in another function). An optimizer step is a `.step()` on an
    optimizer the file constructs (`torch.optim.*`, `accelerator.prepare`
    of one), a `scaler.step(optimizer)`, or a `.step()` without data
    arguments on the one object a function with a backward pass steps or
    clears; when it steps several objects and clears none, the one stepped
    first after the backward call in its block is the optimizer (PyTorch
    steps the optimizer before the scheduler). An optimizer stepped only
    after a scheduler is then not told apart from it. `DistributedOptimizer.step(context_id)` keeps gradients in
    the distributed autograd context and needs no `zero_grad`. Lightning's
    `training_step` with automatic optimization is not a loop and is never
    reported.

    ## References
    - [Zeroing out gradients in PyTorch](https://pytorch.org/tutorials/recipes/recipes/zeroing_out_gradients.html)
    - [torch.optim.Optimizer.zero_grad](https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.zero_grad.html)
    """

    CODE = "MEM201"
    NAME = "missing-zero-grad"
    MESSAGE = "the loop calls `.backward()` and an optimizer step but never clears gradients: they accumulate across iterations"
    SEVERITY = Severity.WARNING
    FIX_TITLE = "Clear the stepped optimizer's gradients at the start of each iteration"
    FIX_APPLICABILITY = Applicability.UNSAFE
    TRIGGERS = ("backward",)
    NEEDS_NAMES = ("backward", "manual_backward")
    FRAMEWORK = "torch"
    VALID = (
        "def train(model, loader, optimizer, crit):\n    for x, y in loader:\n        optimizer.zero_grad()\n        crit(model(x), y).backward()\n        optimizer.step()\n",
        "def train(model, loader, optimizer, crit, n):\n    for i, (x, y) in enumerate(loader):\n        (crit(model(x), y) / n).backward()\n        if (i + 1) % n == 0:\n            optimizer.step()\n            optimizer.zero_grad()\n",
        "class T:\n    def reset(self):\n        for p in self.model.parameters():\n            p.grad = None\n    def fit(self, loader):\n        while True:\n            loss = self.model(next(loader))\n            loss.backward()\n            self.optimizer.step()\n            self.reset()\n",
        "import paddle\ndef train(model, loader, opt):\n    for x in loader:\n        model(x).backward()\n        opt.step()\n        opt.clear_grad()\n",
        "import torch\ndef train(model, loader, optimizer):\n    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 10)\n    for x in loader:\n        model(x).backward()\n        scheduler.step()\n",
        "import torch.distributed.autograd as dist_autograd\nfrom torch.distributed.optim import DistributedOptimizer\ndef train(model, loader, params):\n    opt = DistributedOptimizer(torch.optim.SGD, params, lr=0.05)\n    for x in loader:\n        with dist_autograd.context() as context_id:\n            dist_autograd.backward(context_id, [model(x).sum()])\n            opt.step(context_id)\n",
    )
    INVALID = (
        "def train(model, loader, optimizer, crit):\n    optimizer.zero_grad()\n    for x, y in loader:\n        crit(model(x), y).backward()\n        optimizer.step()  # expect: MEM201\n",
        "def train(model, loader, opt, scaler):\n    while True:\n        x = next(loader)\n        scaler.scale(model(x)).backward()\n        scaler.step(opt)  # expect: MEM201\n        scaler.update()\n",
        "import torch\nclass Trainer:\n    def __init__(self, model):\n        self.model = model\n        self.optimizer = torch.optim.AdamW(model.parameters())\n    def fit(self, loader):\n        for batch in loader:\n            self.accelerator.backward(self.model(**batch).loss)\n            self.optimizer.step()  # expect: MEM201\n            self.lr_scheduler.step()\n",
    )

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        #: Steps of loops already decided (an outer loop leaves them to the innermost one).
        self._claimed: set[int] = set()

    def leave_For(self, node: ast.For | ast.AsyncFor) -> None:
        self._check_loop(node)

    def leave_While(self, node: ast.While) -> None:
        self._check_loop(node)

    def _check_loop(self, loop: Loop) -> None:
        calls = calls_in(loop.body)
        if not any(is_backward(call, self.ctx) for call in calls):
            return  # cheap check first: the rest interprets the function
        semantic = self.ctx.semantic
        steps = [call for call in calls if is_optimizer_step(call, semantic) and not self._context_step(call)]
        if not steps:
            return
        if any(id(step) in self._claimed for step in steps):
            self._claimed.update(id(step) for step in steps)  # an inner loop already decided
            return
        self._claimed.update(id(step) for step in steps)
        if not reaches(loop.body, clears_grads, semantic):
            self.report(steps[0], fix=self._fix(loop, steps[0]))
            return
        uncleared = self._uncleared_optimizers(loop, steps)
        if uncleared:
            self.report(uncleared[0], message=f"`{self._stepped(uncleared[0])}` is stepped in this loop but never cleared (only other optimizers are): its gradients accumulate",
                        fix=self._fix(loop, uncleared[0]))

    # -- the fix -------------------------------------------------------------
    def _fix(self, loop: Loop, step: ast.Call) -> Fix | None:
        """``<optimizer>.zero_grad()`` as the loop body's first statement, for
        the optimizer ``step`` steps (``opt.step()``, ``scaler.step(opt)``);
        None when that is not a plain name, when the step is conditional in
        the loop (``if (i + 1) % k == 0``: gradient accumulation, which a
        clear per iteration would undo), or when the body is on the header line."""
        receiver = step.func.value
        positional = positional_args(step)
        if positional and self.ctx.semantic.value(positional[0]).kind is Kind.OPTIMIZER:
            receiver = positional[0]  # scaler.step(opt)
        elif positional:
            return None
        optimizer = dotted_name(receiver)
        if optimizer is None or loop.body[0].lineno == loop.lineno or not self._unconditional(step, loop):
            return None
        if not self._bound_at_body_start(optimizer, loop):
            return None
        return self.fix(self.plan("prepend_to_body", loop, code=f"{optimizer}.zero_grad()\n"),
                        title=f"Call `{optimizer}.zero_grad()` at the start of each iteration")

    def _bound_at_body_start(self, optimizer: str, loop: Loop) -> bool:
        """``optimizer`` (a dotted name) names the same object at the top of
        the body as at the step: the body never assigns it (nor its root
        name), and a local root is bound before the loop or by its ``for``
        target. Else ``zero_grad()`` at the top would clear a previous
        optimizer or fail (``UnboundLocalError`` on the first iteration)."""
        root = optimizer.split(".")[0]
        for node in walk(loop.body):
            if isinstance(getattr(node, "ctx", None), ast.Store) and (
                    isinstance(node, ast.Name) and node.id == root or dotted_name(node) == optimizer):
                return False
        if isinstance(loop, (ast.For, ast.AsyncFor)) and any(
                isinstance(n, ast.Name) and n.id == root for n in ast.walk(loop.target)):
            return True
        semantic = self.ctx.semantic
        unit = semantic.unit_of(loop)
        scope = semantic.scopes.own_scope(unit) if unit is not semantic.module else semantic.scopes.module_scope
        local = scope is not None and root in scope.bindings
        return not local or root in semantic.bound_before(loop)

    def _unconditional(self, node: ast.AST, loop: Loop) -> bool:
        """``node`` runs on every iteration of ``loop`` (no ``if``/``try``/inner loop between them)."""
        parents = self.ctx.semantic.parents
        current = parents.get(node)
        while current is not None and current is not loop:
            if isinstance(current, (ast.If, ast.Try, ast.For, ast.AsyncFor, ast.While, ast.IfExp, ast.BoolOp,
                                    ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.Match)):
                return False
            current = parents.get(current)
        return current is loop

    def _known_optimizer(self, step: ast.Call) -> bool:
        semantic = self.ctx.semantic
        receiver = semantic.value(step.func.value)
        if receiver.kind is Kind.OPTIMIZER:
            return True
        positional = positional_args(step)
        return bool(positional) and semantic.value(positional[0]).kind is Kind.OPTIMIZER  # scaler.step(opt)

    def _context_step(self, step: ast.Call) -> bool:
        """A distributed-autograd optimizer's step: its gradients live in the
        autograd context, nothing to zero."""
        return self.ctx.semantic.value(step.func.value).type_name in CONTEXT_OPTIMIZERS

    @staticmethod
    def _stepped(step: ast.Call) -> str:
        """Last name of the optimizer a step call updates (``opt_g`` for ``scaler.step(self.opt_g)``)."""
        receiver = receiver_name(step.func.value) or ""
        if "scaler" in receiver.lower() and positional_args(step):
            receiver = receiver_name(positional_args(step)[0]) or ""
        return receiver.split(".")[-1]

    def _uncleared_optimizers(self, loop: Loop, steps: list[ast.Call]) -> list[ast.Call]:
        """Steps of optimizers never cleared, when every clear in the loop is
        ``<other optimizer>.zero_grad()`` (only optimizers known by
        construction count: an unknown object stepped beside one may be a scheduler)."""
        steps = [step for step in steps if self._known_optimizer(step)]
        stepped = {self._stepped(step) for step in steps}
        if len(stepped) < 2:
            return []
        cleared = set()
        for node in walk(loop.body):
            if not clears_grads(node):
                continue
            is_zero_grad = isinstance(node, ast.Call) and method_name(node) == "zero_grad"
            name = (receiver_name(node.func.value) or "").split(".")[-1] if is_zero_grad else ""
            if name not in stepped:
                return []  # a model, a p.grad loop, or an alias: cannot tell which gradients it clears
            cleared.add(name)
        if local_callees(loop.body, self.ctx.semantic):
            return []
        return [step for step in steps if self._stepped(step) not in cleared]
