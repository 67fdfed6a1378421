"""MEM104 inference-without-no-grad."""

import ast
import re
from functools import cached_property

from memlint.lint.dataflow import call_method_name
from memlint.lint.diagnostic import Severity
from memlint.lint.names import dotted_name
from memlint.lint.patterns import contains_training_step
from memlint.lint.rule import Rule
from memlint.lint.syntax import FUNCTION_TYPES, call_arguments
from memlint.lint.vocabulary import MODEL_NAME
from memlint.lint.walk import Visitor, visit as walk_visit

EVAL_FUNCTION = re.compile(
    r"(?:^|_)(?:valid|validate|validation|eval|evaluate|evaluation|predict|prediction|predictions|"
    r"inference|infer|test_step|test_epoch|run_test|val_step|val_epoch)(?:_|$)",
    re.IGNORECASE,
)
LIGHTNING_BASES = re.compile(r"(?:^|\.)(?:LightningModule|LightningFlow)$")
LOSS_CALLEE = re.compile(r"(?:criterion|loss)", re.IGNORECASE)


class InferenceWithoutNoGrad(Rule):
    """## What it does
    Reports a forward pass in an evaluation or inference context that runs
    with autograd enabled: in functions named like `validate`, `evaluate`,
    `predict`, `inference`, `test_step`/`validation_step` (outside
    Lightning), or after `model.eval()` in the same function — when no
    enclosing `torch.no_grad()`/`torch.inference_mode()` (context or
    decorator) disables grad and no `.backward()` follows. In a function
    that also trains (a `fit` with a validation loop), the forward passes
    after `model.eval()` in a loop without a training step are reported.

    ## Why is this bad?
    With grad enabled, autograd saves every activation the backward pass
    would need, for a backward pass that never comes. Evaluation then uses
    several times the memory it needs, and any output kept across batches
    keeps its whole graph alive.

    ## Example
    ```python
    def evaluate(model, loader):
        model.eval()
        for x, y in loader:
            logits = model(x)
    ```

    ## Use instead
    ```python
    @torch.inference_mode()
    def evaluate(model, loader):
        model.eval()
        for x, y in loader:
            logits = model(x)
    ```

    ## Known problems
    Only the first forward pass of a function is reported. A function whose
    every caller in the same file runs it under `no_grad` is not reported;
    callers in other files are not seen, so an evaluation helper always
    called under `no_grad` from elsewhere is reported (suppress it with
    `# noqa: MEM104` or decorate it). `model.eval()` alone does not disable
    gradients; it only switches dropout and batch-norm behaviour.

    ## References
    - [torch.no_grad](https://pytorch.org/docs/stable/generated/torch.no_grad.html)
    - [torch.inference_mode](https://pytorch.org/docs/stable/generated/torch.inference_mode.html)
    - [Autograd mechanics: locally disabling gradient computation](https://pytorch.org/docs/stable/notes/autograd.html)
    """

    CODE = "MEM104"
    NAME = "inference-without-no-grad"
    MESSAGE = "forward pass in an evaluation context with autograd enabled: activations are saved for a backward that never comes"
    SEVERITY = Severity.WARNING
    TRIGGERS = ("eval", "valid", "predict", "infer", "test_step", "test_epoch", "run_test", "val_")
    NEEDS_GRAPH_SOURCE = True  # a forward pass needs a model
    VALID = (
        "import torch\n@torch.no_grad()\ndef evaluate(model, loader):\n    for x in loader:\n        model(x)\n",
        "import torch\ndef evaluate(model, loader):\n    model.eval()\n    with torch.inference_mode():\n        for x in loader:\n            model(x)\n",
        "def train(model, loader, opt):\n    model.eval()\n    for x in loader:\n        loss = model(x)\n        loss.backward()\n        opt.step()\n",
        "import lightning as L\nclass M(L.LightningModule):\n    def validation_step(self, batch, idx):\n        return self.model(batch)\n",
        "import torch\ndef validate(model, x):\n    return model(x)\ndef run(model, x):\n    with torch.no_grad():\n        return validate(model, x)\n",
        "import torch\ndef fit(model, loader, val_loader, opt):\n    for x in loader:\n        model(x).sum().backward()\n        opt.step()\n    model.eval()\n    with torch.no_grad():\n        for x in val_loader:\n            model(x)\n",
        "def fit(model, gen, loader, opt):\n    gen.eval()\n    for x in loader:\n        loss = model(gen(x)).mean()\n        loss.backward()\n        opt.step()\n",
    )
    INVALID = (
        "def evaluate(model, loader):\n    for x in loader:\n        out = model(x)  # expect: MEM104\n",
        "def run(model, loader):\n    model.eval()\n    preds = [model(x) for x in loader]  # expect: MEM104\n",
        "class W:\n    def validation_step(self, x):\n        return self.net(x)  # expect: MEM104\n",
        "import torch as T\ndef predict(model, x):\n    with T.enable_grad():\n        return model(x)  # expect: MEM104\n",
        "def fit(model, loader, val_loader, opt, crit):\n    for epoch in range(3):\n        model.train()\n        for x, y in loader:\n            loss = crit(model(x), y)\n            loss.backward()\n            opt.step()\n        model.eval()\n        for x, y in val_loader:\n            loss = crit(model(x), y)  # expect: MEM104\n",
    )

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        flow = self.ctx.dataflow
        named_eval = bool(EVAL_FUNCTION.search(node.name))
        eval_call = None if named_eval or node not in self._functions_calling_eval else _first_eval_call(node)
        if not named_eval and eval_call is None:
            return  # not an evaluation context: skip the dataflow analysis
        if flow.decorated_no_grad(node) or self._lightning_hook(node):
            return
        scope = flow.scope(node)
        forward = [call for call in scope.forward_calls if not self._is_loss_call(call) and not _nested_in_function(call, node, flow)]
        if not forward:
            return
        if contains_training_step(node.body) or scope.backward_names:
            if eval_call is not None:
                forward = [call for call in forward if self._in_evaluation_loop(call, eval_call)]
            else:
                forward = []
        for call in forward:
            if flow.grad_disabled(call):
                continue
            if not named_eval and (eval_call is None or not _after(eval_call, call, self.ctx)):
                continue
            if self._all_callers_disable_grad(node):
                return
            self.report(call)
            return

    def _in_evaluation_loop(self, call: ast.Call, eval_call: ast.Call) -> bool:
        """In a function that also trains: ``call`` comes after ``eval_call``
        and its innermost loop (in the function) has no training step."""
        loops = self.ctx.dataflow.enclosing_loops(call)
        return bool(loops) and _after(eval_call, call, self.ctx) and not contains_training_step(loops[0].body)

    @cached_property
    def _functions_calling_eval(self) -> set[ast.FunctionDef | ast.AsyncFunctionDef]:
        """Functions (and their enclosing functions) that contain a ``.eval()`` call."""
        found: set[ast.FunctionDef | ast.AsyncFunctionDef] = set()
        for call in self.ctx.index.of_type(ast.Call):
            if _is_eval_call(call):
                found.update(a for a in self.ctx.dataflow.ancestors(call) if isinstance(a, FUNCTION_TYPES))
        return found

    def _is_loss_call(self, call: ast.Call) -> bool:
        name = dotted_name(call.func)
        return name is not None and bool(LOSS_CALLEE.search(name.split(".")[-1]))

    def _lightning_hook(self, function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        if not re.match(r"^(?:validation_step|test_step|predict_step)$", function.name):
            return False
        owner = next((a for a in self.ctx.dataflow.ancestors(function) if isinstance(a, ast.ClassDef)), None)
        if owner is None:
            return False
        for base in owner.bases:
            qualified = self.ctx.qualified(base) or ""
            if LIGHTNING_BASES.search(qualified):
                return True
        return False

    def _all_callers_disable_grad(self, function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        finder = _CallsOf(function.name)
        walk_visit(self.ctx.module, finder)
        return bool(finder.calls) and all(self.ctx.dataflow.grad_disabled(call) for call in finder.calls)


def _is_eval_call(call: ast.Call) -> bool:
    """``x.eval()`` with no arguments (not the builtin ``eval(source)``)."""
    return call_method_name(call) == "eval" and not call_arguments(call)


def _nested_in_function(call: ast.Call, function: ast.FunctionDef | ast.AsyncFunctionDef, flow) -> bool:
    for ancestor in flow.ancestors(call):
        if ancestor is function:
            return False
        if isinstance(ancestor, (*FUNCTION_TYPES, ast.Lambda)):
            return True
    return False


def _first_eval_call(function: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.Call | None:
    finder = _EvalCall()
    walk_visit(function.body, finder)
    return finder.call


class _EvalCall(Visitor):
    def __init__(self) -> None:
        self.call: ast.Call | None = None

    def visit_Call(self, node: ast.Call) -> None:
        if self.call is None and _is_eval_call(node):
            receiver = dotted_name(node.func.value)
            if receiver is not None and MODEL_NAME.match(receiver.split(".")[-1]):
                self.call = node


class _CallsOf(Visitor):
    def __init__(self, name: str) -> None:
        self.name = name
        self.calls: list[ast.Call] = []

    def visit_Call(self, node: ast.Call) -> None:
        name = dotted_name(node.func)
        if name is not None and name.split(".")[-1] == self.name:
            self.calls.append(node)


def _after(first: ast.AST, second: ast.AST, ctx) -> bool:
    return ctx.span(first)[0] <= ctx.span(second)[0]
