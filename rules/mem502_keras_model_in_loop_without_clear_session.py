"""MEM502 keras-model-in-loop-without-clear-session."""

import ast
import re

from memlint.lint.rule import Rule
from memlint.lint.diagnostic import Severity
from memlint.lint.syntax import FUNCTION_TYPES
from memlint.lint.walk import Visitor, visit as walk_visit

#: Calls that create a new Keras model (and new graph/layer state in the global session).
KERAS_MODEL = re.compile(
    r"^(?:tensorflow\.(?:compat\.v[12]\.)?)?keras\.(?:models\.)?(?:Sequential|Model|clone_model|load_model|model_from_json|model_from_config)$|"
    r"^(?:tensorflow\.(?:compat\.v[12]\.)?)?keras\.applications\.(?:\w+\.)?[A-Z]\w*$"
)
CLEAR_SESSION = re.compile(r"^(?:tensorflow\.(?:compat\.v[12]\.)?)?keras\.(?:backend|utils)\.clear_session$")
MAX_DEPTH = 3


class KerasModelInLoopWithoutClearSession(Rule):
    """## What it does
    Reports a Keras model built inside a loop — `keras.Sequential(...)`,
    `tf.keras.Model(inputs, outputs)`, `keras.applications.*(...)`,
    `clone_model`/`load_model`, an instance of a local `keras.Model`
    subclass, or a call to a local function that builds one — when the loop
    never calls `tf.keras.backend.clear_session()` (or Keras 3's
    `keras.utils.clear_session()`). Typical loops: hyper-parameter search,
    k-fold cross-validation, ensembles.

    ## Why is this bad?
    Keras keeps global state for every model it builds (layer-name
    counters, the graph and its variables in TF1-style and functional
    code); old models are not released when the Python name is rebound.
    Memory — host and device — grows with each iteration until the search
    dies part-way through.

    ## Example
    ```python
    for units in (64, 128, 256):
        model = keras.Sequential([keras.layers.Dense(units), keras.layers.Dense(1)])
        model.compile(optimizer="adam", loss="mse")
        model.fit(x, y)
    ```

    ## Use instead
    ```python
    for units in (64, 128, 256):
        keras.backend.clear_session()
        model = keras.Sequential([keras.layers.Dense(units), keras.layers.Dense(1)])
        model.compile(optimizer="adam", loss="mse")
        model.fit(x, y)
    ```

    ## Known problems
    `clear_session()` anywhere in the loop, or in the function the loop
    calls to build the model, counts (even when conditional). A loop that
    builds models in a function defined in another module, or a search
    driven by a framework callback (`study.optimize(objective)`), is not
    seen. Comprehensions that build an ensemble are not loops here.

    ## References
    - [tf.keras.backend.clear_session](https://www.tensorflow.org/api_docs/python/tf/keras/backend/clear_session)
    - [keras.utils.clear_session](https://keras.io/api/utils/backend_utils/#clearsession-function)
    """

    CODE = "MEM502"
    NAME = "keras-model-in-loop-without-clear-session"
    MESSAGE = "a Keras model is built in a loop without `clear_session()`: every iteration's model state accumulates"
    SEVERITY = Severity.WARNING
    TRIGGERS = ("keras",)
    NEEDS_NAMES = ("keras",)
    FRAMEWORK = "tensorflow"
    VALID = (
        "import tensorflow as tf\nfor units in (8, 16):\n    tf.keras.backend.clear_session()\n    model = tf.keras.Sequential([tf.keras.layers.Dense(units)])\n    model.fit(x, y)\n",
        "import tensorflow as tf\nmodel = tf.keras.Sequential([tf.keras.layers.Dense(8)])\nfor epoch in range(3):\n    model.fit(x, y)\n",
        "from keras import backend as K\nfrom keras.models import Sequential\ndef build():\n    K.clear_session()\n    return Sequential([])\nfor fold in range(5):\n    build().fit(x, y)\n",
        "import torch.nn as nn\nfor n in (8, 16):\n    model = nn.Sequential(nn.Linear(4, n))\n",
    )
    INVALID = (
        "import tensorflow as tf\nfor units in (8, 16):\n    model = tf.keras.Sequential([tf.keras.layers.Dense(units)])  # expect: MEM502\n    model.fit(x, y)\n",
        "from tensorflow import keras\ndef build(n):\n    inputs = keras.Input((4,))\n    return keras.Model(inputs, keras.layers.Dense(n)(inputs))\ndef search(grid):\n    for n in grid:\n        m = build(n)  # expect: MEM502\n        m.fit(x, y)\n",
        "import keras\nclass Net(keras.Model):\n    pass\nfold = 0\nwhile fold < 5:\n    net = Net()  # expect: MEM502\n    fold += 1\n",
        "from keras.applications import ResNet50\nfor lr in (1e-3, 1e-4):\n    m = ResNet50(weights=None)  # expect: MEM502\n",
        "import optuna\nimport tensorflow as tf\ndef objective(trial):\n    units = trial.suggest_int('units', 8, 64)\n    model = tf.keras.Sequential([tf.keras.layers.Dense(units)])  # expect: MEM502\n    model.compile('adam', 'mse')\n    return model.evaluate(x, y)\nstudy = optuna.create_study()\nstudy.optimize(objective, n_trials=20)\n",
    )

    def visit_Call(self, node: ast.Call) -> None:
        semantic = self.ctx.semantic
        loops = semantic.enclosing_loops(node)
        function = semantic.function_of(node)
        if not loops and function is None:
            return
        if not self._builds_model(node, depth=0, seen=set()):
            return
        repeated = not loops and self._driven(function)
        if not (loops or repeated):
            return
        if loops and self._in_enclosing_builder(node):
            return  # reported where the builder is called in a loop
        bodies = [loop.body for loop in loops] + ([function.body] if repeated else [])
        if any(_clears_session(body, self.ctx) for body in bodies):
            return
        self.report(node)

    def _driven(self, function) -> bool:
        """A function a driver calls once per trial (an Optuna objective)."""
        repetition = self.ctx.semantic.repetition(function)
        return repetition is not None and repetition.reason == "driver"

    def _in_enclosing_builder(self, node: ast.Call) -> bool:
        """A model built inside a loop of a builder function that itself clears the session."""
        function = self.ctx.semantic.function_of(node)
        return isinstance(function, FUNCTION_TYPES) and _clears_session(function.body, self.ctx)

    def _builds_model(self, call: ast.Call, depth: int, seen: set) -> bool:
        semantic = self.ctx.semantic
        qualified = semantic.qualified(call.func) or ""
        if KERAS_MODEL.match(qualified):
            return True
        klass = _local_class(semantic, call.func)
        if klass is not None:
            return "keras" in klass.roles and "module" in klass.roles
        if depth >= MAX_DEPTH:
            return False
        function = semantic.callee(call)
        if not isinstance(function, FUNCTION_TYPES) or function in seen:
            return False
        seen.add(function)
        if _clears_session(function.body, self.ctx):
            return False
        finder = _Calls()
        walk_visit(function.body, finder)
        return any(self._builds_model(inner, depth + 1, seen) for inner in finder.calls)


def _local_class(semantic, func: ast.expr):
    """The class of this file a plain name refers to, by scope."""
    if not isinstance(func, ast.Name):
        return None
    from memlint.lint.semantic.scopes import BindingKind

    bindings = semantic.scopes.bindings_of(func.id, semantic.scopes.scope_for(func))
    classes = [b.node for b in bindings if b.kind is BindingKind.CLASS]
    return semantic.classes.of(classes[0]) if len(classes) == 1 else None


def _clears_session(body: list[ast.stmt], ctx) -> bool:
    finder = _Calls()
    walk_visit(body, finder)
    return any(CLEAR_SESSION.match(ctx.qualified(call.func) or "") for call in finder.calls)


class _Calls(Visitor):
    def __init__(self) -> None:
        self.calls: list[ast.Call] = []

    def visit_Call(self, node: ast.Call) -> None:
        self.calls.append(node)
