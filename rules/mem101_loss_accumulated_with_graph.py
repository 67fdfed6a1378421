"""MEM101 loss-accumulated-with-graph."""

import ast

from memlint.lint.dataflow import root_name
from memlint.lint.diagnostic import Fix, Severity
from memlint.lint.patterns import carried_across_iterations, is_training_step_call, returned_names, with_method
from memlint.lint.rule import Rule
from memlint.lint.syntax import FUNCTION_TYPES
from memlint.lint.walk import file_memo
from memlint.rules._training import reaches


class LossAccumulatedWithGraph(Rule):
    """## What it does
    Reports a loop-carried accumulator that adds a graph-attached tensor:
    `total += loss`, `total = total + loss`, `acc[key] += losses[key]`,
    `acc += loss / n`, or `acc += self.training_step(batch)` where that
    method returns an attached loss.

    ## Why is this bad?
    A tensor produced by a forward pass or a loss function carries its
    autograd graph. Adding it to a running total makes the total depend on
    every iteration's graph, so none of them is freed: every activation
    saved for backward in every step stays allocated, and memory grows
    until the run is out of memory.

    ## Example
    ```python
    total_loss = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        total_loss += loss
    ```

    ## Use instead
    ```python
    total_loss = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        total_loss += loss.item()  # or loss.detach() to stay on the device
    ```

    ## Fix safety
    The fix appends `.detach()` to the added value: the total keeps its
    type and device and loses only the graph, which is safe. Use `.item()`
    by hand when a Python float is wanted (it synchronises with the GPU).
    No fix is offered for a conditional or `and`/`or` value
    (`total += loss if flag else 0`): its other branch may be no tensor.

    ## Known problems
    An accumulator that is itself passed to `.backward()`, or returned from
    a function whose loop runs no training step (a loss summed over heads
    or chunks on purpose), is not reported. Values that cross function boundaries are followed only for
    functions and methods defined in the same file.

    ## References
    - [PyTorch FAQ: my model reports "cuda runtime error(2): out of memory"](https://pytorch.org/docs/stable/notes/faq.html)
    """

    CODE = "MEM101"
    NAME = "loss-accumulated-with-graph"
    MESSAGE = "a graph-attached tensor is added to a loop-carried total: every iteration's autograd graph stays alive"
    SEVERITY = Severity.ERROR
    FIX_TITLE = "Add `.detach()` to the accumulated value"
    TRIGGERS = ("+=", "+ ", "+")
    NEEDS_GRAPH_SOURCE = True
    VALID = (
        "def f(model, loader, crit, opt):\n    total = 0.0\n    for x, y in loader:\n        loss = crit(model(x), y)\n        loss.backward()\n        total += loss.item()\n",
        "def f(model, loader, crit):\n    total = 0.0\n    for x, y in loader:\n        loss = crit(model(x), y)\n        total += loss.detach()\n",
        "def f(model, x, heads, crit, y):\n    loss = 0\n    for head in heads:\n        loss += crit(head(model(x)), y)\n    loss.backward()\n",
        "import torch\ndef f(model, loader, crit):\n    total = 0.0\n    with torch.no_grad():\n        for x, y in loader:\n            total += crit(model(x), y)\n    return total\n",
        "def f(model, loader):\n    correct = 0\n    for x, y in loader:\n        correct += (model(x).argmax(1) == y).sum()\n",
    )
    INVALID = (
        "def f(model, loader, crit, opt):\n    total = 0.0\n    for x, y in loader:\n        loss = crit(model(x), y)\n        loss.backward()\n        total += loss  # expect: MEM101\n",
        "def f(model, loader, crit):\n    total = 0.0\n    for x, y in loader:\n        loss = crit(model(x), y)\n        loss.backward()\n        total = total + loss  # expect: MEM101\n",
        "def f(model, loader, n):\n    acc = {}\n    for batch in loader:\n        losses = model(batch)\n        for k in losses:\n            acc[k] += losses[k] / n  # expect: MEM101\n",
        "class T:\n    def training_step(self, b):\n        return self.model(b).loss\n    def fit(self, loader):\n        total = 0\n        for b in loader:\n            total += self.training_step(b)  # expect: MEM101\n",
        "def step(model, opt, x):\n    loss = model(x)\n    loss.backward()\n    opt.step()\n    return loss\ndef train(model, opt, loader):\n    total = 0\n    for x in loader:\n        total += step(model, opt, x)  # expect: MEM101\n    return total\n",
    )

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if not isinstance(node.op, (ast.Add, ast.Sub)):
            return
        if self._leaks(node.target, node.value, node):
            self.report(node, fix=self._detach_fix(node.value))

    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) != 1 or not isinstance(node.value, ast.BinOp):
            return
        if not isinstance(node.value.op, (ast.Add, ast.Sub)):
            return
        target = node.targets[0]
        added = self._added_to(target, node.value)
        if added is not None and self._leaks(target, added, node):
            self.report(node, fix=self._detach_fix(added))

    def _added_to(self, target: ast.expr, operation: ast.BinOp) -> ast.expr | None:
        """``loss`` in ``total = total + loss`` / ``total = loss + total``; None when
        the operation does not update ``target``."""
        target_code = self.ctx.code(target)
        if self.ctx.code(operation.left) == target_code:
            return operation.right
        if self.ctx.code(operation.right) == target_code and isinstance(operation.op, ast.Add):
            return operation.left
        return None

    def _detach_fix(self, added: ast.expr) -> Fix | None:
        detached = with_method(self.ctx, added, "detach")
        return None if detached is None else self.replacement(added, detached)

    def _leaks(self, target: ast.expr, added: ast.expr, statement: ast.stmt) -> bool:
        if isinstance(added, (ast.List, ast.Tuple, ast.Set, ast.ListComp, ast.SetComp, ast.Dict, ast.DictComp)):
            return False  # `hist += [loss]` collects rather than sums: MEM102's finding
        flow = self.ctx.dataflow
        loops = flow.enclosing_loops(statement)
        if not loops or flow.grad_disabled(statement):
            return False
        if not flow.is_attached(added):
            return False
        name = root_name(target)
        loop = None if name is None else carried_across_iterations(flow, name, statement)
        if loop is None:
            return False  # re-created every iteration, or a sum over layers/heads/terms
        return not self._intended_loss_sum(name, statement, loop)

    def _intended_loss_sum(self, name: str, statement: ast.stmt, loop: ast.stmt) -> bool:
        """A loss built on purpose: the total is backpropagated, or returned
        from a function whose loop does no training step, not even in a
        local function it calls (a sum over heads, chunks or terms that the
        caller trains on)."""
        flow = self.ctx.dataflow
        scope = flow.scope(statement)
        if name in scope.backward_names:
            return True
        function = scope.node
        if not isinstance(function, FUNCTION_TYPES) or name not in returned_names(function):
            return False
        trains = file_memo(("MEM101 loop trains", id(loop)), lambda: reaches(loop.body, is_training_step_call, flow.functions))
        return not trains
