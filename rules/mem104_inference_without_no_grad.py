"""MEM104 inference-without-no-grad."""

import ast
import re

from memlint.lint.diagnostic import Severity
from memlint.lint.rule import Rule
from memlint.lint.semantic.operations import parameterless
from memlint.lint.semantic.values import Kind, Tri
from memlint.lint.syntax import FUNCTION_TYPES

#: Function names that say the function evaluates or samples (its intent,
#: read together with what it does: a forward pass and no training step).
EVAL_FUNCTION = re.compile(
    r"(?:^|_)(?:valid|validate|validation|eval|evaluate|evaluation|predict|prediction|predictions|"
    r"inference|infer|test_step|test_epoch|run_test|val_step|val_epoch|sample|sampling|generate|rollout)(?:_|s?$)",
    re.IGNORECASE,
)

#: A model's own method that samples step by step (``DDPM.sample``,
#: ``Decoder.generate``): its loop of forward passes is inference.
SAMPLING_METHOD = re.compile(r"(?:^|_)(?:sample|sampling|generate|rollout)(?:_|s?$)", re.IGNORECASE)


class InferenceWithoutNoGrad(Rule):
    """## What it does
    Reports a forward pass of a module in an evaluation or inference
    context that runs with autograd enabled: a function named like
    `validate`, `evaluate`, `predict`, `inference`, `sample`, `generate`,
    `rollout`, `test_step`/`validation_step` (outside Lightning, which runs
    those under `no_grad`), or a loop over batches after `model.eval()` in
    the same function, or code after `model.eval()` at module level
    (`if __name__ == "__main__":` scripts) —
    when it runs no training step, no `torch.no_grad()`/`inference_mode()`
    (context, decorator, or every caller in the file) disables grad, and no
    backward pass uses the output. In a function that also trains (a `fit`
    with a validation loop), the forward passes after `model.eval()` in a
    loop without a training step are reported. A module is known by
    construction (`nn.Linear(...)`, a class deriving from `nn.Module`,
    `from_pretrained`) or by use (`.eval()`, `.parameters()`); calling a
    constructor is not a forward pass.

    A module whose forward disables autograd itself is not reported: an in-file `forward` decorated
    `@torch.no_grad()`, or yolov5's `torch.hub.load("ultralytics/yolov5", ...)`
    wrapper (`AutoShape`, unless `autoshape=False`).

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
    `# noqa: MEM104` or decorate it). A module's methods are reported only
    when their name says they sample or generate (`DDPM.sample`) and they
    run forward passes in a loop; its `forward`, `predict` and other
    helpers serve training and evaluation alike. Test
    files (pytest's default `test_*.py`/`*_test.py`, `conftest.py`) and
    test functions elsewhere are not reported: test code is not inference
    code. A
    function that returns the output to a caller of the same file that
    backpropagates it is not reported.
    `model.eval()` alone does not disable gradients; it only switches
    dropout and batch-norm behaviour.

    ## References
    - [torch.no_grad](https://pytorch.org/docs/stable/generated/torch.no_grad.html)
    - [torch.inference_mode](https://pytorch.org/docs/stable/generated/torch.inference_mode.html)
    - [Autograd mechanics: locally disabling gradient computation](https://pytorch.org/docs/stable/notes/autograd.html)
    """

    CODE = "MEM104"
    NAME = "inference-without-no-grad"
    MESSAGE = "forward pass in an evaluation context with autograd enabled: activations are saved for a backward that never comes"
    SEVERITY = Severity.WARNING
    TRIGGERS = ("eval", "valid", "predict", "infer", "test_step", "test_epoch", "run_test", "val_", "sampl", "generat", "rollout")
    NEEDS_GRAPH_SOURCE = True  # a forward pass needs a module
    FRAMEWORK = "torch"
    VALID = (
        "import torch\n@torch.no_grad()\ndef evaluate(model, loader):\n    model.eval()\n    for x in loader:\n        model(x)\n",
        "import torch\ndef evaluate(model, loader):\n    model.eval()\n    with torch.inference_mode():\n        for x in loader:\n            model(x)\n",
        "def train(model, loader, opt):\n    model.eval()\n    for x in loader:\n        loss = model(x)\n        loss.backward()\n        opt.step()\n",
        "import lightning as L\nimport torch.nn as nn\nclass M(L.LightningModule):\n    def __init__(self):\n        super().__init__()\n        self.net = nn.Linear(4, 2)\n    def validation_step(self, batch, idx):\n        return self.net(batch)\n",
        "import torch\nimport torch.nn as nn\ndef validate(model, x):\n    return model(x)\ndef run(x):\n    model = nn.Linear(4, 2)\n    with torch.no_grad():\n        return validate(model, x)\n",
        "import torch\ndef fit(model, loader, val_loader, opt):\n    for x in loader:\n        model(x).sum().backward()\n        opt.step()\n    model.eval()\n    with torch.no_grad():\n        for x in val_loader:\n            model(x)\n",
        "class ModelForTest:\n    pass\ndef test_infer_shapes():\n    model = ModelForTest()\n    model.eval()\n    assert model is not None\n",
        "import torch.nn as nn\ndef predict_step(net, x, y, opt):\n    out = net(x)\n    loss = nn.functional.mse_loss(out, y)\n    loss.backward()\n    opt.step()\n    return out\n",
        "import torch\ndef detect(images):\n    model = torch.hub.load('ultralytics/yolov5', 'yolov5s')\n    model.eval()\n    for im in images:\n        print(model(im).pandas())\n",
    )
    INVALID = (
        "import torch\ndef decode(model, src):\n    logits = model(src.cuda())\n    return logits.argmax(-1)\ndef inference(model, sentences):\n    model.eval()\n    for src in sentences:\n        print(decode(model, src))  # expect: MEM104\n",
        "def evaluate(model, loader):\n    model.eval()\n    for x in loader:\n        out = model(x)  # expect: MEM104\n",
        "def run(model, loader):\n    model.eval()\n    preds = [model(x) for x in loader]  # expect: MEM104\n",
        "import torch.nn as nn\nclass W:\n    def __init__(self):\n        self.net = nn.Linear(4, 2)\n    def validation_step(self, x):\n        return self.net(x)  # expect: MEM104\n",
        "import torch as T\nimport torch.nn as nn\ndef predict(x):\n    model = nn.Linear(4, 2)\n    with T.no_grad():\n        with T.enable_grad():\n            return model(x)  # expect: MEM104\n",
        "def fit(model, loader, val_loader, opt, crit):\n    for epoch in range(3):\n        model.train()\n        for x, y in loader:\n            loss = crit(model(x), y)\n            loss.backward()\n            opt.step()\n        model.eval()\n        for x, y in val_loader:\n            loss = crit(model(x), y)  # expect: MEM104\n",
        "import torch.nn as nn\nif __name__ == '__main__':\n    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())\n    model.eval()\n    print(model(torch.zeros(1, 4)))  # expect: MEM104\n",
        "import torch\nimport torch.nn as nn\nclass Policy(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(4, 2)\n    def forward(self, obs):\n        return self.fc(obs)\ndef rollout(policy: Policy, env, steps):\n    obs = env.reset()\n    for _ in range(steps):\n        action = policy(obs).argmax(-1)  # expect: MEM104\n        obs = env.step(action)\n",
        "import torch\ndef detect(images):\n    model = torch.hub.load('ultralytics/yolov5', 'yolov5s', autoshape=False)\n    model.eval()\n    for im in images:\n        print(model(im))  # expect: MEM104\n",
    )

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        semantic = self.ctx.semantic
        named = bool(EVAL_FUNCTION.search(node.name))
        eval_call = _first_eval_call(semantic, node)
        if not named and eval_call is None:
            return  # not an evaluation context: the rest interprets the function
        if semantic.hook_of(node) is not None and semantic.hook_of(node).grad == "disabled":
            return
        if semantic.is_test_function(node) or semantic.is_test_file:
            return  # tests (and their helpers) are not inference code
        if semantic.is_module_method(node):
            if SAMPLING_METHOD.search(node.name):
                self._check_unit(node, True, None, in_loops_only=True)
            return  # a module's forward and helpers serve training and evaluation alike
        self._check_unit(node, named, eval_call)

    def visit_Module(self, node: ast.Module) -> None:
        semantic = self.ctx.semantic
        if semantic.is_test_file:
            return
        eval_call = _first_eval_call(semantic, node)
        if eval_call is not None:
            self._check_unit(node, False, eval_call)

    def _check_unit(self, unit: ast.AST, named: bool, eval_call: ast.Call | None, in_loops_only: bool = False) -> None:
        semantic = self.ctx.semantic
        if not semantic.may_run_forward(unit) or (isinstance(unit, FUNCTION_TYPES) and semantic.decorator_grad(unit) is Tri.NO):
            return  # cheap checks first: the rest interprets the function
        forward = [call for call in semantic.forward_calls(unit)
                   if semantic.grad_mode(call) is Tri.YES and semantic.value(call).graph is not Tri.NO
                   and not self._frozen_callee(call) and (not in_loops_only or semantic.enclosing_loops(call))]
        helpers = [] if in_loops_only else self._helper_forwards(unit)
        forward += helpers
        if not forward:
            return
        trains = bool(semantic.backward_calls(unit)) or semantic.trains(unit.body)
        if trains:
            if eval_call is None:
                return
            forward = [call for call in forward if self._in_evaluation_loop(call, eval_call)]
        else:
            if not named:
                forward = [call for call in forward if _after(eval_call, call) and self._repeated_or_script(call, unit)]
            forward = [call for call in forward if not self._backpropagated(call, unit)]
        if not forward or self._output_trained_by_callers(unit):
            return
        first = min(forward, key=lambda call: (call.lineno, call.col_offset))
        message = None
        if first in helpers:
            message = f"{self.MESSAGE} (the forward passes run in `{self.ctx.semantic.callee(first).name}`)"
        self.report(first, message=message)

    def _helper_forwards(self, unit: ast.AST) -> list[ast.Call]:
        """Calls with autograd on of the file's own helpers that run forward
        passes and no training step (``tokens = greedy_decode(model, src)``);
        a helper that is an evaluation function by itself is judged on its own."""
        semantic = self.ctx.semantic
        found = []
        for call in semantic.own_nodes(unit, (ast.Call,)):
            if not semantic.may_call_local(call):
                continue
            callee = semantic.callee(call)
            if not isinstance(callee, FUNCTION_TYPES) or EVAL_FUNCTION.search(callee.name) or semantic.is_module_method(callee):
                continue
            analysis = semantic.canonical(callee)
            if analysis.trains or analysis.backward_calls or semantic.grad_mode(call) is not Tri.YES:
                continue
            if any(semantic.grad_mode(inner) is Tri.YES for inner in semantic.forward_calls(callee)):
                found.append(call)  # the helper's own no_grad (`with torch.no_grad(): model(x)`) is enough
        return found

    def _frozen_callee(self, call: ast.Call) -> bool:
        """The module called has every parameter frozen (``requires_grad_(False)``,
        a loop setting ``p.requires_grad = False``) or has none (a loss module):
        it records no graph of its own."""
        semantic = self.ctx.semantic
        called = semantic.value(call.func)
        if called.frozen or parameterless(called):
            return True  # `model(x)`, `criterion(outputs, y)`
        if not isinstance(call.func, ast.Attribute):
            return False
        owner = semantic.value(call.func.value)  # `model.encode(x)`
        return owner.kind is Kind.MODULE and owner.frozen

    def _repeated_or_script(self, call: ast.Call, unit: ast.AST) -> bool:
        """After ``model.eval()`` in a function that does not say it
        evaluates: the forward pass runs once per batch (a run loop, a
        comprehension over a stream), or in a script's top level."""
        semantic = self.ctx.semantic
        if isinstance(unit, ast.Module) or semantic.run_loops(call):
            return True
        comprehension = semantic.comprehension_of(call)
        return comprehension is not None and semantic.is_run_comprehension(comprehension)

    def _in_evaluation_loop(self, call: ast.Call, eval_call: ast.Call) -> bool:
        """In a function that also trains: ``call`` comes after ``eval_call``
        and its innermost loop has no training step."""
        semantic = self.ctx.semantic
        loops = semantic.enclosing_loops(call)
        return bool(loops) and _after(eval_call, call) and not semantic.trains(loops[0].body)

    def _backpropagated(self, call: ast.Call, unit: ast.AST) -> bool:
        semantic = self.ctx.semantic
        if semantic.result_backpropagated(call):
            return True
        value = semantic.value(call)
        return bool(value.sources and value.sources & semantic.canonical(unit).backpropagated)

    def _output_trained_by_callers(self, unit: ast.AST) -> bool:
        """A caller of the same file backpropagates what the function returns."""
        semantic = self.ctx.semantic
        if not isinstance(unit, FUNCTION_TYPES):
            return False
        if semantic.returns(unit).graph is Tri.NO:
            return False
        return any(semantic.result_backpropagated(call) for call in semantic.call_sites_of(unit))


def _first_eval_call(semantic, unit: ast.AST) -> ast.Call | None:
    """The first ``m.eval()`` (no arguments: a module's) in the unit's own body."""
    for call in semantic.own_nodes(unit, (ast.Call,)):
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "eval" and not call.args and not call.keywords:
            return call
    return None


def _after(first: ast.AST | None, second: ast.AST) -> bool:
    return first is not None and (first.lineno, first.col_offset) <= (second.lineno, second.col_offset)
