"""MEM109 hook-stores-activation."""

from __future__ import annotations

import ast

from memlint.lint.diagnostic import Severity
from memlint.lint.rule import Rule
from memlint.lint.semantic import torch_ops as ops
from memlint.lint.semantic.stores import leaf_values
from memlint.lint.semantic.values import Kind, Tri
from memlint.lint.syntax import FUNCTION_TYPES, call_arguments
from memlint.lint.signatures import first_parameter, is_static_method, positional_parameters

#: Module hook registrations (torch 2.13 torch/nn/modules/module.py): the
#: positions of the hook's parameters that hold activations or gradients,
#: counted from the end of its signature, and whether they can carry a graph.
MODULE_HOOKS = {
    "register_forward_hook": ("forward", (-1, -2)),  # (module, args, output) / (module, args, kwargs, output)
    "register_forward_pre_hook": ("forward", (1,)),  # (module, args[, kwargs])
    "register_full_backward_hook": ("backward", (1, 2)),  # (module, grad_input, grad_output)
    "register_backward_hook": ("backward", (1, 2)),
    "register_full_backward_pre_hook": ("backward", (1,)),  # (module, grad_output)
}
#: Global module hooks (torch.nn.modules.module): the same signatures, for every module.
GLOBAL_HOOKS = {
    "torch.nn.modules.module.register_module_forward_hook": "register_forward_hook",
    "torch.nn.modules.module.register_module_forward_pre_hook": "register_forward_pre_hook",
    "torch.nn.modules.module.register_module_full_backward_hook": "register_full_backward_hook",
}
#: Container methods that make the container longer.
GROWING_METHODS = frozenset({"append", "extend", "insert", "appendleft", "add", "put"})
#: Tensor methods after which the stored value is on the host or a Python value.
HOST_METHODS = frozenset({"cpu", "numpy", "tolist", "item"})
DETACHING_METHODS = frozenset({"detach", "detach_", "item", "tolist", "numpy"})


#: Hooks that receive a forward pass's tensors (module input or output).
FORWARD_KINDS = frozenset({"register_forward_hook", "register_forward_pre_hook"})
KEPT_MESSAGE = ("a forward hook keeps the activation it receives without `.detach()`: its autograd graph "
                "(the forward's saved tensors up to this module) stays alive after the step, until the next pass overwrites it")


class HookStoresActivation(Rule):
    """## What it does
    Reports a forward, forward-pre, backward or tensor hook
    (`register_forward_hook`, `register_full_backward_hook`,
    `tensor.register_hook`, ...) whose function appends the activation or
    gradient it receives (`output`, `input`, `grad_output`, `grad`, or an
    element or attribute of them) to a container that outlives the call
    (`self.activations`, a list of the enclosing function, a global) while
    it is still on the device: without `.cpu()` (and, for a forward hook,
    without `.detach()`). The hooked module itself, which a module hook
    receives first, outlives the call too (`module.acts.append(output)`).
    The hook function is found through its name, a
    lambda, a bound method (a `@staticmethod` included), `functools.partial` or a factory of the file
    that returns it (`register_forward_hook(save_output(name))`). A tensor
    hook registered inside a forward hook on the activation it receives
    (`output.register_hook(self.save_gradient)`) is a tensor hook too.

    ## Why is this bad?
    A hook runs on every forward or backward pass. What it appends stays
    on the GPU for as long as the container lives: one activation map per
    layer per batch. A forward hook's `output` also holds the autograd
    graph of the step that produced it, so every step's saved activations
    stay allocated too. Memory grows with every batch until the run fails.

    ## Example
    ```python
    gradients = []

    def save_grad(module, grad_input, grad_output):
        gradients.append(grad_output[0])

    model.layer4.register_full_backward_hook(save_grad)
    ```

    ## Use instead
    ```python
    gradients = []

    def save_grad(module, grad_input, grad_output):
        gradients.append(grad_output[0].detach().cpu())

    model.layer4.register_full_backward_hook(save_grad)
    ```

    ## Known problems
    Stores that overwrite one slot (`self.features = output`,
    `activations[name] = output`) keep one tensor per hooked module: they
    are reported only from forward hooks, without `.detach()`, in a file
    that runs a backward pass (so the forwards record graphs and the kept
    activation holds one past the step, as in grad-CAM); a feature
    extractor's hooks in a file that never backpropagates are not. A container
    that the file empties or re-creates (`feats.clear()`, `self.feats = []`
    in a reset method), and hooks whose handle is removed in the function
    that registered them, are bounded and not reported. The rule reports
    only in a file that shows accelerator use (`.cuda()`, `device="cuda"`,
    ...). Hook functions of another file are not followed.

    ## References
    - [torch.nn.Module.register_forward_hook](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_hook)
    - [torch.Tensor.register_hook](https://pytorch.org/docs/stable/generated/torch.Tensor.register_hook.html)
    """

    CODE = "MEM109"
    NAME = "hook-stores-activation"
    MESSAGE = "a hook appends the tensor it receives to a container that outlives the call, on the device: memory grows with every pass"
    SEVERITY = Severity.WARNING
    TRIGGERS = ("register_",)
    NEEDS_NAMES = ("register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook",
                   "register_backward_hook", "register_full_backward_pre_hook", "register_hook",
                   "register_module_forward_hook", "register_module_forward_pre_hook",
                   "register_module_full_backward_hook")
    FRAMEWORK = "torch"
    VALID = (
        "import torch.nn as nn\nclass CAM:\n    def __init__(self, model, layer):\n        self.model = model.cuda()\n        layer.register_forward_hook(self.grab)\n    def grab(self, module, inputs, output):\n        self.fmap = output.detach()\n    def __call__(self, x, cls):\n        self.model(x.cuda())[:, cls].sum().backward()\n        return self.fmap\n",
        "import torch.nn as nn\nfeats = []\ndef keep(module, inp, out):\n    feats.append(out.detach().cpu())\nmodel = nn.Linear(4, 4).cuda()\nmodel.register_forward_hook(keep)\n",
        "import torch.nn as nn\nfeats = {}\ndef keep(name):\n    def hook(module, inp, out):\n        feats[name] = out\n    return hook\nmodel = nn.Linear(4, 4).cuda()\nmodel.register_forward_hook(keep('fc'))\n",
        "import torch.nn as nn\nclass Probe:\n    def __init__(self, layer):\n        self.grads = []\n        layer.register_full_backward_hook(self.save)\n    def save(self, module, grad_in, grad_out):\n        self.grads.append(grad_out[0].cpu())\nprobe = Probe(nn.Linear(4, 4).cuda())\n",
        "import torch.nn as nn\nfeats = []\ndef keep(module, inp, out):\n    feats.append(out)\ndef run(x):\n    model = nn.Linear(4, 4).cuda()\n    handle = model.register_forward_hook(keep)\n    model(x)\n    handle.remove()\n",
        "import torch.nn as nn\nsizes = []\ndef keep(module, inp, out):\n    sizes.append(out.shape[0])\nmodel = nn.Linear(4, 4).cuda()\nmodel.register_forward_hook(keep)\n",
    )
    INVALID = (
        "import torch\ndef attach():\n    grads = []\n    def keep(g):\n        grads.append(g)  # expect: MEM109\n    return grads, keep\ndef run(loader):\n    grads, keep = attach()\n    for x in loader:\n        x = x.cuda().requires_grad_(True)\n        x.register_hook(keep)\n        (x * 2).sum().backward()\n",
        "import torch.nn as nn\nclass CAM:\n    def __init__(self, model, layer):\n        self.model = model.cuda()\n        layer.register_forward_hook(self.grab)\n    def grab(self, module, inputs, output):\n        self.fmap = output  # expect: MEM109\n    def __call__(self, x, cls):\n        self.model.zero_grad()\n        self.model(x.cuda())[:, cls].sum().backward()\n        return self.fmap\n",
        "import torch.nn as nn\nfeats = []\ndef keep(module, inp, out):\n    feats.append(out)  # expect: MEM109\nmodel = nn.Linear(4, 4).cuda()\nmodel.register_forward_hook(keep)\n",
        "import torch.nn as nn\nclass GradCAM:\n    def __init__(self, model, layer):\n        self.model = model.cuda()\n        self.gradients = []\n        layer.register_full_backward_hook(self.save_gradient)\n    def save_gradient(self, module, grad_input, grad_output):\n        self.gradients.append(grad_output[0])  # expect: MEM109\n",
        "import torch\ndef train(model, loader):\n    norms = []\n    model.cuda().train()\n    for x in loader:\n        out = model(x.cuda())\n        out.register_hook(lambda g: norms.append(g.detach()))  # expect: MEM109\n        out.sum().backward()\n",
        "import functools\nimport torch.nn as nn\nstore = {'enc': []}\ndef keep(name, module, inp, out):\n    store[name].append(out.last_hidden_state)  # expect: MEM109\nmodel = nn.Linear(4, 4).to('cuda')\nmodel.register_forward_hook(functools.partial(keep, 'enc'))\n",
    )

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if not node.args:
            return
        kind = None
        if isinstance(func, ast.Attribute) and func.attr in MODULE_HOOKS:
            kind = func.attr
            receiver = self.ctx.semantic.value(func.value)
            if receiver.kind not in (Kind.MODULE, Kind.UNKNOWN):
                return
        elif isinstance(func, ast.Attribute) and func.attr == "register_hook":
            tensor = self.ctx.semantic.value(func.value)
            if not (tensor.kind is Kind.TENSOR or tensor.kind is Kind.UNKNOWN and tensor.graph is Tri.YES
                    or self._hooked_activation(func.value)):
                return  # `register_hook` of another library (a value that requires grad is a tensor: modules have none)
            kind = "register_hook"
        else:
            last = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if not last.startswith("register_module_"):
                return  # cheap check first: the global hooks' names (aliases keep a trigger in the import)
            qualified = self.ctx.qualified(func)
            kind = GLOBAL_HOOKS.get(qualified) if qualified else None
        if kind is None or not self.ctx.semantic.uses_accelerator(self.ctx.module):
            return
        found = self.ctx.semantic.callable_definition(node.args[0])
        if found is None:
            return
        hook, bound = found
        parameters = self._activation_parameters(hook, bound, kind, node)
        if not parameters or self._removed_after_use(node):
            return
        owners = self._persistent_owners(hook, bound, kind)
        if kind in FORWARD_KINDS and self._file_backpropagates():
            for store in self._kept_stores(hook, parameters, owners):
                self.report(store, message=KEPT_MESSAGE)
        for store, leaf, detached in self._growing_stores(hook, parameters, owners):
            forward = kind == "register_hook" or MODULE_HOOKS.get(kind, ("",))[0] == "forward"
            if forward and kind != "register_hook" and not detached:
                message = "a forward hook appends the activation it receives to a container that outlives the call, without `.detach()`: every pass's tensor and autograd graph stay alive"
            else:
                message = None
            self.report(store, message=message)

    def _hooked_activation(self, receiver: ast.expr) -> bool:
        """``receiver`` is the activation a module forward hook of the file
        receives (``output`` in ``def save(self, module, input, output):
        output.register_hook(...)``): torch hands a forward hook the
        module's output tensor (torch 2.13 torch/nn/modules/module.py
        ``_call_impl``), so ``register_hook`` there is a tensor hook."""
        if not isinstance(receiver, ast.Name):
            return False
        function = self.ctx.semantic.function_of(receiver)
        return function is not None and receiver.id in self._forward_hook_activations().get(function, ())

    def _forward_hook_activations(self) -> dict[ast.AST, frozenset[str]]:
        """Each function of the file registered as a module forward hook,
        with the names of its parameters that hold activations (found once per file)."""
        found = self.__dict__.get("_forward_hooks")
        if found is None:
            found = self.__dict__["_forward_hooks"] = {}
            semantic = self.ctx.semantic
            for call in semantic.index.of_type(ast.Call):
                func = call.func
                if not (isinstance(func, ast.Attribute) and func.attr in FORWARD_KINDS and call.args) or \
                        semantic.value(func.value).kind not in (Kind.MODULE, Kind.UNKNOWN):
                    continue
                definition = semantic.callable_definition(call.args[0])
                if definition is not None and not isinstance(definition[0], ast.Lambda):
                    hook, bound = definition
                    found[hook] = found.get(hook, frozenset()) | self._activation_parameters(hook, bound, func.attr, call)
        return found

    # -- the hook's signature --------------------------------------------------------
    def _activation_parameters(self, hook: ast.AST, bound: int, kind: str, registration: ast.Call) -> frozenset[str]:
        positional = [a.arg for a in positional_parameters(hook)][bound:]
        if hook.args.vararg is not None or not positional:
            return frozenset()
        if kind == "register_hook":
            return frozenset(positional[:1])
        _, positions = MODULE_HOOKS[kind]
        with_kwargs = any(k.arg == "with_kwargs" and isinstance(k.value, ast.Constant) and k.value.value is True
                          for k in registration.keywords)
        expected = {"register_forward_hook": 4 if with_kwargs else 3, "register_forward_pre_hook": 3 if with_kwargs else 2,
                    "register_full_backward_hook": 3, "register_backward_hook": 3, "register_full_backward_pre_hook": 2}[kind]
        if len(positional) != expected:
            return frozenset()
        chosen = {positional[p] for p in positions if -len(positional) <= p < len(positional)}
        if kind == "register_forward_hook" and with_kwargs:
            chosen = {positional[1], positional[3]}
        return frozenset(chosen)

    def _persistent_owners(self, hook: ast.AST, bound: int, kind: str) -> dict[str, bool]:
        """The names of the hook whose attributes outlive a call, each with
        whether any object's attribute of that name is the same storage: the
        receiver of a method hook (``self``: False, only ``self.x``), and for a
        module hook its first parameter, the hooked module itself, which lives
        as long as the model (torch 2.13.0 ``torch/nn/modules/module.py``
        ``_call_impl`` passes ``self`` first; True: ``layer.acts`` there is the
        ``m.acts`` the file sets up on that module under any name)."""
        owners = {}
        receiver = _receiver_of(self.ctx.semantic, hook)
        if receiver is not None:
            owners[receiver] = False
        if kind != "register_hook":
            positional = [a.arg for a in positional_parameters(hook)][bound:]
            if positional:
                owners[positional[0]] = True
        return owners

    def _removed_after_use(self, registration: ast.Call) -> bool:
        """The handle is kept and removed in the unit that registered the hook:
        the hook runs for a bounded stretch (one forward, one probe)."""
        semantic = self.ctx.semantic
        unit = semantic.unit_of(registration)
        return any(isinstance(c.func, ast.Attribute) and c.func.attr == "remove" and not c.args
                   for c in semantic.own_nodes(unit, (ast.Call,)))

    # -- what the hook stores -----------------------------------------------------------
    def _file_backpropagates(self) -> bool:
        """The file runs a backward pass: its forwards (and the hooks' outputs)
        record graphs, so a stored activation keeps one alive."""
        found = self.__dict__.get("_backpropagates")
        if found is None:
            semantic = self.ctx.semantic
            found = self.__dict__["_backpropagates"] = any(
                isinstance(c.func, ast.Attribute) and c.func.attr == "backward"
                or semantic.qualified(c.func) in ("torch.autograd.grad", "torch.autograd.backward")
                for c in semantic.index.of_type(ast.Call))
        return found

    def _kept_stores(self, hook: ast.AST, parameters: frozenset[str], owners: dict[str, bool]):
        """``self.x = output`` / ``acts[name] = output`` / a ``global``/``nonlocal``
        name bound to the activation, not detached and not moved to the host."""
        if isinstance(hook, ast.Lambda):
            return
        semantic = self.ctx.semantic
        assignments = _single_assignments(hook)
        for node in semantic.own_nodes(hook, (ast.Assign,)):
            if len(node.targets) != 1:
                continue
            target = node.targets[0]
            root = _storage_root(target)
            if root is None or not self._outlives(root, hook, owners):
                continue
            traced = _trace(node.value, parameters, assignments)
            if traced is not None and not traced[1] and not traced[0] & DETACHING_METHODS:
                yield node


    def _growing_stores(self, hook: ast.AST, parameters: frozenset[str], owners: dict[str, bool]):
        semantic = self.ctx.semantic
        body = [hook.body] if isinstance(hook, ast.Lambda) else hook.body
        nodes = []
        for statement in body:
            nodes.extend(n for n in ast.walk(statement))
        assignments = _single_assignments(hook)
        for node in nodes:
            container, values = None, ()
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in GROWING_METHODS:
                container, values = node.func.value, call_arguments(node)
                if node.func.attr == "insert":
                    values = values[1:]
            elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and isinstance(node.value, (ast.List, ast.Tuple)):
                container, values = node.target, node.value.elts
            if container is None or semantic.function_of(node) is not semantic.function_of(body[0]) and not isinstance(hook, ast.Lambda):
                continue
            root = _storage_root(container)
            if root is None or not self._outlives(root, hook, owners) or self._reset_somewhere(root, hook, owners):
                continue
            for leaf in leaf_values(values):
                traced = _trace(leaf, parameters, assignments)
                if traced is None:
                    continue
                methods, moved_to_host = traced
                if moved_to_host:
                    continue
                yield node, leaf, bool(methods & DETACHING_METHODS)
                break

    def _outlives(self, root: str, hook: ast.AST, owners: dict[str, bool]) -> bool:
        if "." in root:
            return root.split(".", 1)[0] in owners
        scope = self.ctx.semantic.scopes.own_scope(hook)
        if scope is None:
            return False
        return root not in scope.bindings or root in scope.global_names or root in scope.nonlocal_names

    def _reset_somewhere(self, root: str, hook: ast.AST, owners: dict[str, bool]) -> bool:
        """The file empties the container (``.clear()``, ``del c[:]``) or binds
        it again after its definition (``self.feats = []`` in a reset method);
        for an attribute of the hooked module, on whatever name the file
        reaches that module by (``for m in model.modules(): m.acts = []``)."""
        semantic = self.ctx.semantic
        attr = root.split(".", 1)[1] if "." in root else None
        if attr is not None and owners.get(root.split(".", 1)[0]):
            root = None
        same = self._same_variable(root, hook) if attr is None else (lambda node: True)
        bindings = 0
        for node in semantic.index.of_type(ast.Assign, ast.AnnAssign, ast.Call, ast.Delete):
            if isinstance(node, ast.Call):
                if (isinstance(node.func, ast.Attribute) and node.func.attr == "clear"
                        and _matches(node.func.value, root, attr) and same(node.func.value)):
                    return True
                continue
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for target in targets:
                for element in target.elts if isinstance(target, ast.Tuple) else (target,):
                    if isinstance(node, ast.Delete):
                        if isinstance(element, ast.Subscript) and _matches(element.value, root, attr) and same(element.value):
                            return True
                    elif _matches(element, root, attr) and same(element):
                        bindings += 1
        return bindings > 1

    def _same_variable(self, name: str, hook: ast.AST):
        """A test that a ``Name`` node is the variable ``name`` the hook sees
        (a local of another function with the same name is another list)."""
        scopes = self.ctx.semantic.scopes
        hook_scope = scopes.own_scope(hook) or scopes.scope_for(hook)
        seen = scopes.binding_scope(name, hook_scope)
        return lambda node: scopes.binding_scope(name, scopes.scope_for(node)) is seen


def _matches(node: ast.expr, root: str | None, attr: str | None) -> bool:
    """``node`` is the storage ``root`` (``c``, or ``self.x`` with ``attr`` x);
    with ``root`` None, the attribute ``attr`` of any object."""
    if attr is not None:
        return isinstance(node, ast.Attribute) and node.attr == attr and (
            root is None or isinstance(node.value, ast.Name) and node.value.id == root.split(".")[0])
    return isinstance(node, ast.Name) and node.id == root


def _storage_root(container: ast.expr) -> str | None:
    """``self.x`` for ``self.x`` / ``self.x[k]``; ``c`` for ``c`` / ``c[k]`` /
    ``c.setdefault(k, [])`` (the list that ``dict.setdefault`` returns is the one stored in ``c``)."""
    node = container
    while isinstance(node, ast.Subscript) or (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                                              and node.func.attr == "setdefault" and len(node.args) == 2):
        node = node.value if isinstance(node, ast.Subscript) else node.func.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    return None


def _receiver_of(semantic, hook: ast.AST) -> str | None:
    """The receiver (``self``) of a hook that is a method, or of the method a closure is defined in."""
    function = hook
    while function is not None:
        if isinstance(function, FUNCTION_TYPES) and semantic.class_of_method(function) is not None:
            if is_static_method(function):
                return None
            return first_parameter(function)
        function = semantic.unit_of(function) if function is not semantic.module else None
        if function is semantic.module:
            return None
    return None



def _single_assignments(hook: ast.AST) -> dict[str, ast.expr]:
    """Locals of the hook assigned exactly once (``g = grad_output[0]``)."""
    if isinstance(hook, ast.Lambda):
        return {}
    counts: dict[str, list[ast.expr]] = {}
    for node in ast.walk(hook):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            counts.setdefault(node.targets[0].id, []).append(node.value)
    return {name: values[0] for name, values in counts.items() if len(values) == 1}


def _trace(expr: ast.expr, parameters: frozenset[str], assignments: dict[str, ast.expr], depth: int = 0):
    """Follow ``expr`` back through tensor methods, indexing and attributes to
    a hook parameter: the methods applied on the way and whether the value was
    moved to the host; None when it is not (a function of it, a number)."""
    methods: set[str] = set()
    host = False
    node = expr
    while True:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            if name in ops.PYTHON_RESULT:
                return None  # `out.numel()`, `out.size(0)`: a Python value, no tensor
            methods.add(name)
            if name in HOST_METHODS or name == "to" and any(
                    isinstance(a, ast.Constant) and a.value == "cpu" for a in [*node.args, *(k.value for k in node.keywords)]):
                host = True
            node = node.func.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Attribute):
            if node.attr in ("shape", "dtype", "device", "ndim", "requires_grad"):
                return None  # metadata, no tensor
            node = node.value
        elif isinstance(node, ast.IfExp):
            # `output[0] if isinstance(output, tuple) else output`: either branch may be what is
            # stored; detached (or on the host) only when every branch that is the activation is
            branches = [t for t in (_trace(b, parameters, assignments, depth) for b in (node.body, node.orelse)) if t is not None]
            if not branches:
                return None
            return frozenset(methods | frozenset.intersection(*(b[0] for b in branches))), host or all(b[1] for b in branches)
        elif isinstance(node, ast.Name):
            if node.id in parameters:
                return frozenset(methods), host
            if node.id in assignments and depth < 3:
                inner = _trace(assignments[node.id], parameters, assignments, depth + 1)
                if inner is None:
                    return None
                return frozenset(methods | inner[0]), host or inner[1]
            return None
        else:
            return None
