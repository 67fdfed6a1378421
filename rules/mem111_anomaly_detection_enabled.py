"""MEM111 anomaly-detection-enabled."""

from __future__ import annotations

import ast

from memlint.lint.diagnostic import Severity
from memlint.lint.rule import Rule
from memlint.lint.semantic import frameworks as fw
from memlint.lint.syntax import FUNCTION_TYPES, WITH_TYPES


class AnomalyDetectionEnabled(Rule):
    """## What it does
    Reports autograd's anomaly mode switched on for training:
    `torch.autograd.set_detect_anomaly(True)` called in a file that trains
    (it stays on for the rest of the process), a
    `with torch.autograd.detect_anomaly():` (or `set_detect_anomaly(True)`)
    block that holds a training loop or sits in one, and
    `Trainer(detect_anomaly=True)` of Lightning. Import spellings are
    resolved (`from torch.autograd import detect_anomaly`).

    ## Why is this bad?
    In anomaly mode every forward operation records the Python stack trace
    that created it, and backward checks every result for NaN: steps are
    several times slower, host memory grows with the traces kept for each
    node of the graph, and NaN checks add device work and synchronisation.
    It is a debugging tool for one failing step, not a training setting.

    ## Example
    ```python
    torch.autograd.set_detect_anomaly(True)
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()

    # while debugging one step:
    with torch.autograd.detect_anomaly():
        criterion(model(x), y).backward()
    ```

    ## Known problems
    A switch controlled by a flag (`set_detect_anomaly(args.debug)`,
    `Trainer(detect_anomaly=cfg.debug)`) is opt-in debugging and is not
    reported, nor is anomaly mode in a test function or around one step
    outside any loop. A `set_detect_anomaly(True)` in a file that does not
    train (the loop is in another module) is reported only at the top level
    of a script that runs it.

    ## References
    - [torch.autograd anomaly detection](https://pytorch.org/docs/stable/autograd.html#anomaly-detection)
    - [Lightning Trainer(detect_anomaly)](https://lightning.ai/docs/pytorch/stable/common/trainer.html#detect-anomaly)
    """

    CODE = "MEM111"
    NAME = "anomaly-detection-enabled"
    MESSAGE = "autograd anomaly detection is on for training: every op records a stack trace and backward checks every result (slower steps, more memory)"
    SEVERITY = Severity.WARNING
    TRIGGERS = ("anomaly",)
    NEEDS_NAMES = ("detect_anomaly", "set_detect_anomaly")
    FRAMEWORK = "torch"
    VALID = (
        "import torch\ndef train(model, loader, opt, args):\n    torch.autograd.set_detect_anomaly(args.debug)\n    for x in loader:\n        model(x).sum().backward()\n        opt.step()\n",
        "import torch\ndef debug_one(model, x):\n    with torch.autograd.detect_anomaly():\n        model(x).sum().backward()\n",
        "import torch\ndef train(model, loader, opt):\n    torch.autograd.set_detect_anomaly(False)\n    for x in loader:\n        model(x).sum().backward()\n        opt.step()\n",
        "import lightning as L\ntrainer = L.Trainer(max_epochs=3, detect_anomaly=False)\n",
        "import mylib\ndef train(model, loader, opt):\n    with mylib.detect_anomaly():\n        for x in loader:\n            model(x).sum().backward()\n            opt.step()\n",
    )
    INVALID = (
        "import torch\ndef train(model, loader, opt):\n    torch.autograd.set_detect_anomaly(True)  # expect: MEM111\n    for x in loader:\n        model(x).sum().backward()\n        opt.step()\n",
        "from torch.autograd import detect_anomaly\ndef train(model, loader, opt):\n    with detect_anomaly():  # expect: MEM111\n        for x in loader:\n            model(x).sum().backward()\n            opt.step()\n",
        "import torch\ndef train(model, loader, opt):\n    for x in loader:\n        with torch.autograd.set_detect_anomaly(True):  # expect: MEM111\n            model(x).sum().backward()\n        opt.step()\n",
        "import lightning as L\ntrainer = L.Trainer(max_epochs=3, detect_anomaly=True)  # expect: MEM111\n",
    )

    def visit_Call(self, node: ast.Call) -> None:
        qualified = self.ctx.qualified(node.func)
        if qualified is None:
            return
        semantic = self.ctx.semantic
        function = semantic.function_of(node)
        if function is not None and semantic.is_test_function(function):
            return  # a test checks the switch itself
        keyword = fw.ANOMALY_TRAINER_KEYWORDS.get(qualified)
        if keyword is not None:
            if any(k.arg == keyword and _true(k.value) for k in node.keywords):
                self.report(node, message="`Trainer(detect_anomaly=True)` runs the whole fit in autograd anomaly mode: every op records a stack trace and backward checks every result")
            return
        if qualified not in fw.ANOMALY_SETTERS and qualified not in fw.ANOMALY_CONTEXTS:
            return
        if qualified in fw.ANOMALY_SETTERS and not (node.args and _true(node.args[0])):
            return
        with_statement = self._with_of(node)
        if with_statement is not None:
            if self._repeats(with_statement) or any(semantic.is_run_loop(n) for n in ast.walk(with_statement)
                                                    if isinstance(n, (ast.For, ast.AsyncFor, ast.While))):
                self.report(node)
            return
        if qualified in fw.ANOMALY_CONTEXTS:
            return  # built, not entered here
        if self._trains_afterwards(node):
            self.report(node)

    def _with_of(self, call: ast.Call) -> ast.AST | None:
        parent = self.ctx.semantic.parents.get(call)
        if isinstance(parent, ast.withitem) and parent.context_expr is call:
            return self.ctx.semantic.parents.get(parent)
        return None

    def _repeats(self, node: ast.AST) -> bool:
        """``node`` runs once per step: in a run loop, or in a function that repeats per batch."""
        semantic = self.ctx.semantic
        if semantic.run_loops(node):
            return True
        function = semantic.function_of(node)
        if function is None:
            return False
        repetition = semantic.repetition(function)
        return repetition is not None and repetition.per_batch and repetition.reason != "step"

    def _trains_afterwards(self, call: ast.Call) -> bool:
        """The global switch is set where training runs: the unit that sets it
        trains (itself or through the file's functions) or runs a loop that
        does; at the top level of a script, the file trains."""
        semantic = self.ctx.semantic
        unit = semantic.unit_of(call)
        body = unit.body if isinstance(unit, (*FUNCTION_TYPES, ast.Module)) else []
        if semantic.trains(body):
            return True
        if unit is semantic.module:
            return any(semantic.trains(f.body) for f in semantic.functions)
        return False


def _true(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is True
