"""MEM506 persistent-tape-kept: persistent tapes around the loop, re-made without `del`, or re-entered."""

import pytest
from _marks import assert_matches_markers, reported_lines

CODE = "MEM506"

REPORTED = {
    "autodiff_alias": (
        "import tensorflow as tf\nfor x in ds:\n    with tf.autodiff.GradientTape(persistent=True) as t:  # expect: MEM506\n        l = f(x)\n    t.gradient(l, v)\n"
    ),
    "while_around_the_loop_minimize": (
        "import tensorflow as tf\nwith tf.GradientTape(persistent=True) as t:  # expect: MEM506\n    while True:\n        opt.minimize(loss, v, tape=t)\n"
    ),
    "assigned_in_loop_without_del": (
        "import tensorflow as tf\nfor x in ds:\n    t = tf.GradientTape(persistent=True)  # expect: MEM506\n    with t:\n        l = f(x)\n    t.gradient(l, v)\n"
    ),
    "del_of_another_name": (
        "import tensorflow as tf\nfor x in ds:\n    with tf.GradientTape(persistent=True) as t:  # expect: MEM506\n        l = f(x)\n    t.gradient(l, v)\n    del l\n"
    ),
}

SILENT = {
    "set_to_none": "import tensorflow as tf\nfor x in ds:\n    with tf.GradientTape(persistent=True) as t:\n        l = f(x)\n    t.gradient(l, v)\n    t = None\n",
    "not_persistent_variable": "import tensorflow as tf\nfor x in ds:\n    with tf.GradientTape(persistent=flag) as t:\n        l = f(x)\n",
    "once_outside_loops": "import tensorflow as tf\nwith tf.GradientTape(persistent=True) as t:\n    l = f(x)\ng1, g2 = t.gradient(l, a), t.gradient(l, b)\n",
    "literal_loop": "import tensorflow as tf\nfor k in (1, 2):\n    with tf.GradientTape(persistent=True) as t:\n        l = f(k)\n",
    "loop_in_tape_over_layers": (
        "import tensorflow as tf\nwith tf.GradientTape(persistent=True) as t:\n    h = x\n    for layer in model.layers:\n        h = layer(h)\n"
    ),
    "other_library_tape": "import tensorflow as tf\nimport mylib\nfor x in ds:\n    with mylib.GradientTape(persistent=True) as t:\n        l = f(x)\n",
    "step_function": (
        "import tensorflow as tf\ndef step(x):\n    with tf.GradientTape(persistent=True) as t:\n        l = f(x)\n    return t.gradient(l, v)\nfor x in ds:\n    step(x)\n"
    ),
}


@pytest.mark.parametrize("source", REPORTED.values(), ids=REPORTED.keys())
def test_reported_shapes(source):
    assert_matches_markers(CODE, source)


@pytest.mark.parametrize("source", SILENT.values(), ids=SILENT.keys())
def test_silent_shapes(source):
    assert reported_lines(CODE, source) == []
