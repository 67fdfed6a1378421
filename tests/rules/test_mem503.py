"""MEM503 keras-predict-in-loop: Keras models only, by what the semantic model knows, in loops that repeat."""

import pytest
from _marks import assert_matches_markers, reported_lines

CODE = "MEM503"

REPORTED = {
    "while_loop": "import keras\nm = keras.Sequential([])\ni = 0\nwhile i < n:\n    m.predict(x[i])  # expect: MEM503\n    i += 1\n",
    "subclass": "import tensorflow as tf\nclass Net(tf.keras.Model):\n    pass\nnet = Net()\nfor b in batches:\n    net.predict(b)  # expect: MEM503\n",
    "functional_alias": "from tensorflow.keras import Model as KModel\nm = KModel(inp, out)\nfor f in files:\n    m.predict(f)  # expect: MEM503\n",
    "per_batch_callback": (
        "from tensorflow import keras\nclass Probe(keras.callbacks.Callback):\n    def on_train_batch_end(self, batch, logs=None):\n"
        "        self.model.predict(self.sample)  # expect: MEM503\n"
    ),
    "large_literal_range": "import keras\nm = keras.models.load_model('m')\nfor i in range(1000):\n    m.predict(x)  # expect: MEM503\n",
}

SILENT = {
    "sklearn_in_tf_file": "import tensorflow as tf\nfrom sklearn.svm import SVC\nm = SVC().fit(x, y)\nfor r in rows:\n    m.predict(r)\n",
    "unknown_model": "import tensorflow as tf\nfrom mypkg import build\nm = build()\nfor r in rows:\n    m.predict(r)\n",
    "not_a_tf_file": "import keras_like\nm = keras_like.Sequential([])\nfor r in rows:\n    m.predict(r)\n",
    "torch_module_predict": "import tensorflow as tf\nimport torch.nn as nn\nm = nn.Linear(2, 2)\nfor r in rows:\n    m.predict(r)\n",
    "once": "import keras\nm = keras.Sequential([])\nm.predict(ds)\n",
    "epoch_hook_once": (
        "from tensorflow import keras\nclass Probe(keras.callbacks.Callback):\n    def on_epoch_end(self, epoch, logs=None):\n"
        "        self.model.predict(self.sample)\n"
    ),
    "callback_own_model_attribute": (
        "from tensorflow import keras\nfrom sklearn.svm import SVC\nclass Probe(keras.callbacks.Callback):\n    def __init__(self):\n        self.model = SVC()\n"
        "    def on_epoch_end(self, epoch, logs=None):\n        for r in rows:\n            self.model.predict(r)\n"
    ),
    "small_literal_range": "import keras\nm = keras.Sequential([])\nfor i in range(3):\n    m.predict(x[i])\n",
    "predict_on_batch": "import keras\nm = keras.Sequential([])\nfor b in batches:\n    m.predict_on_batch(b)\n",
}


@pytest.mark.parametrize("source", REPORTED.values(), ids=REPORTED.keys())
def test_reported_shapes(source):
    assert_matches_markers(CODE, source)


@pytest.mark.parametrize("source", SILENT.values(), ids=SILENT.keys())
def test_silent_shapes(source):
    assert reported_lines(CODE, source) == []
