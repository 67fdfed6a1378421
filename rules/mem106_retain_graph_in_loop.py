"""MEM106 retain-graph-in-loop."""

import ast

from memlint.lint.diagnostic import Severity
from memlint.lint.rule import Rule
from memlint.lint.semantic import frameworks as fw
from memlint.lint.semantic.values import Tri
from memlint.lint.syntax import is_constant, keyword_arg
from memlint.lint.walk import Visitor, visit as walk_visit, walk

#: Positional index of ``retain_graph`` in each backward-like callable.
RETAIN_POSITION = {name: position for name, (_, position) in fw.AUTOGRAD_FUNCTIONS.items()}
BACKWARD_METHODS = frozenset({"backward", "manual_backward"})
PER_STEP_MESSAGE = ("`retain_graph=True` on the last backward of a function run once per batch: the graph's saved "
                    "tensors are never released by a later backward")


class RetainGraphInLoop(Rule):
    """## What it does
    Reports `.backward(retain_graph=True)` (also through a `GradScaler`,
    Accelerate's `accelerator.backward` or Lightning's `manual_backward`) and
    `torch.autograd.backward/grad(..., retain_graph=True)` (the tensors given
    by position or as `tensors=`/`outputs=`) inside a loop when it is the
    last backward of the iteration: no backward later in the same iteration
    releases the graph. Outside every loop, the same call is reported when
    it is the last backward of a function that builds its graph itself and
    that a loop of the file (or a framework hook) runs once per batch
    (`for batch in batches: self.process_batch(batch)`): each call is one
    iteration.

    ## Why is this bad?
    `retain_graph=True` keeps every buffer the graph saved for backward after
    the gradients are computed. When nothing later in the iteration frees
    them, each iteration's graph stays allocated at least until the next one
    is built, and whenever anything carried across iterations (an optimised
    input, a running state) references it, the graphs of all iterations are
    kept: memory grows until the run fails. It is almost always a workaround
    for a "backward through the graph a second time" error whose real cause
    is a tensor that should have been detached.

    ## Example
    ```python
    for step in range(steps):
        loss = objective(x)
        loss.backward(retain_graph=True)
        optimizer.step()
    ```

    ## Use instead
    ```python
    for step in range(steps):
        loss = objective(x)
        loss.backward()
        optimizer.step()
    ```

    ## Known problems
    A later backward of the same iteration is assumed to use the retained
    graph (and free it); whether it really shares the graph is not checked.
    A loop that builds no graph itself (no forward pass in its body: the
    same graph, built before the loop, is backpropagated once per output or
    per repetition) needs `retain_graph=True` and is not reported.
    `retain_graph=<variable>` is not reported. `create_graph=True` (which
    retains too) is not reported: higher-order gradients need it. In a
    function run once per batch, a retaining call with `create_graph=True`,
    or in a function that returns a value not known to be detached (a
    gradient penalty its caller adds to the loss), is not reported: the
    caller's backward may run through the same graph. A function whose
    callers the file does not show is not taken to run per batch.

    ## References
    - [torch.Tensor.backward](https://pytorch.org/docs/stable/generated/torch.Tensor.backward.html)
    - [torch.autograd.grad](https://pytorch.org/docs/stable/generated/torch.autograd.grad.html)
    """

    CODE = "MEM106"
    NAME = "retain-graph-in-loop"
    MESSAGE = "`retain_graph=True` on the last backward of a loop iteration: the graph's saved tensors are never released by a later backward"
    SEVERITY = Severity.WARNING
    TRIGGERS = ("retain_graph", "True")  # positional form: grad(out, inputs, None, True)
    NEEDS_NAMES = ("backward", "manual_backward", "grad")
    NEEDS_GRAPH_SOURCE = True
    FRAMEWORK = "torch"
    VALID = (
        "def f(enc, a, b, loader, opt):\n    for x in loader:\n        z = enc(x)\n        a(z).mean().backward(retain_graph=True)\n        b(z).mean().backward()\n        opt.step()\n",
        "def f(model, x):\n    loss = model(x).sum()\n    loss.backward(retain_graph=True)\n    loss.backward()\n",
        "def f(model, loader, opt, keep):\n    for x in loader:\n        model(x).sum().backward(retain_graph=keep)\n",
        "import torch\ndef f(model, loader, params):\n    for x in loader:\n        loss = model(x).sum()\n        g = torch.autograd.grad(loss, params, retain_graph=True)\n        loss.backward()\n",
        "def f(model, loader, opt, heads):\n    for x in loader:\n        z = model(x)\n        for h in heads:\n            h(z).sum().backward(retain_graph=True)\n        z.sum().backward()\n",
    )
    INVALID = (
        "def f(model, loader, opt):\n    for x in loader:\n        loss = model(x).sum()\n        loss.backward(retain_graph=True)  # expect: MEM106\n        opt.step()\n",
        "import torch\ndef f(model, x, opt, n):\n    i = 0\n    while i < n:\n        torch.autograd.backward(model(x).sum(), retain_graph=True)  # expect: MEM106\n        i += 1\n",
        "from torch import autograd\ndef f(model, loader, params):\n    for x in loader:\n        g = autograd.grad(model(x).sum(), params, None, True)  # expect: MEM106\n",
        "def f(model, loader, opt, scaler):\n    for x in loader:\n        a = model(x).sum()\n        a.backward()\n        scaler.scale(a * 2).backward(retain_graph=True)  # expect: MEM106\n",
    )

    def visit_Call(self, node: ast.Call) -> None:
        if not self._retains(node):
            return
        loops = self.ctx.semantic.enclosing_loops(node)
        if not loops:
            if self._ends_a_repeated_step(node):
                self.report(node, message=PER_STEP_MESSAGE)
            return
        if any(self._later_releasing_backward(loop, node) for loop in loops):
            return
        building = next((loop for loop in loops if self._builds_graph_in(loop)), None)
        if building is None:
            return  # one graph built before the loop, backpropagated repeatedly: retaining is required
        if self._later_backward(building, node):
            return  # a later retaining call ends the iteration: it is the one reported
        self.report(node)

    def _ends_a_repeated_step(self, call: ast.Call) -> bool:
        """Outside every loop of its function, ``call`` is the last backward of
        a function that builds its graph itself and that a loop of the file
        (``for batch in batches: self.process_batch(batch)``), or a framework
        hook, runs once per batch: each call is one iteration of that loop."""
        semantic = self.ctx.semantic
        function = semantic.function_of(call)
        if function is None:
            return False
        if _creates_graph(call) or semantic.returns(function).graph is not Tri.NO:
            return False  # what it returns (a gradient penalty) may be backpropagated by the caller, through this graph
        repetition = semantic.repetition(function)
        if repetition is None or not repetition.per_batch or repetition.reason not in ("caller", "hook"):
            return False
        return not self._later_backward(function, call) and self._builds_graph_in(function)

    def _later_backward(self, loop: ast.For | ast.AsyncFor | ast.While, call: ast.Call) -> bool:
        """Another backward call (retaining or not) comes after ``call`` in the
        loop body (or the body of the function that holds it)."""
        finder = _BackwardCalls(self)
        walk_visit(loop.body, finder)
        end = self.ctx.span(call)[1]
        return any(other is not call and self.ctx.span(other)[0] >= end for other in finder.calls)

    def _builds_graph_in(self, loop: ast.For | ast.AsyncFor | ast.While) -> bool:
        """The loop body runs a forward pass (or creates a grad-requiring tensor);
        decided once per loop, however many retaining calls it holds."""
        cache = self.__dict__.setdefault("_graph_built_in", {})
        if loop not in cache:
            semantic = self.ctx.semantic
            calls = [node for node in walk(loop.body) if isinstance(node, ast.Call)]
            rebuilt = _rebound_names(loop)
            cache[loop] = any(
                semantic.is_forward_call(call) or keyword_arg(call, "requires_grad") is not None
                or (semantic.is_backward_call(call) and semantic.backward_calls(semantic.unit_of(call))[call].sources & rebuilt)
                for call in calls
            )
        return cache[loop]

    def _backward_kind(self, call: ast.Call) -> str | None:
        """``"method"`` for ``x.backward(...)``, the qualified name for the autograd functions."""
        qualified = self.ctx.qualified(call.func)
        if qualified in RETAIN_POSITION:
            return qualified
        if isinstance(call.func, ast.Attribute) and call.func.attr in BACKWARD_METHODS:
            return "method"
        return None

    def _retains(self, call: ast.Call) -> bool:
        kind = self._backward_kind(call)
        if kind is None:
            return False
        keyword = keyword_arg(call, "retain_graph")
        if keyword is not None:
            return is_constant(keyword.value, True)
        positional = [arg for arg in call.args if not isinstance(arg, ast.Starred)]
        if kind in RETAIN_POSITION:
            index = RETAIN_POSITION[kind]
            return len(positional) > index and is_constant(positional[index], True)
        # Tensor.backward(gradient, retain_graph): only when the receiver is the tensor itself
        return kind == "method" and call.func.attr == "backward" and len(positional) >= 2 and is_constant(positional[1], True)

    def _later_releasing_backward(self, loop: ast.For | ast.AsyncFor | ast.While, call: ast.Call) -> bool:
        """A backward after ``call`` in the loop body that does not retain the graph."""
        end = self.ctx.span(call)[1]
        return any(other is not call and start >= end for other, start in self._releasing_backwards(loop))

    def _releasing_backwards(self, loop: ast.For | ast.AsyncFor | ast.While) -> list[tuple[ast.Call, tuple[int, int]]]:
        """The loop body's backward calls that do not retain the graph, with
        their start positions (found once per loop)."""
        cache = self.__dict__.setdefault("_releasing", {})
        if loop not in cache:
            finder = _BackwardCalls(self)
            walk_visit(loop.body, finder)
            cache[loop] = [(other, self.ctx.span(other)[0]) for other in finder.calls if not self._retains(other)]
        return cache[loop]


def _creates_graph(call: ast.Call) -> bool:
    """``create_graph=`` is given and not ``False``: the gradients are differentiated again."""
    keyword = keyword_arg(call, "create_graph")
    return keyword is not None and not is_constant(keyword.value, False)


def _rebound_names(loop: ast.AST) -> set[str]:
    """Names assigned inside the loop body (a value differentiated there is built per iteration)."""
    names: set[str] = set()
    for node in walk(loop.body):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    if isinstance(loop, (ast.For, ast.AsyncFor)):
        names.update(n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name))
    return names


class _BackwardCalls(Visitor):
    def __init__(self, rule: RetainGraphInLoop) -> None:
        self.rule = rule
        self.calls: list[ast.Call] = []

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        return False

    def visit_Call(self, node: ast.Call) -> None:
        if self.rule._backward_kind(node) is not None:
            self.calls.append(node)
