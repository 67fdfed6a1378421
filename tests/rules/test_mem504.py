"""MEM504 tf-function-retracing: Python values that change per iteration, and tf.functions made per iteration."""

import pytest
from _marks import assert_matches_markers, reported_lines

CODE = "MEM504"
STEP = "import tensorflow as tf\n@tf.function\ndef step(x, v):\n    return x\n"

REPORTED = {
    "enumerate_index": STEP + "for i, x in enumerate(ds):\n    step(x, i)  # expect: MEM504\n",
    "keyword_argument": STEP + "for epoch in range(epochs):\n    step(x, v=epoch)  # expect: MEM504\n",
    "string_per_file": STEP + "import os\nfor name in os.listdir('.'):\n    step(x, name)  # expect: MEM504\n",
    "counter_expression": STEP + "n = 0\nwhile True:\n    step(x, n * 2)  # expect: MEM504\n    n += 1\n",
    "alias_import": "from tensorflow import function as tf_function\n@tf_function\ndef step(x, v):\n    return x\nfor e in range(epochs):\n    step(x, e)  # expect: MEM504\n",
    "per_batch_hook_creates": (
        "import tensorflow as tf\nclass CB(tf.keras.callbacks.Callback):\n    def on_train_batch_end(self, batch, logs=None):\n"
        "        tf.function(self.probe)(batch)  # expect: MEM504\n"
    ),
}

SILENT = {
    "tensor_argument": STEP + "for x in ds:\n    step(x, tf.constant(1))\n",
    "invariant_python_value": STEP + "k = 3\nfor x in ds:\n    step(x, k)\n",
    "unknown_value": STEP + "for x, meta in ds:\n    step(x, meta)\n",
    "not_a_tf_function": "import tensorflow as tf\ndef step(x, v):\n    return x\nfor e in range(epochs):\n    step(x, e)\n",
    "other_library_function_decorator": "import tensorflow as tf\nimport numba\n@numba.jit\ndef step(x, v):\n    return x\nfor e in range(epochs):\n    step(x, e)\n",
    "follow_type_hints": "import tensorflow as tf\n@tf.function(experimental_follow_type_hints=True)\ndef step(x, v: tf.Tensor):\n    return x\nfor e in range(epochs):\n    step(x, e)\n",
    "literal_loop": STEP + "for e in (1, 2, 3):\n    step(x, e)\n",
    "created_in_init": "import tensorflow as tf\nclass T:\n    def __init__(self):\n        self.step = tf.function(self._step)\n    def _step(self, x):\n        return x\n",
    "decorator_call_at_top_level": "import tensorflow as tf\n@tf.function(jit_compile=True)\ndef step(x):\n    return x\nfor x in ds:\n    step(x)\n",
    "not_tf_file": "import jax\n@jax.jit\ndef step(x, v):\n    return x\nfor e in range(epochs):\n    step(x, e)\n",
}


@pytest.mark.parametrize("source", REPORTED.values(), ids=REPORTED.keys())
def test_reported_shapes(source):
    assert_matches_markers(CODE, source)


@pytest.mark.parametrize("source", SILENT.values(), ids=SILENT.keys())
def test_silent_shapes(source):
    assert reported_lines(CODE, source) == []
