"""Fixes that broke real programs in the corpus review (/work/notes/fix_verdicts.txt),
reproduced as small shapes written for these tests:

- MEM501: the memory-growth loop calls ``tf.config.list_physical_devices``
  (TF 2.1+), so a TF1-style script must not get it (only the TF1 remedy,
  ``allow_growth`` in each session's ``ConfigProto``); no fix in a library
  module (setting the process-wide GPU policy when it is imported raises in
  a program that touched its GPUs first). Entry points still get it.
- MEM502: the inserted ``clear_session()`` must be spelled through an import
  bound where the loop runs (else ``NameError``), and a second fix must
  change nothing. The fix is unsafe (automatic layer names restart).
- MEM206: a deliberate fallback for an old torch (a version-tested branch,
  an ``except AttributeError`` handler) is neither rewritten nor reported.
"""

from __future__ import annotations

import pytest

from memlint.lint.diagnostic import Applicability
from memlint.lint.engine import LintOptions, lint_source
from memlint.lint.fixes import fix_text


def _findings(code: str, source: str):
    return [d for d in lint_source("t.py", source.encode(), LintOptions(frozenset({code}))).diagnostics
            if d.code == code]


def _fixed(code: str, source: str) -> str:
    """``source`` after ``--fix --unsafe-fixes --select code``."""
    options = LintOptions(frozenset({code}))
    return fix_text("t.py", source, options, True, _findings(code, source)).fixed


def _has_fix(code: str, source: str) -> bool:
    found = _findings(code, source)
    assert found, f"{code} is not reported at all"
    return any(d.fix is not None and d.fix.plans for d in found)


# -- MEM501 ---------------------------------------------------------------------------
TF1_SCRIPTS = {
    "session_and_placeholder": (
        "import tensorflow as tf\n"
        "inputs = tf.placeholder(tf.float32, [None, 3])\n"
        "weights = tf.Variable(tf.zeros([3, 1]))\n"
        "cost = tf.reduce_mean(tf.matmul(inputs, weights))\n"
        "step = tf.train.GradientDescentOptimizer(0.5).minimize(cost)\n"
        "with tf.Session() as sess:\n"
        "    sess.run(tf.global_variables_initializer())\n"
        "    for _ in range(10):\n"
        "        sess.run(step, feed_dict={inputs: batch})\n"),
    "compat_v1_graph": (
        "import tensorflow as tf\n"
        "tf.compat.v1.disable_eager_execution()\n"
        "x = tf.compat.v1.placeholder(tf.float32)\n"
        "train = tf.compat.v1.train.AdamOptimizer(0.01).minimize(tf.reduce_sum(x * x))\n"
        "sess = tf.compat.v1.Session()\n"
        "sess.run(train, feed_dict={x: 1.0})\n"),
    "contrib_and_tutorial_reader": (
        "import tensorflow as tf\n"
        "from tensorflow.examples.tutorials.mnist import input_data\n"
        "digits = input_data.read_data_sets('/tmp/mnist')\n"
        "def net(x):\n"
        "    return tf.contrib.layers.fully_connected(x, 10)\n"
        "model = tf.keras.Sequential([])\n"
        "model.compile(optimizer='adam', loss='mse')\n"
        "model.fit(digits.train.images, digits.train.labels)\n"),
}


#: What the fix does to each TF1 script: the sessions get ``allow_growth`` in their
#: ``ConfigProto``, spelled like the session's callee; None: no fix (Keras opens its own session).
TF1_SESSION_REWRITE = {
    "session_and_placeholder": ("with tf.Session() as sess:",
                                "with tf.Session(config=tf.ConfigProto(gpu_options=tf.GPUOptions(allow_growth=True)))"
                                " as sess:"),
    "compat_v1_graph": ("sess = tf.compat.v1.Session()",
                        "sess = tf.compat.v1.Session(config=tf.compat.v1.ConfigProto("
                        "gpu_options=tf.compat.v1.GPUOptions(allow_growth=True)))"),
    "contrib_and_tutorial_reader": None,
}


@pytest.mark.parametrize("name", sorted(TF1_SCRIPTS))
def test_mem501_gives_tf1_style_code_the_tf1_remedy_not_the_tf2_loop(name):
    source = TF1_SCRIPTS[name]
    once = _fixed("MEM501", source)
    assert "list_physical_devices" not in once
    rewrite = TF1_SESSION_REWRITE[name]
    assert once == (source if rewrite is None else source.replace(*rewrite))
    if rewrite is not None:
        assert not _findings("MEM501", once), "allow_growth in the ConfigProto is not recognised"
        assert _fixed("MEM501", once) == once, "a second --fix changed the file again"


@pytest.mark.parametrize("opening", [
    "with tf.Session(config=config) as sess:\n",  # a ConfigProto of the user's: not ours to edit blindly
    "with tf.train.MonitoredTrainingSession() as sess:\n",
    "with tf.Session() as a, tf.train.Supervisor().managed_session() as sess:\n",
])
def test_mem501_no_tf1_remedy_when_a_session_is_opened_another_way(opening):
    source = TF1_SCRIPTS["session_and_placeholder"].replace("with tf.Session() as sess:\n", opening)
    assert not _has_fix("MEM501", source)


#: A Keras helper module: model building and training live in methods, and the
#: module-level code only defines things (a call inside a function does not count).
LIBRARY = (
    "import tensorflow as tf\n"
    "\n"
    "def _strip(path):\n"
    "    return path[:-4]\n"
    "\n"
    "def load_frontend():\n"
    "    path = tf.keras.utils.get_file('frontend.zip', 'https://example.org/frontend.zip')\n"
    "    return tf.keras.models.load_model(_strip(path))\n"
    "\n"
    "class ClassifierSpec:\n"
    "    def train(self, data, epochs):\n"
    "        model = tf.keras.Sequential([load_frontend(), tf.keras.layers.Dense(2)])\n"
    "        model.compile(optimizer='adam', loss='mse')\n"
    "        model.fit(data, epochs=epochs)\n"
    "        return model\n"
)


def test_mem501_offers_no_fix_in_a_library_module():
    assert not _has_fix("MEM501", LIBRARY)


@pytest.mark.parametrize("entry", [
    "\nif __name__ == '__main__':\n    ClassifierSpec().train(None, 1)\n",
    "\nClassifierSpec().train(None, 1)\nprint(_strip('abcdefg'))\n",  # module-level code that runs the file's function
])
def test_mem501_still_fixes_the_same_code_as_an_entry_point(entry):
    fixed = _fixed("MEM501", LIBRARY + entry)
    assert fixed.startswith('import tensorflow as tf\nfor _gpu in tf.config.list_physical_devices("GPU"):\n'
                            "    tf.config.experimental.set_memory_growth(_gpu, True)\n\ndef _strip")


def test_mem501_tf2_script_using_compat_v1_logging_keeps_its_fix():
    """``tf.compat.v1.logging`` runs on TF 2: not TF1-style code."""
    source = ("import tensorflow as tf\n"
              "def objective(trial):\n"
              "    tf.compat.v1.logging.info('trial %d', trial)\n"
              "    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])\n"
              "    model.compile(optimizer='adam', loss='mse')\n"
              "    return model.fit(x, y).history['loss'][-1]\n"
              "study.optimize(objective, n_trials=3)\n")
    assert "set_memory_growth(_gpu, True)" in _fixed("MEM501", source)


# -- MEM502 ---------------------------------------------------------------------------
#: An exporter: TensorFlow is imported only inside the function that needs it,
#: and the loop that builds one model per weight file lives in another function.
EXPORTER = (
    "def to_saved_model(weights):\n"
    "    import tensorflow as tf\n"
    "    inputs = tf.keras.Input(shape=(4,))\n"
    "    model = tf.keras.Model(inputs=inputs, outputs=tf.keras.layers.Dense(2)(inputs))\n"
    "    model.compile(optimizer='adam', loss='mse')\n"
    "    model.save(weights + '.tf')\n"
    "\n"
    "def export_all(paths):\n"
    "    for path in paths:\n"
    "        to_saved_model(path)\n"
)


def test_mem502_offers_no_fix_when_tensorflow_is_not_bound_in_the_loops_scope():
    assert not _has_fix("MEM502", EXPORTER)
    assert _fixed("MEM502", EXPORTER) == EXPORTER


@pytest.mark.parametrize("source, header, inserted", [
    ("import tensorflow as tf\nfor units in (4, 8):\n    model = tf.keras.Sequential([tf.keras.layers.Dense(units)])\n"
     "    model.fit(x, y)\n", "for units in (4, 8):\n", "    tf.keras.backend.clear_session()\n"),
    ("from tensorflow import keras\nfor units in (4, 8):\n    model = keras.Sequential([keras.layers.Dense(units)])\n"
     "    model.fit(x, y)\n", "for units in (4, 8):\n", "    keras.backend.clear_session()\n"),
    # the import made earlier in the loop's own function is the one in scope
    (EXPORTER.replace("def export_all(paths):\n", "def export_all(paths):\n    import tensorflow as tf\n"),
     "    for path in paths:\n", "        tf.keras.backend.clear_session()\n"),
])
def test_mem502_fix_uses_a_bound_spelling_and_is_idempotent(source, header, inserted):
    once = _fixed("MEM502", source)
    assert once == source.replace(header, header + inserted, 1)
    assert not _findings("MEM502", once), "the inserted call is not recognised as clearing the session"
    assert _fixed("MEM502", once) == once, "a second --fix changed the file again"


def test_mem502_fix_is_unsafe():
    """Automatic layer names restart after clear_session(): program-visible (saved weights, summaries)."""
    source = ("import tensorflow as tf\nfor units in (4, 8):\n"
              "    model = tf.keras.Sequential([tf.keras.layers.Dense(units)])\n    model.fit(x, y)\n")
    (finding,) = _findings("MEM502", source)
    assert finding.fix.applicability is Applicability.UNSAFE
    options = LintOptions(frozenset({"MEM502"}))
    assert fix_text("t.py", source, options, False, [finding]).fixed == source


# -- MEM206 ---------------------------------------------------------------------------
GUARDED = {
    "conditional_expression_on_a_version_flag": (
        "import torch\nfrom pkg.imports import _TORCH_GREATER_EQUAL_2_4\n"
        "class Plugin:\n"
        "    def __init__(self, device):\n"
        "        self.scaler = torch.amp.GradScaler(device=device) if _TORCH_GREATER_EQUAL_2_4 "
        "else torch.cuda.amp.GradScaler()\n"),
    "except_attribute_or_type_error": (
        "import torch\n"
        "class Scaler:\n"
        "    def __init__(self, device='cuda'):\n"
        "        try:\n"
        "            self.inner = torch.amp.GradScaler(device=device)\n"
        "        except (AttributeError, TypeError):\n"
        "            self.inner = torch.cuda.amp.GradScaler()\n"),
    "if_on_torch_version": (
        "import torch\nfrom packaging import version\n"
        "def scaler():\n"
        "    if version.parse(torch.__version__) < version.parse('2.3'):\n"
        "        return torch.cuda.amp.GradScaler()\n"
        "    return torch.amp.GradScaler('cuda')\n"),
    "hasattr_probe": (
        "import torch\n"
        "def context():\n"
        "    if hasattr(torch.amp, 'autocast'):\n"
        "        return torch.amp.autocast('cuda')\n"
        "    else:\n"
        "        return torch.cuda.amp.autocast()\n"),
    "old_branch_of_a_helper_with_less_than": (
        "import torch\n"
        "def scaler():\n"
        "    if is_torch_version('<', '2.3'):\n"
        "        return torch.cuda.amp.GradScaler()\n"
        "    return torch.amp.GradScaler('cuda')\n"),
}


@pytest.mark.parametrize("name", sorted(GUARDED))
def test_mem206_leaves_a_version_fallback_alone(name):
    source = GUARDED[name]
    assert not _findings("MEM206", source)
    assert _fixed("MEM206", source) == source


def test_mem206_reports_without_a_fix_in_the_branch_for_a_newer_torch():
    """``if version >= 1.6`` (code older than torch.amp) runs the alias on a new
    torch: still a warning every call, but the rewrite could break the old
    versions the guard was written for."""
    source = ("import torch\nfrom packaging import version\n"
              "if version.parse(torch.__version__) >= version.parse('1.6'):\n"
              "    amp_context = torch.cuda.amp.autocast()\n")
    assert _findings("MEM206", source) and not _has_fix("MEM206", source)


def test_mem206_still_fixes_unguarded_calls_next_to_a_fallback():
    """An unrelated handler (``ValueError``) and a version test that does not
    enclose the call are no fallback: those calls are rewritten."""
    source = ("import torch\n"
              "def scalers(flag_version):\n"
              "    try:\n"
              "        a = torch.amp.GradScaler('cuda')\n"
              "    except ValueError:\n"
              "        a = torch.cuda.amp.GradScaler()\n"
              "    if flag_version:\n"
              "        pass\n"
              "    b = torch.cuda.amp.GradScaler()\n"
              "    return a, b\n")
    assert len(_findings("MEM206", source)) == 2
    fixed = _fixed("MEM206", source)
    assert "torch.cuda.amp" not in fixed and fixed.count('torch.amp.GradScaler("cuda")') == 2
