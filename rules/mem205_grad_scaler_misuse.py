"""MEM205 grad-scaler-misuse."""

from __future__ import annotations

import ast

from memlint.lint.diagnostic import Severity
from memlint.lint.names import dotted_name
from memlint.lint.rule import Rule
from memlint.lint.semantic import frameworks as fw
from memlint.lint.semantic.values import Tri
from memlint.lint.syntax import WITH_TYPES, is_constant, keyword_arg, string_value
from memlint.rules._training import backward_loss, calls_in, is_delegated_backward, method_name, walk
from memlint.lint.signatures import parameter_defaults

GRAD_SCALERS = frozenset({
    "torch.cuda.amp.GradScaler", "torch.amp.GradScaler", "torch.GradScaler", "torch.amp.grad_scaler.GradScaler",
    "torch.cuda.amp.grad_scaler.GradScaler",
})
AUTOCASTS = frozenset({"torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast", "torch.amp.autocast_mode.autocast"})
_FP16 = frozenset({"torch.float16", "torch.half"})
#: Any of these in the file means the loss is (or may be) scaled by something: stay silent.
_SCALING_WORDS = ("GradScaler", "scaler", "scale_loss", "loss_scale", "Scaler", "deepspeed", "apex")
#: Fields of the nodes that hold identifiers: names, attributes, definitions, parameters, keywords, imports.
_IDENTIFIER_FIELDS = ("id", "attr", "name", "arg", "asname", "module", "names")


def keyword_value(call: ast.Call, name: str) -> ast.expr | None:
    """The expression passed as ``name=...``, or None."""
    found = keyword_arg(call, name)
    return found.value if found is not None else None


def unnamed_arguments(call: ast.Call) -> list[ast.expr]:
    """The arguments not passed by name: ``x``, ``*xs`` (as ``xs``), ``**kw`` (as ``kw``)."""
    positional = [arg.value if isinstance(arg, ast.Starred) else arg for arg in call.args]
    return positional + [keyword.value for keyword in call.keywords if keyword.arg is None]


def _literals_bound_to(semantic, name: str) -> list[str]:
    """The string literals the file assigns to ``name`` (``device = "cpu"``,
    ``device = torch.device("cpu")``, a parameter default)."""
    found = []
    for statement in semantic.index.of_type(ast.Assign):
        if any(isinstance(t, ast.Name) and t.id == name for t in statement.targets):
            found.extend(n.value for n in ast.walk(statement.value) if isinstance(n, ast.Constant) and isinstance(n.value, str))
    for argument in semantic.index.of_type(ast.arguments):
        defaults = dict(parameter_defaults(argument))
        if isinstance(string_value(defaults.get(name)), str):
            found.append(string_value(defaults[name]))
    return found


def identifiers(index) -> set[str]:
    """The identifiers the module spells (the dotted module of an import as
    one), read from its node index's groups: each node class's own
    identifier fields (:data:`_IDENTIFIER_FIELDS`)."""
    found: set[str] = set()
    for kind, fields in _IDENTIFIER_FIELDS_OF.items():
        for node in index.of_type(kind):
            for field in fields:
                value = getattr(node, field)
                if isinstance(value, str):
                    found.add(value)
                elif isinstance(value, list):
                    found.update(item for item in value if isinstance(item, str))
    return found


#: The node classes with fields in :data:`_IDENTIFIER_FIELDS`, and those
#: fields (Python 3.11's ``ast``).
_IDENTIFIER_FIELDS_OF = {
    kind: tuple(field for field in kind._fields if field in _IDENTIFIER_FIELDS)
    for kind in vars(ast).values()
    if isinstance(kind, type) and issubclass(kind, ast.AST) and any(f in _IDENTIFIER_FIELDS for f in kind._fields)
}


class GradScalerMisuse(Rule):
    """## What it does
    Reports two halves of a broken mixed-precision setup:

    - a `GradScaler` (`torch.amp.GradScaler`, `torch.cuda.amp.GradScaler`,
      `torch.GradScaler`) whose `scale(loss)` is used in a file that never
      uses `autocast`: reported at the `GradScaler(...)` call;
    - float16 `autocast` (`torch.autocast("cuda")`, `torch.cuda.amp.autocast()`,
      or `dtype=torch.float16`) in a function that calls `.backward()` on the
      loss directly, in a file with no loss scaler at all: reported at the
      `.backward()` call.

    ## Why is this bad?
    Without autocast the model runs in float32: the scaler only multiplies
    and divides the loss, gains nothing and hides that mixed precision is
    off (the memory saving the code was written for never happens). The
    reverse is worse: float16 gradients below ~6e-8 flush to zero, so
    without loss scaling small gradients vanish and training stalls or
    diverges. bfloat16 has float32's range and needs no scaler.

    ## Example
    ```python
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    ```

    ## Use instead
    ```python
    scaler = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Known problems
    The analysis is per file: a scaler built in one module and passed to a
    training loop in another is only judged where its `scale(...)` is
    called, and any mention of a scaler (`scaler`, `GradScaler`, DeepSpeed
    or apex loss scaling) anywhere in the file silences the second half.
    An autocast whose dtype comes from a variable is not known to be
    float16 and is not reported, unless the file provably binds it: a name
    bound once (`ctx = torch.autocast(...)`, then `with ctx:`), an item of
    a dict display whose key folds (`{"float16": torch.float16, ...}[dtype]`
    with `dtype = "float16"`), the branch of a conditional expression whose
    test folds (`nullcontext() if device == "cpu" else autocast(...)`).
    `enabled=False` is not reported. A device type
    that is not a literal (`autocast(device_type=device.type)`) is taken
    for CUDA (whose default autocast dtype is float16,
    torch/amp/autocast_mode.py, torch 2.13.0) when the file moves its
    tensors or modules to that device (`x.to(device)`, `device=device`) —
    GPU training code, run as its authors run it — unless the file binds
    that name only to literals of another device (`device = "cpu"`); any
    other variable device is unknown and not reported.

    ## References
    - [Automatic Mixed Precision package: gradient scaling](https://pytorch.org/docs/stable/amp.html#gradient-scaling)
    - [CUDA Automatic Mixed Precision examples](https://pytorch.org/docs/stable/notes/amp_examples.html)
    """

    CODE = "MEM205"
    NAME = "grad-scaler-misuse"
    MESSAGE = "`GradScaler` is used but nothing runs under `autocast`: the model trains in float32"
    SEVERITY = Severity.WARNING
    TRIGGERS = ("GradScaler", "autocast")
    NEEDS_NAMES = ("GradScaler", "autocast")
    FRAMEWORK = "torch"
    VALID = (
        "import torch\nscaler = torch.amp.GradScaler('cuda')\ndef step(model, x, opt):\n    with torch.autocast('cuda'):\n        loss = model(x)\n    scaler.scale(loss).backward()\n    scaler.step(opt)\n",
        "import torch\ndef step(model, x, opt):\n    with torch.autocast('cuda', dtype=torch.bfloat16):\n        loss = model(x)\n    loss.backward()\n    opt.step()\n",
        "import torch\ndef step(model, x, opt, dtype):\n    with torch.autocast('cuda', dtype=dtype):\n        loss = model(x)\n    loss.backward()\n",
        "import torch\ndef evaluate(model, x):\n    with torch.autocast('cuda'):\n        return model(x)\n",
        "import torch\nfrom jax import GradScaler\ns = GradScaler()\n",
    )
    INVALID = (
        "import torch\nscaler = torch.cuda.amp.GradScaler()  # expect: MEM205\ndef step(model, x, opt):\n    loss = model(x)\n    scaler.scale(loss).backward()\n    scaler.step(opt)\n",
        "import torch\ndef step(model, x, opt):\n    with torch.autocast('cuda'):\n        loss = model(x)\n    loss.backward()  # expect: MEM205\n    opt.step()\n",
        "from torch.cuda.amp import autocast\ndef step(model, x, y, opt, crit):\n    with autocast():\n        out = model(x)\n        loss = crit(out, y)\n    loss.backward()  # expect: MEM205\n",
        "import torch as T\ndef step(model, x, opt):\n    with T.amp.autocast(device_type='cuda', dtype=T.float16):\n        loss = model(x).loss\n    loss.backward()  # expect: MEM205\n",
    )

    def visit_Module(self, node: ast.Module) -> None:
        everything = self.ctx.index.nodes  # module level, classes and every function: the node index, pre-order
        calls = [n for n in everything if isinstance(n, ast.Call)]
        scalers = [c for c in calls if self.ctx.qualified(c.func) in GRAD_SCALERS]
        if scalers and not self._autocast_anywhere(everything) and self._scaler_used(calls):
            for call in scalers:
                if not self._disabled(call):
                    self.report(call)
        spelled = " ".join(identifiers(self.ctx.index))
        if not any(word in spelled for word in _SCALING_WORDS):
            self._check_unscaled(node)

    def _autocast_anywhere(self, nodes: list[ast.AST]) -> bool:
        """Some code of the file names an autocast (``torch.autocast``,
        ``accelerator.autocast()``, an ``autocast`` imported or passed in)."""
        return any((isinstance(n, ast.Name) and n.id == "autocast") or (isinstance(n, ast.Attribute) and n.attr == "autocast")
                   or (isinstance(n, ast.alias) and "autocast" in (n.asname or n.name)) for n in nodes)

    def _scaler_used(self, calls: list[ast.Call]) -> bool:
        """True when some ``x.scale(loss)`` is backpropagated on a forward result of this file."""
        for call in calls:
            if method_name(call) == "backward" and isinstance(call.func, ast.Attribute):
                receiver = call.func.value
                if isinstance(receiver, ast.Call) and method_name(receiver) == "scale":
                    loss = backward_loss(call, self.ctx.semantic)
                    if loss is not None and self.ctx.semantic.value(loss).attached:
                        return True
        return False

    def _disabled(self, call: ast.Call) -> bool:
        return is_constant(keyword_value(call, "enabled"), False)

    def _check_unscaled(self, module: ast.Module) -> None:
        for unit in [module, *(function.body for function in self.ctx.semantic.functions)]:
            fp16 = [n for n in walk(unit) if isinstance(n, WITH_TYPES) and any(self._fp16_autocast(i.context_expr) for i in n.items)]
            if not fp16:
                continue
            for call in calls_in(unit):
                if method_name(call) == "backward" and not is_delegated_backward(call, self.ctx.semantic):
                    receiver = call.func.value
                    if isinstance(receiver, ast.Call):
                        continue
                    self.report(call, message="`.backward()` on an unscaled float16 `autocast` loss: small gradients underflow to zero (use a `GradScaler`)")

    def _fp16_autocast(self, expr: ast.expr) -> bool:
        provable = self.ctx.semantic.constants.expression  # `ctx = nullcontext() if device == "cpu" else autocast(...)`
        expr = provable(expr)
        if not isinstance(expr, ast.Call):
            return False
        qualified = self.ctx.qualified(expr.func)
        if qualified not in AUTOCASTS or self._disabled(expr):
            return False
        dtype = keyword_value(expr, "dtype")
        if dtype is not None:
            return self.ctx.qualified(provable(dtype)) in _FP16  # `{"float16": torch.float16, ...}[dtype]`
        positional = unnamed_arguments(expr)
        if qualified == "torch.cuda.amp.autocast":
            return len(positional) < 2 and not (positional and is_constant(positional[0], False))
        device = keyword_value(expr, "device_type")
        if device is None and positional:
            device = positional[0]
            if len(positional) > 1:
                return self.ctx.qualified(provable(positional[1])) in _FP16
        if device is None or string_value(device) is not None:
            return string_value(device) == "cuda"
        return self._may_be_cuda(device)

    def _may_be_cuda(self, device: ast.expr) -> bool:
        """A device type that is not a literal (``device.type``, a
        ``device_type`` variable) is CUDA's when the file puts its training
        tensors or modules on that device (``x.to(device)``,
        ``device=device``) or it is a tensor's device on the accelerator
        (``x.device.type``), unless every literal the file binds to its name
        is another device (``device = "cpu"``). Otherwise it is unknown."""
        base = device.value if isinstance(device, ast.Attribute) and device.attr == "type" else device
        root = base
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name):
            bound = _literals_bound_to(self.ctx.semantic, root.id)
            if bound and not any(fw.ACCELERATOR_STRINGS.match(text) for text in bound):
                return False
        if isinstance(base, ast.Attribute) and base.attr == "device":
            return self.ctx.semantic.value(base.value).device is Tri.YES
        name = dotted_name(base)
        return name is not None and name in self._placement_targets()

    def _placement_targets(self) -> frozenset[str]:
        """Dotted names the file moves tensors or modules to: ``x.to(d)``,
        ``x.cuda(d)``, ``device=d``."""
        found = self.__dict__.get("_targets")
        if found is None:
            names = set()
            for call in self.ctx.index.of_type(ast.Call):
                if isinstance(call.func, ast.Attribute) and call.func.attr in ("to", "cuda") and call.args:
                    names.add(dotted_name(call.args[0]))
                names.update(dotted_name(k.value) for k in call.keywords if k.arg == "device")
            found = self._targets = frozenset(names - {None})
        return found
