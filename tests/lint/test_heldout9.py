"""False positives of the ninth held-out judging round (/work/heldout9),
each fixed by what the values are, and checked on code of another style
than the judged repositories': every buggy snippet is reported on its
marked lines, and a correct look-alike gets no finding of that code.

The snippets are new code written for these tests."""

from __future__ import annotations

import textwrap

from .expectations import lint_text, parse_expectations
from .test_recall_styles import assert_reported, assert_silent


# -- MEM505: a step that calls an in-file helper which resets the default
# graph (`tf.compat.v1.reset_default_graph()`) starts from an empty graph:
# the ops it builds afterwards do not pile up.

HELPER_RESETS_OK = """
    import tensorflow.compat.v1 as tf1

    def fresh_start(seed):
        tf1.reset_default_graph()
        tf1.set_random_seed(seed)

    def search(trials):
        scores = []
        for trial in trials:
            fresh_start(trial.seed)
            inputs = tf1.placeholder(tf1.float32, shape=(None, 8))
            score = tf1.reduce_sum(inputs * trial.weight)
            with tf1.Session() as session:
                scores.append(session.run(score, feed_dict={inputs: trial.data}))
        return scores
"""

# the helper only opens its own graph and hands nothing back: the loop's ops
# still land in the one default graph
HELPER_SCOPED_GRAPH_BUG = """
    import tensorflow.compat.v1 as tf1

    def describe_graph():
        scratch = tf1.Graph()
        with scratch.as_default():
            tf1.constant(0.0)

    def search(trials):
        session = tf1.Session()
        for trial in trials:
            describe_graph()
            inputs = tf1.placeholder(tf1.float32, shape=(None, 8))  # expect: MEM505
            session.run(inputs * 2.0, feed_dict={inputs: trial.data})
"""


def test_mem505_helper_that_resets_the_graph_is_a_fresh_graph():
    assert_silent(HELPER_RESETS_OK, "MEM505")


def test_mem505_helper_with_its_own_scoped_graph_still_grows_the_default_graph():
    assert_reported(HELPER_SCOPED_GRAPH_BUG, "MEM505")


# -- MEM103: a list made afresh for each item of an outer loop, filled by a
# loop over that item and joined into the tensor a forward pass takes, is one
# input batch: it is dropped at the next item.

PER_GROUP_BATCH_OK = """
    import torch
    from helpers import batched

    class Scorer:
        def __init__(self, net, device, size):
            self.net = net.to(device)
            self.device = device
            self.size = size

        def score(self, requests):
            scores = []
            with torch.no_grad():
                for group in batched(requests, self.size):
                    rows, lengths = [], []
                    for tokens in group:
                        row = torch.tensor(tokens, dtype=torch.long).to(self.device)
                        rows.append(row[None])
                        lengths.append(len(tokens))
                    logits = self.net(torch.cat(rows, dim=0))
                    for row, logit, length in zip(rows, logits, lengths):
                        scores.append(float(logit[:length].sum()))
            return scores
"""

# the same batches, but each group's output is kept on the device for the
# whole run: the per-group list is still one batch, the outer list grows
PER_GROUP_KEPT_BUG = """
    import torch
    from helpers import batched

    def embed_all(net, requests, device, size):
        net = net.to(device)
        kept = []
        with torch.no_grad():
            for group in batched(requests, size):
                rows = []
                for tokens in group:
                    rows.append(torch.tensor(tokens).to(device)[None])
                kept.append(net(torch.cat(rows, dim=0)))  # expect: MEM103
        return kept
"""


def test_mem103_list_rebuilt_per_outer_item_and_fed_to_the_model_is_one_batch():
    assert_silent(PER_GROUP_BATCH_OK, "MEM103")


def test_mem103_outputs_of_each_batch_kept_on_device_are_reported():
    assert_reported(PER_GROUP_KEPT_BUG, "MEM103")


# -- MEM104: a notebook wrapper method calls a method of a module class
# defined in another cell that runs under `@torch.no_grad()`: the receiver
# is known to be a module only by its `.eval()`, not its class, and every
# module class of the notebook defining that method disables grad for it.

DELEGATES_TO_NO_GRAD_METHOD_OK = """
    # %%
    import torch
    from torch import nn

    # %%
    class Tagger(nn.Module):
        def __init__(self, width, tags):
            super().__init__()
            self.proj = nn.Linear(width, tags)

        def forward(self, feats):
            return self.proj(feats)

        @torch.no_grad()
        def predict_tags(self, feats):
            return self(feats).argmax(-1).tolist()

    # %%
    class TagService:
        def __init__(self, tagger):
            self.tagger = tagger
            self.tagger.eval()

        def predict_tags(self, rows):
            tags = self.tagger.predict_tags(torch.as_tensor(rows))
            return {"tags": tags}
"""

# the same wrapper, but the module's method runs with grad enabled
DELEGATES_TO_GRAD_METHOD_BUG = """
    # %%
    import torch
    from torch import nn

    # %%
    class Tagger(nn.Module):
        def __init__(self, width, tags):
            super().__init__()
            self.proj = nn.Linear(width, tags)

        def forward(self, feats):
            return self.proj(feats)

        def predict_tags(self, feats):
            return self(feats).argmax(-1).tolist()

    # %%
    class TagService:
        def __init__(self, tagger):
            self.tagger = tagger
            self.tagger.eval()

        def predict_tags(self, rows):
            tags = self.tagger.predict_tags(torch.as_tensor(rows))  # expect: MEM104
            return {"tags": tags}
"""


def _notebook_mem104(source: str):
    return [d for d in lint_text("snippet.ipynb", textwrap.dedent(source), {"MEM104"}) if d.code == "MEM104"]


def test_mem104_wrapper_delegating_to_a_no_grad_method_of_another_cell_is_silent():
    assert _notebook_mem104(DELEGATES_TO_NO_GRAD_METHOD_OK) == []


def test_mem104_wrapper_delegating_to_a_grad_method_is_reported():
    source = textwrap.dedent(DELEGATES_TO_GRAD_METHOD_BUG)
    expected = {line for line, code in parse_expectations(source).pairs() if code == "MEM104"}
    assert expected and {d.line for d in _notebook_mem104(source)} == expected


# -- MEM303: a file loaded only to be read sample by sample -- indexed per
# item, measured with `len`, wrapped in an in-file `Dataset` -- through the
# functions it is returned to and passed to, is a data file written
# elsewhere, not a checkpoint of the run.

SAMPLES_FILE_OK = """
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Pairs(Dataset):
        def __init__(self, records):
            self.records = records

        def __len__(self):
            return len(self.records)

        def __getitem__(self, k):
            return self.records[k]

    def read_splits(folder):
        fit_part = torch.load(f"{folder}/fit.bin")
        held_part = torch.load(f"{folder}/held.bin")
        return fit_part, held_part

    def sample(records, count):
        picks = torch.randint(len(records), (count,))
        return [records[int(p)] for p in picks]

    def run(folder, net):
        net = net.cuda()
        fit_part, held_part = read_splits(folder)
        loader = DataLoader(Pairs(fit_part), batch_size=8)
        for batch in loader:
            net(batch.cuda())
        return sample(held_part, 4)
"""

# the look-alike: the same reader, but one split is a checkpoint read by key
# and copied into the model
CHECKPOINT_BY_KEY_BUG = """
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Pairs(Dataset):
        def __init__(self, records):
            self.records = records

        def __getitem__(self, k):
            return self.records[k]

    def read_parts(folder):
        fit_part = torch.load(f"{folder}/fit.bin")
        weights = torch.load(f"{folder}/weights.bin")  # expect: MEM303
        return fit_part, weights

    def run(folder, net):
        net = net.cuda()
        fit_part, weights = read_parts(folder)
        net.load_state_dict(weights["net"])
        for batch in DataLoader(Pairs(fit_part), batch_size=8):
            net(batch.cuda())
"""


def test_mem303_file_read_only_as_samples_is_a_data_file():
    assert_silent(SAMPLES_FILE_OK, "MEM303")


def test_mem303_look_alike_checkpoint_read_by_key_is_reported():
    assert_reported(CHECKPOINT_BY_KEY_BUG, "MEM303")
