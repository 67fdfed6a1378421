"""MEM108 module-stores-forward-output."""

from __future__ import annotations

import ast

from memlint.lint.diagnostic import Severity
from memlint.lint.names import dotted_name, root_name
from memlint.lint.rule import Rule
from memlint.lint.semantic import torch_ops as ops
from memlint.lint.semantic.stores import STORING_METHODS, leaf_values
from memlint.lint.syntax import FUNCTION_TYPES, call_arguments
from memlint.lint.signatures import arguments_bound, first_parameter, parameter_names

#: Storing methods that make a container longer with every call.
GROWING_METHODS = frozenset({"append", "extend", "insert", "appendleft", "add", "put"})


class ModuleStoresForwardOutput(Rule):
    """## What it does
    Reports a graph-attached tensor that a module's `forward` (or a method
    that `forward` calls on `self`) stores on the module: `self.features = x`,
    `self.cache[key] = out`, `self.outputs.append(h)`, a class attribute
    (`Net.last = y`), or writes it in place into a buffer
    (`self.running_mean.mul_(m).add_(y.mean(0))`: the buffer records the op
    and chains every call's graph), without `.detach()`. Whether the method is part of a
    forward pass, and whether the value carries an autograd graph, come from
    the semantic model: the class derives from a module class and the value
    is the output of a layer, or arithmetic on one, computed with autograd on.

    ## Why is this bad?
    The module outlives the step. What it holds keeps the autograd graph
    that produced it reachable after the step ends: a plain attribute keeps
    the last call's graph alive into the next step (and the whole graph in an
    evaluation pass that never runs `backward()`), and a list that grows on
    every call keeps every step's graph until the process runs out of memory.

    ## Example
    ```python
    class Encoder(nn.Module):
        def forward(self, x):
            h = self.layers(x)
            self.hidden_states.append(h)
            return self.head(h)
    ```

    ## Use instead
    ```python
    class Encoder(nn.Module):
        def forward(self, x):
            h = self.layers(x)
            self.hidden_states.append(h.detach())  # or return it to the caller
            return self.head(h)
    ```

    ## Known problems
    Only values computed from the forward pass's inputs are reported: a
    tensor derived from the module's parameters alone (a per-device cache of
    a bias table, weights sampled for a KL term) holds a graph of the
    parameters, not of the batch. A tensor stored together with a
    gradient hook on the same tensor (`self.attn_map = attn;
    attn.register_hook(...)`, also through a helper method that stores its
    argument) is kept on purpose for attention-map / Grad-CAM
    visualisation and is not reported.
    A value stored on purpose for a backward pass that comes later in the
    same step (an auxiliary loss the training loop collects from the
    module) is reported too when it is no one-element loss; such losses
    (`self.aux_loss = ...`, a scalar) are not reported. Recurrent state
    that `forward` also returns to its caller, or feeds back into its
    computation (`self.rnn(x, self.hidden)`), is left to MEM105; a value
    read back only after an unconditional store in the same method
    (`self.scale = ...` then `f(x, self.scale)`) is this call's value, not
    carried state, and is reported. Methods
    reached from `forward` are followed through `self.method(...)` calls of
    the same file only; a module whose `forward` runs under a caller's
    `torch.no_grad()` in another file cannot be seen to.

    ## References
    - [PyTorch FAQ: my model reports "cuda runtime error(2): out of memory"](https://pytorch.org/docs/stable/notes/faq.html)
    - [Autograd mechanics: saved tensors](https://pytorch.org/docs/stable/notes/autograd.html#saved-tensors)
    """

    CODE = "MEM108"
    NAME = "module-stores-forward-output"
    MESSAGE = "a module's forward stores a graph-attached tensor on the module: its autograd graph stays reachable after the step"
    SEVERITY = Severity.ERROR
    TRIGGERS = ("self.",)
    NEEDS_NAMES = ("forward",)
    NEEDS_GRAPH_SOURCE = True
    FRAMEWORK = "torch"
    VALID = (
        "import torch.nn as nn\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(4, 4)\n        self.feats = []\n    def forward(self, x):\n        y = self.fc(x)\n        self.feats.append(y.detach().cpu())\n        return y\n",
        "import torch\nimport torch.nn as nn\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(4, 4)\n    def forward(self, x):\n        y = self.fc(x)\n        with torch.no_grad():\n            self.last_norm = self.fc(x).norm(dim=-1)\n        return y\n",
        "import torch.nn as nn\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(4, 4)\n    def forward(self, x):\n        y = self.fc(x)\n        self.aux_loss = y.pow(2).mean()\n        return y\n",
        "import torch.nn as nn\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(4, 4)\n    def forward(self, x):\n        feats = []\n        y = self.fc(x)\n        feats.append(y)\n        return feats\n",
        "import torch.nn as nn\nclass Logger:\n    def forward(self, layer, x):\n        y = layer(x)\n        self.last = y\n        return y\n",
        "import torch.nn as nn\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(4, 4)\n        self.seen = []\n    def forward(self, x):\n        self.seen.append(x.shape[0])\n        return self.fc(x)\n",
    )
    INVALID = (
        "import torch.nn as nn\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(4, 4)\n        self.feats = []\n    def forward(self, x):\n        y = self.fc(x)\n        self.feats.append(y)  # expect: MEM108\n        return y\n",
        "import torch.nn as nn\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(4, 4)\n        self.cache = {}\n    def forward(self, x, key):\n        y = self.fc(x).relu()\n        self.cache[key] = y  # expect: MEM108\n        return y\n",
        "import torch.nn as nn\nclass Block(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.attn = nn.Linear(8, 8)\n    def _attend(self, x):\n        weights = self.attn(x).softmax(-1)\n        self.attention_map = weights  # expect: MEM108\n        return weights @ x\n    def forward(self, x):\n        return self._attend(x)\n",
        "import torch.nn as nn\nclass Net(nn.Module):\n    history = []\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(4, 4)\n    def forward(self, x):\n        y = self.fc(x)\n        Net.history.append({'out': y})  # expect: MEM108\n        return y\n",
    )

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            if isinstance(target, (ast.Attribute, ast.Subscript)):
                self._check(node, target, (node.value,), growing=False)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.op, ast.Add) and isinstance(node.value, (ast.List, ast.Tuple)):
            self._check(node, node.target, tuple(node.value.elts), growing=True)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in STORING_METHODS:
            values = call_arguments(node)
            if func.attr in ("insert", "setdefault") and len(values) >= 2:
                values = values[1:]
            if values:
                self._check(node, func.value, tuple(values), growing=func.attr in GROWING_METHODS)
        elif isinstance(func, ast.Attribute) and func.attr in ops.IN_PLACE_WRITES and call_arguments(node):
            # `self.running_mean.mul_(m).add_(mean * (1 - m))`: each call's graph is chained onto the last
            self._check(node, _in_place_receiver(func.value), tuple(call_arguments(node)), growing=True, in_place=True)

    def _check(self, node: ast.AST, target: ast.expr, values: tuple[ast.expr, ...], growing: bool, in_place: bool = False) -> None:
        semantic = self.ctx.semantic
        function = semantic.function_of(node)
        if function is None:
            return
        klass = semantic.in_forward_pass(function)
        if klass is None or not self._on_the_module(target, function, klass):
            return
        if semantic.grad_disabled(node):
            return
        inputs = semantic.input_derived(function)
        attached = [leaf for leaf in leaf_values(values)
                    if semantic.value(leaf).attached and semantic.value(leaf).sources & inputs]
        if not attached:
            return
        if not growing and all(semantic.value(leaf).scalar for leaf in attached):
            return  # an auxiliary loss the training step collects and backpropagates
        if self._recurrent(node, target, klass):
            return
        if all(self._hooked_for_its_gradient(node, function, leaf) for leaf in attached):
            return  # kept with a gradient hook on the same tensor: attention-map / Grad-CAM visualisation
        where = dotted_name(target) or root_name(target) or "the module"
        if in_place:
            message = (f"a module's forward writes a graph-attached tensor into `{where}` in place on every call: "
                       "each call's autograd graph is chained onto the last and stays alive")
        elif growing:
            message = f"a module's forward appends a graph-attached tensor to `{where}` on every call: every step's autograd graph stays alive"
        else:
            message = f"a module's forward stores a graph-attached tensor in `{where}`: its autograd graph stays reachable after the step"
        self.report(node, message=message)

    def _hooked_for_its_gradient(self, node: ast.AST, function: ast.AST, leaf: ast.expr) -> bool:
        """The stored tensor also gets ``.register_hook(...)`` in the block of
        the store (``self.attn_map = attn; attn.register_hook(self.keep_grad)``)
        or, for a helper method that stores its parameter, in the block of
        every call of that helper (``self.keep_map(attn);
        attn.register_hook(...)``): the tensor is kept with its graph on
        purpose, to read it together with its gradient (attention-map and
        Grad-CAM visualisation), one slot overwritten per call."""
        name = dotted_name(leaf)
        if name is None:
            return False
        if _block_hooks(self.ctx.semantic, node, name):
            return True
        if not isinstance(leaf, ast.Name):
            return False
        if leaf.id not in parameter_names(function):
            return False
        semantic = self.ctx.semantic
        sites = semantic.call_sites_of(function)
        if not sites:
            return False
        for call in sites:
            on_object = isinstance(call.func, ast.Attribute) and semantic.class_of_method(function) is not None
            argument = arguments_bound(call, function, skip_receiver=on_object).get(leaf.id)
            passed = dotted_name(argument) if argument is not None else None
            if passed is None or not _block_hooks(semantic, call, passed):
                return False
        return True

    def _on_the_module(self, target: ast.expr, function: ast.AST, klass) -> bool:
        """``target`` is state of the module: ``self.x`` (``self.x[k]``,
        ``self.x.y``) or an attribute of the class itself (``Net.x``,
        ``type(self).x``, ``self.__class__.x``)."""
        node = target
        while isinstance(node, ast.Subscript):
            node = node.value
        if not isinstance(node, ast.Attribute):
            return False
        base = node
        while isinstance(base, ast.Attribute):
            base = base.value
        receiver = first_parameter(function)
        if isinstance(base, ast.Name):
            if base.id == receiver:
                return True
            return any(info.name == base.id for info in klass.mro())
        if isinstance(base, ast.Call) and dotted_name(base.func) == "type" and len(base.args) == 1:
            return isinstance(base.args[0], ast.Name) and base.args[0].id == receiver
        return False

    def _recurrent(self, store: ast.AST, target: ast.expr, klass) -> bool:
        """The stored attribute is fed back into the module's computation
        (``self.rnn(x, self.hidden)``): recurrent state carried on purpose,
        MEM105's case. A read that comes after an unconditional store in the
        same method body (``self.scale = ...; f(x, self.scale)``) sees this
        call's value, not the previous call's: no state is carried."""
        node = target
        while isinstance(node, ast.Subscript):
            node = node.value
        if not isinstance(node, ast.Attribute):
            return False
        attr = node.attr
        semantic = self.ctx.semantic
        overwritten_from = self._unconditional_end(store)
        for method in semantic.forward_pass_methods(klass):
            for call in semantic.own_nodes(method, (ast.Call,)):
                if overwritten_from is not None and method is overwritten_from[0] and \
                        self.ctx.span(call)[0] >= overwritten_from[1]:
                    continue
                for argument in call_arguments(call):
                    if any(isinstance(n, ast.Attribute) and n.attr == attr and isinstance(n.ctx, ast.Load)
                           for n in ast.walk(argument)):
                        return True
        return False

    def _unconditional_end(self, store: ast.AST) -> tuple[ast.AST, tuple[int, int]] | None:
        """``(method, end of the store)`` when ``store`` is a statement of its
        method's own body (it runs on every call, before what follows it)."""
        semantic = self.ctx.semantic
        statement = store
        while statement is not None and not isinstance(statement, ast.stmt):
            statement = semantic.parents.get(statement)
        method = semantic.parents.get(statement) if statement is not None else None
        if not isinstance(method, FUNCTION_TYPES) or statement not in method.body:
            return None
        return method, self.ctx.span(statement)[1]



def _in_place_receiver(receiver: ast.expr) -> ast.expr:
    """The tensor a chain of in-place writes changes: ``self.buf`` of
    ``self.buf.mul_(m).add_(v)`` (each returns its receiver)."""
    while isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute) and receiver.func.attr in ops.IN_PLACE_WRITES:
        receiver = receiver.func.value
    return receiver


def _block_hooks(semantic, node: ast.AST, name: str) -> bool:
    """The statement list holding ``node``'s statement calls ``name.register_hook(...)``."""
    statement = node
    while statement is not None and not isinstance(statement, ast.stmt):
        statement = semantic.parents.get(statement)
    parent = semantic.parents.get(statement) if statement is not None else None
    if parent is None:
        return False
    for field in ("body", "orelse", "finalbody"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and statement in block:
            for sibling in block:
                for call in ast.walk(sibling):
                    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) \
                            and call.func.attr == "register_hook" and dotted_name(call.func.value) == name:
                        return True
    return False
