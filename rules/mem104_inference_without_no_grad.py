"""MEM104 inference-without-no-grad."""

import ast
import re

from memlint.lint.diagnostic import Applicability, Fix, Severity
from memlint.lint.names import dotted_name
from memlint.lint.patterns import module_spelling
from memlint.lint.rule import Rule
from memlint.lint.semantic import frameworks as fw
from memlint.lint.semantic import torch_ops
from memlint.lint.semantic.constants import literal_arguments, ruled_out_by_arguments
from memlint.lint.semantic.operations import literal_iterable, parameterless
from memlint.lint.semantic.values import Kind, Tri
from memlint.lint.signatures import first_parameter
from memlint.lint.syntax import FUNCTION_TYPES, call_arguments

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
    loop without a training step are reported, and so are those in a
    branch of an `if` (or a `case` of a `match`, `case "valid":`) inside the
    training loop that switches to evaluation mode and takes no training
    step (`if step % 100 == 0:`, a periodic evaluation) -- a backward pass
    that only the other branch or the other cases take, on names they bind
    themselves, does not make it a training step -- and, at a script's top level, a forward pass outside
    every loop after `model.eval()` once training is done. A module is known by
    construction (`nn.Linear(...)`, a class deriving from `nn.Module`,
    `from_pretrained`) or by use (`.eval()`, `.parameters()`); calling a
    constructor is not a forward pass, and neither is a call of a module
    without parameters (a `torch.nn` loss, a torchmetrics metric such as
    `Accuracy(task=...)`, or a module class of the file whose methods create
    none) on values without a graph. The
    `model.eval()` that opens an evaluation context must be a module's
    apart from that switch (built as one, called, or used with
    `.parameters()`-like methods): an environment wrapper's or another
    file's agent object's `eval()` is not one. "After" follows the flow of
    control: not from the other branch of an `if`, not only around a
    loop's back edge, not past a `model.train()` that always runs in
    between, and not for a module bound after the switch by constructing
    it from a module class of the file out of plain values (`net =
    Net(hidden=10)`, not a wrapper `Net(model)`) and called once,
    outside any loop (a shape check of the new module: it starts in
    training mode); one called in the evaluation loop (a loss module with
    a parameter on the outputs) and a `torch.nn` layer built so (the
    lone-layer probe below) are still judged. A function without such a name or switch is an evaluation too
    when what it does makes it one: the file calls it and trains elsewhere,
    and it forwards a module in a loop over a stream of batches (a loader)
    while neither it nor what it calls takes a training step or a backward
    pass (a script's `test()` after its `train()`). So is a method of a
    class that is no module, another of whose methods runs a backward pass
    (a trainer), when it forwards a module in a loop over batches, takes no
    training step and returns nothing with a graph, also when the file
    never calls it (`BERTTrainer.test(self, epoch)`). So is a module's own
    method outside its forward pass that switches the module itself to
    evaluation mode (`self.eval()`) and then calls it in a loop of its own
    over the data (sentence-transformers' `encode(self, sentences)` over
    slices of the input, `self.forward(features)`): its forward passes
    after the switch, in a loop that walks data and not the module's
    layers, are reported. A module frozen with
    `requires_grad_(False)` stays frozen through `copy.deepcopy`, `.eval()`
    and `.to()`, also when the model learns only at `.eval()` that the
    value is a module. Callers beyond the depth the model follows are taken to run
    with grad on when nothing in the file can turn it off.

    At a script's (or a notebook cell's) top level, outside every loop, one
    call of a single `torch.nn` convolution, linear or embedding layer whose
    output is only shown or measured (`conv(img).shape`, `print(out.shape)`)
    is not reported: such a layer saves for backward only its input and its
    weight, tensors alive anyway, so nothing is saved for nothing. Its output
    fed to another layer (`pool(conv(img))`) is reported.

    A call of what the file made with a `torch.func` gradient transform
    (`grad`, `grad_and_value`, `vjp`, `jacrev`, `jacfwd`, `hessian`, also
    inside `vmap`) and assigned to the attribute called (every assignment
    of that attribute in the file: `layer.per_sample = vmap(grad(loss))`,
    then `layer.per_sample(params, x, g)`) computes gradients, forward and
    backward in one call, and is not reported.

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

    ## Fix safety
    The fix decorates an evaluation function that has no training step with
    `@torch.no_grad()`, or else wraps the outermost loop around the forward
    pass that runs no backward pass and no optimizer step in
    `with torch.no_grad():` (the loop is indented one level, comments kept).
    It is unsafe: the outputs no longer require gradients, so code that
    later backpropagates through them, or reads `.requires_grad`, behaves
    differently. There is no fix without an `import torch` to spell it, for
    an `async def`, for a forward pass outside a loop in code that also
    trains, or for a loop holding a `yield` or `await` (the `with` would stay
    open, autograd off, while the caller runs).

    ## Known problems
    Only the first forward pass of a function is reported (in a notebook's
    top level, the first of each cell: each cell runs on its own). A forward of a
    library module that runs an adversarial attack when asked
    (robustness's `model(x, y, make_adv=True)`) needs autograd and is not
    one; a call of the file's helper whose backward passes and steps all
    sit in branches that the call's literal arguments rule out
    (`run_epoch(..., mode="val")` with `if mode == "train":` inside) is
    an evaluation for that call. A function whose
    every caller in the same file runs it under `no_grad` is not reported;
    callers in other files are not seen, so an evaluation helper always
    called under `no_grad` from elsewhere is reported (suppress it with
    `# noqa: MEM104` or decorate it). A module's methods are reported only
    when their name says they sample or generate (`DDPM.sample`) and they
    run forward passes in a loop of steps, unless, switching nothing to
    evaluation mode, they return a one-element tensor with a graph
    (`return loss.mean()` after a rollout: a training objective), or when
    they switch their own module to evaluation mode and run it over data
    (above) (a loop over the module's own layers, `for block in
    self.blocks`, is one forward pass), or when they run a backward pass of
    their own and switch a module to evaluation mode (a trainer written as
    an `nn.Module`, judged as a function that trains is); its `forward`, `predict` and other
    helpers serve training and evaluation alike, so a call of such a method
    (`model.inference(a, b)`) in an evaluation context is reported at the
    call, as a helper function's would be, and not in the method. A
    helper function that only a script's top level calls, each call after
    `model.eval()` with grad on (`for name in os.listdir(d):
    process_image(net, name)`), is reported at its own forward pass, where
    `@torch.no_grad()` on the helper fixes it: the top level has no function
    to decorate. A call
    of a method decorated `@torch.no_grad()`/`@torch.inference_mode()` is
    not reported: of the file's function it resolves to, or, on a module
    of unknown class, when every module class of the file that defines a
    method of that name decorates it so. Test
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
    FIX_TITLE = "Run the evaluation under `torch.no_grad()`"
    FIX_APPLICABILITY = Applicability.UNSAFE
    TRIGGERS = ("eval", "valid", "predict", "infer", "test_step", "test_epoch", "run_test", "val_", "sampl", "generat", "rollout",
                "backward")  # a file that trains: its functions that only forward over a stream are evaluations
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
        if not named and not _mode_switches(semantic, node, "eval"):
            if self._evaluates_a_stream(node) or self._evaluates_for_the_script(node) or self._evaluates_for_a_trainer(node):
                self._check_unit(node, True, [])
            return  # not an evaluation context: the rest interprets the function
        if semantic.hook_of(node) is not None and semantic.hook_of(node).grad == "disabled":
            return
        if semantic.is_test_function(node) or semantic.is_test_file:
            return  # tests (and their helpers) are not inference code
        if semantic.is_module_method(node) and not self._trains_itself(node):
            if SAMPLING_METHOD.search(node.name):
                if not self._returns_training_loss(node):
                    self._check_unit(node, True, [], in_loops=self._in_sampling_loop, decorate=False)
                return
            switches = self._own_eval_switches(node)
            if switches:
                self._check_unit(node, True, [], in_loops=lambda call: self._in_own_data_loop(call, switches))
            return  # a module's forward and helpers serve training and evaluation alike
        eval_calls = _eval_calls(semantic, node)
        if not named and not eval_calls:
            return
        self._check_unit(node, named, eval_calls)

    def _trains_itself(self, method: ast.AST) -> bool:
        """A module's method that runs a backward pass of its own and
        switches a module to evaluation mode (a trainer written as an
        ``nn.Module``: ``train_step`` with ``accelerator.backward(loss)``,
        then ``model.eval()`` to sample): a training step, judged as a
        function is, not a forward helper."""
        semantic = self.ctx.semantic
        return bool(_mode_switches(semantic, method, "eval")) and semantic.runs_backward(method) \
            and semantic.in_forward_pass(method) is None

    def _returns_training_loss(self, method: ast.AST) -> bool:
        """A module's method that switches nothing to evaluation mode and
        returns a one-element tensor with a graph (``return loss.mean()``
        after a rollout of forward passes): an objective for its callers to
        backpropagate, as ``forward`` is, not a sampler, whose samples are
        no full reduction."""
        semantic = self.ctx.semantic
        if _mode_switches(semantic, method, "eval"):
            return False
        returned = semantic.returns(method)
        return returned.kind is Kind.TENSOR and returned.scalar and returned.graph is Tri.YES

    def visit_Module(self, node: ast.Module) -> None:
        semantic = self.ctx.semantic
        if semantic.is_test_file:
            return
        eval_calls = _eval_calls(semantic, node)
        if eval_calls:
            self._check_unit(node, False, eval_calls)

    def _evaluates_a_stream(self, function: ast.AST) -> bool:
        """What ``function`` does makes it an evaluation: it loops over a
        stream of batches (a loader, a dataset) calling a module in the loop,
        and neither it nor anything it calls takes a training step or runs a
        backward pass, while the file calls it (a script's ``test()`` after
        its ``train()``) and trains elsewhere. A forward pass over every batch
        with nothing to differentiate it is inference."""
        semantic = self.ctx.semantic
        loops = [loop for loop in semantic.own_nodes(function, (ast.For, ast.AsyncFor))
                 if any(isinstance(node, ast.Call) for statement in loop.body for node in ast.walk(statement))]
        if not loops or semantic.is_test_file:
            return False  # cheap, syntactic checks first: the rest interprets the function
        if semantic.is_module_method(function) or semantic.is_test_function(function):
            return False
        if semantic.hook_of(function) is not None or not semantic.sites_of(function):
            return False
        if semantic.decorator_grad(function) is Tri.NO or not semantic.may_run_forward(function):
            return False
        if not (semantic.runs_backward(semantic.module) or any(
                semantic.runs_backward(other) for other in semantic.functions if other is not function)):
            return False  # the file trains nowhere else (syntactic, so before interpreting the function)
        analysis = semantic.canonical(function)
        if analysis.trains or analysis.backward_calls:
            return False
        return any(semantic.value(loop.iter).stream is Tri.YES and any(
            semantic.is_forward_call(call) for call in ast.walk(loop) if isinstance(call, ast.Call)) for loop in loops)

    def _evaluates_for_the_script(self, function: ast.AST) -> bool:
        """Every call of ``function`` in the file runs at the script's top
        level as an evaluation -- after ``model.eval()``, with grad on, its
        result backpropagated nowhere, and per input or outside the script's
        training (``for name in os.listdir(d): process_image(net, name)``)
        -- while ``function`` itself forwards a module and takes no training
        step. The function is then the evaluation, reported in its body where
        ``@torch.no_grad()`` fixes it, not at the calls: a script's top level
        has no function to decorate. A helper also called from a function is
        judged at each call, by that caller's context."""
        memo = self.__dict__.setdefault("_for_the_script", {})
        if function not in memo:
            memo[function] = self._script_helper(function)
        return memo[function]

    def _evaluates_for_a_trainer(self, function: ast.AST) -> bool:
        """``function`` is a method of a class that is no module, another of
        whose methods runs a backward pass (a trainer), and it forwards a
        module in a loop over the run's batches while neither it nor what it
        calls takes a training step, and returns nothing with a graph: the
        trainer's evaluation pass (``BERTTrainer.test(epoch)``), also when
        the file never calls it (a command line or another file does).
        Called in the file, each call must run with grad on and its result
        be backpropagated nowhere."""
        semantic = self.ctx.semantic
        klass = semantic.class_of_method(function) if isinstance(function, FUNCTION_TYPES) else None
        if klass is None or klass.is_module or semantic.is_test_file or semantic.is_test_function(function):
            return False
        if semantic.hook_of(function) is not None or semantic.decorator_grad(function) is Tri.NO:
            return False
        loops = [loop for loop in semantic.own_nodes(function, (ast.For, ast.AsyncFor, ast.While))
                 if any(isinstance(node, ast.Call) for statement in loop.body for node in ast.walk(statement))]
        if not loops or not any(semantic.runs_backward(other) for other in klass.methods.values() if other is not function):
            return False  # cheap, syntactic checks first: the rest interprets the method
        analysis = semantic.canonical(function)
        if analysis.trains or analysis.backward_calls or semantic.returns(function).graph is Tri.YES:
            return False
        if any(semantic.grad_mode(call) is not Tri.YES or semantic.result_backpropagated(call) for call in semantic.call_sites_of(function)):
            return False
        return any(self._walks_batches(loop) and any(
            semantic.is_forward_call(call) for call in ast.walk(loop) if isinstance(call, ast.Call)) for loop in loops)

    def _walks_batches(self, loop: ast.AST) -> bool:
        """A loop over the run's data: a run loop, or a loop over anything but
        a literal whose item feeds the forward pass (``for data in
        self.test_data:`` with ``data = {k: v.to(device) ...}``), when the
        model cannot tell what the attribute holds."""
        semantic = self.ctx.semantic
        if semantic.is_run_loop(loop):
            return True
        return isinstance(loop, (ast.For, ast.AsyncFor)) and not literal_iterable(loop.iter) and semantic.feeds_items_forward(loop)

    def _script_helper(self, function: ast.AST) -> bool:
        semantic = self.ctx.semantic
        if not isinstance(function, FUNCTION_TYPES) or semantic.is_test_file or semantic.is_test_function(function):
            return False
        if semantic.is_module_method(function) or semantic.hook_of(function) is not None:
            return False
        module = semantic.module
        if not _mode_switches(semantic, module, "eval") or semantic.decorator_grad(function) is Tri.NO \
                or not semantic.may_run_forward(function):
            return False  # cheap, syntactic checks first: finding the call sites interprets the callers
        calls = semantic.call_sites_of(function)
        if not calls or any(semantic.unit_of(call) is not module for call in calls):
            return False
        eval_calls = _eval_calls(semantic, module)
        if not eval_calls:
            return False
        analysis = semantic.canonical(function)
        if analysis.trains or analysis.backward_calls:
            return False
        script_trains = bool(semantic.backward_calls(module)) or semantic.trains(module.body)
        for call in calls:
            if semantic.grad_mode(call) is not Tri.YES or semantic.result_backpropagated(call) or not self._after_eval(eval_calls, call):
                return False
            if script_trains and not (self._in_evaluation_loop(call, eval_calls) or self._script_evaluation(call, module, eval_calls)):
                return False
        return any(semantic.grad_mode(inner) is Tri.YES for inner in semantic.forward_calls(function))

    def _own_eval_switches(self, method: ast.AST) -> list[ast.Call]:
        """A module's method outside its forward pass that switches its own
        module to evaluation mode (``self.eval()``): it drives the module over
        data itself (sentence-transformers' ``encode``), as an evaluation
        function of the file would; the switches, or none. Cheap, syntactic
        checks first: the forward-pass methods are found by their calls."""
        semantic = self.ctx.semantic
        receiver = first_parameter(method)
        switches = [call for call in _mode_switches(semantic, method, "eval")
                    if isinstance(call.func.value, ast.Name) and call.func.value.id == receiver]
        if not switches or semantic.in_forward_pass(method) is not None:
            return []
        return switches

    def _in_own_data_loop(self, call: ast.Call, switches: list[ast.Call]) -> bool:
        """In a module's method that switched itself to evaluation mode:
        ``call`` runs after that switch, in a loop of the method that walks
        data (a loader, slices of the inputs), not a loop over the module's
        own layers."""
        semantic = self.ctx.semantic
        unit = semantic.unit_of(call)
        loops = [loop for loop in semantic.enclosing_loops(call) if semantic.unit_of(loop) is unit]
        return self._after_eval(switches, call) and any(
            semantic.walks_data(loop, counted=False) and not semantic.walks_layers(loop) for loop in loops)

    def _check_unit(self, unit: ast.AST, named: bool, eval_calls: list[ast.Call], in_loops=None,
                    decorate: bool = True) -> None:
        """Report the unit's first forward pass with grad on that no training
        step uses; ``in_loops``, when given, keeps only the forward passes it
        accepts (those in a module's sampling or data loop), and
        ``decorate`` says whether the fix may decorate the function."""
        semantic = self.ctx.semantic
        if not semantic.may_run_forward(unit) or (isinstance(unit, FUNCTION_TYPES) and semantic.decorator_grad(unit) is Tri.NO):
            return  # cheap checks first: the rest interprets the function
        forward = [call for call in semantic.forward_calls(unit)
                   if semantic.grad_mode(call) is Tri.YES and semantic.value(call).graph is not Tri.NO
                   and not self._frozen_callee(call) and not self._attacking_forward(call)
                   and not self._callee_disables_grad(call) and not self._lone_layer_probe(call, unit)
                   and not self._computes_gradients(call)
                   and (in_loops is None or in_loops(call))]
        helpers = [] if in_loops is not None else self._helper_forwards(unit)
        forward += helpers
        if not forward:
            return
        trains = bool(semantic.backward_calls(unit)) or semantic.trains(unit.body) and not self._trains_only_through_told(unit)
        if trains:
            if not eval_calls:
                return
            forward = [call for call in forward
                       if self._in_evaluation_loop(call, eval_calls) or self._script_evaluation(call, unit, eval_calls)]
        else:
            if not named:
                forward = [call for call in forward if self._after_eval(eval_calls, call) and self._repeated_or_script(call, unit)]
            forward = [call for call in forward if not self._backpropagated(call, unit)]
        if not forward or self._output_trained_by_callers(unit):
            return
        for first in self._firsts(unit, forward):
            message = None
            if first in helpers:
                message = f"{self.MESSAGE} (the forward passes run in `{self.ctx.semantic.callee(first).name}`)"
            self.report(first, message=message, fix=self._fix(unit, first, trains, decorate))

    def _firsts(self, unit: ast.AST, forward: list[ast.Call]) -> list[ast.Call]:
        """The forward passes to report: the unit's first one, and in a
        notebook's top level the first one of each cell -- the kernel runs
        each cell on its own, and each cell's outputs keep their graphs in
        its globals (a module re-wrapped after `.eval()` in a later cell
        and run again there is another evaluation)."""
        def order(call: ast.Call) -> tuple[int, int]:
            return call.lineno, call.col_offset

        layout = self.ctx.notebook
        if layout is None or not isinstance(unit, ast.Module):
            return [min(forward, key=order)]
        by_cell: dict[object, ast.Call] = {}
        for call in sorted(forward, key=order):
            cell = layout.cell_of(call.lineno)
            by_cell.setdefault(None if cell is None else cell.number, call)
        return list(by_cell.values())

    # -- the fix -------------------------------------------------------------
    def _fix(self, unit: ast.AST, first: ast.Call, trains: bool, decorate: bool) -> Fix | None:
        """``@torch.no_grad()`` on an evaluation function without a training
        step, else ``with torch.no_grad():`` around the outermost loop that
        holds the first forward pass and trains nothing; None when neither
        is known to be right (no ``torch`` import to spell it, an async
        function, a forward pass outside any loop in code that also trains)."""
        torch_name = module_spelling(self.ctx, "torch")
        if torch_name is None:
            return None
        no_grad = f"{torch_name}.no_grad()"
        if isinstance(unit, ast.FunctionDef) and not trains and decorate:
            return self.fix(self.plan("add_decorator", unit, code=no_grad),
                            title=f"Decorate `{unit.name}` with `@{no_grad}`")
        loop = self._evaluation_loop(unit, first)
        if loop is None or any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)) for n in ast.walk(loop)):
            return None  # a `with` suspended at a `yield`/`await` would turn autograd off in the caller
        return self.fix(self.plan("wrap_in_with", loop, code=no_grad), title=f"Run the evaluation loop under `with {no_grad}:`")

    def _evaluation_loop(self, unit: ast.AST, call: ast.Call) -> ast.stmt | None:
        """The outermost ``for``/``while`` statement of ``unit`` around
        ``call`` that runs no backward pass and no optimizer step."""
        semantic = self.ctx.semantic
        found = None
        for loop in semantic.enclosing_loops(call):  # innermost first
            if not isinstance(loop, (ast.For, ast.AsyncFor, ast.While)) or semantic.unit_of(loop) is not unit:
                break
            if semantic.trains(loop):
                break
            found = loop
        return found

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
            if not isinstance(callee, FUNCTION_TYPES) or self._judged_on_its_own(callee):
                continue
            analysis = semantic.canonical(callee)
            if semantic.grad_mode(call) is not Tri.YES:
                continue
            if (analysis.trains or analysis.backward_calls) and not self._trains_only_when_told(call, callee):
                continue
            if any(semantic.grad_mode(inner) is Tri.YES for inner in semantic.forward_calls(callee)):
                found.append(call)  # the helper's own no_grad (`with torch.no_grad(): model(x)`) is enough
        return found

    def _trains_only_when_told(self, call: ast.Call, callee: ast.AST) -> bool:
        """Every backward pass and optimizer step of ``callee`` (and every
        call of it that trains) sits in a branch that the literal arguments
        of ``call`` rule out: ``_run_epoch(args, "val", loader, model)`` where
        the helper computes ``is_train = (mode == "train")`` and backpropagates
        only under ``if is_train:``. For that call, the helper evaluates."""
        semantic = self.ctx.semantic
        env = literal_arguments(semantic, call, callee)
        if not env:
            return False
        analysis = semantic.canonical(callee)
        training = [*analysis.backward_calls, *analysis.optimizer_steps]
        training += [site for site, found in analysis.call_sites.items()
                     if found.callee is not None and semantic.canonical(found.callee).trains]
        return bool(training) and all(ruled_out_by_arguments(semantic, node, callee, env) for node in training)

    def _trains_only_through_told(self, unit: ast.AST) -> bool:
        """What trains in ``unit`` is only calls of the file's helpers whose
        training branches the call's literal arguments rule out
        (:meth:`_trains_only_when_told`): no backward pass or optimizer step
        of its own, no other call that trains."""
        semantic = self.ctx.semantic
        analysis = semantic.canonical(unit)
        if analysis.backward_calls or analysis.optimizer_steps:
            return False
        told = False
        for call, site in analysis.call_sites.items():
            if site.callee is None or not semantic.canonical(site.callee).trains:
                continue
            if not self._trains_only_when_told(call, site.callee):
                return False
            told = True
        return told

    def _judged_on_its_own(self, callee: ast.AST) -> bool:
        """A helper whose forward passes are reported in its own body, not at
        its calls: an evaluation function by its name, a module's ``forward``
        (its calls are forward passes themselves), a special method
        (``__init__`` runs at construction) or a module's sampling method.
        Any other method of a module (``model.inference(a, b)``,
        which runs the module's layers) serves whatever its caller does, so
        the caller's evaluation context decides at the call."""
        semantic = self.ctx.semantic
        if semantic.is_module_method(callee):
            return callee.name.startswith("__") or callee.name == "forward" or bool(SAMPLING_METHOD.search(callee.name))
        return bool(EVAL_FUNCTION.search(callee.name)) or self._evaluates_for_the_script(callee) \
            or self._evaluates_for_a_trainer(callee)

    def _callee_disables_grad(self, call: ast.Call) -> bool:
        """The call runs an in-file function or method decorated
        ``@torch.inference_mode()`` / ``@torch.no_grad()``: its forward pass
        runs with grad disabled, whatever the caller's mode. A method called
        on a module whose class the model does not know (``self.net =
        net``, then ``self.net.score(x)``) is taken for that method of the
        file's module classes when every one of them that defines it
        decorates it so."""
        semantic = self.ctx.semantic
        callee = semantic.callee(call)
        if isinstance(callee, FUNCTION_TYPES):
            return semantic.decorator_grad(callee) is Tri.NO
        if not isinstance(call.func, ast.Attribute):
            return False
        owner = semantic.value(call.func.value)
        if owner.kind is not Kind.MODULE:
            return False
        if owner.klass is not None:
            info = semantic.classes.get(owner.klass)
            candidates = [] if info is None else [klass for klass in info.mro() if call.func.attr in klass.methods][:1]
        else:
            candidates = [klass for klass in semantic.classes.by_node.values()
                          if klass.is_module and call.func.attr in klass.methods]
        return bool(candidates) and all(
            semantic.decorator_grad(klass.methods[call.func.attr]) is Tri.NO for klass in candidates)

    def _computes_gradients(self, call: ast.Call) -> bool:
        """``call`` runs what the file made with a ``torch.func`` gradient
        transform (:data:`~fw.GRADIENT_TRANSFORMS`, possibly inside
        :data:`~fw.BATCHING_TRANSFORMS`): ``layer.per_sample = vmap(grad(f))``
        assigned to that attribute (every assignment of it in the file), then
        ``layer.per_sample(params, x, g)``. It computes gradients, forward
        and backward in one call: no inference forward."""
        if not isinstance(call.func, ast.Attribute):
            return False
        memo = self.__dict__.setdefault("_gradient_attributes", {})
        attribute = call.func.attr
        if attribute not in memo:
            assigned = [node.value for node in ast.walk(self.ctx.module) if isinstance(node, ast.Assign)
                        and any(isinstance(target, ast.Attribute) and target.attr == attribute for target in node.targets)]
            memo[attribute] = bool(assigned) and all(self._gradient_transform(value) for value in assigned)
        return memo[attribute]

    def _gradient_transform(self, expr: ast.expr, depth: int = 0) -> bool:
        """``expr`` is ``grad(f)``-like, or ``vmap(...)`` of one (of a name bound to one)."""
        if not isinstance(expr, ast.Call) or not expr.args or depth > 3:
            return False
        qualified = self.ctx.qualified(expr.func)
        if qualified in fw.GRADIENT_TRANSFORMS:
            return True
        if qualified not in fw.BATCHING_TRANSFORMS:
            return False
        wrapped = expr.args[0]
        if isinstance(wrapped, ast.Name):
            semantic = self.ctx.semantic
            bindings = semantic.scopes.bindings_of(wrapped.id, semantic.scopes.scope_for(wrapped))
            statements = [semantic.parents.get(binding.node) for binding in bindings]
            return bool(statements) and all(isinstance(statement, ast.Assign) and self._gradient_transform(statement.value, depth + 1)
                                            for statement in statements)
        return self._gradient_transform(wrapped, depth + 1)

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

    def _lone_layer_probe(self, call: ast.Call, unit: ast.AST) -> bool:
        """At a script's (or a notebook cell's) top level, outside every loop
        and comprehension: a call of one ``torch.nn`` layer that saves only
        its input and its own parameters for backward
        (:data:`~memlint.lint.semantic.torch_ops.INPUT_SAVING_LAYERS`:
        ``conv(img).shape``), whose output is only shown or measured and
        fed to nothing else. Autograd then keeps no tensor that is not alive
        anyway: no activation is saved for nothing."""
        semantic = self.ctx.semantic
        if not isinstance(unit, ast.Module) or semantic.enclosing_loops(call) or semantic.comprehension_of(call) is not None:
            return False
        return _input_saving_layer(semantic.value(call.func)) and _only_inspected(semantic, call, unit)

    def _attacking_forward(self, call: ast.Call) -> bool:
        """A forward pass of a module built by a library whose forward runs an
        adversarial attack with autograd when asked to
        (:data:`~memlint.lint.semantic.frameworks.ATTACKING_FORWARD`:
        ``model, _ = make_and_restore_model(...)`` then
        ``model(x, y, make_adv=True)``): it differentiates with respect to its
        input, so it needs autograd and ``no_grad`` would break it."""
        semantic = self.ctx.semantic
        builder = _builder_of(semantic, call.func)
        keyword = fw.ATTACKING_FORWARD.get(self.ctx.qualified(builder.func)) if builder is not None else None
        if keyword is None:
            return False
        value = next((k.value for k in call.keywords if k.arg == keyword), None)
        return value is not None and not (isinstance(value, ast.Constant) and not value.value)

    def _repeated_or_script(self, call: ast.Call, unit: ast.AST) -> bool:
        """After ``model.eval()`` in a function that does not say it
        evaluates: the forward pass runs once per batch (a run loop, a
        comprehension over a stream, or a function that its callers run
        repeatedly: a ``detect(net, image)`` called for every image), or in
        a script's top level."""
        semantic = self.ctx.semantic
        if isinstance(unit, ast.Module) or semantic.run_loops(call):
            return True
        if isinstance(unit, FUNCTION_TYPES) and semantic.repetition(unit) is not None:
            return True
        comprehension = semantic.comprehension_of(call)
        return comprehension is not None and semantic.is_run_comprehension(comprehension)

    def _in_evaluation_loop(self, call: ast.Call, eval_calls: list[ast.Call]) -> bool:
        """In a function that also trains: ``call`` runs after one of ``eval_calls``
        and its innermost loop has no training step."""
        semantic = self.ctx.semantic
        loops = semantic.enclosing_loops(call)
        if not loops or not self._after_eval(eval_calls, call):
            return False
        return not semantic.trains(loops[0].body) or self._evaluation_branch(call, eval_calls, loops[0])

    def _script_evaluation(self, call: ast.Call, unit: ast.AST, eval_calls: list[ast.Call]) -> bool:
        """In a script's top level that also trains: ``call`` runs outside every
        loop, after a module was switched to evaluation mode (once training is
        done, ``model.eval()`` then ``preds = model(test_x)``), and no backward
        pass uses its output."""
        return isinstance(unit, ast.Module) and not self.ctx.semantic.enclosing_loops(call) \
            and self._after_eval(eval_calls, call) and not self.ctx.semantic.result_backpropagated(call)

    def _evaluation_branch(self, call: ast.Call, eval_calls: list[ast.Call], loop: ast.AST) -> bool:
        """``call`` runs in a branch of an ``if`` (or a ``case`` of a ``match``,
        ``case "valid":``) inside the training loop
        (``if step % 100 == 0:``) that switches a module to evaluation mode
        before it and takes no training step itself: a periodic evaluation
        within the loop, whose forward passes no backward pass uses."""
        semantic = self.ctx.semantic
        child: ast.AST = call
        for ancestor in semantic.ancestors(call):
            if ancestor is loop:
                return False
            branch = _branch_of(ancestor, child)
            if branch is not None:
                if any(_within(eval_call, branch) and eval_call.lineno <= call.lineno for eval_call in eval_calls):
                    return not semantic.trains(branch) and not (
                        semantic.result_backpropagated(call) and self._backward_outside(call, _other_branches(ancestor, branch, semantic.parents)))
            child = ancestor
        return False

    def _backward_outside(self, call: ast.Call, others: list[ast.stmt]) -> bool:
        """A backward pass of ``call``'s unit lies outside ``others``, the
        branches exclusive with ``call``'s own: the result-to-backward flow,
        which follows names (``pred`` is backpropagated in the ``train``
        case), may be this branch's; one only in a branch that excludes this
        one (it rebinds the names first) is not."""
        backwards = self.ctx.semantic.analysis_of(call).backward_calls
        return any(not _within(backward, others) for backward in backwards)

    def _after_eval(self, eval_calls: list[ast.Call], call: ast.Call) -> bool:
        """``call`` can run after one of ``eval_calls`` with the module still in
        evaluation mode: along the flow of control (not from an exclusive
        branch, not only around a loop's back edge), and no ``.train()`` of
        the same module runs unconditionally in between."""
        semantic = self.ctx.semantic
        # a module built after the switch and run once, outside loops: a check of that new module
        called = call.func.id if isinstance(call.func, ast.Name) and not semantic.enclosing_loops(call) else None
        for eval_call in eval_calls:
            receiver = dotted_name(eval_call.func.value)
            if semantic.runs_after(eval_call, call, undone=lambda statement, receiver=receiver: _switches_back(statement, receiver)
                                   or self._builds_module(statement, called)):
                return True
        return False

    def _builds_module(self, statement: ast.stmt, name: str | None) -> bool:
        """``statement`` binds ``name`` to a module it constructs from a
        module class of the file (``net = Net(...)``) out of plain values (no
        module or tensor given to wrap): a new module starts in training mode (torch 2.13.0
        ``torch/nn/modules/module.py`` ``Module.__init__``: ``self.training =
        True``), whatever was switched to evaluation mode before it."""
        if name is None or not isinstance(statement, ast.Assign) or not isinstance(statement.value, ast.Call):
            return False
        if not any(isinstance(target, ast.Name) and target.id == name for target in statement.targets):
            return False
        semantic = self.ctx.semantic
        constructor = statement.value
        built = semantic.value(constructor)
        if built.kind is not Kind.MODULE:
            return False
        if any(semantic.value(argument).kind is Kind.MODULE or semantic.value(argument).may_hold_tensor
               for argument in call_arguments(constructor)):
            return False  # `TopOnly(net)`: a wrapper runs the module it is given, in that module's mode
        return built.klass is not None and dotted_name(constructor.func) == built.klass.rsplit(".", 1)[-1]

    def _in_sampling_loop(self, call: ast.Call) -> bool:
        """In a module's sampling method: ``call`` repeats in a loop of steps,
        not only in a loop over the module's layers (``for block in
        self.blocks``: one pass through stacked layers, as in ``forward``)."""
        semantic = self.ctx.semantic
        return any(not semantic.walks_layers(loop) for loop in semantic.enclosing_loops(call))

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


def _is_mode_switch(call: ast.Call, mode: str) -> bool:
    """``call`` is ``x.eval()`` (no arguments: a module's) for ``mode``
    "eval", ``x.train()``/``x.train(True)`` for "train"."""
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr != mode or call.keywords:
        return False
    if not call.args:
        return True
    return mode == "train" and len(call.args) == 1 and isinstance(call.args[0], ast.Constant) and call.args[0].value is True


def _mode_switches(semantic, unit: ast.AST, mode: str) -> list[ast.Call]:
    """Cheap, syntactic: the unit's own ``mode`` switches (:func:`_is_mode_switch`)."""
    return [call for call in semantic.own_nodes(unit, (ast.Call,)) if _is_mode_switch(call, mode)]


def _eval_calls(semantic, unit: ast.AST) -> list[ast.Call]:
    """The unit's ``m.eval()`` calls on a value known as a module apart from
    that switch (an environment wrapper's or an agent object's ``eval()`` is
    not a module's)."""
    return [call for call in _mode_switches(semantic, unit, "eval") if semantic.module_apart_from_mode(call.func.value)]



def _branch_of(ancestor: ast.AST, child: ast.AST) -> list[ast.stmt] | None:
    """The statements of ``ancestor`` that hold ``child`` when ``ancestor``
    chooses between exclusive branches: the body or ``else`` of an ``if``
    (not its test), the body of a ``match`` statement's ``case`` (not its
    pattern or guard); None otherwise."""
    if isinstance(ancestor, ast.If) and child is not ancestor.test:
        return ancestor.body if child in ancestor.body else ancestor.orelse
    if isinstance(ancestor, ast.match_case) and child in ancestor.body:
        return ancestor.body
    return None


def _other_branches(ancestor: ast.AST, branch: list[ast.stmt], parents) -> list[ast.stmt]:
    """The statements of the branches exclusive with ``branch`` (as
    :func:`_branch_of` gave it from ``ancestor``): the other arm of the
    ``if``; the bodies of the ``match`` statement's other cases."""
    if isinstance(ancestor, ast.If):
        return ancestor.orelse if branch is ancestor.body else ancestor.body
    match = parents.get(ancestor)
    if not isinstance(match, ast.Match):
        return []
    return [statement for case in match.cases if case is not ancestor for statement in case.body]


def _within(node: ast.AST, statements: list[ast.stmt]) -> bool:
    """``node`` lies in one of ``statements``, by source position."""
    start = (node.lineno, node.col_offset)
    return any((s.lineno, s.col_offset) <= start <= (s.end_lineno, s.end_col_offset) for s in statements)


def _switches_back(statement: ast.stmt, receiver: str | None) -> bool:
    """``statement`` is ``receiver.train()`` (or ``.train(True)``): evaluation mode ends there."""
    if receiver is None or not isinstance(statement, ast.Expr) or not isinstance(statement.value, ast.Call):
        return False
    call = statement.value
    return _is_mode_switch(call, "train") and dotted_name(call.func.value) == receiver

def _input_saving_layer(value) -> bool:
    """``value`` is a single ``torch.nn`` layer of
    :data:`~memlint.lint.semantic.torch_ops.INPUT_SAVING_LAYERS` (built by the
    library, not a container nor a module class of the file)."""
    name = value.type_name or ""
    return (value.kind is Kind.MODULE and value.klass is None and name.startswith("torch.nn.")
            and name.rsplit(".", 1)[-1] in torch_ops.INPUT_SAVING_LAYERS)


def _only_inspected(semantic, call: ast.Call, unit: ast.AST) -> bool:
    """What ``call`` returns is only shown or measured (:func:`_inspection`):
    the call itself, or every read in ``unit`` of the one name it is
    assigned to."""
    if _inspection(semantic, call):
        return True
    parent = semantic.parents.get(call)
    if not (isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name)):
        return False
    name = parent.targets[0].id
    reads = [node for node in ast.walk(unit) if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)]
    return all(_inspection(semantic, read) for read in reads)


def _inspection(semantic, node: ast.expr) -> bool:
    """``node``'s value is only shown or measured, which records nothing in
    autograd: a bare expression statement, a metadata attribute
    (``.shape``, :data:`~memlint.lint.semantic.torch_ops.METADATA_ATTRIBUTES`),
    a method returning a Python value (``.size()``), an argument of
    ``print`` or a field of an f-string."""
    parent = semantic.parents.get(node)
    if isinstance(parent, (ast.Expr, ast.FormattedValue)):
        return True
    if isinstance(parent, ast.Attribute) and parent.value is node:
        if parent.attr in torch_ops.METADATA_ATTRIBUTES:
            return True
        caller = semantic.parents.get(parent)
        return parent.attr in torch_ops.PYTHON_RESULT and isinstance(caller, ast.Call) and caller.func is parent
    return isinstance(parent, ast.Call) and node in parent.args and semantic.qualified(parent.func) == "print"


def _builder_of(semantic, func: ast.expr) -> ast.Call | None:
    """The call whose result was last assigned, before ``func``, to the name
    ``func`` is (``model = build(...)``, ``model, ckpt = build(...)``)."""
    if not isinstance(func, ast.Name):
        return None
    position = semantic.index.position_of(func)
    if position is None:
        return None
    found, found_at = None, -1
    for binding in semantic.scopes.bindings_of(func.id, semantic.scopes.scope_for(func)):
        at = semantic.index.position_of(binding.node)
        if at is None or at >= position or at <= found_at:
            continue
        statement = next((a for a in semantic.ancestors(binding.node) if isinstance(a, ast.stmt)), None)
        found_at = at
        found = statement.value if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call) else None
    return found
