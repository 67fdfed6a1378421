"""MEM202 zero-grad-after-forward."""

import ast

from memlint.lint.diagnostic import Severity
from memlint.lint.patterns import names_in
from memlint.lint.rule import Rule
from memlint.lint.syntax import FUNCTION_TYPES, ends_in_break, is_constant
from memlint.lint.names import dotted_name, targets_of
from memlint.rules._training import arguments_in_order, backward_loss, is_backward, method_name, walk


def keeps_zero_tensors(call: ast.Call) -> bool:
    """True for ``zero_grad(set_to_none=False)`` / ``zero_grad(False)`` (MEM203's case)."""
    for argument in arguments_in_order(call):
        if not isinstance(argument, ast.keyword):
            return is_constant(argument, False)
        if argument.arg in (None, "set_to_none"):
            return is_constant(argument.value, False)
    return False


class ZeroGradAfterForward(Rule):
    """## What it does
    Reports `zero_grad()` (with the default `set_to_none=True`, or set
    explicitly) that runs, in one iteration, after the forward pass whose
    loss is then backpropagated and before that `.backward()`. "One
    iteration" is the innermost loop body, or the function body (a
    `train_step`) when the call is not in a loop.

    ## Why is this bad?
    With `set_to_none=True`, `zero_grad()` frees the previous step's
    gradients. Called after the forward pass, it leaves one full copy of
    all gradients allocated through the forward pass, where the activation
    peak is: peak memory grows by the size of the parameters (measured at
    ~20% of peak on GPT-2-XL).

    ## Example
    ```python
    for x, y in loader:
        logits, loss = model(x, y)
        model.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    for x, y in loader:
        logits, loss = model(x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    ```

    ## Known problems
    A `zero_grad` after the forward is not reported when another one of the
    same optimizer or model runs before that forward with no backward pass
    in between (the gradients are freed already), nor in a loop whose body
    ends in an unconditional `break` (one step: no earlier step's gradients).
    `zero_grad(set_to_none=False)` is not reported here: it keeps zero-filled
    gradients alive at every point of the step anyway, which is MEM203's
    finding. The forward pass is recognised by the shared semantic model
    (model-like callees) and must reach the backpropagated loss through plain
    assignments in the same body; forward passes under `torch.no_grad()` do
    not count. The backward must be able to run after the `zero_grad`: one
    in the other branch of an `if` (a loss-scaler object's call in one, a
    plain `loss.backward()` in the other) is not it. In multi-model steps (GANs) a `zero_grad` of one model after
    another model's forward is reported too: that model's gradients are
    also alive during that forward.

    ## References
    - [torch.optim.Optimizer.zero_grad](https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.zero_grad.html)
    - [Understanding GPU memory: the memory snapshot](https://pytorch.org/blog/understanding-gpu-memory-1/)
    """

    CODE = "MEM202"
    NAME = "zero-grad-after-forward"
    MESSAGE = "`zero_grad()` runs after the forward pass: the previous gradients stay allocated through the forward peak"
    SEVERITY = Severity.INFO
    TRIGGERS = ("zero_grad",)
    NEEDS_NAMES = ("zero_grad",)
    FRAMEWORK = "torch"
    VALID = (
        "def train(model, loader, opt):\n    for x, y in loader:\n        opt.zero_grad()\n        loss = model(x, y)\n        loss.backward()\n        opt.step()\n",
        "def train(model, loader, opt):\n    for x, y in loader:\n        loss = model(x, y)\n        loss.backward()\n        opt.step()\n        opt.zero_grad(set_to_none=True)\n",
        "def train(model, loader, opt):\n    for x, y in loader:\n        loss = model(x, y)\n        opt.zero_grad(set_to_none=False)\n        loss.backward()\n        opt.step()\n",
        "import torch\ndef train(model, teacher, loader, opt):\n    for x in loader:\n        with torch.no_grad():\n            target = teacher(x)\n        opt.zero_grad()\n        loss = ((model(x) - target) ** 2).mean()\n        loss.backward()\n        opt.step()\n",
    )
    INVALID = (
        "def train(model, loader, opt):\n    for x, y in loader:\n        logits, loss = model(x, y)\n        model.zero_grad(set_to_none=True)  # expect: MEM202\n        loss.backward()\n        opt.step()\n",
        "def train(model, loader, opt, crit):\n    while True:\n        x, y = next(loader)\n        out = model(x)\n        loss = crit(out, y)\n        opt.zero_grad()  # expect: MEM202\n        loss.backward()\n        opt.step()\n",
        "class T:\n    def train_step(self, batch):\n        outputs = self.model(**batch)\n        self.optimizer.zero_grad()  # expect: MEM202\n        self.scaler.scale(outputs.loss).backward()\n        self.scaler.step(self.optimizer)\n",
    )

    def visit_Call(self, node: ast.Call) -> None:
        if method_name(node) != "zero_grad" or keeps_zero_tensors(node):
            return
        semantic = self.ctx.semantic
        loops = semantic.enclosing_loops(node)
        if loops:
            if ends_in_break(loops[0]):
                return  # `for x, y in loader: ...; break`: one step, no gradients of an earlier one to keep
            unit = loops[0].body
        else:
            function = semantic.function_of(node)
            if not isinstance(function, FUNCTION_TYPES):
                return
            unit = function.body
        if self._forward_feeds_later_backward(node, unit):
            self.report(node)

    def _forward_feeds_later_backward(self, zero_grad: ast.Call, unit: list[ast.stmt]) -> bool:
        """True when a forward before ``zero_grad`` reaches the loss of the next ``.backward()``."""
        order = list(walk(unit))
        index = {id(node): i for i, node in enumerate(order)}
        position = index.get(id(zero_grad))
        if position is None:
            return False
        semantic = self.ctx.semantic
        backward = next((n for n in order[position + 1:] if isinstance(n, ast.Call) and is_backward(n, self.ctx)
                         and semantic.runs_after(zero_grad, n)), None)  # not one of an exclusive branch
        loss = backward_loss(backward, self.ctx.semantic) if backward is not None else None
        if loss is None:
            return False
        pending = set(names_in(loss))
        assignments = [n for n in order[: index[id(backward)]] if isinstance(n, ast.Assign)]
        for assignment in reversed(assignments):
            targets = {name for target in assignment.targets for name in targets_of(target)}
            if not targets & pending:
                continue
            if index[id(assignment)] < position and self._has_forward(assignment.value):
                return not self._cleared_before(order, index, assignment, zero_grad)
            pending = (pending - targets) | set(names_in(assignment.value))
        return False

    def _cleared_before(self, order: list[ast.AST], index: dict[int, int], forward: ast.stmt, zero_grad: ast.Call) -> bool:
        """Another ``zero_grad`` (one that frees the gradients) of the same
        receiver runs before ``forward`` on the way to it, with no backward
        pass in between: the gradients are gone already while the forward
        runs, and the second call frees nothing."""
        semantic = self.ctx.semantic
        receiver = dotted_name(zero_grad.func.value) if isinstance(zero_grad.func, ast.Attribute) else None
        start = index[id(forward)]
        for earlier in order[:start]:
            if earlier is zero_grad or not (isinstance(earlier, ast.Call) and method_name(earlier) == "zero_grad") \
                    or keeps_zero_tensors(earlier) or not isinstance(earlier.func, ast.Attribute) \
                    or dotted_name(earlier.func.value) != receiver or not semantic.runs_after(earlier, forward):
                continue
            between = order[index[id(earlier)] + 1:start]
            if not any(isinstance(n, ast.Call) and is_backward(n, self.ctx) for n in between):
                return True
        return False


    def _has_forward(self, expr: ast.expr) -> bool:
        semantic = self.ctx.semantic
        return any(
            isinstance(n, ast.Call) and semantic.is_forward_call(n) and not semantic.grad_disabled(n) for n in walk(expr)
        )
