"""MEM504 tf-function-retracing."""

from __future__ import annotations

import ast

from memlint.lint.diagnostic import Severity
from memlint.lint.rule import Rule
from memlint.lint.semantic import frameworks as fw
from memlint.lint.semantic.values import Kind
from memlint.lint.syntax import FOR_TYPES, FUNCTION_TYPES, is_constant

#: ``tf.function(..., experimental_follow_type_hints=True)`` converts arguments annotated
#: ``tf.Tensor`` to tensors before tracing (tensorflow 2.x ``polymorphic_function.py``).
FOLLOW_TYPE_HINTS = "experimental_follow_type_hints"


class TfFunctionRetracing(Rule):
    """## What it does
    Reports three ways a `tf.function` traces again and again:
    a function decorated with `@tf.function` (or wrapped with
    `tf.function(f)`) without an `input_signature`, called in a loop with a
    Python number or string that changes every iteration (the loop
    variable of `for epoch in range(...)`, a counter `step += 1`);
    `tf.function(f)` called inside a loop or a repeated function; and a
    `@tf.function` def nested inside a loop body, or inside a function that
    the file calls repeatedly (from a loop or a comprehension over the
    data, directly or through other functions of the file).

    ## Why is this bad?
    A `tf.function` keys its traces on the Python values of its arguments
    (tensors only by dtype and shape). A new Python value is a new key: a
    new graph is traced and a new concrete function kept in the function's
    cache for the life of the function. A new `tf.function` object per
    iteration traces from scratch every time. Steps get slow (TensorFlow
    warns about "excessive retracing") and host memory grows with every
    trace.

    ## Example
    ```python
    @tf.function
    def train_step(x, y, epoch):
        ...

    for epoch in range(epochs):
        for x, y in dataset:
            train_step(x, y, epoch)
    ```

    ## Use instead
    ```python
    @tf.function
    def train_step(x, y, epoch):
        ...

    for epoch in range(epochs):
        for x, y in dataset:
            train_step(x, y, tf.constant(epoch, tf.int64))
    ```

    ## Known problems
    Only functions of this file (and `tf.function` values it makes) are
    followed; the changing value must be known to the semantic model to be
    a Python value (a number, a string), and to change in a loop around the
    call (its loop variable, or a name assigned in it). A value that only
    changes between calls of the enclosing function is not seen. Booleans
    (at most two traces) are not reported, nor a new numpy array per call
    (`np.array([[x, y]])`: traced by shape and dtype, like a tensor), and neither is a function whose
    `input_signature` is given or that follows type hints
    (`experimental_follow_type_hints=True`). Loops over a literal
    tuple/list or a small literal `range` are not reported. A nested
    `@tf.function` that the enclosing function itself calls in a loop is
    not reported when the enclosing function repeats only once per
    checkpoint (`for ckpt in tf.train.checkpoints_iterator(...)`): one
    trace per evaluation, reused by its steps; repeated per dataset or per
    batch, it is.

    ## References
    - [Better performance with tf.function: rules of tracing](https://www.tensorflow.org/guide/function#rules_of_tracing)
    - [tf.function: input_signature and retracing](https://www.tensorflow.org/api_docs/python/tf/function)
    """

    CODE = "MEM504"
    NAME = "tf-function-retracing"
    MESSAGE = "`tf.function` retraces: a new concrete function is traced and kept for every new Python value or function object"
    SEVERITY = Severity.WARNING
    #: "function" is in most files' prose; the TensorFlow/Keras import every file this
    #: rule reads must have is the narrower necessary token (the identifier is gated after parsing)
    TRIGGERS = ("tensorflow", "keras")
    NEEDS_NAMES = ("function",)
    FRAMEWORK = "tensorflow"
    VALID = (
        "import tensorflow as tf\n@tf.function\ndef step(x, epoch):\n    return x * epoch\nfor epoch in range(epochs):\n    step(x, tf.constant(epoch))\n",
        "import tensorflow as tf\n@tf.function(input_signature=[tf.TensorSpec(None), tf.TensorSpec([], tf.int64)])\ndef step(x, epoch):\n    return x\nfor epoch in range(epochs):\n    step(x, epoch)\n",
        "import tensorflow as tf\n@tf.function\ndef step(x, training):\n    return x\nfor x in dataset:\n    step(x, True)\n",
        "import tensorflow as tf\ndef step(x, epoch):\n    return x\nfast = tf.function(step)\nfor x in dataset:\n    fast(x, 3)\n",
        "import tensorflow as tf\n@tf.function\ndef step(x, flag):\n    return x\nfor i in range(n):\n    step(x, i % 2 == 0)\n",
    )
    INVALID = (
        "import tensorflow as tf\n@tf.function\ndef step(x, epoch):\n    return x * epoch\nfor epoch in range(epochs):\n    step(x, epoch)  # expect: MEM504\n",
        "import tensorflow as tf\ndef run(xs):\n    for x in xs:\n        f = tf.function(lambda v: v * 2)  # expect: MEM504\n        f(x)\n",
        "import tensorflow as tf\nclass Trainer:\n    @tf.function\n    def step(self, x, lr):\n        return x * lr\n    def fit(self, data):\n        lr = 0.1\n        for x in data:\n            self.step(x, lr)  # expect: MEM504\n            lr = lr * 0.99\n",
        "import tensorflow as tf\nfor x in dataset:\n    @tf.function  # expect: MEM504\n    def scaled(v):\n        return v * 2\n    scaled(x)\n",
        "import tensorflow as tf\ndef body(x, i):\n    return x\nstep_fn = tf.function(body)\ni = 0\nwhile i < n:\n    step_fn(x, i)  # expect: MEM504\n    i += 1\n",
    )

    def visit_Call(self, node: ast.Call) -> None:
        semantic = self.ctx.semantic
        if self.ctx.qualified(node.func) in fw.TF_FUNCTIONS:
            if not self._is_decorator(node) and self._created_repeatedly(node):
                self.report(node, message="`tf.function(...)` created in a loop: every iteration traces a new function from scratch and keeps its graphs; create it once, outside the loop")
            return
        loops = semantic.repeating_loops(node)
        if not loops or not self._retraceable(node):
            return
        changing = self._changing_argument(node, loops)
        if changing is not None:
            self.report(node, message=f"`tf.function` without `input_signature` called with a Python value that changes every iteration (`{changing}`): each new value traces and keeps a new concrete function; pass a tensor (`tf.constant(...)`) or set `input_signature`")

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        semantic = self.ctx.semantic
        decorator = semantic.tf_function(node)
        if decorator is None:
            return
        if semantic.repeating_loops(node):
            self.report(decorator, message="a `@tf.function` defined inside a loop is a new function every iteration: it traces from scratch and keeps its graphs; define it once, outside the loop")
            return
        enclosing = semantic.function_of(node)
        if isinstance(enclosing, FUNCTION_TYPES) and semantic.called_repeatedly(enclosing) \
                and not self._reused_within(node, enclosing):
            self.report(decorator, message=f"a `@tf.function` defined inside `{enclosing.name}`, which is called repeatedly, is a new function on every call: it traces from scratch and keeps its graphs; define it once, outside")

    def _reused_within(self, function: ast.AST, enclosing: ast.AST) -> bool:
        """The enclosing function itself calls the nested ``tf.function`` in a
        loop (``for _ in range(steps): step(it)``), and the enclosing function
        repeats only once per checkpoint that training writes (each call of it
        runs in a loop over :data:`~memlint.lint.semantic.frameworks.TF_CHECKPOINT_STREAMS`,
        an evaluator following a training job): one trace per checkpoint,
        reused by every step of that evaluation and released with the local
        function when it returns. A function repeated per dataset, per batch
        or per call of another repeated function is still reported."""
        semantic = self.ctx.semantic
        if not any(semantic.function_of(call) is enclosing and semantic.repeating_loops(call)
                   for call in semantic.call_sites_of(function)):
            return False
        per_checkpoint = False
        for call in semantic.call_sites_of(enclosing):
            loops = semantic.repeating_loops(call)
            if not loops:
                caller = semantic.unit_of(call)
                if isinstance(caller, FUNCTION_TYPES) and semantic.called_repeatedly(caller):
                    return False  # repeated through its caller: not known to be per checkpoint
                continue  # a single call (`train_then_eval`'s final evaluation)
            if not all(self._over_checkpoints(loop) for loop in loops):
                return False
            per_checkpoint = True
        return per_checkpoint

    def _over_checkpoints(self, loop: ast.AST) -> bool:
        return isinstance(loop, FOR_TYPES) and isinstance(loop.iter, ast.Call) \
            and self.ctx.qualified(loop.iter.func) in fw.TF_CHECKPOINT_STREAMS

    # -- a tf.function made repeatedly --------------------------------------------------
    def _is_decorator(self, call: ast.Call) -> bool:
        parent = self.ctx.semantic.parents.get(call)
        return isinstance(parent, FUNCTION_TYPES) and any(d is call for d in parent.decorator_list)

    def _created_repeatedly(self, call: ast.Call) -> bool:
        semantic = self.ctx.semantic
        if semantic.repeating_loops(call):
            return True
        comprehension = semantic.comprehension_of(call)
        if comprehension is not None:
            return semantic.is_run_comprehension(comprehension)
        function = semantic.function_of(call)
        if not isinstance(function, FUNCTION_TYPES):
            return False
        repetition = semantic.repetition(function)
        return repetition is not None and repetition.per_batch

    # -- a call of a tf.function that retraces -----------------------------------------
    def _retraceable(self, call: ast.Call) -> bool:
        """``call`` calls a ``tf.function`` that traces per Python value: a
        decorated function of the file without ``input_signature``, or a
        ``tf.function(f)`` value made without one."""
        semantic = self.ctx.semantic
        callee = semantic.callee(call)
        if isinstance(callee, FUNCTION_TYPES):
            decorator = semantic.tf_function(callee)
            if decorator is None:
                return False
            return not (isinstance(decorator, ast.Call) and _fixes_signature(decorator))
        return semantic.value(call.func).type_name == fw.TF_FUNCTION

    def _changing_argument(self, call: ast.Call, loops: list[ast.AST]) -> str | None:
        """The text of an argument that is a Python value changing per iteration, or None."""
        changing = set()
        for loop in loops:
            changing |= _changed_in(loop)
        semantic = self.ctx.semantic
        for argument in [*call.args, *(k.value for k in call.keywords)]:
            if isinstance(argument, ast.Starred) or _is_boolean(argument):
                continue
            if not any(isinstance(n, ast.Name) and n.id in changing for n in ast.walk(argument)):
                continue
            value = semantic.value(argument)
            if value.kind is Kind.PLAIN and value.type_name not in fw.TF_TRACED_BY_SPEC:
                return self.ctx.code(argument)
        return None


def _fixes_signature(decorator: ast.Call) -> bool:
    """``@tf.function(input_signature=...)`` (or positional, after ``func``), or type hints followed."""
    for keyword in decorator.keywords:
        if keyword.arg == fw.TF_FUNCTION_SIGNATURE and not is_constant(keyword.value, None):
            return True
        if keyword.arg == FOLLOW_TYPE_HINTS and not is_constant(keyword.value, False):
            return True
    return len(decorator.args) >= 2


def _changed_in(loop: ast.AST) -> set[str]:
    """Names the loop binds or rebinds each iteration: its target and what its body assigns."""
    names = set()
    if isinstance(loop, FOR_TYPES):
        names |= {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
    for node in ast.walk(loop):
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign) and node is not loop:
            for target in node.targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return names


def _is_boolean(node: ast.expr) -> bool:
    """A comparison, ``not``, ``and``/``or`` or a bool literal: at most two traces."""
    return isinstance(node, (ast.Compare, ast.BoolOp)) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)) or (
        isinstance(node, ast.Constant) and isinstance(node.value, bool))
