"""MEM101 loss-accumulated-with-graph."""

import ast

from memlint.lint.diagnostic import Fix, Severity
from memlint.lint.names import dotted_name, root_name
from memlint.lint.patterns import method_call_plan
from memlint.lint.rule import Rule
from memlint.lint.semantic.stores import accumulated_value
from memlint.lint.semantic.values import Kind
from memlint.lint.syntax import FUNCTION_TYPES
from memlint.lint.walk import descendants

_SUMS = (ast.Add, ast.Sub)
_LITERAL_CONTAINERS = (ast.List, ast.Tuple, ast.Set, ast.ListComp, ast.SetComp, ast.Dict, ast.DictComp)


class LossAccumulatedWithGraph(Rule):
    """## What it does
    Reports a total kept across the iterations of a training or evaluation
    loop that adds a graph-attached tensor: `total += loss`,
    `total = total + loss`, `acc[key] += losses[key] / n`,
    `acc[key] = acc.get(key, 0.0) + value` (the item read back with
    `get`/`setdefault` and written again: one finding, not also MEM102's), an exponential
    moving average `ema = 0.9 * ema + 0.1 * loss`, `self.running += loss`
    in a per-batch hook (Lightning `training_step`), or a call such as
    `meter.update(loss)` where the method (defined in the same file) adds
    its argument into the object's state, including a meter kept in a dict
    of meters (`meters.setdefault(name, Meter()).update(loss)`).

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
    type and device and loses only the graph, which is safe (the added
    tensor itself is untouched, so its own backward pass still works). Use
    `.item()` by hand when a Python float is wanted (it synchronises with
    the GPU). No fix is offered for a conditional or `and`/`or` value
    (`total += loss if flag else 0`: its other branch may be no tensor), for
    a container, for a recurrence other than `total = total + x`, or at a
    call (`meter.update(loss)`).

    ## Known problems
    A total reset only under a periodic condition (`if step % 100 == 0:
    total = 0`) is still kept across the iterations between resets and is
    reported, unless it is the total of one gradient-accumulation window:
    what is added (or a value it is computed from) is backpropagated in the
    same iteration without `retain_graph`, which frees its saved tensors,
    and the total is reset in the branch that takes the optimizer step
    (torchtune's `running_loss += current_loss; current_loss.backward()`,
    `running_loss = 0` after `optimizer.step()`): only a few graph nodes of
    one window are kept. A total reset only once per epoch, or whose addend
    is never backpropagated, is reported. A total that is itself backpropagated (a loss summed over heads,
    chunks or micro-batches for one backward pass) is not reported, nor one
    returned from a function that no call in the same file backpropagates
    or detaches (its callers decide) unless that function switches a model
    to `eval()` (its total is a metric). Values are followed across functions
    and classes defined in the same file, a returned tuple position by
    position (`loss, stats, n = step(b)` attaches only `loss`, also when the
    function returns `None` on an early exit). `obj.backward(x, ...)` where
    `obj` is an instance of a class of the file that defines `backward`
    runs that method (hand-written gradients), so it marks nothing as
    differentiated; a loss handed to a function of
    another module is not followed. The value of a torchmetrics metric that
    is not differentiable (`Accuracy`, `F1Score`, `Precision`, ... and their
    `Binary`/`Multiclass`/`Multilabel` classes) carries no graph and is not
    reported; a differentiable one (`MeanSquaredError`) is.

    ## References
    - [PyTorch FAQ: my model reports "cuda runtime error(2): out of memory"](https://pytorch.org/docs/stable/notes/faq.html)
    """

    CODE = "MEM101"
    NAME = "loss-accumulated-with-graph"
    MESSAGE = "a graph-attached tensor is added to a total kept across iterations: every iteration's autograd graph stays alive"
    SEVERITY = Severity.ERROR
    FIX_TITLE = "Add `.detach()` to the accumulated value"
    TRIGGERS = ("+", "-", "(")
    NEEDS_GRAPH_SOURCE = True
    FRAMEWORK = "torch"
    VALID = (
        "def f(model, loader, crit, opt):\n    total = 0.0\n    for x, y in loader:\n        loss = crit(model(x), y)\n        loss.backward()\n        total += loss.item()\n",
        "import torch.nn as nn\ndef f(x, y, n_heads):\n    heads = nn.ModuleList([nn.Linear(4, 2) for _ in range(n_heads)])\n    loss = 0\n    for head in heads:\n        loss += nn.functional.cross_entropy(head(x), y)\n    loss.backward()\n",
        "import torch\ndef f(model: torch.nn.Module, loader, crit):\n    total = 0.0\n    with torch.no_grad():\n        for x, y in loader:\n            total += crit(model(x), y)\n    return total\n",
        "def f(model, loader, opt):\n    correct = 0\n    for x, y in loader:\n        out = model(x)\n        out.sum().backward()\n        correct += (out.argmax(1) == y).sum()\n",
        "import torch\ndef f(model: torch.nn.Module, loader, opt):\n    for x, y in loader:\n        loss = 0.0\n        for term in model(x):\n            loss = loss + term\n        loss.backward()\n        opt.step()\n",
        "class Meter:\n    def __init__(self):\n        self.sum = 0.0\n    def update(self, v):\n        self.sum += v\ndef f(model, loader, opt):\n    meter = Meter()\n    for x in loader:\n        loss = model(x).sum()\n        loss.backward()\n        meter.update(loss.item())\n",
    )
    INVALID = (
        "def f(model, loader, crit, opt):\n    total = 0.0\n    for x, y in loader:\n        loss = crit(model(x), y)\n        loss.backward()\n        total += loss  # expect: MEM101\n",
        "def f(model, loader, crit):\n    total = 0.0\n    for x, y in loader:\n        loss = crit(model(x), y)\n        loss.backward()\n        total = total + loss  # expect: MEM101\n",
        "import torch.nn as nn\ndef f(loader, n):\n    model = nn.Linear(4, 4)\n    acc = {}\n    for x in loader:\n        losses = {'l1': model(x).abs().mean(), 'l2': model(x).pow(2).mean()}\n        for k in losses:\n            acc[k] += losses[k] / n  # expect: MEM101\n",
        "def step(model, opt, x):\n    loss = model(x).sum()\n    loss.backward()\n    opt.step()\n    return loss\ndef train(model, opt, loader):\n    total = 0\n    for x in loader:\n        total += step(model, opt, x)  # expect: MEM101\n    return total\n",
        "class Meter:\n    def __init__(self):\n        self.sum = 0.0\n    def update(self, v):\n        self.sum += v\ndef f(model, loader, opt):\n    meter = Meter()\n    for x in loader:\n        loss = model(x).sum()\n        loss.backward()\n        meter.update(loss)  # expect: MEM101\n",
        "def f(model, loader, opt):\n    ema = None\n    for x in loader:\n        loss = model(x).mean()\n        loss.backward()\n        opt.step()\n        ema = loss if ema is None else 0.98 * ema + 0.02 * loss  # expect: MEM101\n",
    )

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.op, _SUMS):
            self._check(node, node.target, node.value, fixable=True)

    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) != 1 or root_name(node.targets[0]) is None:
            return
        target = node.targets[0]
        added = self._added_to(target, node.value)
        if added is not None:
            self._check(node, target, added, fixable=True)
        elif self._recurrence(target, node.value):
            self._check(node, target, node.value, fixable=False)

    def visit_Call(self, node: ast.Call) -> None:
        semantic = self.ctx.semantic
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        if name not in semantic.accumulating_functions() or not semantic.may_call_local(node):
            return  # cheap checks first: no function of this name adds into state
        effects = [e for e in semantic.call_effects(node) if e.kind == "accumulate" and e.value.attached]
        if not effects or semantic.grad_disabled(node):
            return
        for effect in effects:
            root = semantic.effect_root(node, effect)
            if root is not None and semantic.keeper(root, node) is not None:
                self.report(node, message=f"{self.MESSAGE} (the call adds it into `{effect.target}`)")
                return

    # -- shapes ---------------------------------------------------------------------
    def _added_to(self, target: ast.expr, value: ast.expr) -> ast.expr | None:
        """``loss`` in ``total = total + loss`` / ``total = loss + total`` /
        ``acc[k] = acc.get(k, 0.0) + loss`` (the shared shape of :func:`accumulated_value`)."""
        if not isinstance(value, ast.BinOp) or not isinstance(value.op, _SUMS):
            return None  # cheap check first
        return accumulated_value(self.ctx.semantic, target, value)

    def _recurrence(self, target: ast.expr, value: ast.expr) -> bool:
        """``ema = a * loss + (1 - a) * ema``: an arithmetic value that reads the target."""
        name = dotted_name(target)
        branches = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
        if name is None or not any(isinstance(branch, ast.BinOp) for branch in branches):
            return False
        return any(isinstance(branch, ast.BinOp) and any(
            dotted_name(node) == name for node in descendants(branch) if isinstance(node, (ast.Name, ast.Attribute))
        ) for branch in branches)

    # -- decision ---------------------------------------------------------------------
    def _check(self, node: ast.stmt, target: ast.expr, added: ast.expr, fixable: bool) -> None:
        if isinstance(added, _LITERAL_CONTAINERS):
            return  # `hist += [loss]` collects rather than sums: MEM102's finding
        semantic = self.ctx.semantic
        root = root_name(target)
        if root is None or not (semantic.enclosing_loops(node) or semantic.may_persist(root, node)):
            return  # cheap checks first: the rest interprets the function
        function = semantic.function_of(node)
        if function is not None and semantic.is_module_method(function):
            return  # state kept by a module's forward: MEM108's finding
        if semantic.holds_no_graph(added):
            return
        if semantic.grad_disabled(node):
            return
        value = semantic.value(added)
        if not value.attached or value.kind is Kind.CONTAINER:
            return
        if isinstance(target, ast.Subscript) and semantic.value(target.value).kind is not Kind.CONTAINER:
            return  # `out[idx] += v` writes into a tensor in place (or into what the file does not show)
        keeper = semantic.keeper(root, node)
        if keeper is None or self._intended_sum(root, node):
            return
        if keeper.why == "calls" and semantic.repetition(keeper.function).reason == "caller":
            return  # judged at the calls, with their own arguments
        if keeper.why == "loop" and self._window_total(root, node, added, keeper.loop):
            return  # each addend's graph is freed by its own backward, the total reset at every step
        # `.detach()` is safe here: the value is graph-attached and not a container (checked above),
        # and it is added into a running total, so it is a tensor
        self.report(node, fix=self._detach_fix(added) if fixable else None)

    def _intended_sum(self, root: str, node: ast.stmt) -> bool:
        """A loss built on purpose: the total is backpropagated in its unit,
        or returned from a function whose in-file callers all backpropagate
        what it returns (or that no call of the file uses)."""
        semantic = self.ctx.semantic
        unit = semantic.unit_of(node)
        if semantic.backpropagated(root, unit):
            return True
        if not isinstance(unit, FUNCTION_TYPES) or root not in self._returned_names(unit):
            return False
        calls = semantic.call_sites_of(unit)
        if not calls:
            return not semantic.trains(unit.body) and not _switches_to_eval(semantic, unit)
        return any(semantic.result_backpropagated(call) for call in calls)

    def _window_total(self, root: str, node: ast.stmt, added: ast.expr, loop: ast.AST) -> bool:
        """A total of one gradient-accumulation window (torchtune's
        ``running_loss += current_loss``): what is added is backpropagated
        in the same iteration of ``loop`` without ``retain_graph``, so
        autograd frees its saved tensors there, and the total is reset in
        a branch of ``loop`` that takes the optimizer step. What stays is a
        chain of a few graph nodes, as long as one window."""
        return self._reset_at_step(root, loop) and self._backpropagated_in(added, loop)

    def _backpropagated_in(self, added: ast.expr, loop: ast.AST) -> bool:
        """A backward call inside ``loop``, not retaining the graph, differentiates
        a value computed from an attached name that ``added`` reads."""
        semantic = self.ctx.semantic
        read = {n.id for n in ast.walk(added) if isinstance(n, ast.Name) and semantic.value(n).attached}
        if not read:
            return False
        inside = set(map(id, ast.walk(loop)))
        for call, value in semantic.backward_calls(semantic.unit_of(loop)).items():
            if id(call) in inside and not _retains_graph(call) and read & value.sources:
                return True
        return False

    def _reset_at_step(self, root: str, loop: ast.AST) -> bool:
        """``root`` is rebound to a value that does not read it (``total = 0``)
        in a branch of an ``if`` inside ``loop`` whose same branch takes an
        optimizer step: the total lives for one accumulation window."""
        semantic = self.ctx.semantic
        for branch_holder in (n for n in ast.walk(loop) if isinstance(n, ast.If)):
            for branch in (branch_holder.body, branch_holder.orelse):
                nodes = [n for statement in branch for n in ast.walk(statement)]
                if any(isinstance(n, ast.Call) and semantic.is_optimizer_step(n) for n in nodes) \
                        and any(_resets(n, root) for n in nodes):
                    return True
        return False

    def _returned_names(self, function: ast.AST) -> frozenset[str]:
        """Names read by the function's own ``return`` statements (once per function)."""
        cache = self.__dict__.setdefault("_returned", {})
        if function not in cache:
            returns = self.ctx.semantic.own_nodes(function, (ast.Return,))
            cache[function] = frozenset(n.id for r in returns if r.value is not None for n in ast.walk(r.value) if isinstance(n, ast.Name))
        return cache[function]

    def _detach_fix(self, added: ast.expr) -> Fix | None:
        detached = method_call_plan(self, added, "detach")
        return None if detached is None else self.fix(detached)


def _resets(node: ast.AST, root: str) -> bool:
    """``node`` is ``root = value`` with a value that does not read ``root``."""
    if not isinstance(node, ast.Assign) or not any(dotted_name(t) == root for t in node.targets):
        return False
    return not any(dotted_name(n) == root for n in ast.walk(node.value) if isinstance(n, (ast.Name, ast.Attribute)))


def _retains_graph(call: ast.Call) -> bool:
    """The backward call passes ``retain_graph`` (or ``create_graph``) other than a constant False/None."""
    for keyword in call.keywords:
        if keyword.arg in ("retain_graph", "create_graph") or keyword.arg is None:
            if not (isinstance(keyword.value, ast.Constant) and keyword.value.value in (False, None)):
                return True
    return len(call.args) > 1  # positional retain_graph: the file does not say which


def _switches_to_eval(semantic, unit: ast.AST) -> bool:
    """The function calls ``model.eval()``: it evaluates, its sum is a metric, not a loss to backpropagate."""
    return any(isinstance(call.func, ast.Attribute) and call.func.attr == "eval" and not call.args and not call.keywords
               for call in semantic.own_nodes(unit, (ast.Call,)))
