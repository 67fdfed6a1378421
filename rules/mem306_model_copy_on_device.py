"""MEM306 model-copy-on-device."""

from __future__ import annotations

import ast

from memlint.lint.diagnostic import Severity
from memlint.lint.rule import Rule
from memlint.lint.semantic.operations import literal_iterable
from memlint.lint.semantic.torch_ops import MODULE_RETURNING_METHODS
from memlint.lint.semantic.values import Kind, Tri
from memlint.lint.syntax import FOR_TYPES

DEEPCOPY = frozenset({"copy.deepcopy"})
#: Methods that take the copy to the host at once (``deepcopy(m).cpu()``).
_TO_HOST = frozenset({"cpu", "numpy", "tolist"})
#: How many of the file's callers are followed back to a run loop (the semantic
#: model's own calling contexts go two callers deep, docs/semantic-model.md).
_MAX_CALLER_DEPTH = 2


class ModelCopyOnDevice(Rule):
    """## What it does
    Reports `copy.deepcopy` of a module, or of its `state_dict()`, while the
    module is on the accelerator, in code that runs again and again: inside
    a loop of the run (over epochs or batches), or in a function that runs
    once per batch or epoch (a framework hook such as Lightning's
    `on_train_epoch_end`, a function or method called from such a loop,
    directly or through other functions of the file), also inside a loop
    over a fixed set of modules there (one copy per EMA model per call); and
    in any loop that is no literal display (over clients, folds, members)
    when each copy is kept past its iteration: appended to, or stored under
    a key of, a container made before the loop. Typical
    cases: a "best model" snapshot after each validation, an EMA or teacher
    model re-created every epoch, a copy per fold or trial that is kept.

    ## Why is this bad?
    A deep copy of a module on the GPU allocates a second full set of its
    parameters and buffers on the GPU (a `state_dict()` copy clones every
    tensor where it lives). The copy stays until it is replaced, and while
    it is replaced two copies exist: a model that fills most of the device
    runs out of memory at the first snapshot, and copies kept in a list grow
    without bound.

    ## Example
    ```python
    model = Net().to("cuda")
    for epoch in range(epochs):
        train_one_epoch(model, loader, optimizer)
        if evaluate(model) > best_acc:
            best_model = copy.deepcopy(model)
    ```

    ## Use instead
    ```python
    model = Net().to("cuda")
    for epoch in range(epochs):
        train_one_epoch(model, loader, optimizer)
        if evaluate(model) > best_acc:
            best_state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    ```

    ## Known problems
    Whether the module is on the accelerator comes from the same file
    (`.cuda()`, `.to(device)`, `device=`, a framework hook's module); a
    module that arrives from another file is not known to be there, and the
    rule stays silent; an attribute that a base class uses but never assigns
    (`self.model` in its `fit`) is what the file's subclasses assign to it.
    A copy kept per iteration through a call is followed only when that
    call may hand the module back (not a call whose value is a number or a
    tensor). A copy that is moved to the host in the same
    expression (`copy.deepcopy(model).cpu()`, also after methods that return
    the module, `copy.deepcopy(model).eval().requires_grad_(False).cpu()`) is not reported, although the
    copy exists on the device for a moment. One copy made before the loop
    (an EMA model, a frozen teacher) is the intended pattern and is not
    reported; nor is a copy in a test function, in a module's forward pass
    (and the methods it calls), or in a function that takes one training
    step but that no loop of the file is seen to call. An `nn.ModuleList`,
    `nn.ModuleDict` or `nn.Sequential` is on the device where the modules
    given to it are.

    ## References
    - [Saving and loading models: save the best model's state_dict](https://pytorch.org/tutorials/beginner/saving_loading_models.html)
    - [copy.deepcopy](https://docs.python.org/3/library/copy.html#copy.deepcopy)
    """

    CODE = "MEM306"
    NAME = "model-copy-on-device"
    MESSAGE = "`copy.deepcopy` of a module on the accelerator runs every iteration: each copy is another full set of weights on the device"
    SEVERITY = Severity.WARNING
    TRIGGERS = ("deepcopy",)
    NEEDS_NAMES = ("deepcopy",)
    FRAMEWORK = "torch"
    VALID = (
        "import copy\nimport torch.nn as nn\ndef fit(loader, opt, epochs):\n    model = nn.Linear(4, 2).cuda()\n    ema = copy.deepcopy(model)\n    for epoch in range(epochs):\n        for x in loader:\n            model(x).sum().backward()\n            opt.step()\n",
        "import copy\nimport torch.nn as nn\ndef fit(loader, opt, epochs):\n    model = nn.Linear(4, 2).cuda()\n    for epoch in range(epochs):\n        for x in loader:\n            model(x).sum().backward()\n            opt.step()\n        best = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}\n",
        "import copy\nimport torch.nn as nn\ndef fit(loader, opt, epochs):\n    model = nn.Linear(4, 2)\n    for epoch in range(epochs):\n        for x in loader:\n            model(x).sum().backward()\n            opt.step()\n        best = copy.deepcopy(model)\n",
        "import copy\nimport torch.nn as nn\ndef fit(loader, opt, epochs):\n    model = nn.Linear(4, 2).cuda()\n    for epoch in range(epochs):\n        for x in loader:\n            model(x).sum().backward()\n            opt.step()\n        best = copy.deepcopy(model).cpu()\n",
        "import copy\ndef fit(configs, epochs):\n    for cfg in configs:\n        cfg = copy.deepcopy(cfg)\n        cfg['lr'] = 0.1\n",
    )
    INVALID = (
        "import copy\nimport torch.nn as nn\ndef fit(loader, opt, epochs):\n    model = nn.Linear(4, 2).cuda()\n    for epoch in range(epochs):\n        for x in loader:\n            model(x).sum().backward()\n            opt.step()\n        best = copy.deepcopy(model)  # expect: MEM306\n",
        "from copy import deepcopy\nimport torch\ndef fit(model, loader, opt, device):\n    model.to(device)\n    for x in loader:\n        model(x.to(device)).sum().backward()\n        opt.step()\n        snapshot = deepcopy(model.state_dict())  # expect: MEM306\n",
        "import copy\nimport lightning as L\nclass EMA(L.Callback):\n    def on_train_epoch_end(self, trainer, pl_module):\n        self.teacher = copy.deepcopy(pl_module)  # expect: MEM306\n",
    )

    def visit_Call(self, node: ast.Call) -> None:
        if len(node.args) != 1 or node.keywords:
            return
        if isinstance(node.func, ast.Attribute) and node.func.attr != "deepcopy" or not isinstance(node.func, (ast.Attribute, ast.Name)):
            return  # cheap check first: `copy.deepcopy(...)`, `deepcopy(...)` or an imported alias
        if isinstance(node.func, ast.Name) and node.func.id != "deepcopy" and node.func.id not in self._aliases():
            return
        if self.ctx.qualified(node.func) not in DEEPCOPY:
            return
        if not self._copies_device_weights(node.args[0]) or self._taken_to_host(node):
            return
        if self._repeats(node):
            self.report(node)

    def _aliases(self) -> frozenset[str]:
        """Local names that ``from copy import deepcopy as <name>`` binds."""
        found = self.__dict__.get("_alias_names")
        if found is None:
            found = self._alias_names = frozenset(
                alias.asname for node in self.ctx.index.of_type(ast.ImportFrom) if node.module == "copy"
                for alias in node.names if alias.name == "deepcopy" and alias.asname)
        return found

    def _copies_device_weights(self, copied: ast.expr) -> bool:
        """``copied`` is a module on the accelerator, or such a module's ``state_dict()``."""
        semantic = self.ctx.semantic
        value = semantic.value(copied)
        if value.kind is Kind.MODULE:
            return value.device is Tri.YES
        if isinstance(copied, ast.Call) and isinstance(copied.func, ast.Attribute) and copied.func.attr == "state_dict":
            owner = semantic.value(copied.func.value)
            return owner.kind is Kind.MODULE and owner.device is Tri.YES
        return False

    def _taken_to_host(self, node: ast.Call) -> bool:
        """``copy.deepcopy(m).cpu()`` / ``.to("cpu")``, also at the end of a
        chain of methods that return the module itself
        (``deepcopy(m).eval().requires_grad_(False).cpu()``): the copy leaves
        the device at once."""
        parents = self.ctx.semantic.parents
        while True:
            parent = parents.get(node)
            call = parents.get(parent) if isinstance(parent, ast.Attribute) else None
            if not isinstance(call, ast.Call) or call.func is not parent:
                return False
            if parent.attr in _TO_HOST:
                return True
            if parent.attr == "to" and call.args and isinstance(call.args[0], ast.Constant) and call.args[0].value == "cpu":
                return True
            if parent.attr not in MODULE_RETURNING_METHODS:
                return False
            node = call  # `.eval()`, `.requires_grad_(False)`, `.half()`: the same module, go on

    def _repeats(self, node: ast.Call) -> bool:
        """The copy is made again and again: in a run loop, or in a function
        that repeats (a framework hook, a function called from a run loop,
        directly or through the file's functions) -- also inside a loop over
        a fixed structure there (one copy per EMA model, per call)."""
        semantic = self.ctx.semantic
        function = semantic.function_of(node)
        if function is not None and (semantic.is_test_function(function) or semantic.in_forward_pass(function) is not None):
            return False
        if semantic.run_loops(node) or self._kept_per_iteration(node):
            return True
        if function is None or semantic.comprehension_of(node) is not None:
            return False  # module-level code, or a comprehension over a fixed structure
        return self._called_repeatedly(function, depth=0)

    def _kept_per_iteration(self, node: ast.Call) -> bool:
        """In a loop that is no literal display (over clients, folds, members),
        the copy is kept past its iteration: it, or the name it is bound to,
        is handed to ``append``/``extend``/``insert``/``add`` of a container
        the loop did not create, or stored under a key of one
        (``copies[k] = deepcopy(m)``): one more copy on the device per
        iteration, all alive at once."""
        semantic = self.ctx.semantic
        loops = [loop for loop in semantic.enclosing_loops(node)
                 if not (isinstance(loop, FOR_TYPES) and literal_iterable(loop.iter))]
        if not loops:
            return False
        return semantic.kept_past_iteration(loops[0], node, _bound_names(semantic.parents.get(node), node))

    def _called_repeatedly(self, function: ast.AST, depth: int) -> bool:
        """A framework hook or driver runs ``function``, or a call of the file
        runs it from a run loop or from a function that is itself so called
        (``update()`` per step calls ``checkpoint()``); not a guess that a
        training step repeats."""
        semantic = self.ctx.semantic
        repetition = semantic.repetition(function)
        if repetition is None or depth > _MAX_CALLER_DEPTH:
            return False
        if repetition.reason in ("hook", "driver"):
            return True
        if repetition.reason != "caller":
            return False
        return any(semantic.run_loops(site.call) or self._called_repeatedly(semantic.unit_of(site.call), depth + 1)
                   for site in semantic.sites_of(function))


def _bound_names(statement: ast.AST | None, call: ast.Call) -> frozenset[str]:
    """The plain names ``statement`` binds the copy to (``local = deepcopy(m)``)."""
    if isinstance(statement, ast.Assign) and statement.value is call:
        return frozenset(t.id for t in statement.targets if isinstance(t, ast.Name))
    return frozenset()
