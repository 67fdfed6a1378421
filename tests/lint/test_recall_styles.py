"""Misses of the recall set (fixtures/recall), each fixed in the semantic
model or its rule, checked on code of another style than the reproducer's:
every buggy snippet must be reported on its marked lines, and a correct
look-alike must get no finding of that code.

The snippets are new code written for these tests."""

from __future__ import annotations

import textwrap

import pytest

from .expectations import describe, lint_text, parse_expectations


def _lint(source: str, code: str):
    return [d for d in lint_text("snippet.py", source, {code}) if d.code == code]


def assert_reported(source: str, code: str) -> None:
    """Every ``# expect: CODE`` line of ``source`` is reported, and no other line."""
    source = textwrap.dedent(source)
    expected = {line for line, c in parse_expectations(source).pairs() if c == code}
    assert expected, "the snippet marks no line"
    found = _lint(source, code)
    assert {d.line for d in found} == expected, describe(found)


def assert_silent(source: str, code: str) -> None:
    source = textwrap.dedent(source)
    found = _lint(source, code)
    assert found == [], describe(found)


# MEM308: a Python-object collection reached through a local and its items
# (bug_79: ``blob = json.load(fh)``; ``self.records = blob["annotations"]``).

MEM308_BUG = """
    import pickle
    from torch.utils import data as tud

    class ShardIndex(tud.Dataset):
        def __init__(self, index_path, split="train"):
            with open(index_path, "rb") as handle:
                table = pickle.load(handle)
            self.entries = table["splits"][split]  # expect: MEM308

        def __len__(self):
            return len(self.entries)

        def __getitem__(self, position):
            entry = self.entries[position]
            return entry["tokens"], entry["label"]

    def loaders(path):
        return tud.DataLoader(ShardIndex(path), batch_size=32, num_workers=6)
"""

MEM308_OK = """
    import pickle
    import numpy as np
    from torch.utils import data as tud

    class ShardIndex(tud.Dataset):
        def __init__(self, index_path, split="train"):
            with open(index_path, "rb") as handle:
                table = pickle.load(handle)
            self.vocab_size = table["meta"]["vocab"]
            self.entries = np.asarray(table["splits"][split], dtype=np.int64)

        def __len__(self):
            return len(self.entries)

        def __getitem__(self, position):
            return self.entries[position] % self.vocab_size

    def loaders(path):
        return tud.DataLoader(ShardIndex(path), batch_size=32, num_workers=6)
"""


def test_mem308_collection_reached_through_a_local():
    assert_reported(MEM308_BUG, "MEM308")


def test_mem308_converted_collection_is_silent():
    assert_silent(MEM308_OK, "MEM308")


# MEM205: fp16 autocast whose device type is a variable (bug_45:
# ``autocast(device_type=device.type)``, no dtype: float16 on CUDA).

MEM205_BUG = """
    import torch

    class Runner:
        def __init__(self, net, opt, accel):
            self.net, self.opt, self.accel = net, opt, accel

        def fit_epoch(self, batches):
            for inputs, labels in batches:
                with torch.autocast(self.accel):
                    err = torch.nn.functional.cross_entropy(self.net(inputs.to(self.accel)), labels.to(self.accel))
                self.opt.zero_grad()
                err.backward()  # expect: MEM205
                self.opt.step()
"""

MEM205_CPU_OK = """
    import torch

    accel = "cpu"

    def fit_epoch(net, opt, batches):
        for inputs, labels in batches:
            with torch.autocast(accel):
                err = torch.nn.functional.cross_entropy(net(inputs), labels)
            opt.zero_grad()
            err.backward()
            opt.step()
"""

MEM205_BF16_OK = """
    import torch

    def fit_epoch(net, opt, batches, accel):
        for inputs, labels in batches:
            with torch.autocast(accel.type, dtype=torch.bfloat16):
                err = torch.nn.functional.cross_entropy(net(inputs.to(accel)), labels.to(accel))
            opt.zero_grad()
            err.backward()
            opt.step()
"""


def test_mem205_variable_device_type_is_cuda_fp16():
    assert_reported(MEM205_BUG, "MEM205")


MEM205_UNPLACED_OK = """
    import torch

    def fit_epoch(net, opt, batches, kind):
        for inputs, labels in batches:
            with torch.autocast(kind):
                err = torch.nn.functional.cross_entropy(net(inputs), labels)
            opt.zero_grad()
            err.backward()
            opt.step()
"""


@pytest.mark.parametrize("source", [MEM205_CPU_OK, MEM205_BF16_OK, MEM205_UNPLACED_OK], ids=["cpu-literal", "bf16", "unplaced"])
def test_mem205_cpu_or_bf16_autocast_is_silent(source):
    assert_silent(source, "MEM205")


# MEM101: the terms of a backpropagated sum are loss terms with a graph, even
# when the callables that made them show no module evidence (bug_09:
# ``(actor_loss + critic_loss).backward()``, then ``total += actor_loss``).

MEM101_BUG = """
    import torch

    def teacher_forcing(step_fn, halt_fn, optimiser, corpus, hidden0):
        seq_total = 0.0
        halt_total = 0.0
        for sentence in corpus:
            hidden, token_losses, halts = hidden0, [], []
            for token, nxt in zip(sentence[:-1], sentence[1:]):
                logits, hidden = step_fn(token, hidden)
                token_losses.append(torch.nn.functional.cross_entropy(logits, nxt))
                halts.append(halt_fn(hidden).sigmoid().mean())
            seq_loss = torch.stack(token_losses).mean()
            halt_loss = torch.stack(halts).sum()
            optimiser.zero_grad()
            (seq_loss - -0.01 * halt_loss).backward()
            optimiser.step()
            seq_total = seq_total + seq_loss  # expect: MEM101
            halt_total += halt_loss  # expect: MEM101
        return seq_total, halt_total
"""

MEM101_OK = """
    import torch

    def teacher_forcing(step_fn, optimiser, corpus, hidden0, weight):
        seq_total = 0.0
        penalty_total = 0.0
        for n, sentence in enumerate(corpus):
            hidden, token_losses = hidden0, []
            for token, nxt in zip(sentence[:-1], sentence[1:]):
                logits, hidden = step_fn(token, hidden)
                token_losses.append(torch.nn.functional.cross_entropy(logits, nxt))
            seq_loss = torch.stack(token_losses).mean()
            penalty = weight * float(n) / len(corpus)
            optimiser.zero_grad()
            (seq_loss + penalty).backward()
            optimiser.step()
            seq_total = seq_total + seq_loss.item()
            penalty_total += penalty
        return seq_total, penalty_total
"""


def test_mem101_terms_of_a_backpropagated_sum_are_attached():
    assert_reported(MEM101_BUG, "MEM101")


def test_mem101_python_number_term_and_item_are_silent():
    assert_silent(MEM101_OK, "MEM101")


# MEM503: ``predict`` on a parameter of unknown kind in a file where only
# Keras provides ``predict`` (bug_81: ``net.predict(frame)`` in a while loop).

MEM503_BUG = """
    import numpy as np
    import tensorflow as tf

    def sliding_scores(detector, signal, width=256, hop=64):
        windows = (signal[i:i + width] for i in range(0, len(signal) - width, hop))
        return [float(detector.predict(w[None, :, None], verbose=0)[0, 0]) for w in windows]  # expect: MEM503

    def export(detector, path):
        tf.saved_model.save(detector, path)
"""

MEM503_SKLEARN_OK = """
    import numpy as np
    import tensorflow as tf
    from sklearn.linear_model import LogisticRegression

    def sliding_scores(detector, signal, width=256, hop=64):
        windows = (signal[i:i + width] for i in range(0, len(signal) - width, hop))
        return [float(detector.predict(w[None, :])[0]) for w in windows]

    def embed(path):
        return tf.keras.models.load_model(path)
"""

MEM503_OWN_CLASS_OK = """
    import numpy as np
    import tensorflow as tf

    class Threshold:
        def __init__(self, level):
            self.level = level

        def predict(self, window):
            return np.asarray(window).mean() > self.level

    def sliding_scores(detector, signal, width=256, hop=64):
        windows = (signal[i:i + width] for i in range(0, len(signal) - width, hop))
        return [bool(detector.predict(w)) for w in windows]
"""


def test_mem503_unknown_receiver_where_only_keras_predicts():
    assert_reported(MEM503_BUG, "MEM503")


MEM503_IN_HOUSE_OK = """
    import numpy as np
    import tensorflow as tf
    from .scoring import robust_detector

    def sliding_scores(signal, width=256, hop=64):
        detector = robust_detector()
        windows = (signal[i:i + width] for i in range(0, len(signal) - width, hop))
        return [float(detector.predict(w)) for w in windows]
"""


@pytest.mark.parametrize("source", [MEM503_SKLEARN_OK, MEM503_OWN_CLASS_OK, MEM503_IN_HOUSE_OK],
                         ids=["sklearn", "own-class", "in-house-package"])
def test_mem503_other_predict_providers_are_silent(source):
    assert_silent(source, "MEM503")


# MEM306: an attribute of a module of unknown class is a submodule when the
# file's module classes assign it one (bug_77: ``deepcopy(pl_module.student)``
# in a Lightning callback).

MEM306_BUG = """
    import copy
    import torch
    import torch.nn as nn

    class TwoTower(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.query_tower = nn.Sequential(nn.Linear(dim, dim), nn.ReLU())
            self.doc_tower = nn.Linear(dim, dim)
            self.settings = {"temperature": 0.05}

        def forward(self, q, d):
            return self.query_tower(q) @ self.doc_tower(d).T

    def fit(net, pairs, epochs):
        net = net.to("cuda")
        opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
        anchors = []
        for epoch in range(epochs):
            for q, d in pairs:
                scores = net(q.cuda(), d.cuda())
                loss = nn.functional.cross_entropy(scores, torch.arange(len(q), device="cuda"))
                opt.zero_grad()
                loss.backward()
                opt.step()
            anchors.append(copy.deepcopy(net.query_tower))  # expect: MEM306
        return anchors
"""

MEM306_OK = """
    import copy
    import torch
    import torch.nn as nn

    class TwoTower(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.query_tower = nn.Sequential(nn.Linear(dim, dim), nn.ReLU())
            self.doc_tower = nn.Linear(dim, dim)
            self.settings = {"temperature": 0.05}

        def forward(self, q, d):
            return self.query_tower(q) @ self.doc_tower(d).T

    def fit(net, pairs, epochs):
        net = net.to("cuda")
        opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
        history = []
        for epoch in range(epochs):
            for q, d in pairs:
                scores = net(q.cuda(), d.cuda())
                loss = nn.functional.cross_entropy(scores, torch.arange(len(q), device="cuda"))
                opt.zero_grad()
                loss.backward()
                opt.step()
            history.append(copy.deepcopy(net.settings))
        return history
"""


def test_mem306_attribute_of_unknown_module_is_a_submodule():
    assert_reported(MEM306_BUG, "MEM306")


def test_mem306_plain_attribute_copy_is_silent():
    assert_silent(MEM306_OK, "MEM306")


# MEM110: a parameter annotated with a dataset type is a stream of batches
# (bug_72: ``ds: tf.data.Dataset``, ``bank = tf.concat([bank, vecs], 0)``).

MEM110_BUG = """
    import tensorflow as tf

    def pooled_features(records: tf.data.Dataset, width: int):
        pooled = tf.zeros((0, width))
        for features, _labels in records:
            mean = tf.reduce_mean(features, axis=1)
            pooled = tf.concat([pooled, mean], axis=0)  # expect: MEM110
        return pooled
"""

MEM110_OK = """
    import tensorflow as tf

    def pooled_features(records: tf.data.Dataset, width: int):
        chunks = []
        for features, _labels in records:
            chunks.append(tf.reduce_mean(features, axis=1).numpy())
        return tf.concat(chunks, axis=0) if chunks else tf.zeros((0, width))

    def stacked_heads(heads: list, width: int):
        out = tf.zeros((0, width))
        for head in heads:
            out = tf.concat([out, head], axis=0)
        return out
"""


def test_mem110_annotated_dataset_is_a_stream():
    assert_reported(MEM110_BUG, "MEM110")


def test_mem110_one_concat_after_the_loop_is_silent():
    assert_silent(MEM110_OK, "MEM110")


# MEM505: every statement of the step that builds ops for a ``sess.run`` is
# reported, not only the first (bug_83: ``sq = tf1.square(loss)`` and ``acc =
# tf1.reduce_mean(...)`` both built for one run).

MEM505_BUG = """
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    inputs = tf.compat.v1.placeholder(tf.float32, [None, 32])
    weights = tf.Variable(tf.random.normal([32, 4]))
    scores = tf.matmul(inputs, weights)

    def monitor(feeds):
        session = tf.compat.v1.Session()
        session.run(tf.compat.v1.global_variables_initializer())
        it = iter(feeds)
        while True:
            batch = next(it, None)
            if batch is None:
                break
            norm = tf.norm(weights)  # expect: MEM505
            top = tf.reduce_max(tf.nn.softmax(scores), axis=1)  # expect: MEM505
            print(session.run({"norm": norm, "top": top}, feed_dict={inputs: batch}))
"""

MEM505_OK = """
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    inputs = tf.compat.v1.placeholder(tf.float32, [None, 32])
    weights = tf.Variable(tf.random.normal([32, 4]))
    scores = tf.matmul(inputs, weights)
    norm = tf.norm(weights)
    top = tf.reduce_max(tf.nn.softmax(scores), axis=1)

    def monitor(feeds):
        session = tf.compat.v1.Session()
        session.run(tf.compat.v1.global_variables_initializer())
        it = iter(feeds)
        while True:
            batch = next(it, None)
            if batch is None:
                break
            print(session.run({"norm": norm, "top": top}, feed_dict={inputs: batch}))
"""


def test_mem505_each_statement_building_ops_is_reported():
    assert_reported(MEM505_BUG, "MEM505")


def test_mem505_ops_built_before_the_loop_are_silent():
    assert_silent(MEM505_OK, "MEM505")


# MEM105: state that comes back through the call's output object (bug_29:
# ``outputs = model(**inputs, state=state)``; ``state = outputs.state``).

MEM105_BUG = """
    import torch
    import torch.nn as nn

    class StreamingEncoder(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.cell = nn.GRUCell(dim, dim)

        def forward(self, chunk, cache=None):
            hidden = self.cell(chunk, cache)
            return {"hidden": hidden, "cache": hidden}

    def transcribe(chunks, dim=80):
        encoder = StreamingEncoder(dim).cuda()
        cache = None
        texts = []
        for chunk in chunks:
            result = encoder(chunk.cuda(), cache=cache)  # expect: MEM105
            cache = result["cache"]
            texts.append(int(result["hidden"].argmax()))
        return texts
"""

MEM105_OK = """
    import torch
    import torch.nn as nn

    class StreamingEncoder(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.cell = nn.GRUCell(dim, dim)

        def forward(self, chunk, cache=None):
            hidden = self.cell(chunk, cache)
            return {"hidden": hidden, "cache": hidden}

    def transcribe(chunks, dim=80):
        encoder = StreamingEncoder(dim).cuda()
        cache = None
        texts = []
        for chunk in chunks:
            result = encoder(chunk.cuda(), cache=cache)
            cache = result["cache"].detach()
            texts.append(int(result["hidden"].argmax()))
        return texts

    def transcribe_eval(chunks, dim=80):
        encoder = StreamingEncoder(dim).cuda()
        cache = None
        with torch.inference_mode():
            for chunk in chunks:
                result = encoder(chunk.cuda(), cache=cache)
                cache = result["cache"]
        return cache
"""


def test_mem105_state_read_back_from_the_output_is_carried():
    assert_reported(MEM105_BUG, "MEM105")


def test_mem105_detached_or_grad_free_state_is_silent():
    assert_silent(MEM105_OK, "MEM105")


# MEM103: the parts of a batch that a framework hook receives on the device
# are on the device, in a file that never names the device (bug_18: a
# Lightning validation_step keeps ``logits.softmax(1)`` and ``mask``).

MEM103_BUG = """
    import pytorch_lightning as pl
    import torch

    class Retrieval(pl.LightningModule):
        def __init__(self, tower):
            super().__init__()
            self.tower = tower
            self.bank = []

        def test_step(self, batch, batch_idx):
            query, _ = batch
            z = torch.nn.functional.normalize(self.tower(query), dim=-1)
            self.bank.append(z)  # expect: MEM103

        def on_test_epoch_end(self):
            self.log("bank_size", float(len(self.bank)))
            self.bank.clear()
"""

MEM103_OK = """
    import pytorch_lightning as pl
    import torch

    class Retrieval(pl.LightningModule):
        def __init__(self, tower):
            super().__init__()
            self.tower = tower
            self.bank = []

        def test_step(self, batch, batch_idx):
            query, _ = batch
            z = torch.nn.functional.normalize(self.tower(query), dim=-1)
            self.bank.append(z.cpu())

        def on_test_epoch_end(self):
            self.log("bank_size", float(len(self.bank)))
            self.bank.clear()
"""


def test_mem103_unpacked_hook_batch_is_on_the_device():
    assert_reported(MEM103_BUG, "MEM103")


def test_mem103_host_copy_is_silent():
    assert_silent(MEM103_OK, "MEM103")


# torch.distributions: a distribution built from attached tensors keeps their
# graph; ``log_prob``/``entropy``/``rsample`` are differentiable, ``sample`` is
# drawn under no_grad (torch 2.13.0 torch/distributions/distribution.py).

DISTRIBUTION_BUG = """
    import torch
    import torch.nn as nn

    def reinforce(env, steps=1000):
        actor = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 2))
        log_std = nn.Parameter(torch.zeros(2))
        opt = torch.optim.Adam([*actor.parameters(), log_std], lr=3e-4)
        spread = 0.0
        for _ in range(steps):
            obs = torch.as_tensor(env.observe(), dtype=torch.float32)
            policy = torch.distributions.Normal(actor(obs), log_std.exp())
            move = policy.sample()
            reward = env.act(move.numpy())
            opt.zero_grad()
            (-policy.log_prob(move).sum() * reward).backward()
            opt.step()
            spread += policy.entropy().sum()  # expect: MEM101
        return spread
"""

DISTRIBUTION_OK = """
    import torch
    import torch.nn as nn

    def reinforce(env, steps=1000):
        actor = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 2))
        log_std = nn.Parameter(torch.zeros(2))
        opt = torch.optim.Adam([*actor.parameters(), log_std], lr=3e-4)
        spread = 0.0
        moves = []
        for _ in range(steps):
            obs = torch.as_tensor(env.observe(), dtype=torch.float32)
            policy = torch.distributions.Normal(actor(obs), log_std.exp())
            move = policy.sample()
            moves.append(move)
            reward = env.act(move.numpy())
            opt.zero_grad()
            (-policy.log_prob(move).sum() * reward).backward()
            opt.step()
            spread += policy.entropy().sum().item()
        return spread, moves
"""


def test_distribution_entropy_keeps_the_graph():
    assert_reported(DISTRIBUTION_BUG, "MEM101")


def test_distribution_samples_and_item_are_silent():
    assert_silent(DISTRIBUTION_OK, "MEM101")
    assert_silent(DISTRIBUTION_OK, "MEM102")


def test_distribution_facts_match_the_installed_torch():
    torch = pytest.importorskip("torch")
    from memlint.lint.semantic import torch_ops as ops

    logits = torch.zeros(3, requires_grad=True)
    for dist in (torch.distributions.Categorical(logits=logits), torch.distributions.Normal(logits, logits.exp())):
        drawn = dist.sample()
        assert not drawn.requires_grad
        for name in ops.DISTRIBUTION_DIFFERENTIABLE_METHODS:
            method = getattr(dist, name, None)
            if method is None:
                continue
            try:
                result = method(drawn) if name in ("log_prob", "cdf", "icdf") else method()
            except NotImplementedError:
                continue
            assert result.requires_grad, name
        assert dist.log_prob(drawn).requires_grad and dist.entropy().requires_grad


# MEM102 and torch.distributions: log-probabilities kept on persistent state
# are the REINFORCE pattern when another function of the file backpropagates
# what it reads from that state (pytorch/examples reinforce.py's
# ``policy.saved_log_probs``), and a leak when nothing does.

REINFORCE_SHAPE = """
    import torch
    import torch.nn as nn

    class Agent:
        def __init__(self):
            self.net = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 3))
            self.opt = torch.optim.SGD(self.net.parameters(), lr=1e-2)
            self.trace = []
            self.gains = []

        def act(self, obs):
            dist = torch.distributions.Categorical(logits=self.net(torch.as_tensor(obs)))
            choice = dist.sample()
            self.trace.append(dist.log_prob(choice)){mark}
            return int(choice)

        def learn(self):
{learn}
            self.trace.clear()
            self.gains.clear()

    def play(env, agent, episodes):
        for _ in range(episodes):
            obs, done = env.reset(), False
            while not done:
                obs, gain, done = env.step(agent.act(obs))
                agent.gains.append(gain)
            agent.learn()
"""

LEARNS = """\
            terms = [-lp * g for lp, g in zip(self.trace, self.gains)]
            self.opt.zero_grad()
            torch.stack(terms).sum().backward()
            self.opt.step()"""

ONLY_LOGS = """\
            print(sum(float(lp) for lp in self.trace) / max(len(self.trace), 1))"""


def test_mem102_log_probs_backpropagated_by_another_method_are_silent():
    assert_silent(REINFORCE_SHAPE.format(mark="", learn=LEARNS), "MEM102")


def test_mem102_log_probs_kept_and_only_logged_are_reported():
    assert_reported(REINFORCE_SHAPE.format(mark="  # expect: MEM102", learn=ONLY_LOGS), "MEM102")
