"""Misses of the eighth, held-out recall family (fixtures/recall bug_210..bug_233:
bug_215 MEM103, bug_228 MEM401), each fixed by what the values are, and
checked on code of another style than the reproducer's: every buggy
snippet is reported on its marked lines, and a correct look-alike gets no
finding of that code.

The snippets are new code written for these tests."""

from __future__ import annotations

import ast
import textwrap

from memlint.lint.context import FileContext
from memlint.lint.semantic.values import Tri

from .test_recall_styles import assert_reported, assert_silent


def _semantic(source: str):
    source = textwrap.dedent(source)
    module = ast.parse(source)
    return module, FileContext("snippet.py", source, module).semantic


# -- MEM103 (bug_215): a method of a model from another file given the data by
# keyword (`model.sample(cond=batch)`) runs the model's layers as a positional
# call does; and a loader that an engine prepares yields batches on the device
# even when the file does not say it is a loader (a parameter).  bug_215 is an
# Accelerate function under `inference_mode`; here a Fabric evaluator class
# whose method is decorated `@torch.no_grad()`, storing by key into a dict.

MEM103_KEYWORD_METHOD_BUG = """
    import torch
    from lightning.fabric import Fabric

    class Reconstructor:
        def __init__(self, fabric: Fabric):
            self.fabric = fabric

        @torch.no_grad()
        def reconstruct_all(self, autoencoder, images):
            autoencoder = self.fabric.setup(autoencoder)
            images = self.fabric.setup_dataloaders(images)
            autoencoder.eval()
            recon = {}
            for step, pixels in enumerate(images):
                recon[step] = autoencoder.decode_latents(latents=pixels, scale=0.18)  # expect: MEM103
            return recon
"""

MEM103_KEYWORD_METHOD_OK = """
    import torch
    from lightning.fabric import Fabric

    class Reconstructor:
        def __init__(self, fabric: Fabric):
            self.fabric = fabric

        @torch.no_grad()
        def reconstruct_all(self, autoencoder, images):
            autoencoder = self.fabric.setup(autoencoder)
            images = self.fabric.setup_dataloaders(images)
            autoencoder.eval()
            recon = {}
            for step, pixels in enumerate(images):
                recon[step] = autoencoder.decode_latents(latents=pixels, scale=0.18).cpu()
            return recon
"""


def test_mem103_keyword_call_of_a_model_method_on_prepared_batches():
    assert_reported(MEM103_KEYWORD_METHOD_BUG, "MEM103")


def test_mem103_results_moved_to_the_host_are_silent():
    assert_silent(MEM103_KEYWORD_METHOD_OK, "MEM103")


def test_a_keyword_call_of_a_model_method_is_a_forward_pass():
    module, semantic = _semantic("""
        import torch.nn as nn
        def run(model: nn.Module, batch):
            model = model.cuda()
            x = batch.cuda()
            a = model.embed_text(tokens=x)
            b = model.embed_text(x)
            c = model.embed_text(tokens=None, scale=2)
    """)
    calls = {c.lineno: c for c in ast.walk(module) if isinstance(c, ast.Call) and getattr(c.func, "attr", "") == "embed_text"}
    assert semantic.is_forward_call(calls[6]) and semantic.is_forward_call(calls[7])
    assert not semantic.is_forward_call(calls[8])  # no data handed over: a configuration call


def test_prepared_parameter_yields_device_batches():
    module, semantic = _semantic("""
        from accelerate import Accelerator
        def run(model, loader):
            accelerator = Accelerator()
            model, loader = accelerator.prepare(model, loader)
            for batch in loader:
                pass
    """)
    batch = next(n for n in ast.walk(module) if isinstance(n, ast.Name) and n.id == "batch")
    assert semantic.value(batch).device is Tri.YES


def test_unprepared_parameter_yields_batches_of_unknown_device():
    module, semantic = _semantic("""
        from accelerate import Accelerator
        def run(model, loader):
            accelerator = Accelerator()
            model = accelerator.prepare(model)
            for batch in loader:
                pass
    """)
    batch = next(n for n in ast.walk(module) if isinstance(n, ast.Name) and n.id == "batch")
    assert semantic.value(batch).device is not Tri.YES


# -- MEM401 (bug_228): a periodic condition that also runs the optimizer step is
# the gradient-accumulation boundary: a flush under it runs once per training
# step.  bug_228 is an engine method with `if (i + 1) % self.grad_accum == 0:`;
# here a module-level `while` loop over an iterator, the boundary counted with
# a step counter and the flush through `import torch.cuda as tc` in the
# `else` branch, which runs on every other micro-batch.

MEM401_ACCUMULATION_BUG = """
    import torch
    import torch.cuda as tc

    model = torch.nn.Linear(512, 512).cuda()
    opt = torch.optim.AdamW(model.parameters())
    ACCUM = 8
    it = iter(batches)
    micro = 0
    while True:
        x = next(it, None)
        if x is None:
            break
        (model(x.cuda()).pow(2).mean() / ACCUM).backward()
        micro += 1
        if micro % ACCUM == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            tc.empty_cache()  # expect: MEM401
        else:
            tc.empty_cache()  # expect: MEM401
"""

MEM401_ACCUMULATION_OK = """
    import torch
    import torch.cuda as tc

    model = torch.nn.Linear(512, 512).cuda()
    opt = torch.optim.AdamW(model.parameters())
    ACCUM = 8
    it = iter(batches)
    micro = 0
    while True:
        x = next(it, None)
        if x is None:
            break
        (model(x.cuda()).pow(2).mean() / ACCUM).backward()
        micro += 1
        if micro % ACCUM == 0:
            opt.step()
            opt.zero_grad(set_to_none=True)
        if micro % 10_000 == 0:
            tc.empty_cache()
    tc.empty_cache()
"""


def test_mem401_flush_at_the_accumulation_boundary():
    assert_reported(MEM401_ACCUMULATION_BUG, "MEM401")


def test_mem401_occasional_flush_apart_from_the_step_is_silent():
    assert_silent(MEM401_ACCUMULATION_OK, "MEM401")
