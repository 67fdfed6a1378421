"""MEM502 keras-model-in-loop-without-clear-session: the shapes it reports and the ones it leaves alone."""

import pytest
from _marks import assert_matches_markers, reported_lines

CODE = "MEM502"

REPORTED = {
    "sequential_alias": "import tensorflow as tf\nK = tf.keras\nfor u in (8, 16):\n    m = tf.keras.Sequential([])  # expect: MEM502\n",
    "from_import_model": "from keras.models import Model\ndef f(folds):\n    for tr, va in folds:\n        m = Model(inp, out)  # expect: MEM502\n",
    "builder_two_levels": (
        "from tensorflow import keras\ndef body(n):\n    return keras.Sequential([keras.layers.Dense(n)])\ndef build(n):\n    return body(n)\n"
        "def search(grid):\n    for n in grid:\n        build(n).fit(x, y)  # expect: MEM502\n"
    ),
    "applications_while": "import tensorflow as tf\ni = 0\nwhile i < 3:\n    net = tf.keras.applications.ResNet50(weights=None)  # expect: MEM502\n    i += 1\n",
    "nested_loops": (
        "import tensorflow as tf\nfor lr in (1e-3, 1e-4):\n    for bs in (32, 64):\n        m = tf.keras.models.clone_model(base)  # expect: MEM502\n"
    ),
}

SILENT = {
    "clear_in_loop": "import tensorflow as tf\nfor u in (8, 16):\n    tf.keras.backend.clear_session()\n    m = tf.keras.Sequential([])\n",
    "clear_keras3_utils": "import keras\nfor u in (8, 16):\n    keras.utils.clear_session()\n    m = keras.Sequential([])\n",
    "clear_in_outer_loop": "import tensorflow as tf\nfor lr in (1, 2):\n    tf.keras.backend.clear_session()\n    for bs in (3, 4):\n        m = tf.keras.Sequential([])\n",
    "builder_clears": "from tensorflow import keras\ndef build():\n    keras.backend.clear_session()\n    return keras.Sequential([])\nfor i in range(3):\n    build()\n",
    "built_once": "import tensorflow as tf\nm = tf.keras.Sequential([])\nfor e in range(3):\n    m.fit(x, y)\n",
    "torch_sequential": "import torch.nn as nn\nfor n in (1, 2):\n    m = nn.Sequential(nn.Linear(n, n))\n",
    "comprehension": "import tensorflow as tf\nms = [tf.keras.Sequential([]) for _ in range(3)]\n",
    "layers_in_loop": "from tensorflow import keras\nlayers = []\nfor n in (8, 16):\n    layers.append(keras.layers.Dense(n))\n",
}


@pytest.mark.parametrize("source", REPORTED.values(), ids=REPORTED.keys())
def test_reported_shapes(source):
    assert_matches_markers(CODE, source)


@pytest.mark.parametrize("source", SILENT.values(), ids=SILENT.keys())
def test_silent_shapes(source):
    assert reported_lines(CODE, source) == []
