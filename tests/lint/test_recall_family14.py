"""Misses of the fourteenth, held-out recall family (fixtures/recall
bug_361..bug_385, ok_97..ok_102), each fixed by what the values are, and
checked on code of another style than the recall case: every buggy snippet
is reported on its marked lines, and a correct look-alike gets no finding of
that code.

The snippets are new code written for these tests."""

from __future__ import annotations

from .test_recall_styles import assert_reported, assert_silent

# -- MEM104 + MEM102 misses (bug_372): a module's own method, outside its
# forward pass, that switches the module to evaluation mode (``self.eval()``)
# and runs it over the data in a loop of its own drives the module as an
# evaluation function of the file would. bug_372 is an ``nn.Sequential``
# subclass calling ``self.forward(features)[...]`` over index slices and
# ``extend``-ing a list; here an ``nn.Module`` subclass calls itself on each
# batch of a loader and appends.

SELF_EVAL_BUG = """
    import torch
    from torch import nn

    class Retriever(nn.Module):
        def __init__(self, dim=128):
            super().__init__()
            self.proj = nn.Linear(dim, dim)

        def forward(self, x):
            return self.proj(x).tanh()

        def index_corpus(self, loader):
            self.eval()
            bank = []
            for batch in loader:
                z = self(batch["x"].cuda())  # expect: MEM104
                bank.append(z)  # expect: MEM102
            return torch.cat(bank)
"""

SELF_EVAL_OK = """
    import torch
    from torch import nn

    class Retriever(nn.Module):
        def __init__(self, dim=128):
            super().__init__()
            self.proj = nn.Linear(dim, dim)

        def forward(self, x):
            return self.proj(x).tanh()

        @torch.inference_mode()
        def index_corpus(self, loader):
            self.eval()
            bank = []
            for batch in loader:
                z = self(batch["x"].cuda())
                bank.append(z)
            return torch.cat(bank)

        def embed_one(self, x):
            self.eval()
            return self(x)
"""

# A module's method outside its forward pass whose loop calls each of its
# items (the layers of one pass, as timm's ``forward_intermediates``, found
# on the judged corpus) keeps one pass's features: no run over data, also
# when the model cannot tell what the stages are (built in another file).
LAYER_WALK_OK = """
    import torch
    from torch import nn

    from .blocks import make_stages


    class Tap(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.norm = nn.LayerNorm(dim)

        def forward(self, x, index):
            return self.norm(x.mean((2, 3))) * (index + 1)


    class Tower(nn.Module):
        def __init__(self, depth=4):
            super().__init__()
            self.stem = nn.Conv2d(3, 8, 3, padding=1)
            self.stages = make_stages(depth)
            self.tap = Tap(8)
            self.taps = {1, 3}

        def forward(self, x):
            x = self.stem(x)
            for stage in self.stages:
                x = stage(x)
            return x

        def features(self, x, keep):
            x = self.stem(x)
            outs = []
            for i, stage in enumerate(self.stages[:keep]):
                x = stage(x)
                if i in self.taps:
                    outs.append(self.tap(x, i))
            return outs
"""


def test_mem104_module_method_evaluating_itself_over_a_loader():
    assert_reported(SELF_EVAL_BUG, "MEM104")


def test_mem102_module_method_collecting_its_own_outputs():
    assert_reported(SELF_EVAL_BUG, "MEM102")


def test_mem104_module_method_under_inference_mode_or_single_forward_is_silent():
    assert_silent(SELF_EVAL_OK, "MEM104")
    assert_silent(SELF_EVAL_OK, "MEM102")


def test_mem102_module_method_walking_its_layers_is_silent():
    assert_silent(LAYER_WALK_OK, "MEM102")
    assert_silent(LAYER_WALK_OK, "MEM103")


# -- MEM304 miss (bug_374 x2): a ``@dataclass``'s ``__post_init__`` runs at
# construction (CPython 3.11.7 Lib/dataclasses.py), and an attribute it moves
# to the device is the dataset when a function of the file reads it batch by
# batch in its training loop through an instance of the class. bug_374 uses
# ``@dataclass`` with ``.float()``/``.bool()`` casts and ``.to(self.device)``;
# here ``@dataclasses.dataclass(...)`` with ``torch.as_tensor(...).cuda()``
# indexed by random indices in a loop of a script function.

POST_INIT_BUG = """
    import dataclasses

    import numpy as np
    import torch

    @dataclasses.dataclass(frozen=False)
    class FrameBank:
        path: str

        def __post_init__(self):
            frames = np.load(self.path)
            self.frames = torch.as_tensor(frames).cuda()  # expect: MEM304
            self.labels = torch.as_tensor(np.load(self.path + ".labels.npy")).byte().cuda()  # expect: MEM304

    def fit(model, bank: FrameBank, opt, steps=1000):
        for step in range(steps):
            idx = torch.randint(0, len(bank.frames), (16,))
            loss = torch.nn.functional.cross_entropy(model(bank.frames[idx]), bank.labels[idx].long())
            opt.zero_grad()
            loss.backward()
            opt.step()
"""

POST_INIT_OK = """
    import dataclasses

    import numpy as np
    import torch

    @dataclasses.dataclass(frozen=False)
    class FrameBank:
        path: str

        def __post_init__(self):
            frames = np.load(self.path)
            self.frames = torch.as_tensor(frames).pin_memory()
            self.mean = torch.tensor([0.485, 0.456, 0.406]).cuda()

    def fit(model, bank: FrameBank, opt, steps=1000):
        for step in range(steps):
            idx = torch.randint(0, len(bank.frames), (16,))
            x = bank.frames[idx].cuda(non_blocking=True) - bank.mean[step % 3]
            loss = model(x).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
"""


def test_mem304_dataclass_post_init_moves_data_read_in_batches():
    assert_reported(POST_INIT_BUG, "MEM304")


def test_mem304_dataclass_keeping_pinned_data_is_silent():
    assert_silent(POST_INIT_OK, "MEM304")


# -- MEM403 miss (bug_382): a loop that loads a file named by its item each
# iteration (``nib.load(func_file)``; frameworks.FILE_READERS) walks the files
# on disk: one figure per file grows with the data. bug_382 nests a session
# loop with ``plt.figure`` + ``plt.savefig``; here one loop over sorted
# paths opens each image with PIL and saves a ``plt.subplots`` figure.

FILE_LOOP_BUG = """
    import matplotlib.pyplot as plt
    from PIL import Image

    def contact_sheets(paths, out_dir):
        for k, path in enumerate(sorted(paths)):
            img = Image.open(path)
            fig, ax = plt.subplots(figsize=(4, 4))  # expect: MEM403
            ax.imshow(img)
            ax.set_axis_off()
            fig.savefig(f"{out_dir}/{k:04d}.png")
"""

FILE_LOOP_OK = """
    import matplotlib.pyplot as plt
    from PIL import Image

    def contact_sheets(paths, out_dir):
        for k, path in enumerate(sorted(paths)):
            img = Image.open(path)
            fig, ax = plt.subplots(figsize=(4, 4))
            ax.imshow(img)
            fig.savefig(f"{out_dir}/{k:04d}.png")
            plt.close(fig)

    def two_panels(out_dir):
        for name in ("left.png", "right.png"):
            img = Image.open(name)
            plt.figure()
            plt.imshow(img)
            plt.savefig(f"{out_dir}/{name}")
"""


def test_mem403_figure_per_file_read_in_the_loop():
    assert_reported(FILE_LOOP_BUG, "MEM403")


def test_mem403_closed_figure_or_literal_file_list_is_silent():
    assert_silent(FILE_LOOP_OK, "MEM403")


# -- MEM401 miss (bug_383): a ``for`` whose own variable the body never reads
# (``for _ in range(n)``) is a counter; under no_grad, each iteration draws
# its batch by a call and binds the result of a call given it: one inference
# step per iteration. bug_383 is a ``@torch.no_grad()`` function with
# ``del cache`` before the flush; here an ``@torch.inference_mode()`` method
# of a scorer class.

COUNTER_BUG = """
    import torch

    class Scorer:
        def __init__(self, engine):
            self.engine = engine

        @torch.inference_mode()
        def score(self, sampler, steps):
            total = 0.0
            for _ in range(steps):
                batch = sampler.draw()
                logits = self.engine.run(batch)
                total += logits.float().mean().item()
                torch.cuda.empty_cache()  # expect: MEM401
            return total / steps
"""

COUNTER_OK = """
    import gc

    import torch

    class Scorer:
        def __init__(self, engine):
            self.engine = engine

        @torch.inference_mode()
        def score(self, sampler, steps):
            total = 0.0
            for _ in range(steps):
                batch = sampler.draw()
                logits = self.engine.run(batch)
                total += logits.float().mean().item()
            torch.cuda.empty_cache()
            return total / steps

        @torch.inference_mode()
        def release(self, rounds):
            for _ in range(rounds):
                gc.collect()
                torch.cuda.empty_cache()
"""


def test_mem401_flush_per_counted_inference_step():
    assert_reported(COUNTER_BUG, "MEM401")


def test_mem401_flush_after_the_loop_or_without_work_is_silent():
    assert_silent(COUNTER_OK, "MEM401")


# -- MEM106 miss (bug_384): ``retain_graph=True`` on the last backward of a
# function that builds its graph and that a loop of the file runs once per
# batch: each call is one iteration. bug_384 is a trainer method called from
# ``fit``'s batch loop; here a module-level step function driven by a
# ``while`` loop over ``next(it)``.

STEP_BUG = """
    import torch.nn.functional as F

    def step(model, opt, x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward(retain_graph=True)  # expect: MEM106
        opt.step()
        return loss.item()

    def run(model, opt, loader):
        it = iter(loader)
        while True:
            try:
                x, y = next(it)
            except StopIteration:
                break
            step(model, opt, x, y)
"""

STEP_OK = """
    import torch
    import torch.nn.functional as F

    def step(model, opt, x, y, aux_weight=0.1):
        opt.zero_grad()
        out = model(x)
        loss = F.cross_entropy(out, y)
        loss.backward(retain_graph=True)
        (out.pow(2).mean() * aux_weight).backward()
        opt.step()
        return loss.item()

    def gradient_penalty(critic, real, fake):
        alpha = torch.rand(real.size(0), 1, device=real.device)
        mixed = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
        score = critic(mixed)
        grads = torch.autograd.grad(score.sum(), mixed, create_graph=True, retain_graph=True)[0]
        return ((grads.norm(2, dim=1) - 1) ** 2).mean()

    def critic_steps(critic, opt, pairs):
        for real, fake in pairs:
            opt.zero_grad()
            loss = critic(fake).mean() - critic(real).mean() + 10 * gradient_penalty(critic, real, fake)
            loss.backward()
            opt.step()

    def warm_up(model, x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward(retain_graph=True)
        return loss

    def run(model, opt, loader, x0, y0):
        warm_up(model, x0, y0)
        it = iter(loader)
        while True:
            try:
                x, y = next(it)
            except StopIteration:
                break
            step(model, opt, x, y)
"""


def test_mem106_retaining_backward_ending_a_per_batch_function():
    assert_reported(STEP_BUG, "MEM106")


def test_mem106_second_backward_or_single_call_is_silent():
    assert_silent(STEP_OK, "MEM106")
