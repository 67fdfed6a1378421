"""Misses of the sixth, held-out recall family (fixtures/recall bug_159..bug_182:
bug_166/bug_167 MEM505, bug_175 MEM110, bug_162 MEM308, bug_171 MEM503,
bug_173 MEM504, bug_182 MEM101, bug_178 MEM204, bug_179 MEM205), each fixed
by what the values are, and checked on code of another style than the
reproducer's: every buggy snippet is reported on its marked lines, and a
correct look-alike gets no finding of that code.

The snippets are new code written for these tests."""

from __future__ import annotations

import ast

from memlint.lint.context import FileContext

from .test_recall_styles import assert_reported, assert_silent


def _semantic(source: str):
    module = ast.parse(source)
    return module, FileContext("snippet.py", source, module).semantic


def _node(module: ast.Module, text: str) -> ast.expr:
    return next(n for n in ast.walk(module) if isinstance(n, ast.expr) and ast.unparse(n) == text)


# -- MEM505 (bug_166): an op built once per call of a function that the epoch
# loop calls, before the function's own step loop, and run by each step.

MEM505_PER_CALL_BUG = """
    import tensorflow.compat.v1 as tf

    def evaluate(sess, images, labels, logits, x, y):
        hits = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.int32))  # expect: MEM505
        total = 0
        for start in range(0, len(images), 256):
            total += sess.run(hits, {x: images[start:start + 256], y: labels[start:start + 256]})
        return total / len(images)

    def main(images, labels, logits, x, y, train_op):
        with tf.Session() as sess:
            epoch = 0
            while epoch < 90:
                sess.run(train_op)
                print(evaluate(sess, images, labels, logits, x, y))
                epoch += 1
"""

MEM505_PER_CALL_OK = """
    import tensorflow.compat.v1 as tf

    def evaluate(sess, images, labels, hits, x, y):
        total = 0
        for start in range(0, len(images), 256):
            total += sess.run(hits, {x: images[start:start + 256], y: labels[start:start + 256]})
        return total / len(images)

    def main(images, labels, logits, x, y, train_op):
        hits = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.int32))
        with tf.Session() as sess:
            sess.graph.finalize()
            epoch = 0
            while epoch < 90:
                sess.run(train_op)
                print(evaluate(sess, images, labels, hits, x, y))
                epoch += 1
"""

# The same function called once: its op is built once.
MEM505_CALLED_ONCE_OK = """
    import tensorflow.compat.v1 as tf

    def evaluate(sess, images, logits, x):
        top = tf.argmax(logits, 1)
        return [sess.run(top, {x: batch}) for batch in images]

    with tf.Session() as sess:
        print(evaluate(sess, test_images, logits, x))
"""


def test_mem505_op_built_per_call_of_a_function_called_per_epoch():
    assert_reported(MEM505_PER_CALL_BUG, "MEM505")


def test_mem505_op_built_once_and_passed_in_is_silent():
    assert_silent(MEM505_PER_CALL_OK, "MEM505")


def test_mem505_function_called_once_is_silent():
    assert_silent(MEM505_CALLED_ONCE_OK, "MEM505")


# -- MEM505 (bug_167): `tf1 = tf.compat.v1` is the module itself: its
# `Session` is a session and its functions are ops. Here inside a function,
# with `from tensorflow import compat`.

MEM505_ALIAS_BUG = """
    from tensorflow import compat

    def anneal(weights, steps):
        v1 = compat.v1
        session = v1.Session()
        session.run(v1.global_variables_initializer())
        for step in range(steps):
            session.run(v1.assign(weights, weights * 0.999))  # expect: MEM505
        return session
"""

MEM505_ALIAS_OK = """
    from tensorflow import compat

    def anneal(weights, steps):
        v1 = compat.v1
        decay = v1.assign(weights, weights * 0.999)
        session = v1.Session()
        session.run(v1.global_variables_initializer())
        for step in range(steps):
            session.run(decay)
        return session
"""


def test_mem505_ops_of_a_module_alias_bound_by_assignment():
    assert_reported(MEM505_ALIAS_BUG, "MEM505")


def test_mem505_op_of_a_module_alias_built_once_is_silent():
    assert_silent(MEM505_ALIAS_OK, "MEM505")


def test_a_name_bound_once_to_an_imported_chain_is_an_alias():
    source = ("import torch\nimport tensorflow as tf\nclear = torch.cuda.empty_cache\nv1 = tf.compat.v1\n"
              "twice = torch.cuda\ntwice = None\nloose = unknown.module\n"
              "clear()\nv1.Session()\ntwice.synchronize()\nloose.run()\n")
    module, semantic = _semantic(source)
    assert semantic.qualified(_node(module, "clear")) == "torch.cuda.empty_cache"
    assert semantic.qualified(_node(module, "v1.Session")) == "tensorflow.compat.v1.Session"
    assert semantic.qualified(_node(module, "twice.synchronize")) is None  # bound twice: not provably the module
    assert semantic.qualified(_node(module, "loose.run")) is None  # its head is no import


# -- MEM110 (bug_175): the growth written as a conditional expression, here
# with the concatenation in the first branch and under inference_mode.

MEM110_IFEXP_BUG = """
    import torch

    @torch.inference_mode()
    def embed_all(encoder, loader, device="cuda"):
        encoder.to(device).eval()
        bank = None
        for batch in loader:
            emb = encoder(batch.to(device))
            bank = torch.cat([bank, emb]) if bank is not None else emb  # expect: MEM110
        return bank
"""

MEM110_IFEXP_OK = """
    import torch

    @torch.inference_mode()
    def embed_all(encoder, loader, device="cuda"):
        encoder.to(device).eval()
        bank = None
        for batch in loader:
            emb = encoder(batch.to(device)).cpu()
            bank = torch.cat([bank, emb]) if bank is not None else emb
        return bank
"""


def test_mem110_tensor_grown_by_a_conditional_expression():
    assert_reported(MEM110_IFEXP_BUG, "MEM110")


def test_mem110_host_tensor_grown_by_a_conditional_expression_is_silent():
    assert_silent(MEM110_IFEXP_OK, "MEM110")


# -- MEM308 (bug_162): an annotated assignment binds like a plain one, on the
# attribute and on the local it goes through.

MEM308_ANNOTATED_BUG = """
    import json
    from typing import Any, Dict, List

    from torch.utils import data

    class Captions(data.Dataset):
        def __init__(self, path: str):
            with open(path) as fh:
                blob: Dict[str, Any] = json.load(fh)
            self.items: List[Dict[str, Any]] = blob["annotations"]  # expect: MEM308

        def __len__(self):
            return len(self.items)

        def __getitem__(self, k):
            return self.items[k]["caption"]

    loader = data.DataLoader(Captions("captions.json"), batch_size=64, num_workers=6)
"""

MEM308_ANNOTATED_OK = """
    import json
    from typing import Any, Dict

    import numpy as np
    from torch.utils import data

    class Captions(data.Dataset):
        def __init__(self, path: str):
            with open(path) as fh:
                blob: Dict[str, Any] = json.load(fh)
            self.items: np.ndarray = np.array([a["caption"] for a in blob["annotations"]])

        def __len__(self):
            return len(self.items)

        def __getitem__(self, k):
            return self.items[k]

    loader = data.DataLoader(Captions("captions.json"), batch_size=64, num_workers=6)
"""


def test_mem308_annotated_attribute_of_a_json_collection():
    assert_reported(MEM308_ANNOTATED_BUG, "MEM308")


def test_mem308_annotated_numpy_attribute_is_silent():
    assert_silent(MEM308_ANNOTATED_OK, "MEM308")


# -- MEM503 (bug_171): `predict` two calls away from the loop (loop -> method
# -> module helper), here a method's loop over a list of requests (no run loop
# of the data: what repeats is the loop, followed through the file's calls).

MEM503_TRANSITIVE_BUG = """
    import tensorflow as tf

    ranker = tf.keras.models.load_model("ranker.keras")

    def relevance(features):
        return ranker.predict(features, verbose=0)[:, 0]  # expect: MEM503

    class Server:
        def answer(self, query):
            return relevance(query.features).argmax()

        def serve(self, queries):
            for query in queries:
                print(self.answer(query))
"""

MEM503_TRANSITIVE_OK = """
    import tensorflow as tf

    ranker = tf.keras.models.load_model("ranker.keras")

    def relevance(features):
        return ranker.predict(features, batch_size=512, verbose=0)[:, 0]

    class Offline:
        def answer(self, table):
            return relevance(table).argsort()

        def report(self, table):
            order = self.answer(table)
            for row in order[:10]:
                print(row)
"""


def test_mem503_predict_in_a_helper_two_calls_from_the_loop():
    assert_reported(MEM503_TRANSITIVE_BUG, "MEM503")


def test_mem503_helper_called_once_outside_any_loop_is_silent():
    assert_silent(MEM503_TRANSITIVE_OK, "MEM503")


# -- MEM504 (bug_173): a nested `@tf.function` def in a function that runs
# repeatedly, here a module-level function called per epoch.

MEM504_NESTED_BUG = """
    import tensorflow as tf

    def validate(model, dataset):
        @tf.function(reduce_retracing=True)  # expect: MEM504
        def step(x, y):
            return tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(y, model(x, training=False)))

        return float(tf.add_n([step(x, y) for x, y in dataset]))

    def fit(model, train, val, epochs):
        for epoch in range(epochs):
            model.fit(train, epochs=1, verbose=0)
            print(epoch, validate(model, val))
"""

MEM504_NESTED_OK = """
    import tensorflow as tf

    def validate(model, dataset):
        @tf.function(reduce_retracing=True)
        def step(x, y):
            return tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(y, model(x, training=False)))

        return float(tf.add_n([step(x, y) for x, y in dataset]))

    def fit(model, train, val, epochs):
        model.fit(train, epochs=epochs, verbose=0)
        print(validate(model, val))
"""


def test_mem504_nested_tf_function_in_a_function_called_per_epoch():
    assert_reported(MEM504_NESTED_BUG, "MEM504")


def test_mem504_nested_tf_function_in_a_function_called_once_is_silent():
    assert_silent(MEM504_NESTED_OK, "MEM504")


# -- MEM101 (bug_182): Horovod's allreduce is an autograd function, its
# result keeps the loss's graph; here summed inline, with `from ... import`.

MEM101_ALLREDUCE_BUG = """
    import torch
    from horovod.torch import allreduce

    def train(net, batches, opt, loss_fn):
        running = torch.zeros((), device="cuda")
        for x, y in batches:
            opt.zero_grad()
            loss = loss_fn(net(x.cuda()), y.cuda())
            loss.backward()
            opt.step()
            running = running + allreduce(loss, name="loss")  # expect: MEM101
        return running
"""

MEM101_ALLREDUCE_OK = """
    import torch
    from horovod.torch import allreduce

    def train(net, batches, opt, loss_fn):
        running = torch.zeros((), device="cuda")
        for x, y in batches:
            opt.zero_grad()
            loss = loss_fn(net(x.cuda()), y.cuda())
            loss.backward()
            opt.step()
            running = running + allreduce(loss.detach(), name="loss")
        return running
"""


def test_mem101_sum_of_an_allreduced_loss():
    assert_reported(MEM101_ALLREDUCE_BUG, "MEM101")


def test_mem101_sum_of_an_allreduced_detached_loss_is_silent():
    assert_silent(MEM101_ALLREDUCE_OK, "MEM101")


# -- MEM204 (bug_178): a weight on one addend scales that addend only; the
# sum still carries the other, unscaled. Here a counter-based accumulation.

MEM204_ADDEND_BUG = """
    import torch.nn.functional as F

    class Fitter:
        def fit(self, loader):
            seen = 0
            for images, masks in loader:
                logits, aux = self.net(images)
                loss = F.binary_cross_entropy_with_logits(logits, masks) + 0.4 * F.mse_loss(aux, masks)
                loss.backward()  # expect: MEM204
                seen += 1
                if seen == self.accum_steps:
                    self.optimizer.step()
                    self.optimizer.zero_grad()
                    seen = 0
"""

MEM204_ADDEND_OK = """
    import torch.nn.functional as F

    class Fitter:
        def fit(self, loader):
            seen = 0
            for images, masks in loader:
                logits, aux = self.net(images)
                loss = F.binary_cross_entropy_with_logits(logits, masks) + 0.4 * F.mse_loss(aux, masks)
                (loss / self.accum_steps).backward()
                seen += 1
                if seen == self.accum_steps:
                    self.optimizer.step()
                    self.optimizer.zero_grad()
                    seen = 0
"""


def test_mem204_weighted_addend_leaves_the_other_unscaled():
    assert_reported(MEM204_ADDEND_BUG, "MEM204")


def test_mem204_whole_sum_divided_is_silent():
    assert_silent(MEM204_ADDEND_OK, "MEM204")


# -- MEM205 (bug_179): the autocast dtype provably bound by the file, here a
# conditional expression on a module constant.

MEM205_PROVABLE_BUG = """
    import torch

    PRECISION = "fp16"
    AMP_DTYPE = torch.float16 if PRECISION == "fp16" else torch.bfloat16

    def train_step(model, batch, optimizer):
        with torch.autocast("cuda", dtype=AMP_DTYPE):
            loss = model(**batch).loss
        loss.backward()  # expect: MEM205
        optimizer.step()
        optimizer.zero_grad()
"""

MEM205_PROVABLE_OK = """
    import torch

    PRECISION = "bf16"
    AMP_DTYPE = torch.float16 if PRECISION == "fp16" else torch.bfloat16

    def train_step(model, batch, optimizer):
        with torch.autocast("cuda", dtype=AMP_DTYPE):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
"""


def test_mem205_float16_dtype_chosen_by_a_folding_condition():
    assert_reported(MEM205_PROVABLE_BUG, "MEM205")


def test_mem205_bfloat16_dtype_chosen_by_a_folding_condition_is_silent():
    assert_silent(MEM205_PROVABLE_OK, "MEM205")


def test_provable_expression_follows_names_dict_items_and_folding_branches():
    source = ("import torch\nkind = 'half'\ntable = 1\ntable = 2\n"
              "chosen = {'full': torch.float32, 'half': torch.float16}[kind]\n"
              "unknown_key = {'full': torch.float32}[other]\n"
              "picked = None if kind == 'full' else chosen\n"
              "picked\nunknown_key\ntable\n")
    module, semantic = _semantic(source)
    statements = module.body
    expression = semantic.constants.expression
    assert ast.unparse(expression(statements[-3].value)) == "torch.float16"
    assert ast.unparse(expression(statements[-2].value)) == "{'full': torch.float32}[other]"
    assert ast.unparse(expression(statements[-1].value)) == "table"  # bound twice: itself
