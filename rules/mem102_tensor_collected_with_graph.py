"""MEM102 tensor-collected-with-graph."""

import ast

from memlint.lint.diagnostic import Fix, Severity
from memlint.lint.patterns import (
    bound_to_dict,
    collection_target,
    carried_across_iterations,
    names_in,
    outlives_iteration,
    with_method,
)
from memlint.lint.rule import Rule
from memlint.lint.walk import Visitor, file_memo, visit as walk_visit


class TensorCollectedWithGraph(Rule):
    """## What it does
    Reports a graph-attached tensor stored into a container that outlives
    the loop iteration: `outputs.append(out)`, `lst.extend(...)`,
    `self.outputs.append({"loss": loss})`, `buffer.add(logits=logits)`, or
    `d[k] = out` where `d` is defined outside the loop. Tensors nested in
    dicts, tuples and lists count.

    ## Why is this bad?
    The stored tensor keeps a reference to the autograd graph that produced
    it, so every iteration's activations stay allocated until the container
    is dropped — usually the end of the epoch or the run. Memory grows
    linearly with the number of iterations.

    ## Example
    ```python
    outputs = []
    for x, y in loader:
        out = model(x)
        loss = criterion(out, y)
        loss.backward()
        outputs.append(out)
    ```

    ## Use instead
    ```python
    outputs = []
    for x, y in loader:
        out = model(x)
        loss = criterion(out, y)
        loss.backward()
        outputs.append(out.detach().cpu())
    ```

    ## Fix safety
    The fix appends `.detach()` to a stored tensor expression (not to a
    dict or tuple literal, nor to a conditional or `and`/`or` value whose
    other branch may be no tensor), which keeps its value and device: safe.

    ## Known problems
    A list whose elements are later stacked and backpropagated on purpose
    (`torch.stack(losses).sum().backward()`) is not reported. Containers
    passed across functions are followed only within the same file.

    ## References
    - [PyTorch FAQ: memory usage grows in the training loop](https://pytorch.org/docs/stable/notes/faq.html)
    """

    CODE = "MEM102"
    NAME = "tensor-collected-with-graph"
    MESSAGE = "a graph-attached tensor is stored in a container that outlives the iteration: its autograd graph stays alive"
    SEVERITY = Severity.ERROR
    FIX_TITLE = "Add `.detach()` to the stored tensor"
    TRIGGERS = ("+= [", "+=[", "append", "extend", "insert", ".add(", "] =", "appendleft", ".put(", "update", "setdefault")
    NEEDS_GRAPH_SOURCE = True
    VALID = (
        "def f(model, loader):\n    outs = []\n    for x in loader:\n        outs.append(model(x).detach().cpu())\n",
        "import torch\ndef f(model, loader):\n    outs = []\n    with torch.no_grad():\n        for x in loader:\n            outs.append(model(x))\n",
        "import torch\ndef f(model, chunks, opt):\n    losses = []\n    for c in chunks:\n        losses.append(model(c).loss)\n    torch.stack(losses).mean().backward()\n",
        "def f(model, loader):\n    outs = []\n    for x in loader:\n        outs.append(model(x).argmax(-1))\n",
        "def f(model, loader):\n    for x in loader:\n        tmp = []\n        tmp.append(model(x))\n",
    )
    INVALID = (
        "def f(model, loader):\n    outs = []\n    for x in loader:\n        out = model(x)\n        outs.append(out)  # expect: MEM102\n",
        "def f(model, loader, crit):\n    hist = []\n    for x, y in loader:\n        loss = crit(model(x), y)\n        loss.backward()\n        hist.append({'loss': loss, 'n': len(x)})  # expect: MEM102\n",
        "def f(model, loader):\n    cache = {}\n    for i, x in enumerate(loader):\n        cache[i] = model(x)  # expect: MEM102\n",
        "class M:\n    def training_step(self, batch, idx):\n        loss = self.model(batch).loss\n        self.step_outputs.append(loss)  # expect: MEM102\n        return loss\n",
        "def f(model, loader, opt):\n    hist = []\n    for x in loader:\n        loss = model(x).sum()\n        hist += [loss]  # expect: MEM102\n        loss.backward()\n",
    )

    def visit_Call(self, node: ast.Call) -> None:
        self._check(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        self._check(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check(node)

    def _check(self, node: ast.Call | ast.Assign | ast.AugAssign) -> None:
        target = collection_target(node)
        if target is None:
            return
        container, values = target
        flow = self.ctx.dataflow
        if flow.grad_disabled(node) or not outlives_iteration(flow, container, node):
            return
        if flow.enclosing_loops(node) and carried_across_iterations(flow, container, node) is None:
            return  # outputs of a loop over layers or items: bounded, usually the graph being built
        if isinstance(node, ast.Assign) and not bound_to_dict(container, flow.scope_node(node), self.ctx):
            return  # `t[i] = v` writes into a tensor or an unknown object in place
        attached = [value for value in values if flow.is_attached(value)]
        if not attached or self._trained_on_later(container, node):
            return
        self.report(node, fix=self._fix(attached))

    def _trained_on_later(self, container: str, node: ast.AST) -> bool:
        """The container feeds a backward pass (stacked losses): collected on purpose."""
        scope = self.ctx.dataflow.scope(node)
        if container in scope.backward_names:
            return True
        function = scope.node
        for assigned, value in _assignments(function):
            if assigned in scope.backward_names and container in names_in(value):
                return True
        return _backward_mentions(function, container)

    def _fix(self, attached: list[ast.expr]) -> Fix | None:
        value = attached[0]
        if len(attached) != 1 or isinstance(value, (ast.Dict, ast.Tuple, ast.List, ast.Set, ast.ListComp, ast.DictComp, ast.GeneratorExp)):
            return None
        detached = with_method(self.ctx, value, "detach")
        return None if detached is None else self.replacement(value, detached)


def _assignments(function: ast.AST) -> list[tuple[str, ast.expr]]:
    def collect() -> list[tuple[str, ast.expr]]:
        collector = _Assignments()
        walk_visit(function, collector)
        return collector.pairs

    return file_memo(("assignments", id(function)), collect)


class _Assignments(Visitor):
    def __init__(self) -> None:
        self.pairs: list[tuple[str, ast.expr]] = []

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            if isinstance(target, ast.Name):
                self.pairs.append((target.id, node.value))


def _backward_mentions(function: ast.AST, container: str) -> bool:
    """``container`` is read inside a ``.backward(...)``/``.grad(...)`` call of ``function``."""
    def collect() -> frozenset[str]:
        finder = _BackwardNames()
        walk_visit(function, finder)
        return frozenset(finder.names)

    return container in file_memo(("backward_names", id(function)), collect)


class _BackwardNames(Visitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("backward", "grad"):
            self.names |= names_in(node)
