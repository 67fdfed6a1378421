"""MEM505 tf1-op-created-in-loop."""

from __future__ import annotations

import ast
import re

from memlint.lint.diagnostic import Severity
from memlint.lint.rule import Rule
from memlint.lint.semantic import frameworks as fw
from memlint.lint.syntax import FUNCTION_TYPES
from memlint.rules._training import walk

#: ``tensorflow.*`` callables that add no node to the graph: sessions and their
#: options, protocol buffers, file and logging utilities, graph/collection lookups,
#: the Keras API (MEM502/MEM503) and Python-side helpers (TF 1.15 / 2.x API).
NOT_OPS = re.compile(
    r"^tensorflow\.(?:compat\.v1\.)?(?:"
    r"Session|InteractiveSession|ConfigProto|GPUOptions|RunOptions|RunMetadata|GraphOptions|OptimizerOptions|"
    r"Summary|SummaryMetadata|Event|GraphDef|TensorShape|Dimension|DType|as_dtype|TensorSpec|"
    r"logging\.|gfile\.|io\.gfile\.|app\.|flags\.|test\.|config\.|errors\.|sysconfig\.|nest\.|saved_model\.tag_constants|"
    r"python_io\.|keras\.|estimator\.|"
    r"train\.(?:Example|SequenceExample|Features|Feature|FeatureList|FeatureLists|BytesList|FloatList|Int64List|"
    r"Coordinator|start_queue_runners|latest_checkpoint|get_checkpoint_state|checkpoint_exists|list_variables|"
    r"load_variable|get_global_step|MonitoredTrainingSession|MonitoredSession|SingularMonitoredSession)$|"
    r"summary\.FileWriter|summary\.create_file_writer|"
    r"get_default_graph|get_default_session|reset_default_graph|Graph|executing_eagerly|make_ndarray|"
    r"get_variable|get_collection|get_collection_ref|trainable_variables|global_variables|local_variables|"
    r"all_variables|model_variables|variable_scope|name_scope|device|control_dependencies|"
    r"enable_eager_execution|disable_eager_execution|disable_v2_behavior|enable_v2_behavior|"
    r"set_random_seed|random\.set_seed|print$"
    r")"
)
#: Calls that give the loop a fresh graph each iteration (or drop the old one).
RESET_GRAPH = re.compile(r"^tensorflow\.(?:compat\.v1\.)?reset_default_graph$")
FRESH_GRAPH = re.compile(r"^tensorflow\.(?:compat\.v1\.)?(?:reset_default_graph|Graph)$")
#: Arguments of ``Session.run`` that name what is run or fed.
RUN_ARGUMENTS = ("fetches", "feed_dict", "options")


class Tf1OpCreatedInLoop(Rule):
    """## What it does
    In TensorFlow 1.x graph-mode code (`tf.Session`, `tf.compat.v1.Session`,
    `MonitoredTrainingSession`, the default session), reports a `tf.*` op
    (`tf.assign`, `tf.reduce_mean`, `tf.placeholder`, an initializer, a
    `tf.train.Saver`, ...) constructed inside a loop, or inside a function
    that a loop calls per step (or per epoch: an op built before a
    function's own step loop is built once per call), when what it builds
    is run or fed by a `sess.run(...)` in the same iteration. Module
    aliases bound by assignment (`tf1 = tf.compat.v1`) are the module.

    ## Why is this bad?
    In graph mode a `tf.*` call does not compute anything: it adds nodes to
    the default graph, and the graph keeps them forever. Built once per
    step, the graph grows every step — host memory grows, `sess.run` gets
    slower as the graph is re-partitioned, and the process eventually runs
    out of memory. `graph.finalize()` before the loop turns the mistake
    into an immediate error.

    ## Example
    ```python
    with tf.compat.v1.Session() as sess:
        sess.run(init)
        for step in range(num_steps):
            sess.run(tf.compat.v1.assign(learning_rate, base_lr * 0.99 ** step))
            sess.run(train_op, feed_dict={x: batch_x, y: batch_y})
    ```

    ## Use instead
    ```python
    new_lr = tf.compat.v1.placeholder(tf.float32, [])
    update_lr = tf.compat.v1.assign(learning_rate, new_lr)
    with tf.compat.v1.Session() as sess:
        sess.run(init)
        sess.graph.finalize()
        for step in range(num_steps):
            sess.run(update_lr, feed_dict={new_lr: base_lr * 0.99 ** step})
            sess.run(train_op, feed_dict={x: batch_x, y: batch_y})
    ```

    ## Known problems
    The session must be known to the semantic model (made or fetched in
    this file, or passed from a call of this file), and the op must reach
    the `sess.run` of the same iteration directly or through names assigned
    in it; ops built in a helper of another module are not seen. A loop
    that resets the default graph or builds a new `tf.Graph()` per
    iteration (at the level that builds the op), itself or through an
    in-file helper it calls whose body calls `tf.reset_default_graph()`
    (one call level; a helper's own `tf.Graph()` scope does not count),
    is not reported. Loops that build the graph (layers in a
    `for` loop) and run nothing are never reported. Loops over a literal
    tuple/list or a small literal `range` are not reported. A `sess.run`
    that runs ops built by several statements of the step is reported once
    per statement, at its first op.

    ## References
    - [tf.compat.v1.Graph.finalize](https://www.tensorflow.org/api_docs/python/tf/compat/v1/Graph#finalize)
    - [TensorFlow 1.x performance guide: "building the graph in a loop"](https://github.com/tensorflow/docs/blob/master/site/en/r1/guide/performance/overview.md)
    """

    CODE = "MEM505"
    NAME = "tf1-op-created-in-loop"
    MESSAGE = "TF1 op created in a loop and run with `sess.run`: every iteration adds nodes to the default graph, which grows forever; build it once before the loop"
    SEVERITY = Severity.ERROR
    #: the session must be made or fetched in this file for the semantic model to know it
    TRIGGERS = ("Session", "_session")
    NEEDS_NAMES = ("Session", "InteractiveSession", "MonitoredTrainingSession", "MonitoredSession",
                   "SingularMonitoredSession", "get_default_session", "get_session")
    FRAMEWORK = "tensorflow"
    VALID = (
        "import tensorflow as tf\nx = tf.placeholder(tf.float32)\ny = tf.square(x)\nwith tf.Session() as sess:\n    for step in range(steps):\n        sess.run(y, feed_dict={x: step})\n",
        "import tensorflow as tf\nh = x\nfor width in widths:\n    h = tf.layers.dense(h, width)\nwith tf.Session() as sess:\n    sess.run(h)\n",
        "import tensorflow as tf\nfor config in configs:\n    tf.reset_default_graph()\n    loss = tf.reduce_mean(build(config))\n    with tf.Session() as sess:\n        sess.run(loss)\n",
        "import tensorflow as tf\nwith tf.Session() as sess:\n    for step in range(steps):\n        loss = sess.run(loss_op)\n        tf.logging.info('step %d loss %f', step, loss)\n",
        "import tensorflow as tf\nfor step in range(steps):\n    y = tf.square(tf.constant(step))\n    runner.run(y)\n",
    )
    INVALID = (
        "import tensorflow as tf\nwith tf.Session() as sess:\n    for step in range(steps):\n        sess.run(tf.assign(lr, 0.1 * 0.9 ** step))  # expect: MEM505\n",
        "import tensorflow as tf\nsess = tf.compat.v1.Session()\nfor batch in batches:\n    x = tf.compat.v1.placeholder(tf.float32)  # expect: MEM505\n    y = x * 2\n    sess.run(y, feed_dict={x: batch})\n",
        "import tensorflow as tf\ndef evaluate(sess, images):\n    acc = tf.reduce_mean(tf.cast(correct, tf.float32))  # expect: MEM505\n    return sess.run(acc, feed_dict={inp: images})\nwith tf.Session() as sess:\n    for epoch in range(epochs):\n        evaluate(sess, test_images)\n",
        "import tensorflow as tf\nwith tf.Session() as sess:\n    step = 0\n    while step < steps:\n        saver = tf.train.Saver()  # expect: MEM505\n        saver.save(sess, 'ckpt', global_step=step)\n        sess.run(train_op)\n        step += 1\n",
    )

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._reported: set[ast.AST] = set()

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if not isinstance(func, ast.Attribute):
            return
        semantic = self.ctx.semantic
        if func.attr == "run" and semantic.value(func.value).type_name == fw.SESSION:
            arguments = [*node.args, *(k.value for k in node.keywords if k.arg in RUN_ARGUMENTS)]
        elif self._may_take_session(node) and any(
                semantic.value(a).type_name == fw.SESSION for a in [*node.args, *(k.value for k in node.keywords)]):
            arguments = [func.value]  # `saver.save(sess, ...)`, `op.eval(session=sess)`: runs its receiver
        else:
            return
        ops = []
        for region in self._per_step_regions(node):
            if self._fresh_graph(region):
                break  # this repetition (and every wider one) starts from a fresh graph
            ops.extend(op for op in self._ops_run_by(node, arguments, region) if op not in self._reported and op not in ops)
        by_statement: dict[ast.AST, list[ast.Call]] = {}
        for op in ops:  # one finding per statement that builds ops for the run: each is moved out on its own
            by_statement.setdefault(self._statement_of(op), []).append(op)
        for built in sorted(by_statement.values(), key=lambda group: min((op.lineno, op.col_offset) for op in group)):
            self._reported.update(built)
            self.report(min(built, key=lambda op: (op.lineno, op.col_offset)))

    def _statement_of(self, node: ast.AST) -> ast.AST:
        for ancestor in self.ctx.semantic.ancestors(node):
            if isinstance(ancestor, ast.stmt):
                return ancestor
        return node

    def _may_take_session(self, call: ast.Call) -> bool:
        """Cheap test first: a method of an object of the file (not a library
        function such as ``tf.summary.scalar``) given something other than literals."""
        if self.ctx.qualified(call.func) is not None:
            return False
        given = [*call.args, *(k.value for k in call.keywords)]
        return any(not isinstance(a, (ast.Constant, ast.JoinedStr)) for a in given)

    # -- where one step's code is ----------------------------------------------------------
    def _per_step_regions(self, run: ast.Call) -> list[list[ast.stmt]]:
        """The statements that run repeatedly around ``run``, innermost
        first: the body of each repeating loop around it, then the body of
        its function when that function is called repeatedly (an op built
        before the step loop of a function called per epoch is built once
        per call, and the graph keeps every one)."""
        semantic = self.ctx.semantic
        regions = [loop.body for loop in semantic.repeating_loops(run)]
        function = semantic.function_of(run)
        if isinstance(function, FUNCTION_TYPES) and (
                semantic.repetition(function) is not None or semantic.called_repeatedly(function)):
            regions.append(function.body)
        return regions

    def _fresh_graph(self, region: list[ast.stmt], depth: int = 0) -> bool:
        """The step resets the default graph or builds in a new ``tf.Graph()``,
        itself or in an in-file function it calls (one level: a
        ``reset_graph()`` helper that calls ``tf.reset_default_graph()``)."""
        for node in walk(region):
            if not isinstance(node, ast.Call):
                continue
            qualified = self.ctx.qualified(node.func) or ""
            if depth > 0:  # a helper's own `tf.Graph()` / `as_default()` scope ends with it: only a reset lasts
                if RESET_GRAPH.match(qualified):
                    return True
                continue
            if FRESH_GRAPH.match(qualified):
                return True
            if isinstance(node.func, ast.Attribute) and node.func.attr == "as_default":
                return True
            callee = self.ctx.semantic.callee(node)
            if isinstance(callee, FUNCTION_TYPES) and self._fresh_graph(callee.body, depth + 1):
                return True
        return False

    # -- what the run call runs ---------------------------------------------------------------
    def _ops_run_by(self, run: ast.Call, arguments: list[ast.expr], region: list[ast.stmt]) -> list[ast.Call]:
        """Op constructions of ``region`` whose results ``run`` fetches or feeds (its ``arguments``)."""
        found = [op for argument in arguments for op in self._ops_in(argument)]
        wanted = {n.id for argument in arguments for n in ast.walk(argument) if isinstance(n, ast.Name)}
        assignments = [n for n in walk(region) if isinstance(n, ast.Assign) and n.lineno <= run.lineno]
        changed = True
        while changed:  # names the fetched values are computed from, within the step
            changed = False
            for assignment in assignments:
                if _binds(assignment) & wanted:
                    more = {n.id for n in ast.walk(assignment.value) if isinstance(n, ast.Name)} - wanted
                    if more:
                        wanted |= more
                        changed = True
        for assignment in assignments:
            if _binds(assignment) & wanted:
                found.extend(self._ops_in(assignment.value))
        return found

    def _ops_in(self, expr: ast.AST) -> list[ast.Call]:
        """The outermost ``tf.*`` op constructions in ``expr``."""
        found = []
        pending = [expr]
        while pending:
            node = pending.pop()
            if isinstance(node, ast.Call) and self._is_op(node):
                found.append(node)
                continue
            if isinstance(node, (ast.Lambda, *FUNCTION_TYPES)):
                continue
            pending.extend(ast.iter_child_nodes(node))
        return found

    def _is_op(self, call: ast.Call) -> bool:
        qualified = self.ctx.qualified(call.func) or ""
        if not qualified.startswith("tensorflow.") or NOT_OPS.match(qualified) or qualified in fw.TF_SESSIONS:
            return False
        parent = self.ctx.semantic.parents.get(call)
        return not isinstance(parent, ast.withitem)  # a `with tf.device(...)`-style context


def _binds(assignment: ast.Assign) -> set[str]:
    return {n.id for target in assignment.targets for n in ast.walk(target) if isinstance(n, ast.Name)}
