"""MEM506 persistent-tape-kept."""

from __future__ import annotations

import ast

from memlint.lint.diagnostic import Severity
from memlint.lint.rule import Rule
from memlint.lint.semantic import frameworks as fw
from memlint.lint.syntax import FUNCTION_TYPES, LOOP_TYPES, is_constant
from memlint.rules._training import walk

#: Methods that take an optimizer step in TF/Keras (``Optimizer.apply_gradients``,
#: ``minimize``; keras 3.15.1 ``keras/src/optimizers/base_optimizer.py``).
STEP_METHODS = frozenset({"apply_gradients", "minimize"})


class PersistentTapeKept(Rule):
    """## What it does
    Reports a `tf.GradientTape(persistent=True)`:
    whose `with` block contains the training loop (a loop over batches, or
    one that applies gradients); that is created once per iteration of a
    loop which never `del`s it; or that is created once and entered again
    (`with tape:`) on every iteration of a loop.

    ## Why is this bad?
    A persistent tape keeps every intermediate tensor of what it recorded
    until the tape object itself is released, so that `tape.gradient` can
    be called more than once. Around a whole training loop it records every
    step and device memory grows until it runs out. Re-created per step
    without `del tape`, the previous step's tape (and all of its
    activations) stays alive through the next step's forward pass: twice
    the activation memory at the peak.

    ## Example
    ```python
    for x, y in dataset:
        with tf.GradientTape(persistent=True) as tape:
            gen_loss, disc_loss = losses(x, y)
        gen_grads = tape.gradient(gen_loss, generator.trainable_variables)
        disc_grads = tape.gradient(disc_loss, discriminator.trainable_variables)
        apply(gen_grads, disc_grads)
    ```

    ## Use instead
    ```python
    for x, y in dataset:
        with tf.GradientTape(persistent=True) as tape:
            gen_loss, disc_loss = losses(x, y)
        gen_grads = tape.gradient(gen_loss, generator.trainable_variables)
        disc_grads = tape.gradient(disc_loss, discriminator.trainable_variables)
        del tape  # release the recorded intermediates now
        apply(gen_grads, disc_grads)
    ```

    ## Known problems
    A persistent tape made inside a step function (`train_step`) is released
    when the function returns and is not reported. `tape = None` counts like
    `del tape`. A tape kept in an attribute or a container is not followed.
    Loops over a literal tuple/list or a small literal `range` are not
    reported.

    ## References
    - [tf.GradientTape: persistent tapes and `del`](https://www.tensorflow.org/api_docs/python/tf/GradientTape)
    - [Introduction to gradients and automatic differentiation](https://www.tensorflow.org/guide/autodiff#gradients_of_non-scalar_targets)
    """

    CODE = "MEM506"
    NAME = "persistent-tape-kept"
    MESSAGE = "persistent `GradientTape` kept across steps: it holds every intermediate tensor it recorded; `del tape` after the last `tape.gradient`"
    SEVERITY = Severity.WARNING
    TRIGGERS = ("persistent",)
    NEEDS_NAMES = ("persistent",)
    FRAMEWORK = "tensorflow"
    VALID = (
        "import tensorflow as tf\nfor x in dataset:\n    with tf.GradientTape(persistent=True) as tape:\n        a, b = losses(x)\n    ga = tape.gradient(a, va)\n    gb = tape.gradient(b, vb)\n    del tape\n",
        "import tensorflow as tf\n@tf.function\ndef train_step(x):\n    with tf.GradientTape(persistent=True) as tape:\n        a, b = losses(x)\n    return tape.gradient(a, va), tape.gradient(b, vb)\nfor x in dataset:\n    train_step(x)\n",
        "import tensorflow as tf\nfor x in dataset:\n    with tf.GradientTape() as tape:\n        loss = model(x)\n    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))\n",
        "import tensorflow as tf\nwith tf.GradientTape(persistent=True) as tape:\n    tape.watch(x)\n    ys = [f(x, k) for k in range(8)]\njacobians = [tape.gradient(y, x) for y in ys]\n",
        "import tensorflow as tf\nfor x in dataset:\n    with tf.GradientTape(persistent=False) as tape:\n        loss = model(x)\n",
    )
    INVALID = (
        "import tensorflow as tf\nfor x, y in dataset:\n    with tf.GradientTape(persistent=True) as tape:  # expect: MEM506\n        g_loss, d_loss = losses(x, y)\n    g = tape.gradient(g_loss, gv)\n    d = tape.gradient(d_loss, dv)\n",
        "import tensorflow as tf\nwith tf.GradientTape(persistent=True) as tape:  # expect: MEM506\n    for x, y in dataset:\n        loss = model(x)\n        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))\n",
        "import tensorflow as tf\ntape = tf.GradientTape(persistent=True)  # expect: MEM506\nfor x in dataset:\n    with tape:\n        loss = model(x)\n    grads = tape.gradient(loss, model.trainable_variables)\n",
        "from tensorflow import GradientTape\ndef fit(model, batches):\n    step = 0\n    while step < len(batches):\n        with GradientTape(persistent=True) as t:  # expect: MEM506\n            a = model(batches[step])\n        t.gradient(a, model.trainable_variables)\n        step += 1\n",
    )

    def visit_Call(self, node: ast.Call) -> None:
        if self.ctx.qualified(node.func) not in fw.TF_TAPES or not _persistent(node):
            return
        semantic = self.ctx.semantic
        parent = semantic.parents.get(node)
        if isinstance(parent, ast.withitem):
            statement = semantic.parents.get(parent)
            name = parent.optional_vars.id if isinstance(parent.optional_vars, ast.Name) else None
            if self._spans_training_loop(statement):
                self.report(node, message="persistent `GradientTape` around the training loop records every step: it holds every step's intermediate tensors; open one tape per step")
            elif name is not None and self._kept_per_iteration(statement, name):
                self.report(node)
            return
        if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
            name = parent.targets[0].id
            if self._entered_per_iteration(parent, name):
                self.report(node, message="one persistent `GradientTape` entered again every iteration records every step: it holds every step's intermediate tensors; create the tape inside the loop")
            elif self._kept_per_iteration(parent, name):
                self.report(node)

    # -- the shapes -------------------------------------------------------------------
    def _spans_training_loop(self, statement: ast.AST) -> bool:
        """A loop in the ``with`` body that repeats with the run or takes optimizer steps."""
        semantic = self.ctx.semantic
        for node in walk(statement.body):
            if isinstance(node, LOOP_TYPES) and (semantic.is_run_loop(node) or self._steps(node.body, 0)):
                return True
        return False

    def _steps(self, body: list[ast.stmt], depth: int) -> bool:
        """``body`` applies gradients, itself or in a function of the file it calls (two calls deep)."""
        semantic = self.ctx.semantic
        for node in walk(body):
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Attribute) and node.func.attr in STEP_METHODS:
                return True
            if depth < 2 and semantic.may_call_local(node):
                callee = semantic.callee(node)
                if isinstance(callee, FUNCTION_TYPES) and self._steps(callee.body, depth + 1):
                    return True
        return False

    def _kept_per_iteration(self, statement: ast.AST, name: str) -> bool:
        """Made once per iteration of a repeating loop, which never drops the previous one."""
        loops = self.ctx.semantic.repeating_loops(statement)
        return bool(loops) and not _drops(loops[0].body, name)

    def _entered_per_iteration(self, assignment: ast.Assign, name: str) -> bool:
        """``tape = GradientTape(persistent=True)`` before a loop that does ``with tape:`` each iteration."""
        semantic = self.ctx.semantic
        unit = semantic.unit_of(assignment)
        body = unit.body if isinstance(unit, (ast.Module, *FUNCTION_TYPES)) else []
        outer = set(map(id, semantic.repeating_loops(assignment)))
        for node in walk(body):
            if not isinstance(node, (ast.With, ast.AsyncWith)):
                continue
            if not any(isinstance(item.context_expr, ast.Name) and item.context_expr.id == name for item in node.items):
                continue
            loops = [loop for loop in semantic.repeating_loops(node) if id(loop) not in outer]
            if loops and not _rebinds(loops[0].body, name):
                return True
        return False


def _persistent(call: ast.Call) -> bool:
    return any(keyword.arg == "persistent" and is_constant(keyword.value, True) for keyword in call.keywords)


def _drops(body: list[ast.stmt], name: str) -> bool:
    """``del name`` or ``name = None`` in ``body``."""
    for node in walk(body):
        if isinstance(node, ast.Delete) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return True
        if isinstance(node, ast.Assign) and is_constant(node.value, None) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return True
    return False


def _rebinds(body: list[ast.stmt], name: str) -> bool:
    """The loop makes a new tape under ``name`` itself (``tape = GradientTape(...)``)."""
    return any(isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
               for node in walk(body))
