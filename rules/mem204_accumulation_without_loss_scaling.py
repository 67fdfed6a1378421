"""MEM204 accumulation-without-loss-scaling."""

from __future__ import annotations

import ast

from memlint.lint.diagnostic import Severity
from memlint.lint.names import dotted_name, targets_of
from memlint.lint.patterns import names_in
from memlint.lint.rule import Rule
from memlint.lint.semantic.torch_ops import FUNCTIONAL_LOSSES
from memlint.lint.syntax import LOOP_TYPES, WITH_TYPES
from memlint.rules._training import (
    Code, backward_loss, calls_in, clears_grads, is_backward, is_delegated_backward, is_optimizer_step,
    method_name, walk,
)

_ACCUMULATION_WORDS = ("accum", "accumulat", "grad_acc", "update_freq", "iters_to_accumulate")
_SCALING_METHODS = frozenset({"div", "div_", "divide", "true_divide", "mul", "mul_", "multiply", "__truediv__"})
#: Ancestors under which a statement runs only on some iterations.
_BRANCHES = (ast.If, ast.IfExp, *LOOP_TYPES, ast.ExceptHandler)

Loop = ast.For | ast.AsyncFor | ast.While
#: accelerate's engine, whose ``backward`` divides by its own accumulation setting.
ACCELERATORS = frozenset({"accelerate.Accelerator", "accelerate.accelerator.Accelerator"})


def accumulation_period(test: ast.expr) -> ast.expr | None:
    """``N`` for ``(i + 1) % N == 0``, ``not step % N``, ``count == accum_steps``; else None."""
    for node in walk(test):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            return node.right
    for node in walk(test):
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            if not isinstance(node.ops[0], (ast.Eq, ast.GtE)):
                continue
            sides = (node.left, node.comparators[0])
            for side in sides[::-1]:
                name = (dotted_name(side) or "").lower()
                if any(word in name for word in _ACCUMULATION_WORDS):
                    return side
    return None


def has_scaling(code: Code) -> bool:
    """True when ``code`` divides or multiplies (``/ n``, ``* w``, ``.div(n)``)."""
    for node in walk(code):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mult)):
            return True
        if isinstance(node, ast.Call) and method_name(node) in _SCALING_METHODS:
            return True
    return False


def unscaled_addends(expr: ast.expr) -> list[ast.expr]:
    """The parts of ``expr`` that reach its value with no scaling: ``expr``
    itself when it neither divides nor multiplies; in a sum or difference,
    the unscaled parts of each side (a weight or a ``/ n`` on one addend
    scales that addend only: ``kd * t**2 + ce`` leaves ``ce`` as it came);
    none when the scaling applies to the whole (``(kd + ce) / n``)."""
    if not has_scaling(expr):
        return [expr]
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub)):
        return [*unscaled_addends(expr.left), *unscaled_addends(expr.right)]
    return []


class AccumulationWithoutLossScaling(Rule):
    """## What it does
    Reports gradient accumulation, an optimizer step taken only every N
    iterations (`if (i + 1) % N == 0:`, `if step % accum_steps == 0:`, or a
    counter compared with an accumulation setting) while `.backward()` runs
    every iteration, where the loss passed to `.backward()` is not divided
    by anything. The finding is at the `.backward()` call.

    ## Why is this bad?
    Gradients of N micro-batches are summed, not averaged: the update is N
    times larger than the one for the same data in one batch, as if the
    learning rate were N times higher. Training becomes unstable, and the
    results differ from the non-accumulated run the hyper-parameters were
    tuned on.

    ## Example
    ```python
    for i, (x, y) in enumerate(loader):
        loss = criterion(model(x), y)
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    ```

    ## Use instead
    ```python
    for i, (x, y) in enumerate(loader):
        loss = criterion(model(x), y) / accum_steps
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    ```

    ## Known problems
    Only a loss traced, through assignments in the loop body, to a forward
    pass or a loss function is reported; any division or multiplication on
    the way (by N or by anything else, such as a loss weight) silences the
    rule for what it applies to -- in a sum, the addend it scales
    (`kd * t**2 + ce` is reported for `ce`, `(kd + ce) * w` is not) -- as
    does a loss returned by a helper whose body is not known.
    `accelerator.backward(loss)` (Accelerate and DeepSpeed divide by the
    accumulation steps themselves) and `with accelerator.accumulate(model):`
    are never reported. A loop that clears gradients unconditionally is not
    accumulating and is left to other rules. A count that is provably 1 as
    the file runs (`accum = 1`, raised only under an `if` whose test the
    file's own literals decide is false, such as a configured batch equal
    to the per-device limit) is no accumulation and is not reported; the
    folding follows module and function literals, the literal arguments of
    every call of the file, and dict literals.

    ## References
    - [Gradient accumulation (Hugging Face Accelerate)](https://huggingface.co/docs/accelerate/usage_guides/gradient_accumulation)
    - [Automatic Mixed Precision examples: gradient accumulation](https://pytorch.org/docs/stable/notes/amp_examples.html#gradient-accumulation)
    """

    CODE = "MEM204"
    NAME = "accumulation-without-loss-scaling"
    MESSAGE = "gradient accumulation: the loss is not divided by the number of accumulated steps before `.backward()`"
    SEVERITY = Severity.WARNING
    TRIGGERS = ("backward",)
    NEEDS_NAMES = ("backward", "manual_backward")
    FRAMEWORK = "torch"
    VALID = (
        "def train(model, loader, opt, crit, accum):\n    for i, (x, y) in enumerate(loader):\n        loss = crit(model(x), y) / accum\n        loss.backward()\n        if (i + 1) % accum == 0:\n            opt.step()\n            opt.zero_grad()\n",
        "def train(model, loader, opt, scaler, n):\n    for step, batch in enumerate(loader):\n        loss = model(**batch).loss\n        scaler.scale(loss / n).backward()\n        if step % n == 0:\n            scaler.step(opt)\n            opt.zero_grad()\n",
        "def train(model, loader, opt, accelerator):\n    for step, batch in enumerate(loader):\n        with accelerator.accumulate(model):\n            loss = model(**batch).loss\n            loss.backward()\n            if step % 4 == 0:\n                opt.step()\n                opt.zero_grad()\n",
        "def train(model, loader, opt, crit):\n    for i, (x, y) in enumerate(loader):\n        loss = crit(model(x), y)\n        loss.backward()\n        opt.step()\n        opt.zero_grad()\n",
        "def train(model, loader, opt, crit, args):\n    for i, batch in enumerate(loader):\n        loss = compute_loss(model, batch)\n        loss.backward()\n        if (i + 1) % args.accum == 0:\n            opt.step()\n            opt.zero_grad()\n",
    )
    INVALID = (
        "def train(model, loader, opt, crit, accum_steps):\n    for i, (x, y) in enumerate(loader):\n        loss = crit(model(x), y)\n        loss.backward()  # expect: MEM204\n        if (i + 1) % accum_steps == 0:\n            opt.step()\n            opt.zero_grad()\n",
        "def train(model, loader, optimizer, scaler, args):\n    for step, batch in enumerate(loader):\n        outputs = model(**batch)\n        loss = outputs.loss.mean()\n        scaler.scale(loss).backward()  # expect: MEM204\n        if (step + 1) % args.gradient_accumulation_steps == 0 or step == len(loader) - 1:\n            scaler.step(optimizer)\n            scaler.update()\n            optimizer.zero_grad()\n",
        "class T:\n    def fit(self, loader):\n        count = 0\n        for batch in loader:\n            loss = self.model(batch)\n            loss.backward()  # expect: MEM204\n            count += 1\n            if count == self.accum_steps:\n                self.optimizer.step()\n                self.optimizer.zero_grad()\n                count = 0\n",
    )

    def leave_For(self, node: ast.For | ast.AsyncFor) -> None:
        self._check_loop(node)

    def leave_While(self, node: ast.While) -> None:
        self._check_loop(node)

    def _check_loop(self, loop: Loop) -> None:
        calls = calls_in(loop.body)
        semantic = self.ctx.semantic
        if not any(method_name(c) == "step" for c in calls) or not any(is_backward(c, self.ctx) for c in calls):
            return  # cheap check first: the rest interprets the function
        period = next((p for p in (self._step_period(c, loop) for c in calls if is_optimizer_step(c, semantic)) if p is not None), None)
        if period is not None and not self._unconditional_clear(loop):
            self._check_backwards(loop, calls, period)
        for inner, count in self._micro_step_loops(loop, calls):
            self._check_backwards(inner, calls_in(inner.body), count)

    def _micro_step_loops(self, loop: Loop, calls: list[ast.Call]) -> list[tuple[ast.For, ast.expr]]:
        """``for micro in range(k):`` loops directly in ``loop``'s body that
        run backward passes and no step, while ``loop`` itself steps once
        after them: accumulation over ``k`` micro-batches (nanoGPT's shape)."""
        semantic = self.ctx.semantic
        steps = [c for c in calls if is_optimizer_step(c, semantic) and not self._conditional(c, loop)]
        found = []
        for statement in loop.body:
            if not (isinstance(statement, ast.For) and isinstance(statement.iter, ast.Call)
                    and dotted_name(statement.iter.func) == "range" and len(statement.iter.args) == 1):
                continue
            inner_calls = calls_in(statement.body)
            if any(is_optimizer_step(c, semantic) for c in inner_calls) or any(clears_grads(n) for n in walk(statement.body)):
                continue
            if any(is_backward(c, self.ctx) for c in inner_calls) and any(s.lineno > statement.end_lineno for s in steps):
                found.append((statement, statement.iter.args[0]))
        return found

    def _check_backwards(self, loop: Loop, calls: list[ast.Call], period: ast.expr) -> None:
        semantic = self.ctx.semantic
        if semantic.constants.value(period) == 1:
            return  # the count is 1 as the file runs: every iteration steps, nothing accumulates
        for call in calls:
            if not is_backward(call, self.ctx) or method_name(call) != "backward":
                continue
            if is_delegated_backward(call, semantic) and not self._engine_leaves_loss_unscaled(call):
                continue
            if self._conditional(call, loop) or self._in_accumulate_context(call):
                continue
            loss = backward_loss(call, semantic)
            if loss is not None and self._raw_loss(loss, loop, call):
                n = self.ctx.code(period)
                self.report(call, message=f"gradient accumulation: the optimizer steps every `{n}` iterations but the loss is not divided by `{n}` before `.backward()`")

    def _engine_leaves_loss_unscaled(self, call: ast.Call) -> bool:
        """``accelerator.backward(loss)`` of an ``Accelerator(...)`` built in
        this function without ``gradient_accumulation_steps``: accelerate
        divides the loss by that setting, 1 by default (accelerate 1.15.0
        ``Accelerator.backward``). An engine built elsewhere is not known."""
        receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
        if not isinstance(receiver, ast.Name):
            return False
        built = self.ctx.semantic.assignment_before(receiver)
        if built is None or not isinstance(built.value, ast.Call) or self.ctx.qualified(built.value.func) not in ACCELERATORS:
            return False
        return not any(k.arg in ("gradient_accumulation_steps", "gradient_accumulation_plugin", None) for k in built.value.keywords)

    def _step_period(self, step: ast.Call, loop: Loop) -> ast.expr | None:
        child: ast.AST = step
        for ancestor in self.ctx.semantic.ancestors(step):
            if ancestor is loop:
                return None
            if isinstance(ancestor, ast.If) and child in ancestor.body:
                period = accumulation_period(ancestor.test)
                has_else_step = any(is_optimizer_step(c, self.ctx.semantic) for c in calls_in(ancestor.orelse))
                return None if has_else_step else period
            child = ancestor
        return None

    def _conditional(self, node: ast.AST, loop: Loop) -> bool:
        """True when ``node`` sits under an ``if``/``else``/nested loop/``try`` handler inside ``loop``."""
        child = node
        for ancestor in self.ctx.semantic.ancestors(node):
            if ancestor is loop:
                return False
            if isinstance(ancestor, _BRANCHES) or _in_else_block(child, ancestor):
                return True
            child = ancestor
        return True

    def _unconditional_clear(self, loop: Loop) -> bool:
        return any(clears_grads(node) and not self._conditional(node, loop) for node in walk(loop.body))

    def _in_accumulate_context(self, node: ast.AST) -> bool:
        for ancestor in self.ctx.semantic.ancestors(node):
            if isinstance(ancestor, WITH_TYPES) and any("accumulate" in self.ctx.code(item.context_expr) for item in ancestor.items):
                return True
        return False

    def _raw_loss(self, loss: ast.expr, loop: Loop, backward: ast.Call) -> bool:
        """True when ``loss`` comes from a forward pass through assignments with no scaling."""
        semantic = self.ctx.semantic
        unscaled = unscaled_addends(loss)
        if not unscaled:
            return False
        order = list(walk(loop.body))
        end = next(i for i, node in enumerate(order) if node is backward)
        pending = {name for part in unscaled for name in names_in(part)}
        found_source = any(self._is_source(part) for part in unscaled)
        for node in reversed(order[:end]):
            if isinstance(node, ast.AugAssign):
                targets, value = set(targets_of(node.target)), node.value
                if targets & pending and not isinstance(node.op, (ast.Add, ast.Sub)):
                    pending -= targets  # `loss /= n`: what it held so far is scaled
                    continue
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                raw_targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                targets, value = {n for t in raw_targets for n in targets_of(t)}, node.value
            else:
                continue
            if not targets & pending:
                continue
            if not (semantic.value(value).attached or self._loss_like_call(value)):
                pending -= targets  # an input (a batch, a target): not part of the loss's scaling
                continue
            unscaled = unscaled_addends(value)  # a scaled part adds nothing unscaled: not followed
            found_source = found_source or any(self._is_source(part) for part in unscaled)
            if not isinstance(node, ast.AugAssign):
                pending -= targets
            pending |= {name for part in unscaled for name in names_in(part)}
        return found_source

    def _loss_like_call(self, expr: ast.expr) -> bool:
        """A forward pass (a loss module such as ``crit(out, y)``), a
        ``torch.nn.functional`` loss, or a function of this file that runs
        one and does not scale its result."""
        if not isinstance(expr, ast.Call):
            return False
        semantic = self.ctx.semantic
        if semantic.is_forward_call(expr) or _functional_loss(semantic, expr):
            return True
        local = semantic.callee(expr)
        return local is not None and semantic.returns(local).attached and not has_scaling(local.body)

    def _is_source(self, expr: ast.expr) -> bool:
        semantic = self.ctx.semantic
        for node in walk(expr):
            if isinstance(node, ast.Call) and (semantic.is_forward_call(node) or _functional_loss(semantic, node)):
                return True
        return False


def _functional_loss(semantic, call: ast.Call) -> bool:
    qualified = semantic.qualified(call.func) or ""
    return qualified.startswith("torch.nn.functional.") and qualified.rsplit(".", 1)[-1] in FUNCTIONAL_LOSSES


def _in_else_block(node: ast.AST, parent: ast.AST) -> bool:
    """True when ``node`` is a statement of ``parent``'s ``else:`` block (``try``'s included)."""
    return isinstance(parent, ast.stmt) and node in getattr(parent, "orelse", ())
