"""Training-step facts shared by the MEM2xx/MEM3xx/MEM4xx rules.

Not a rule module (the leading underscore keeps the registry away): small,
purely syntactic recognisers of the calls that make up a training step
(``.backward()``, ``optimizer.step()``, ``zero_grad()``), walks that stay
inside one function body, and the imports that mark a file as belonging to
another framework (whose look-alike calls the rules must not report).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import libcst as cst

from memlint.lint.names import dotted_name
from memlint.lint.walk import children as syntactic_children, indexed_descendants

#: Nodes whose bodies run at another time (a nested function, a class body).
SCOPE_TYPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
LOOP_TYPES = (cst.For, cst.While)

#: An optimizer's variable name: ``optimizer``, ``opt_g``, ``d_optim``, ``optimizerD``, ``self.optimizers[0]``.
_OPTIMIZER_TOKEN = re.compile(r"^(?:opt|optim|optimizer|optimiser)s?(?:[a-z]|\d+)?$|^optimi[sz]er")
#: Frameworks whose ``backward``/``step``/``zero_grad`` look-alikes are not PyTorch's.
FOREIGN_FRAMEWORKS = ("paddle", "mindspore", "oneflow", "mxnet", "jittor", "megengine", "tensorflow", "jax", "chainer", "cupy", "mlx")
TORCH_LIKE = ("torch", "lightning", "pytorch_lightning", "accelerate", "transformers", "deepspeed", "timm", "torchvision", "fairseq")


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Every node under ``node`` in source order, not entering nested functions or classes."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        children = [child for child in syntactic_children(current) if not isinstance(child, SCOPE_TYPES)]
        stack.extend(reversed(children))


def calls_in(node: cst.CSTNode) -> list[cst.Call]:
    """The calls under ``node`` (same function body), in source order."""
    found = indexed_descendants(node, (cst.Call,), SCOPE_TYPES)
    if found is None:
        found = [child for child in walk(node) if isinstance(child, cst.Call)]
    return found


def method_name(call: cst.Call) -> str | None:
    """``"step"`` for ``x.step(...)``; None for a plain function call."""
    return call.func.attr.value if isinstance(call.func, cst.Attribute) else None


def receiver_name(expr: cst.BaseExpression) -> str | None:
    """Dotted name of a call receiver, looking through subscripts and calls:
    ``self.optimizers`` for ``self.optimizers[0]`` and ``self.optimizers()``."""
    while isinstance(expr, (cst.Subscript, cst.Call)):
        expr = expr.value if isinstance(expr, cst.Subscript) else expr.func
    return dotted_name(expr)


def positional_args(call: cst.Call) -> list[cst.BaseExpression]:
    return [arg.value for arg in call.args if arg.keyword is None and not arg.star]


def is_optimizer_name(name: str | None) -> bool:
    """True for names like ``optimizer``, ``opt_d``, ``self.gen_optim`` (never a scheduler)."""
    if not name:
        return False
    last = name.split(".")[-1].lower()
    if "sched" in last:
        return False
    return any(_OPTIMIZER_TOKEN.match(token) for token in last.split("_"))


def is_backward(call: cst.Call, ctx) -> bool:
    """``loss.backward()``, ``scaler.scale(loss).backward()``, ``accelerator.backward(loss)``,
    ``self.manual_backward(loss)``, ``torch.autograd.backward(loss)``."""
    method = method_name(call)
    if method in ("backward", "manual_backward"):
        return True
    return ctx.qualified(call.func) == "torch.autograd.backward"


def backward_loss(call: cst.Call) -> cst.BaseExpression | None:
    """The loss a backward call differentiates (the scaled one unwrapped); None if unknown."""
    method = method_name(call)
    positional = positional_args(call)
    if method == "backward" and isinstance(call.func, cst.Attribute):
        receiver = call.func.value
        if isinstance(receiver, cst.Call) and method_name(receiver) == "scale" and positional_args(receiver):
            return positional_args(receiver)[0]
        name = dotted_name(receiver)
        if positional and name is not None and "loss" not in name.lower():
            return positional[0]  # accelerator.backward(loss) / fabric / engine
        return receiver
    return positional[0] if positional else None


def is_delegated_backward(call: cst.Call) -> bool:
    """``accelerator.backward(loss)``-style: a framework object runs the backward."""
    if method_name(call) != "backward" or not isinstance(call.func, cst.Attribute):
        return False
    name = dotted_name(call.func.value)
    return bool(positional_args(call)) and name is not None and "loss" not in name.lower()


def is_optimizer_step(call: cst.Call) -> bool:
    """``optimizer.step()``, ``opt_g.step()``, ``self.optimizers()[0].step()``, ``scaler.step(optimizer)``."""
    if method_name(call) != "step":
        return False
    receiver = receiver_name(call.func.value)
    if is_optimizer_name(receiver):
        return True
    positional = positional_args(call)
    return bool(receiver and "scaler" in receiver.lower() and positional and is_optimizer_name(receiver_name(positional[0])))


def clears_grads(node: cst.CSTNode) -> bool:
    """``zero_grad()``/``clear_grad()`` of anything, ``p.grad = None``, ``p.grad.zero_()``, ``del p.grad``."""
    if isinstance(node, cst.Call):
        method = method_name(node) or dotted_name(node.func) or ""
        last = method.split(".")[-1]
        if "zero_grad" in last or last in ("clear_grad", "clear_gradients", "cleargrads", "zerograd", "zero_gradients"):
            return True
        if last in ("zero_", "detach_", "fill_") and isinstance(node.func, cst.Attribute):
            chain = dotted_name(node.func.value) or ""
            return chain.endswith((".grad", ".grad.data"))
        return False
    if isinstance(node, cst.Assign):
        return any(_is_grad_attribute(target.target) for target in node.targets)
    if isinstance(node, cst.Del):
        return _is_grad_attribute(node.target)
    return False


def _is_grad_attribute(target: cst.BaseExpression) -> bool:
    return isinstance(target, cst.Attribute) and target.attr.value == "grad"


def local_callees(node: cst.CSTNode, functions: dict[str, cst.FunctionDef]) -> list[cst.FunctionDef]:
    """Functions of this file called under ``node`` by name or as ``self.name(...)``."""
    found = []
    for call in calls_in(node):
        name = None
        if isinstance(call.func, cst.Name):
            name = call.func.value
        elif isinstance(call.func, cst.Attribute) and dotted_name(call.func.value) == "self":
            name = call.func.attr.value
        if name is not None and name in functions:
            found.append(functions[name])
    return found


def reaches(node: cst.CSTNode, predicate, functions: dict[str, cst.FunctionDef], depth: int = 2) -> bool:
    """True when ``predicate`` holds for a node under ``node`` or in a local
    function it calls (followed ``depth`` calls deep)."""
    seen: set[int] = set()
    frontier = [node]
    for level in range(depth + 1):
        following = []
        for current in frontier:
            if id(current) in seen:
                continue
            seen.add(id(current))
            body = current.body if isinstance(current, cst.FunctionDef) else current
            if any(predicate(child) for child in walk(body)):
                return True
            if level < depth:
                following.extend(local_callees(body, functions))
        frontier = following
    return False


def is_foreign(ctx) -> bool:
    """True when the file imports another framework and nothing from the PyTorch ecosystem."""
    imports = ctx.imports
    if any(imports.imports_module(name) for name in TORCH_LIKE):
        return False
    return any(imports.imports_module(name) for name in FOREIGN_FRAMEWORKS)


def loops_in(node: cst.CSTNode) -> list[cst.CSTNode]:
    """``for``/``while`` loops under ``node`` in the same body, outermost first."""
    return [child for child in walk(node) if isinstance(child, LOOP_TYPES)]


def loop_body(loop: cst.CSTNode) -> cst.CSTNode:
    return loop.body


def has_modulo(expr: cst.CSTNode) -> bool:
    """True when ``expr`` contains ``a % b`` (a periodic condition)."""
    return any(isinstance(child, cst.BinaryOperation) and isinstance(child.operator, cst.Modulo) for child in walk(expr))


def contains_string(node: cst.CSTNode, prefixes: tuple[str, ...]) -> bool:
    """True when ``node`` contains a string literal starting with one of ``prefixes``."""
    for child in walk(node):
        if isinstance(child, cst.SimpleString):
            value = child.evaluated_value
            if isinstance(value, str) and value.startswith(prefixes):
                return True
    return False
