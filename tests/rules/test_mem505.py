"""MEM505 tf1-op-created-in-loop: ops built per step and run with the session of this file."""

import pytest
from _marks import assert_matches_markers, reported_lines

CODE = "MEM505"
SESSION = "import tensorflow as tf\nsess = tf.Session()\n"

REPORTED = {
    "through_two_names": SESSION + "for b in batches:\n    a = tf.square(b)  # expect: MEM505\n    c = a + 1\n    sess.run(c)\n",
    "fetch_list": SESSION + "for b in batches:\n    sess.run([train_op, tf.reduce_sum(w)])  # expect: MEM505\n",
    "default_session": "import tensorflow as tf\nfor b in batches:\n    tf.get_default_session().run(tf.identity(b))  # expect: MEM505\n",
    "monitored_session": (
        "import tensorflow as tf\nwith tf.train.MonitoredTrainingSession() as s:\n    while not s.should_stop():\n"
        "        s.run(tf.add(a, 1))  # expect: MEM505\n"
    ),
    "eval_with_session": SESSION + "for b in batches:\n    m = tf.reduce_mean(b)  # expect: MEM505\n    m.eval(session=sess)\n",
    "compat_alias": "import tensorflow.compat.v1 as tf1\nsess = tf1.Session()\nfor b in batches:\n    sess.run(tf1.assign(v, b))  # expect: MEM505\n",
    "one_per_run": SESSION + "for b in batches:\n    sess.run(tf.add(tf.square(b), 1))  # expect: MEM505\n",
}

SILENT = {
    "built_before": SESSION + "op = tf.square(x)\nfor b in batches:\n    sess.run(op, feed_dict={x: b})\n",
    "not_run": SESSION + "for b in batches:\n    y = tf.square(b)\n    sess.run(train_op)\n",
    "eager_code": "import tensorflow as tf\nfor b in dataset:\n    y = tf.square(b)\n    print(y.numpy())\n",
    "new_graph_per_iteration": (
        "import tensorflow as tf\nfor c in configs:\n    with tf.Graph().as_default():\n        op = tf.square(c)\n        with tf.Session() as s:\n            s.run(op)\n"
    ),
    "small_literal_loop": SESSION + "for k in range(3):\n    sess.run(tf.constant(k))\n",
    "proto_in_loop": SESSION + "for b in batches:\n    loss = sess.run(loss_op)\n    w.add_summary(tf.Summary(value=[tf.Summary.Value(tag='l', simple_value=loss)]))\n",
    "unknown_runner": "import tensorflow as tf\nfor b in batches:\n    runner.run(tf.square(b))\n",
    "helper_not_called_in_a_loop": "import tensorflow as tf\ndef once(sess):\n    return sess.run(tf.global_variables_initializer())\nonce(tf.Session())\n",
}


@pytest.mark.parametrize("source", REPORTED.values(), ids=REPORTED.keys())
def test_reported_shapes(source):
    assert_matches_markers(CODE, source)


@pytest.mark.parametrize("source", SILENT.values(), ids=SILENT.keys())
def test_silent_shapes(source):
    assert reported_lines(CODE, source) == []
