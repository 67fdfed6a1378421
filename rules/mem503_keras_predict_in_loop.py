"""MEM503 keras-predict-in-loop."""

from __future__ import annotations

import ast
import sys

from memlint.lint.diagnostic import Severity
from memlint.lint.rule import Rule
from memlint.lint.syntax import FUNCTION_TYPES
from memlint.lint.semantic import frameworks as fw
from memlint.lint.semantic.operations import literal_iterable
from memlint.lint.semantic.values import Kind

#: Keras 3.15.1 ``keras/src/trainers/trainer.py``: ``Model.predict`` builds a data
#: adapter (a ``tf.data`` pipeline for the TF backend) and a predict function per call.
PREDICT = "predict"


class KerasPredictInLoop(Rule):
    """## What it does
    Reports `model.predict(x)` on a Keras model (a `Sequential`, a
    functional `Model`, a `keras.Model` subclass, a loaded or cloned model,
    `self.model` in a Keras callback) called once per iteration of a Python
    loop, of a comprehension, or in a function that a loop of the file (or a
    framework, once per batch) calls repeatedly, directly or through other
    functions of the file.

    ## Why is this bad?
    `predict` is made for a whole dataset: every call wraps its input in a
    new data adapter (a `tf.data` pipeline with the TensorFlow backend), a
    progress bar and callbacks, and goes through the predict function's
    caches. Called per batch or per file, host and device memory grow with
    each call (long-standing TensorFlow reports of "memory leak with
    predict in a loop") and each call is slow for a single batch.

    ## Example
    ```python
    model = keras.models.load_model("model.keras")
    for path in paths:
        image = load(path)
        scores.append(model.predict(image[None]))
    ```

    ## Use instead
    ```python
    model = keras.models.load_model("model.keras")
    for path in paths:
        image = load(path)
        scores.append(model(image[None], training=False).numpy())
    # or: model.predict_on_batch(batch), or model.predict(dataset) once
    ```

    ## Known problems
    The model must be known to be a Keras model in this file (built,
    loaded, subclassed, passed from a call of this file, a Keras
    callback's `self.model`, or an object of a class from another module
    that the function both calls and reads `trainable_variables` /
    `trainable_weights` from), or be a value of unknown kind (a parameter) in
    a file where only Keras can provide `predict` (besides Keras it imports
    only the standard library and numerical, data and plotting libraries
    such as numpy, pandas and matplotlib, and no class of the file defines
    `predict`); otherwise a model that comes from another module is not
    seen, and neither is a function handed to code of another module that
    calls it per item. A loop over a literal tuple, list or a small literal
    `range` runs `predict` a few times and is not reported. An `on_epoch_end`
    hook calling `predict` once per epoch is not reported,
    also when it reaches `predict` through a function of the file.

    ## References
    - [keras.Model.predict](https://keras.io/api/models/model_training_apis/#predict-method)
    - [tf.keras.Model.predict: "for small numbers of inputs that fit in one batch, use `__call__`"](https://www.tensorflow.org/api_docs/python/tf/keras/Model#predict)
    """

    CODE = "MEM503"
    NAME = "keras-predict-in-loop"
    MESSAGE = "`predict()` of a Keras model in a loop builds a new data pipeline and predict state every call: memory grows per call; use `model(x, training=False)` or `predict_on_batch`"
    SEVERITY = Severity.WARNING
    TRIGGERS = ("predict",)
    NEEDS_NAMES = ("predict",)
    FRAMEWORK = "tensorflow"
    VALID = (
        "import tensorflow as tf\nmodel = tf.keras.models.load_model('m.keras')\nfor path in paths:\n    y = model(load(path)[None], training=False)\n",
        "import tensorflow as tf\nmodel = tf.keras.models.load_model('m.keras')\nscores = model.predict(dataset)\n",
        "import tensorflow as tf\nfrom sklearn.linear_model import LogisticRegression\nclf = LogisticRegression().fit(x, y)\nfor row in rows:\n    print(clf.predict(row))\n",
        "import tensorflow as tf\nmodel = tf.keras.Sequential([tf.keras.layers.Dense(1)])\nfor split in ('val', 'test'):\n    print(model.predict(data[split]))\n",
        "import tensorflow as tf\nimport torch\nclass Net(torch.nn.Module):\n    def predict(self, x):\n        return self(x).argmax(-1)\nnet = Net()\nfor batch in loader:\n    net.predict(batch)\n",
    )
    INVALID = (
        "import tensorflow as tf\nmodel = tf.keras.models.load_model('m.keras')\nfor path in paths:\n    y = model.predict(load(path)[None])  # expect: MEM503\n",
        "from tensorflow import keras\ndef score(model, batches):\n    return [model.predict(b) for b in batches]  # expect: MEM503\nnet = keras.Sequential([keras.layers.Dense(1)])\nscore(net, batches)\n",
        "import tensorflow as tf\nclass Confusion(tf.keras.callbacks.Callback):\n    def on_epoch_end(self, epoch, logs=None):\n        for _ in range(self.steps):\n            x, y = next(self.data)\n            self.preds.extend(self.model.predict(x))  # expect: MEM503\n",
        "import keras\ndef act(model, state):\n    return model.predict(state[None], verbose=0)  # expect: MEM503\nmodel = keras.Sequential([keras.layers.Dense(4)])\nstate = env.reset()\nwhile True:\n    state = env.step(act(model, state))\n",
    )

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if not isinstance(func, ast.Attribute) or func.attr != PREDICT:
            return
        semantic = self.ctx.semantic
        receiver = semantic.value(func.value)
        if not (receiver.is_module and receiver.framework == "keras") and not self._only_keras_predicts(receiver):
            return
        if self._repeats(node):
            self.report(node)

    def _only_keras_predicts(self, receiver) -> bool:
        """A receiver of unknown kind (a parameter, a value of a call) in a
        file where only Keras can provide ``predict``: the file imports Keras
        and otherwise only the standard library (less its object loaders) and
        :data:`~.frameworks.NO_PREDICT_LIBRARIES`, with no relative import,
        and no class of the file defines ``predict``."""
        if receiver.kind is not Kind.UNKNOWN:
            return False
        semantic = self.ctx.semantic
        roots = semantic.library_roots
        if not roots & fw.KERAS_ROOTS or any(n.level for n in self.ctx.index.of_type(ast.ImportFrom)):
            return False
        allowed = fw.KERAS_ROOTS | fw.NO_PREDICT_LIBRARIES | (sys.stdlib_module_names - fw.OBJECT_LOADING_STDLIB) | {"__future__"}
        if not roots <= allowed:
            return False
        return not any(PREDICT in klass.methods for klass in semantic.classes.by_node.values())

    def _repeats(self, node: ast.Call) -> bool:
        """``node`` runs per iteration of a loop or comprehension, or in a
        function that repeats per item (a call of the file in such a loop, a
        per-batch framework hook, a driver)."""
        semantic = self.ctx.semantic
        if semantic.repeating_loops(node):
            return True
        comprehension = semantic.comprehension_of(node)
        if comprehension is not None and not all(literal_iterable(g.iter) for g in comprehension.generators):
            return True
        function = semantic.function_of(node)
        if not isinstance(function, FUNCTION_TYPES):
            return False
        return self._repeats_per_item(function, set()) or semantic.called_repeatedly(function)

    def _repeats_per_item(self, function, seen: set) -> bool:
        """``function`` runs per item: a framework hook run per batch, a
        driver, a training step, or a call of the file from a run loop or
        from a function that itself runs per item. A framework hook repeats
        per batch or per epoch (frameworks.HOOKS): one predict per epoch is
        not reported, also when the hook reaches it through the file's own
        calls (``on_epoch_end`` calling ``show_samples()``)."""
        semantic = self.ctx.semantic
        repetition = semantic.repetition(function)
        if repetition is None or function in seen:
            return False
        seen.add(function)
        if repetition.reason == "hook":
            return "batch" in function.name
        if repetition.reason != "caller":
            return True
        for site in semantic.sites_of(function):
            if semantic.run_loops(site.call):
                return True
            caller = semantic.unit_of(site.call)
            if isinstance(caller, FUNCTION_TYPES) and caller is not function and self._repeats_per_item(caller, seen):
                return True
        return False
