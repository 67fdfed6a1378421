"""Static extraction of a training script's recipe (CPython ``ast``; never imports the script or torch).

What is read, and from where:

* batch size: ``DataLoader(batch_size=...)`` (a literal, or a name / attribute
  resolved below), else a module constant named like ``BATCH_SIZE``, an
  ``argparse`` option ``--batch-size`` default, or a class (dataclass/config)
  attribute ``batch_size``.  Names resolve to: module/function constants
  (``BATCH = 64``), ``argparse`` defaults (``args.batch_size``), class attribute
  defaults (``cfg.batch_size``), dict literal entries (``config["batch_size"]``)
  and parameter defaults (``def main(batch_size=32)``), all in the same file;
* optimizer: a ``torch.optim`` class call (SGD with ``momentum`` > 0 is sgd-momentum);
* precision: ``autocast`` (``torch.autocast``, ``torch.amp.autocast``,
  ``torch.cuda.amp.autocast``) with its ``dtype`` (CUDA's default is float16);
  ``GradScaler`` is recorded too;
* activation checkpointing: ``torch.utils.checkpoint.checkpoint[_sequential]``
  or ``.gradient_checkpointing_enable()``;
* gradient accumulation: ``if (i + 1) % N == 0: ... .step()`` with N resolved
  as above, else a constant/option named like ``accumulation_steps``;
* ``zero_grad(set_to_none=...)``; a script that calls ``.backward()`` and
  builds an optimizer but never calls ``zero_grad`` keeps its gradients
  between steps (``set_to_none`` False, as MEM201 reports).

Every value carries its position (the literal that gave it), so reports can say
"script line N" and MEM302 can point at the batch-size literal.
"""

from __future__ import annotations

import ast

from memlint.lint.names import dotted_name
import re
from dataclasses import dataclass, field
from typing import Any

from memlint.lint.context import FileContext
from memlint.lint.syntax import is_constant, keyword_arg, string_value
from memlint.lint.walk import Visitor, visit as walk_visit

_BATCH_NAME = re.compile(r"^(train_?)?(batch_?size|bs|batch)$", re.IGNORECASE)
_ACCUM_NAME = re.compile(r"(grad(ient)?_?)?acc(um(ulation|ulate)?)?_?(steps|iters?|iterations)?$", re.IGNORECASE)
_EVAL_WORDS = ("val", "eval", "test", "dev")
_OPTIMIZERS = {"sgd": "sgd", "adam": "adam", "adamw": "adamw", "adagrad": "adagrad", "rmsprop": "rmsprop"}
_AUTOCAST = ("torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast", "torch.amp.autocast_mode.autocast")
_SCALERS = ("torch.cuda.amp.GradScaler", "torch.amp.GradScaler", "torch.GradScaler")
_CHECKPOINT = ("torch.utils.checkpoint.checkpoint", "torch.utils.checkpoint.checkpoint_sequential")
_DTYPES = {"torch.bfloat16": "amp-bf16", "torch.float16": "amp-fp16", "torch.half": "amp-fp16"}


@dataclass
class Found:
    """A value read from the script: ``value``, the 1-based span of the node that gave it, and ``how``."""

    value: Any
    line: int
    col: int
    end_line: int
    end_col: int
    how: str

    def to_json(self) -> dict:
        return {"value": self.value, "line": self.line, "how": self.how}


@dataclass
class Recipe:
    """What the script shows; None where it shows nothing.  ``notes``: things seen but not modelled."""

    batch_size: Found | None = None
    optimizer: Found | None = None
    optimizer_call: str | None = None
    precision: Found | None = None
    grad_scaler: Found | None = None
    checkpointing: Found | None = None
    grad_accum: Found | None = None
    set_to_none: Found | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        keys = ("batch_size", "optimizer", "precision", "grad_scaler", "checkpointing", "grad_accum", "set_to_none")
        out: dict[str, Any] = {k: (getattr(self, k).to_json() if getattr(self, k) else None) for k in keys}
        out["optimizer_call"] = self.optimizer_call
        out["notes"] = list(self.notes)
        return out


def _int_of(node: ast.expr) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    text = string_value(node)
    if text is not None and text.strip().isdigit():
        return int(text)
    return None


def _number_of(node: ast.expr) -> float | None:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return float(node.value)
    return None


def _kwarg(call: ast.Call, name: str) -> ast.expr | None:
    keyword = keyword_arg(call, name)
    return None if keyword is None else keyword.value


def _string_arg(call: ast.Call, index: int) -> str | None:
    positional = [a for a in call.args if not isinstance(a, ast.Starred)]
    return string_value(positional[index]) if len(positional) > index else None


class _Collector(Visitor):
    """One pass: remember name tables and candidate calls; resolution happens afterwards."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.constants: dict[str, ast.expr] = {}
        self.options: dict[str, ast.expr] = {}   # argparse dest -> default node
        self.attributes: dict[str, ast.expr] = {}  # class attribute / dict key -> value node
        self.loaders: list[tuple[ast.Call, str]] = []
        self.optimizers: list[ast.Call] = []
        self.autocasts: list[ast.Call] = []
        self.scalers: list[ast.Call] = []
        self.checkpoints: list[ast.Call] = []
        self.zero_grads: list[ast.Call] = []
        self.backwards: list[ast.Call] = []
        self.modulo_steps: list[ast.expr] = []
        self._class_depth = 0
        self._assign_target: list[str] = []

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._class_depth += 1

    def leave_ClassDef(self, node: ast.ClassDef) -> None:
        self._class_depth -= 1

    def _remember(self, name: str, value: ast.expr) -> None:
        table = self.attributes if self._class_depth else self.constants
        table.setdefault(name, value)

    def visit_Assign(self, node: ast.Assign) -> None:
        names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        for name in names:
            self._remember(name, node.value)
        self._assign_target.append(" ".join(self.ctx.code(t) for t in node.targets))

    def leave_Assign(self, node: ast.Assign) -> None:
        self._assign_target.pop()

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if isinstance(node.target, ast.Name) and node.value is not None:
            self._remember(node.target.id, node.value)

    def visit_arguments(self, node: ast.arguments) -> None:
        positional = [*node.posonlyargs, *node.args]
        defaults = zip(positional[len(positional) - len(node.defaults):], node.defaults)
        keyword_defaults = ((arg, default) for arg, default in zip(node.kwonlyargs, node.kw_defaults) if default is not None)
        for arg, default in (*defaults, *keyword_defaults):
            self.constants.setdefault(arg.arg, default)

    def visit_Dict(self, node: ast.Dict) -> None:
        for key, value in zip(node.keys, node.values):
            key_text = string_value(key)
            if key_text is not None:
                self.attributes.setdefault(key_text, value)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute) and node.func.attr == "backward":
            self.backwards.append(node)
        name = self.ctx.qualified(node.func) or dotted_name(node.func) or ""
        last = name.rsplit(".", 1)[-1]
        if last == "add_argument":
            self._argparse(node)
        elif name.endswith("DataLoader"):
            self.loaders.append((node, self._assign_target[-1] if self._assign_target else ""))
        elif name.startswith("torch.optim.") and "lr_scheduler" not in name:
            self.optimizers.append(node)
        elif name in _AUTOCAST:
            self.autocasts.append(node)
        elif name in _SCALERS:
            self.scalers.append(node)
        elif name in _CHECKPOINT or last == "gradient_checkpointing_enable":
            self.checkpoints.append(node)
        elif last == "zero_grad":
            self.zero_grads.append(node)
        elif last == "dict":  # dict(batch_size=32)
            for keyword in node.keywords:
                if keyword.arg is not None:
                    self.attributes.setdefault(keyword.arg, keyword.value)

    def _argparse(self, node: ast.Call) -> None:
        dest = string_value(_kwarg(node, "dest"))
        flags = [text for text in map(string_value, node.args) if text is not None]
        if dest is None:
            longs = [f for f in flags if f.startswith("--")] or flags
            if not longs:
                return
            dest = longs[0].lstrip("-").replace("-", "_")
        default = _kwarg(node, "default")
        if default is not None:
            self.options.setdefault(dest, default)

    def visit_If(self, node: ast.If) -> None:
        if not _calls_step(node.body):
            return
        for candidate in _modulo_operands(node.test):
            self.modulo_steps.append(candidate)


def _calls_step(body: list[ast.stmt]) -> bool:
    found = []

    class Finder(Visitor):
        def visit_Call(self, node: ast.Call) -> None:
            if isinstance(node.func, ast.Attribute) and node.func.attr == "step":
                found.append(node)

    walk_visit(body, Finder())
    return bool(found)


def _modulo_operands(test: ast.expr) -> list[ast.expr]:
    operands = []

    class Finder(Visitor):
        def visit_BinOp(self, node: ast.BinOp) -> None:
            if isinstance(node.op, ast.Mod):
                operands.append(node.right)

    walk_visit(test, Finder())
    return operands


class _Resolver:
    """Resolve an expression to an int literal (with its node) through the collected tables."""

    def __init__(self, collected: _Collector) -> None:
        self.c = collected

    def resolve(self, node: ast.expr | None, depth: int = 0) -> tuple[int, ast.expr, str] | None:
        if node is None or depth > 5:
            return None
        value = _int_of(node)
        if value is not None:
            return value, node, "literal"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "int" and node.args:
            return self.resolve(node.args[0], depth + 1)
        if isinstance(node, ast.Name):
            found = self._lookup(node.id, (self.c.constants, self.c.options, self.c.attributes), depth)
            return self._tag(found, f"constant {node.id}")
        if isinstance(node, ast.Attribute):
            found = self._lookup(node.attr, (self.c.options, self.c.attributes, self.c.constants), depth)
            return self._tag(found, self._kind(node.attr))
        if isinstance(node, ast.Subscript):
            key = string_value(node.slice)
            if key is not None:
                return self._tag(self._lookup(key, (self.c.attributes, self.c.options), depth), f"config key {key!r}")
        return None

    def _kind(self, attr: str) -> str:
        return f"argparse --{attr.replace('_', '-')} default" if attr in self.c.options else f"attribute {attr}"

    @staticmethod
    def _tag(found, how: str):
        if found is None:
            return None
        value, node, inner = found
        return value, node, how if inner == "literal" else f"{how} <- {inner}"

    def _lookup(self, name: str, tables, depth: int):
        for table in tables:
            if name in table:
                found = self.resolve(table[name], depth + 1)
                if found is not None:
                    return found
        return None


def _found(ctx: FileContext, node: ast.AST, value: Any, how: str) -> Found:
    (line, col), (end_line, end_col) = ctx.span(node)
    return Found(value, line, col, end_line, end_col, how)


def extract_recipe(path: str, source: str) -> Recipe:
    """Read the training recipe of ``source`` statically (see the module docstring).

    Raises SyntaxError only for unparsable source (callers lint first).
    """
    module = ast.parse(source)
    ctx = FileContext(path, source, module)
    collected = _Collector(ctx)
    walk_visit(module, collected)
    resolver = _Resolver(collected)
    recipe = Recipe()
    recipe.batch_size = _batch_size(ctx, collected, resolver)
    _optimizer(ctx, collected, recipe)
    _precision(ctx, collected, recipe)
    if collected.checkpoints:
        call = collected.checkpoints[0]
        recipe.checkpointing = _found(ctx, call, True, (ctx.qualified(call.func) or ctx.code(call.func)) + "(...)")
    recipe.grad_accum = _grad_accum(ctx, collected, resolver)
    _set_to_none(ctx, collected, recipe)
    return recipe


def _argument_code(ctx: FileContext, call: ast.Call) -> list[str]:
    """The code of each argument of ``call`` in source order (``name=value`` for keywords)."""
    arguments = [*call.args, *call.keywords]
    arguments.sort(key=lambda node: (node.lineno, node.col_offset))
    return [ctx.code(argument) for argument in arguments]


def _is_eval(text: str) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in _EVAL_WORDS) and "train" not in lowered


def _batch_size(ctx: FileContext, c: _Collector, resolver: _Resolver) -> Found | None:
    loaders = [(call, target) for call, target in c.loaders if _kwarg(call, "batch_size") is not None]
    preferred = [x for x in loaders if not _is_eval(x[1] + " " + ctx.code(x[0]))] or loaders
    for call, _target in preferred:
        resolved = resolver.resolve(_kwarg(call, "batch_size"))
        if resolved is not None:
            value, node, how = resolved
            how = "DataLoader(batch_size=...)" + ("" if how == "literal" else f" <- {how}")
            return _found(ctx, node, value, how)
    for table, label in ((c.options, "argparse --{} default"), (c.constants, "constant {}"),
                         (c.attributes, "attribute {}")):
        for name, node in table.items():
            if _BATCH_NAME.match(name) and not _is_eval(name):
                resolved = resolver.resolve(node)
                if resolved is not None:
                    shown = name.replace("_", "-") if "argparse" in label else name
                    return _found(ctx, resolved[1], resolved[0], label.format(shown))
    return None


def _optimizer(ctx: FileContext, c: _Collector, recipe: Recipe) -> None:
    for call in c.optimizers:
        qualified = ctx.qualified(call.func) or ""
        cls = qualified.rsplit(".", 1)[-1]
        recipe.optimizer_call = f"{qualified}({', '.join(_argument_code(ctx, call)[1:])})"
        name = _OPTIMIZERS.get(cls.lower())
        if name is None:
            recipe.notes.append(f"optimizer {qualified} (line {ctx.span(call)[0][0]}) is not modelled by the estimator")
            return
        if name == "sgd":
            momentum = _kwarg(call, "momentum")
            if momentum is not None and (_number_of(momentum) is None or _number_of(momentum) > 0):
                name = "sgd-momentum"
        recipe.optimizer = _found(ctx, call, name, f"{cls}(...)")
        return


def _precision(ctx: FileContext, c: _Collector, recipe: Recipe) -> None:
    for call in c.autocasts:
        qualified = ctx.qualified(call.func) or ""
        device = _string_arg(call, 0) or string_value(_kwarg(call, "device_type"))
        if device == "cpu":
            continue
        if is_constant(_kwarg(call, "enabled"), False):
            continue
        dtype = _kwarg(call, "dtype")
        if dtype is None and qualified != "torch.cuda.amp.autocast" and len(call.args) > 1:
            dtype = call.args[1]
        precision = "amp-fp16" if dtype is None else _DTYPES.get(ctx.qualified(dtype) or "")
        if precision is None:
            recipe.notes.append(f"autocast dtype {ctx.code(dtype)} (line {ctx.span(call)[0][0]}) not recognised")
            continue
        recipe.precision = _found(ctx, call, precision, f"{ctx.code(call.func)}({'dtype' if dtype else 'default float16'})")
        break
    if c.scalers:
        recipe.grad_scaler = _found(ctx, c.scalers[0], True, ctx.code(c.scalers[0].func))


def _grad_accum(ctx: FileContext, c: _Collector, resolver: _Resolver) -> Found | None:
    for operand in c.modulo_steps:
        resolved = resolver.resolve(operand)
        if resolved is not None and resolved[0] >= 1:
            how = "`% N == 0` before .step()" + ("" if resolved[2] == "literal" else f" <- {resolved[2]}")
            return _found(ctx, resolved[1], resolved[0], how)
    for table in (c.options, c.constants, c.attributes):
        for name, node in table.items():
            if _ACCUM_NAME.match(name) and "acc" in name.lower():
                resolved = resolver.resolve(node)
                if resolved is not None and resolved[0] >= 1:
                    return _found(ctx, resolved[1], resolved[0], f"{name}")
    return None


def _set_to_none(ctx: FileContext, c: _Collector, recipe: Recipe) -> None:
    for call in c.zero_grads:
        value = _kwarg(call, "set_to_none")
        if value is None:
            value = call.args[0] if call.args else None
        if is_constant(value, True) or is_constant(value, False):
            recipe.set_to_none = _found(ctx, call, value.value, "zero_grad(set_to_none=...)")
            if value.value is False:
                return  # one call that keeps gradients is enough to keep them
        elif value is None and recipe.set_to_none is None:
            recipe.set_to_none = _found(ctx, call, True, "zero_grad() (default set_to_none=True)")
    if not c.zero_grads and c.backwards and c.optimizers:
        # No zero_grad at all (MEM201's finding): the gradients stay allocated
        # from one step to the next, as with zero_grad(set_to_none=False).
        recipe.set_to_none = _found(ctx, c.backwards[0], False, "no zero_grad() in the script: gradients are kept between steps")
