"""MEM103 device-tensor-collected-in-loop."""

import re

import ast

from memlint.lint.dataflow import Tri, root_name, targets_of
from memlint.lint.diagnostic import Applicability, Fix, Severity
from memlint.lint.names import dotted_name
from memlint.lint.patterns import (
    bound_to_dict,
    iteration_loop,
    collection_target,
    contains_training_step,
    leaf_values,
    names_in,
    outlives_iteration,
    with_method,
)
from memlint.lint.rule import Rule
from memlint.lint.syntax import FOR_TYPES, FUNCTION_TYPES, LOOP_TYPES, call_arguments, keyword_arg
from memlint.lint.walk import Visitor, visit as walk_visit

#: Loops over these iterate a model's parts, not data: bounded by the model's depth.
MODULE_ITERABLE = re.compile(
    r"(?:^|\.|_)(?:layers?|blocks?|heads?|modules|children|stages?|levels?|scales?|experts?|params?|parameters|buffers|"
    r"param_groups|weights|devices?|grouped_tensors)$",
    re.IGNORECASE,
)
#: Keyed stores (``d.setdefault(k, v)``, ``d.update(...)``) overwrite per key: not growth by themselves.
KEYED_METHODS = frozenset({"setdefault", "update"})
#: Calls on the container inside the loop that keep it bounded.
SHRINKING_METHODS = frozenset({"clear", "pop", "popleft", "popitem", "remove"})
SMALL_RANGE = 16


class DeviceTensorCollectedInLoop(Rule):
    """## What it does
    Reports a tensor that is on the accelerator and carries no autograd
    graph (detached, or computed under `torch.no_grad()`) stored into a
    container that outlives the loop iteration: `snapshots.append(x.detach())`,
    `preds.extend(...)`, `cache[step] = out` where the container is bound
    before the loop. Tensors nested in dicts, tuples and lists count.

    ## Why is this bad?
    Detaching drops the graph but not the data: every stored tensor still
    occupies accelerator memory until the container is dropped. Memory grows
    linearly with the number of iterations, and a long evaluation or an
    optimisation with thousands of steps runs out of GPU memory.

    ## Example
    ```python
    snapshots = []
    for step in range(steps):
        optimise(x)
        snapshots.append(x.detach().clone())
    ```

    ## Use instead
    ```python
    snapshots = []
    for step in range(steps):
        optimise(x)
        snapshots.append(x.detach().clone().cpu())  # or .item() / .tolist()
    ```

    ## Fix safety
    The fix appends `.cpu()` to the stored tensor. It is unsafe: code that
    later uses the collected tensors on the accelerator (`torch.cat(preds)`
    compared with device tensors) now receives CPU tensors. No fix is
    offered for a conditional or `and`/`or` value: its other branch may be
    no tensor.

    ## Known problems
    Tensors graph-attached when stored are left to MEM102. Loops over a
    model's layers or blocks, over `range` of a small literal, containers
    cleared or popped inside the loop, `deque(maxlen=...)` buffers and
    `d[k] = v` with a key that does not change per iteration are not
    reported (their size is bounded). Whether a value is on the accelerator
    is inferred from `.cuda()`, `.to(device)`, `device=` and model
    placement in the same file; tensors that arrive already on the
    accelerator from another module are not seen.

    ## References
    - [PyTorch FAQ: my out of memory exception handler can't allocate memory](https://pytorch.org/docs/stable/notes/faq.html)
    - [CUDA semantics: memory management](https://pytorch.org/docs/stable/notes/cuda.html#memory-management)
    """

    CODE = "MEM103"
    NAME = "device-tensor-collected-in-loop"
    MESSAGE = "an accelerator tensor is stored in a container that outlives the iteration: device memory grows every iteration"
    SEVERITY = Severity.WARNING
    FIX_TITLE = "Move the stored tensor to the CPU with `.cpu()`"
    FIX_APPLICABILITY = Applicability.UNSAFE
    TRIGGERS = ("cuda", ".to(", "device")
    NEEDS_NAMES = ("cuda", "to", "device")  # the only ways the dataflow puts a value on the accelerator
    VALID = (
        "import torch\ndef f(model, loader):\n    preds = []\n    with torch.no_grad():\n        for x in loader:\n            preds.append(model(x.cuda()).cpu())\n",
        "import torch\ndef f(model, loader):\n    for x in loader:\n        batch_preds = []\n        batch_preds.append(model(x.cuda()).detach())\n",
        "import torch\ndef f(model, x, steps):\n    snaps = []\n    for _ in range(steps):\n        snaps.append(x.detach().clone().cpu())\n",
        "import torch\ndef f(model, loader):\n    outs = []\n    for x in loader:\n        outs.append(model(x.cuda()))\n",
        "import torch\ndef f(self, x):\n    feats = []\n    with torch.no_grad():\n        for block in self.blocks:\n            x = block(x.cuda())\n            feats.append(x)\n    return feats\n",
        "import torch\nfrom collections import deque\ndef f(model, loader):\n    recent = deque(maxlen=10)\n    for x in loader:\n        recent.append(x.cuda())\n",
        "import torch\n@torch.no_grad()\ndef f(model, loader):\n    losses = []\n    for x in loader:\n        losses.append(model(x.cuda()).loss)\n    return torch.stack(losses).mean().item()\n",
    )
    INVALID = (
        "import torch\ndef f(steps):\n    x = torch.zeros(3, device='cuda', requires_grad=True)\n    snaps = []\n    for _ in range(steps):\n        snaps.append(x.detach().clone())  # expect: MEM103\n",
        "import torch\ndef f(model, loader):\n    preds = []\n    model.cuda()\n    with torch.no_grad():\n        for x, y in loader:\n            preds.append(model(x.cuda()))  # expect: MEM103\n",
        "import torch\ndef f(model, loader, device):\n    hist = []\n    for i, (x, y) in enumerate(loader):\n        out = model(x.to(device)).detach()\n        hist.append({'out': out, 'y': y})  # expect: MEM103\n",
        "import torch\ndef f(model, loader, device):\n    cache = {}\n    while True:\n        x = next(loader)\n        with torch.no_grad():\n            cache[len(cache)] = model(x.to(device))  # expect: MEM103\n",
    )

    def visit_Call(self, node: ast.Call) -> None:
        self._check(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        self._check(node)

    def _check(self, node: ast.Call | ast.Assign) -> None:
        target = collection_target(node)
        if target is None:
            return
        container, values = target
        if isinstance(node, ast.Call) and node.func.attr in KEYED_METHODS:
            return
        if not container.startswith("self.") and not _in_loop(self.ctx.stack):
            return  # cheap check first: the dataflow analyses the whole function
        flow = self.ctx.dataflow
        if not values or not outlives_iteration(flow, container, node):
            return
        if any(flow.value(value).graph is Tri.YES for value in values):
            return  # attached: MEM102's finding
        leaves = [
            leaf
            for leaf in leaf_values(values)
            if _stores_device_tensor(flow.value(leaf)) and _tensor_expression(leaf, flow)
            and not (_scalar_like(leaf) and self._evaluation_loop(node))
        ]
        if not leaves or self._bounded(container, node):
            return
        self.report(node, fix=self._fix(leaves))

    def _evaluation_loop(self, node: ast.AST) -> bool:
        """The innermost loop around ``node`` does no training step: per-batch
        scalars collected there are bounded by one pass over the data."""
        loops = self.ctx.dataflow.enclosing_loops(node)
        return bool(loops) and not contains_training_step(loops[0])

    def _bounded(self, container: str, node: ast.Call | ast.Assign) -> bool:
        """The container cannot grow with the number of iterations."""
        flow = self.ctx.dataflow
        loops = flow.enclosing_loops(node)
        if isinstance(node, ast.Assign):
            if not _key_varies(node.targets[0], loops):
                return True
            if not bound_to_dict(container, flow.scope_node(node), self.ctx):
                return True  # `t[i] = v` into a tensor or an unknown object: written in place
        if any(_iterates_model_parts(loop) or _small_literal_range(loop) for loop in loops[:1]):
            return True
        if loops and not iteration_loop(loops[0]):
            return True  # a loop over the items of one batch or structure: its outputs are the result
        if loops and _shrunk_in(loops[0], container):
            return True
        return _bounded_deque(flow.scope_node(node), container, self.ctx)

    def _fix(self, leaves: list[ast.expr]) -> Fix | None:
        if len(leaves) != 1:
            return None
        leaf = leaves[0]
        on_host = with_method(self.ctx, leaf, "cpu")
        return None if on_host is None else self.replacement(leaf, on_host)


def _in_loop(stack: list[ast.AST]) -> bool:
    for ancestor in reversed(stack):
        if isinstance(ancestor, LOOP_TYPES):
            return True
        if isinstance(ancestor, (*FUNCTION_TYPES, ast.Lambda)):
            return False
    return False


#: Methods whose result is a tensor whatever the receiver is known to be.
TENSOR_METHODS = frozenset({"cuda", "to", "detach", "clone", "contiguous", "float", "half", "bfloat16", "view", "reshape", "flatten", "squeeze", "unsqueeze"})


def _tensor_expression(leaf: ast.expr, flow) -> bool:
    """The stored value is a tensor (not an object built from tensors, e.g. ``Sample(x, device=d)``)."""
    if flow.value(leaf).is_tensor_like:
        return True
    return isinstance(leaf, ast.Call) and isinstance(leaf.func, ast.Attribute) and leaf.func.attr in TENSOR_METHODS


def _stores_device_tensor(value) -> bool:
    return value.device is Tri.YES and value.graph is not Tri.YES and not value.is_model


#: Reductions that leave a one-element tensor when called without a dim.
SCALAR_REDUCTIONS = frozenset({"mean", "sum", "max", "min", "norm", "prod", "std", "var", "amax", "amin"})


def _scalar_like(expr: ast.expr) -> bool:
    """A per-iteration scalar (a loss, a full reduction): 512 bytes per batch in
    the caching allocator; kept on the device during evaluation it avoids a
    device sync per batch, the usual practice."""
    if isinstance(expr, ast.Attribute) and "loss" in expr.attr.lower():
        return True
    name = dotted_name(expr)
    if name is not None and "loss" in name.split(".")[-1].lower():
        return True
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        method = expr.func.attr
        if method in ("detach", "clone", "float", "double", "half", "bfloat16"):
            return _scalar_like(expr.func.value)
        return method in SCALAR_REDUCTIONS and not call_arguments(expr)
    return False


def _key_varies(target: ast.expr, loops: list[ast.stmt]) -> bool:
    """``d[i] = v`` grows only when the key changes per iteration (and is not ``i % n``)."""
    if not isinstance(target, ast.Subscript) or not loops:
        return False
    keys = _subscript_keys(target)
    if not keys:
        return False
    if any(isinstance(key, ast.BinOp) and isinstance(key.op, ast.Mod) for key in keys):
        return False
    if any(isinstance(key, ast.Call) and dotted_name(key.func) == "len" for key in keys):
        return True
    loop_names = set()
    for loop in loops:
        loop_names |= _names_bound_per_iteration(loop)
    return any(names_in(key) & loop_names for key in keys)


def _subscript_keys(subscript: ast.Subscript) -> list[ast.expr]:
    """The index expressions of ``d[k]`` / ``d[i, j]``, slices left out."""
    index = subscript.slice
    elements = index.elts if isinstance(index, ast.Tuple) else [index]
    return [element for element in elements if not isinstance(element, ast.Slice)]


def _names_bound_per_iteration(loop: ast.stmt) -> set[str]:
    names = set(targets_of(loop.target)) if isinstance(loop, FOR_TYPES) else set()
    collector = _AssignedNames()
    walk_visit(loop.body, collector)
    return names | collector.names


class _AssignedNames(Visitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self.names.update(targets_of(target))

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.names.update(targets_of(node.target))

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.names.update(targets_of(node.target))


def _iterates_model_parts(loop: ast.stmt) -> bool:
    if not isinstance(loop, FOR_TYPES):
        return False
    return _model_parts(loop.iter)


def _model_parts(iterable: ast.expr) -> bool:
    if isinstance(iterable, ast.Call) and dotted_name(iterable.func) in ("enumerate", "zip", "reversed", "list", "sorted"):
        return any(_model_parts(arg) for arg in _positional_arguments(iterable))
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute):
        if iterable.func.attr in ("children", "modules", "named_children", "named_modules", "parameters", "named_parameters", "buffers", "items", "values"):
            if iterable.func.attr not in ("items", "values"):
                return True
            iterable = iterable.func.value
    name = dotted_name(iterable)
    return name is not None and (bool(MODULE_ITERABLE.search(name)) or "param" in name.lower() or name.endswith(("_per_rank", "_per_device")))


def _positional_arguments(call: ast.Call) -> list[ast.expr]:
    """The arguments of ``call`` not passed by name (``*xs`` and ``**kw`` as ``xs`` and ``kw``)."""
    positional = [arg.value if isinstance(arg, ast.Starred) else arg for arg in call.args]
    return positional + [keyword.value for keyword in call.keywords if keyword.arg is None]


def _small_literal_range(loop: ast.stmt) -> bool:
    """A ``for`` over a tuple or list literal, or over ``range`` of a small integer literal."""
    if not isinstance(loop, FOR_TYPES):
        return False
    iterable = loop.iter
    if isinstance(iterable, (ast.Tuple, ast.List)):
        return True
    if not isinstance(iterable, ast.Call) or dotted_name(iterable.func) != "range":
        return False
    arguments = call_arguments(iterable)
    if not arguments:
        return False
    bound = arguments[-1] if len(arguments) <= 2 else arguments[1]
    return _integer_literal(bound) and bound.value <= SMALL_RANGE


def _integer_literal(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int  # `True` is not an integer literal


def _shrunk_in(loop: ast.stmt, container: str) -> bool:
    """The loop empties, pops from, deletes from or rebinds the container."""
    finder = _ShrinkFinder(container)
    walk_visit(loop.body, finder)
    return finder.found


class _ShrinkFinder(Visitor):
    def __init__(self, container: str) -> None:
        self.container = container
        self.found = False

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute) and node.func.attr in SHRINKING_METHODS:
            if root_name(node.func.value) == self.container:
                self.found = True

    def visit_Delete(self, node: ast.Delete) -> None:
        if any(self.container in names_in(target) for target in node.targets):
            self.found = True

    def visit_Assign(self, node: ast.Assign) -> None:
        if any(self.container in targets_of(target) for target in node.targets):
            self.found = True


def _bounded_deque(function: ast.AST, container: str, ctx) -> bool:
    """``container = deque(..., maxlen=...)`` somewhere in the function or class."""
    finder = _DequeFinder(container, ctx)
    walk_visit((ctx.module if container.startswith("self.") else function), finder)
    return finder.found


class _DequeFinder(Visitor):
    def __init__(self, container: str, ctx) -> None:
        self.container = container
        self.ctx = ctx
        self.found = False

    def visit_Assign(self, node: ast.Assign) -> None:
        value = node.value
        if not isinstance(value, ast.Call) or self.ctx.qualified(value.func) != "collections.deque":
            return
        if keyword_arg(value, "maxlen") is None and len(call_arguments(value)) < 2:
            return
        if any(self.container in targets_of(target) for target in node.targets):
            self.found = True
