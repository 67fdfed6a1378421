"""MEM501 tf-memory-growth-not-set: the shapes it reports and the ones it leaves alone."""

import pytest
from _marks import assert_matches_markers, reported_lines

CODE = "MEM501"
KERAS = "from tensorflow import keras\nm = keras.Sequential([])\nm.compile(optimizer='adam', loss='mse')\n"

REPORTED = {
    "fit_reported_once_at_first_fit": KERAS + "m.fit(x, y)  # expect: MEM501\nm.fit(x, y)\n",
    "keras3_standalone": "import keras\nm = keras.models.load_model('m.keras')\nm.fit(x, y)  # expect: MEM501\n",
    "tape_in_function": "import tensorflow as tf\ndef step(m, x):\n    with tf.GradientTape() as t:  # expect: MEM501\n        l = m(x)\n    return t.gradient(l, m.trainable_variables)\n",
    "subclassed_model_fit": "import tensorflow as tf\nclass M(tf.keras.Model):\n    pass\nM().fit(ds)  # expect: MEM501\n",
}

SILENT = {
    "memory_growth": "import tensorflow as tf\nfor g in tf.config.list_physical_devices('GPU'):\n    tf.config.experimental.set_memory_growth(g, True)\n" + KERAS + "m.fit(x, y)\n",
    "env_allow_growth": "import os\nos.environ.setdefault('TF_FORCE_GPU_ALLOW_GROWTH', 'true')\n" + KERAS + "m.fit(x, y)\n",
    "tf1_allow_growth": "import tensorflow as tf\ncfg = tf.compat.v1.ConfigProto()\ncfg.gpu_options.allow_growth = True\n" + KERAS + "m.fit(x, y)\n",
    "gpu_hidden": "import tensorflow as tf\ntf.config.set_visible_devices([], 'GPU')\n" + KERAS + "m.fit(x, y)\n",
    "torch_backend": "import os\nos.environ['KERAS_BACKEND'] = 'torch'\nimport keras\nm = keras.Sequential([])\nm.fit(x, y)\n",
    "sklearn_fit_in_tf_file": "import tensorflow as tf\nfrom sklearn.svm import SVC\nSVC().fit(x, y)\n",
    "no_tensorflow": "import torch\nmodel = build()\nmodel.compile(optimizer='adam', loss='mse')\nmodel.fit(x, y)\n",
    "train_step_override_only": "import tensorflow as tf\nclass M(tf.keras.Model):\n    def train_step(self, data):\n        with tf.GradientTape() as tape:\n            loss = self(data)\n        return {}\n",
}


@pytest.mark.parametrize("source", REPORTED.values(), ids=REPORTED.keys())
def test_reported_shapes(source):
    assert_matches_markers(CODE, source)


@pytest.mark.parametrize("source", SILENT.values(), ids=SILENT.keys())
def test_silent_shapes(source):
    assert reported_lines(CODE, source) == []
