"""MEM502 keras-model-in-loop-without-clear-session."""

import ast
import re

from memlint.lint.names import dotted_name
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
    )

    def visit_Call(self, node: ast.Call) -> None:
        flow = self.ctx.dataflow
        loops = flow.enclosing_loops(node)
        if not loops or not self._builds_model(node, depth=0, seen=set()):
            return
        if self._in_enclosing_builder(node):
            return  # reported where the builder is called in a loop
        if any(_clears_session(loop.body, self.ctx) for loop in loops):
            return
        self.report(node)

    def _in_enclosing_builder(self, node: ast.Call) -> bool:
        """A model built inside a loop of a builder function that itself clears the session."""
        function = self.ctx.dataflow.scope_node(node)
        return isinstance(function, FUNCTION_TYPES) and _clears_session(function.body, self.ctx)

    def _builds_model(self, call: ast.Call, depth: int, seen: set) -> bool:
        qualified = self.ctx.qualified(call.func) or ""
        if KERAS_MODEL.match(qualified):
            return True
        if depth >= MAX_DEPTH or not isinstance(call.func, (ast.Name, ast.Attribute)):
            return False
        name = dotted_name(call.func)
        if name is None or qualified != name:
            return False  # imported from elsewhere: not followed
        short = name.split(".")[-1]
        if "." in name and not name.startswith("self."):
            return False
        if self._local_keras_class(short):
            return True
        function = self.ctx.dataflow.functions.get(short)
        if function is None or function in seen:
            return False
        seen.add(function)
        if _clears_session(function.body, self.ctx):
            return False
        finder = _Calls()
        walk_visit(function.body, finder)
        return any(self._builds_model(inner, depth + 1, seen) for inner in finder.calls)

    def _local_keras_class(self, name: str) -> bool:
        for statement in self.ctx.module.body:
            if isinstance(statement, ast.ClassDef) and statement.name == name:
                return any(KERAS_MODEL.match(self.ctx.qualified(base) or "") for base in statement.bases)
        return False


def _clears_session(body: list[ast.stmt], ctx) -> bool:
    finder = _Calls()
    walk_visit(body, finder)
    return any(CLEAR_SESSION.match(ctx.qualified(call.func) or "") for call in finder.calls)


class _Calls(Visitor):
    def __init__(self) -> None:
        self.calls: list[ast.Call] = []

    def visit_Call(self, node: ast.Call) -> None:
        self.calls.append(node)
