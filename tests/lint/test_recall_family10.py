"""False alarms and misses of the tenth, held-out recall family (fixtures/recall
bug_260..bug_289, ok_72..ok_77), each fixed by what the values are, and checked
on code of another style than the recall case: every buggy snippet is reported
on its marked lines, and a correct look-alike gets no finding of that code.

The snippets are new code written for these tests."""

from __future__ import annotations

import ast
import textwrap

from memlint.lint.context import FileContext
from memlint.lint.semantic.values import Kind, Tri

from .test_recall_styles import assert_reported, assert_silent


def _semantic(source: str):
    source = textwrap.dedent(source)
    module = ast.parse(source)
    return module, FileContext("snippet.py", source, module).semantic


def _call_on(module: ast.AST, line: int) -> ast.Call:
    return min((n for n in ast.walk(module) if isinstance(n, ast.Call) and n.lineno == line), key=lambda n: n.col_offset)


# -- MEM102 false alarm (ok_73): `if isinstance(obj, T):` is decided by what the
# model knows of `obj` (a tensor, a dict, a number), so a helper of the file that
# detaches by type returns what the taken branch returns, and the statements after
# a taken branch that returns are not reached.  ok_73 is a recursive `detach_tree`
# over a dict; here a module-level loop with a helper negating the test, and a
# helper whose dict branch detaches but whose fall-through returns a tensor as is.

MEM102_TYPE_DISPATCH_OK = """
    import torch

    def to_host(value):
        if not isinstance(value, torch.Tensor):
            return value
        return value.detach().cpu()

    net = torch.nn.Linear(4, 1)
    opt = torch.optim.Adam(net.parameters())
    history = []
    for xb in loader:
        opt.zero_grad()
        err = net(xb).pow(2).mean()
        err.backward()
        opt.step()
        history.append(to_host(err))
"""

MEM102_TYPE_DISPATCH_BUG = """
    import torch

    def strip(value):
        if isinstance(value, dict):
            return {k: v.detach() for k, v in value.items()}
        return value

    net = torch.nn.Linear(4, 1)
    opt = torch.optim.Adam(net.parameters())
    history = []
    for xb in loader:
        opt.zero_grad()
        err = net(xb).pow(2).mean()
        err.backward()
        opt.step()
        history.append(strip(err))  # expect: MEM102
"""


def test_mem102_helper_detaching_by_isinstance_is_silent():
    assert_silent(MEM102_TYPE_DISPATCH_OK, "MEM102")


def test_mem102_helper_whose_taken_branch_keeps_the_tensor_is_reported():
    assert_reported(MEM102_TYPE_DISPATCH_BUG, "MEM102")


def test_isinstance_decides_the_branch_by_the_value():
    module, semantic = _semantic("""
        import torch
        def tidy(x):
            if isinstance(x, (list, torch.Tensor)):
                return x.detach()
            return x
        net = torch.nn.Linear(2, 2)
        a = tidy(net(torch.ones(2)))
        b = tidy({"y": net(torch.ones(2))})
    """)
    assert semantic.value(_call_on(module, 8)).graph is Tri.NO
    assert semantic.value(_call_on(module, 9)).graph is Tri.YES  # a dict is no tensor: `return x` as is


# -- MEM109 false alarm (ok_75): a tensor method that returns a Python value
# (`numel()`, `size()`, `dim()`: torch_ops.PYTHON_RESULT) ends the trace from the
# hook's activation.  ok_75 appends a tuple with `out.numel()` from a bound-method
# hook; here a closure hook appending `output.size(-1)` and `output.dim()`, next to one
# that appends the activation itself.

MEM109_PYTHON_VALUE_OK = """
    import torch.nn as nn

    def watch(model):
        widths = []
        def record(mod, inp, output):
            widths.append((type(mod).__name__, output.size(-1), output.dim()))
        for layer in model.to("cuda").children():
            layer.register_forward_hook(record)
        return widths
"""

MEM109_PYTHON_VALUE_BUG = MEM109_PYTHON_VALUE_OK.replace(
    "widths.append((type(mod).__name__, output.size(-1), output.dim()))",
    "widths.append((type(mod).__name__, output.size(-1), output))  # expect: MEM109")


def test_mem109_hook_keeping_sizes_is_silent():
    assert_silent(MEM109_PYTHON_VALUE_OK, "MEM109")


def test_mem109_hook_keeping_the_activation_next_to_its_size_is_reported():
    assert_reported(MEM109_PYTHON_VALUE_BUG, "MEM109")


# -- MEM401 (bug_285): a loop that itself runs grad-disabled (in an
# `@torch.inference_mode()` method, inside `with torch.no_grad():`) and binds the
# result of a call given its element is one inference step per item, like the loop
# that enters such a context in its body.  bug_285 is a pipeline `__call__` over
# scheduler timesteps with the device module imported by alias; here module-level
# code serving prompts under `with torch.no_grad():` with `from torch import cuda`.

MEM401_GRAD_DISABLED_LOOP_BUG = """
    import torch
    from torch import cuda

    engine = load_engine().to("cuda")
    replies = []
    with torch.no_grad():
        for prompt in prompts:
            reply = engine.respond(tokenize(prompt).cuda())
            replies.append(reply.cpu())
            cuda.empty_cache()  # expect: MEM401
"""

MEM401_GRAD_DISABLED_LOOP_OK = MEM401_GRAD_DISABLED_LOOP_BUG.replace(
    "            cuda.empty_cache()  # expect: MEM401\n", "    cuda.empty_cache()\n")


def test_mem401_flush_per_item_of_a_grad_disabled_loop():
    assert_reported(MEM401_GRAD_DISABLED_LOOP_BUG, "MEM401")


def test_mem401_flush_once_after_the_grad_disabled_loop_is_silent():
    assert_silent(MEM401_GRAD_DISABLED_LOOP_OK, "MEM401")


# -- MEM304 (bug_282): the legacy CUDA tensor types (`torch.cuda.LongTensor(...)`,
# frameworks.LEGACY_CUDA_TENSOR_TYPES) make a tensor on the GPU, a data conversion
# like `torch.LongTensor(...)` moved there.  bug_282 is notebook-like module-level
# code; here a loader function with the type bound by `from torch import cuda`.

MEM304_LEGACY_CUDA_TYPE_BUG = """
    import numpy as np
    from torch import cuda
    from torch.utils.data import DataLoader, TensorDataset

    def make_loader(path):
        arrays = np.load(path)
        inputs = cuda.FloatTensor(arrays["x"])  # expect: MEM304
        return DataLoader(TensorDataset(inputs), batch_size=64, shuffle=True)
"""

MEM304_LEGACY_CUDA_TYPE_OK = """
    import numpy as np
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    def make_loader(path):
        arrays = np.load(path)
        inputs = torch.FloatTensor(arrays["x"])
        return DataLoader(TensorDataset(inputs), batch_size=64, shuffle=True, pin_memory=True)
"""


def test_mem304_legacy_cuda_tensor_type_of_the_data():
    assert_reported(MEM304_LEGACY_CUDA_TYPE_BUG, "MEM304")


def test_mem304_legacy_cpu_tensor_type_is_silent():
    assert_silent(MEM304_LEGACY_CUDA_TYPE_OK, "MEM304")


def test_legacy_cuda_tensor_type_makes_a_device_tensor():
    module, semantic = _semantic("""
        import torch
        ids = torch.cuda.LongTensor([[1, 2], [3, 4]])
        cpu = torch.LongTensor([[1, 2], [3, 4]])
    """)
    value = semantic.value(_call_on(module, 3))
    assert value.kind is Kind.TENSOR and value.device is Tri.YES
    assert semantic.value(_call_on(module, 4)).device is Tri.NO


# -- MEM304 (bug_281): a tensor that a Dataset's `__init__` makes on the GPU with a
# factory (`torch.randn(..., device=...)`) is the data when `__getitem__` hands it
# out (or an element of it); a buffer made there that is not handed out stays
# silent, as before.  bug_281 returns the whole tensor with a random label; here a
# dataset that indexes a `torch.rand` tensor placed with `.to(device)`.

MEM304_SERVED_FACTORY_BUG = """
    import torch
    from torch.utils.data import Dataset

    class NoiseImages(Dataset):
        def __init__(self, n, device="cuda"):
            self.images = torch.rand(n, 3, 64, 64).to(device)  # expect: MEM304
            self.scale = torch.ones(3, device=device)

        def __len__(self):
            return self.images.shape[0]

        def __getitem__(self, i):
            return self.images[i] * 2 - 1, 0
"""

MEM304_SERVED_FACTORY_OK = MEM304_SERVED_FACTORY_BUG.replace(
    "self.images = torch.rand(n, 3, 64, 64).to(device)  # expect: MEM304", "self.images = torch.rand(n, 3, 64, 64)")


def test_mem304_factory_tensor_handed_out_by_getitem():
    assert_reported(MEM304_SERVED_FACTORY_BUG, "MEM304")


def test_mem304_cpu_factory_tensor_and_unserved_device_buffer_are_silent():
    assert_silent(MEM304_SERVED_FACTORY_OK, "MEM304")


# -- MEM107 (bug_274): pytorch-pfn-extras' `reporting.report` keeps what it is
# given in the iteration's observation (detached since v0.3.0, a clone with its
# graph before: pfnet/pytorch-pfn-extras#49; the rule's DETACHING_MODULE_LOGGERS),
# reported as info.  bug_274 calls `ppe.reporting.report` inside
# `manager.run_iteration()`; here `from pytorch_pfn_extras import reporting` in a
# plain step function with an observer argument.

MEM107_PPE_REPORT_BUG = """
    import torch.nn.functional as F
    from pytorch_pfn_extras import reporting

    def train_epoch(model, optimizer, loader):
        model.cuda().train()
        for x, t in loader:
            optimizer.zero_grad()
            nll = F.cross_entropy(model(x.cuda()), t.cuda())
            reporting.report({"nll": nll}, model)  # expect: MEM107
            nll.backward()
            optimizer.step()
"""

MEM107_PPE_REPORT_OK = MEM107_PPE_REPORT_BUG.replace(
    'reporting.report({"nll": nll}, model)  # expect: MEM107', 'reporting.report({"nll": nll.detach()}, model)')


def test_mem107_attached_loss_reported_to_ppe():
    assert_reported(MEM107_PPE_REPORT_BUG, "MEM107")


def test_mem107_detached_loss_reported_to_ppe_is_silent():
    assert_silent(MEM107_PPE_REPORT_OK, "MEM107")


# -- MEM303 (bug_279): a method of an HF Trainer or TrainerCallback subclass runs
# with the trainer's model on the accelerator (frameworks.DEVICE_PLACED_ROLES), so
# a checkpoint it loads holds device tensors even when the file names no GPU.
# bug_279 is a callback's `on_train_end`; here a Trainer subclass restoring an
# extra head, with `torch` imported under another name.

MEM303_TRAINER_METHOD_BUG = """
    import os
    import torch as pt
    from transformers import Trainer

    class HeadTrainer(Trainer):
        def restore_head(self, folder):
            weights = pt.load(os.path.join(folder, "head.bin"))  # expect: MEM303
            self.model.head.load_state_dict(weights)
"""

MEM303_TRAINER_METHOD_OK = MEM303_TRAINER_METHOD_BUG.replace(
    'pt.load(os.path.join(folder, "head.bin"))  # expect: MEM303', 'pt.load(os.path.join(folder, "head.bin"), map_location="cpu")')

MEM303_PLAIN_CLASS_OK = MEM303_TRAINER_METHOD_BUG.replace("from transformers import Trainer", "from mylib import Trainer").replace(
    "  # expect: MEM303", "")


def test_mem303_load_in_a_trainer_method():
    assert_reported(MEM303_TRAINER_METHOD_BUG, "MEM303")


def test_mem303_trainer_method_with_map_location_is_silent():
    assert_silent(MEM303_TRAINER_METHOD_OK, "MEM303")


def test_mem303_same_method_of_a_class_of_another_library_is_silent():
    assert_silent(MEM303_PLAIN_CLASS_OK, "MEM303")


# -- MEM403 (bug_286): a loop over a few plots in a function that runs again and
# again (a Lightning per-epoch hook, a function called from a step loop) adds
# that many open figures per run of the function.  bug_286 loops over the worst
# queries in `on_validation_epoch_end` and hands the figure to
# `add_figure(..., close=False)`; here a helper called per epoch from a plain
# loop, one `plt.figure()` per class.

MEM403_FEW_PLOTS_PER_EPOCH_BUG = """
    import matplotlib.pyplot as plt

    def plot_per_class(history, classes, epoch):
        for c in classes:
            fig = plt.figure(figsize=(4, 3))  # expect: MEM403
            plt.plot(history[c])
            fig.savefig(f"curves/{c}_{epoch}.png")

    def fit(model, loader, optimizer, classes, epochs):
        history = {c: [] for c in classes}
        for epoch in range(epochs):
            for x, y in loader:
                optimizer.zero_grad()
                model(x.cuda()).sum().backward()
                optimizer.step()
            plot_per_class(history, classes, epoch)
"""

MEM403_FEW_PLOTS_PER_EPOCH_OK = MEM403_FEW_PLOTS_PER_EPOCH_BUG.replace(
    "  # expect: MEM403", "").replace('fig.savefig(f"curves/{c}_{epoch}.png")\n',
                                      'fig.savefig(f"curves/{c}_{epoch}.png")\n            plt.close(fig)\n')


def test_mem403_few_plots_in_a_function_called_per_epoch():
    assert_reported(MEM403_FEW_PLOTS_PER_EPOCH_BUG, "MEM403")


def test_mem403_few_plots_closed_per_epoch_are_silent():
    assert_silent(MEM403_FEW_PLOTS_PER_EPOCH_OK, "MEM403")


# -- MEM403 (bug_287): a TensorFlow custom training loop (its body takes gradients
# with a `tf.GradientTape`) repeats with the run.  bug_287 calls a module-level
# helper every N steps; here the figure is made in the loop itself, a
# `for` over an iterator of a parameter.

MEM403_TAPE_LOOP_BUG = """
    import tensorflow as tf
    from matplotlib import pyplot

    def train(model, opt, batches, writer):
        it = iter(batches)
        step = 0
        for x, y in it:
            with tf.GradientTape() as g:
                err = tf.reduce_mean(tf.square(model(x) - y))
            opt.apply_gradients(zip(g.gradient(err, model.trainable_variables), model.trainable_variables))
            step += 1
            fig, ax = pyplot.subplots()  # expect: MEM403
            ax.hist(model(x).numpy().ravel())
            fig.savefig(f"hist_{step}.png")
"""

MEM403_TAPE_LOOP_OK = MEM403_TAPE_LOOP_BUG.replace("  # expect: MEM403", "").replace(
    'fig.savefig(f"hist_{step}.png")\n', 'fig.savefig(f"hist_{step}.png")\n            pyplot.close(fig)\n')


def test_mem403_figure_per_step_of_a_gradient_tape_loop():
    assert_reported(MEM403_TAPE_LOOP_BUG, "MEM403")


def test_mem403_figure_closed_per_step_of_a_gradient_tape_loop_is_silent():
    assert_silent(MEM403_TAPE_LOOP_OK, "MEM403")


# -- MEM502 (bug_288): `hyperopt.fmin(fn, space, ...)` calls its objective once per
# trial (frameworks.REPEATING_DRIVER_FUNCTIONS), like optuna's `study.optimize`.
# bug_288 passes the objective positionally to a bare `fmin`; here `hyperopt` is
# imported as a module and the objective is given as `fn=`, building a functional
# Keras model.

MEM502_HYPEROPT_BUG = """
    import hyperopt
    import tensorflow as tf

    def trial(cfg):
        inputs = tf.keras.Input(shape=(32,))
        hidden = tf.keras.layers.Dense(cfg["units"], activation="relu")(inputs)
        net = tf.keras.Model(inputs, tf.keras.layers.Dense(1)(hidden))  # expect: MEM502
        net.compile(optimizer="adam", loss="mse")
        history = net.fit(features, targets, epochs=2, verbose=0)
        return history.history["loss"][-1]

    hyperopt.fmin(fn=trial, space={"units": hyperopt.hp.choice("units", [32, 64])},
                  algo=hyperopt.tpe.suggest, max_evals=50)
"""

MEM502_HYPEROPT_OK = MEM502_HYPEROPT_BUG.replace("  # expect: MEM502", "").replace(
    '    def trial(cfg):\n', '    def trial(cfg):\n        tf.keras.backend.clear_session()\n')


def test_mem502_model_built_in_a_hyperopt_objective():
    assert_reported(MEM502_HYPEROPT_BUG, "MEM502")


def test_mem502_hyperopt_objective_clearing_the_session_is_silent():
    assert_silent(MEM502_HYPEROPT_OK, "MEM502")


# -- MEM101 (bug_261): `x.train(arg)` with a dict, list or tuple (by its value, or a
# name last bound to such a display) is no `nn.Module.train(mode: bool)`: it is
# the `train` method of the one class of the file that defines it, and what that
# returns is what is summed.  bug_261 passes a dict comprehension bound to a name
# inside `while True`; here a `for` loop passing a tuple display and
# `total = total + ...`.

MEM101_TRAIN_METHOD_BUG = """
    import torch

    class Agent:
        def __init__(self, net):
            self.net = net.cuda()
            self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01)

        def train(self, pair):
            x, y = pair
            self.opt.zero_grad()
            self.err = torch.nn.functional.mse_loss(self.net(x.cuda()), y.cuda())
            self.err.backward()
            self.opt.step()
            return self.err

    def fit(agent, loader):
        total = 0.0
        for x, y in loader:
            total = total + agent.train((x, y))  # expect: MEM101
        return total
"""

MEM101_TRAIN_METHOD_OK = MEM101_TRAIN_METHOD_BUG.replace("            return self.err\n", "            return self.err.item()\n").replace(
    "  # expect: MEM101", "")


def test_mem101_total_of_an_in_file_train_method_given_a_tuple():
    assert_reported(MEM101_TRAIN_METHOD_BUG, "MEM101")


def test_mem101_in_file_train_method_returning_a_number_is_silent():
    assert_silent(MEM101_TRAIN_METHOD_OK, "MEM101")


def test_train_with_a_flag_is_still_a_module_mode_switch():
    module, semantic = _semantic("""
        class Agent:
            def train(self, pair):
                return pair
        def run(net, flag, x):
            net.train(flag)
            return net(x)
    """)
    run = next(n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "run")
    assert semantic.value(run.body[1].value.func).kind is Kind.MODULE


# -- MEM101 (bug_263): a callable whose output is given to a function of the file
# for a parameter that function backpropagates through (`loss = crit(out, y);
# loss.backward()`) is a differentiable module, also when it is a parameter the
# file never calls a module method on.  bug_263 sums the tensor half of a tuple
# its helper returns; here the helper's second result is a confidence computed
# from the output, bound by keyword and summed with `total = total + ...`.

MEM101_BACKPROPAGATED_BY_HELPER_BUG = """
    import torch.nn.functional as F

    def update(optim, logits=None, labels=None):
        err = F.cross_entropy(logits, labels)
        optim.zero_grad()
        err.backward()
        optim.step()
        return err.item(), logits.softmax(-1).amax(-1).mean()

    def run_epoch(net, batches, optim):
        seen, confidence = 0.0, 0.0
        for inputs, labels in batches:
            logits = net(inputs.cuda())
            err, conf = update(optim, logits=logits, labels=labels.cuda())
            seen = seen + err
            confidence = confidence + conf  # expect: MEM101
        return seen, confidence
"""

MEM101_BACKPROPAGATED_BY_HELPER_OK = MEM101_BACKPROPAGATED_BY_HELPER_BUG.replace(
    "logits.softmax(-1).amax(-1).mean()", "logits.softmax(-1).amax(-1).mean().item()").replace("  # expect: MEM101", "")


def test_mem101_total_of_what_a_helper_computes_from_an_output_it_backpropagates():
    assert_reported(MEM101_BACKPROPAGATED_BY_HELPER_BUG, "MEM101")


def test_mem101_helper_returning_numbers_is_silent():
    assert_silent(MEM101_BACKPROPAGATED_BY_HELPER_OK, "MEM101")


# -- MEM104 (bug_269): a model method of another library given `**inputs` (the
# entries of a batch moved to the device) runs the model's layers, as it does
# when the batch is passed by position or keyword.  bug_269 is a wrapper method
# after `self.model.eval()` with `**inputs` from a processor's `.to(device)`;
# here a function (not named for evaluation) embedding a stream of batches, whose
# inputs are a dict comprehension of moved tensors.

MEM104_SPREAD_INPUTS_BUG = """
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader

    def embed_corpus(encoder, tokenizer, corpus):
        encoder.cuda().eval()
        rows = []
        for texts in DataLoader(corpus, batch_size=64):
            tokens = {k: v.cuda() for k, v in tokenizer(texts, return_tensors="pt").items()}
            pooled = encoder.encode_text(**tokens)  # expect: MEM104
            rows.append(F.normalize(pooled, dim=-1).cpu())
        return torch.cat(rows)
"""

MEM104_SPREAD_INPUTS_OK = MEM104_SPREAD_INPUTS_BUG.replace(
    "            pooled = encoder.encode_text(**tokens)  # expect: MEM104\n",
    "            with torch.no_grad():\n                pooled = encoder.encode_text(**tokens)\n")


def test_mem104_model_method_given_spread_inputs_after_eval():
    assert_reported(MEM104_SPREAD_INPUTS_BUG, "MEM104")


def test_mem104_model_method_given_spread_inputs_under_no_grad_is_silent():
    assert_silent(MEM104_SPREAD_INPUTS_OK, "MEM104")


# -- MEM105 (bug_271): a module method that is neither its forward pass (nor a
# method the forward calls), nor a framework hook, nor a training step (a
# `sample`/`rollout` run after training) is checked like any other code: state it
# feeds its recurrent layer step after step keeps every step's graph.  bug_271 is
# `DecoderRNN.sample` feeding `self.lstm` its `states` parameter; here a GRU cell
# rolled out from a latent, next to a forward whose own unroll stays silent.

MEM105_MODULE_ROLLOUT_BUG = """
    import torch
    from torch import nn

    class Dreamer(nn.Module):
        def __init__(self, size=128, vocab=64):
            super().__init__()
            self.cell = nn.GRUCell(size, size)
            self.read = nn.Embedding(vocab, size)
            self.head = nn.Linear(size, vocab)

        def forward(self, tokens, h):
            for t in range(tokens.size(1)):
                h = self.cell(self.read(tokens[:, t]), h)
            return self.head(h)

        def rollout(self, h, steps=500):
            token = self.head(h).argmax(-1)
            dreamed = []
            for _ in range(steps):
                h = self.cell(self.read(token), h)  # expect: MEM105
                token = self.head(h).argmax(-1)
                dreamed.append(token)
            return torch.stack(dreamed, 1)
"""

MEM105_MODULE_ROLLOUT_OK = MEM105_MODULE_ROLLOUT_BUG.replace("  # expect: MEM105", "").replace(
    "        def rollout(self, h, steps=500):\n", "        @torch.no_grad()\n        def rollout(self, h, steps=500):\n")


def test_mem105_state_fed_back_in_a_module_rollout_method():
    assert_reported(MEM105_MODULE_ROLLOUT_BUG, "MEM105")


def test_mem105_rollout_under_no_grad_and_the_forward_unroll_are_silent():
    assert_silent(MEM105_MODULE_ROLLOUT_OK, "MEM105")
