"""Misses of the ninth, held-out recall family (fixtures/recall bug_234..bug_259:
bug_234 MEM101, bug_237 MEM102, bug_243 MEM104, bug_249 MEM109, bug_257
MEM401), each fixed by what the values are, and checked on code of another
style than the reproducer's: every buggy snippet is reported on its marked
lines, and a correct look-alike gets no finding of that code.

The snippets are new code written for these tests."""

from __future__ import annotations

import ast
import textwrap

import pytest

from memlint.lint.context import FileContext
from memlint.lint.semantic import frameworks
from memlint.lint.semantic.values import Kind, Tri

from .test_recall_styles import assert_reported, assert_silent


def _semantic(source: str):
    source = textwrap.dedent(source)
    module = ast.parse(source)
    return module, FileContext("snippet.py", source, module).semantic


def _call_on(module: ast.AST, line: int) -> ast.Call:
    return min((n for n in ast.walk(module) if isinstance(n, ast.Call) and n.lineno == line), key=lambda n: n.col_offset)


# -- MEM101 (bug_234): a name bound once to what a function of the file returns,
# when that is a `def` of its body, is that function: calling the name runs it
# with the call's arguments.  bug_234 is a `fit` function whose closure has the
# name it is bound to; here a module-level script, a factory whose inner
# function has another name than the variable, and `total = total + ...`.

MEM101_FACTORY_BUG = """
    import torch
    from torch.utils.data import DataLoader

    def build_update(net, opt, lossf):
        def _apply(xb, yb):
            opt.zero_grad()
            err = lossf(net(xb.cuda()), yb.cuda())
            err.backward()
            opt.step()
            return err
        return _apply

    net = torch.nn.Linear(8, 1).cuda()
    train_one = build_update(net, torch.optim.SGD(net.parameters(), lr=0.1), torch.nn.MSELoss())
    for epoch in range(10):
        epoch_err = 0.0
        for xb, yb in DataLoader(dataset, batch_size=32):
            epoch_err = epoch_err + train_one(xb, yb)  # expect: MEM101
        print(epoch, epoch_err)
"""

MEM101_FACTORY_OK = MEM101_FACTORY_BUG.replace("            return err\n", "            return err.item()\n").replace(
    "  # expect: MEM101", "")


def test_mem101_total_of_what_a_factory_made_closure_returns():
    assert_reported(MEM101_FACTORY_BUG, "MEM101")


def test_mem101_closure_returning_a_number_is_silent():
    assert_silent(MEM101_FACTORY_OK, "MEM101")


def test_a_name_bound_to_a_factory_closure_is_that_closure():
    module, semantic = _semantic("""
        import torch
        def make(model):
            def run(x):
                return model(x)
            return run
        model = torch.nn.Linear(2, 2)
        go = make(model)
        y = go(torch.ones(2))
        keep = make
    """)
    assert semantic.value(_call_on(module, 9)).graph is Tri.YES
    inner = next(n for n in ast.walk(module) if isinstance(n, ast.FunctionDef) and n.name == "run")
    assert semantic.callee(_call_on(module, 9)) is inner


# -- MEM102 (bug_237): a transformers model called with `return_dict=False`
# returns a plain tuple of tensors (transformers `can_return_tuple`), so what is
# unpacked or indexed out of it is a tensor with the forward's graph.  bug_237
# is notebook-like module-level code that keeps a slice of the first output;
# here a function that keeps the pooled output in a dict by position.

MEM102_TUPLE_OUTPUT_BUG = """
    from transformers import BertModel

    def embed_corpus(batches):
        encoder = BertModel.from_pretrained("bert-base-uncased").to("cuda")
        encoder.eval()
        bank = {}
        for i, (ids, mask) in enumerate(batches):
            _, pooled = encoder(input_ids=ids.cuda(), attention_mask=mask.cuda(), return_dict=False)
            bank[i] = pooled  # expect: MEM102
        return bank
"""

MEM102_TUPLE_OUTPUT_OK = MEM102_TUPLE_OUTPUT_BUG.replace("bank[i] = pooled  # expect: MEM102", "bank[i] = pooled.detach().cpu()")


def test_mem102_tensor_out_of_a_tuple_returning_transformers_forward():
    assert_reported(MEM102_TUPLE_OUTPUT_BUG, "MEM102")


def test_mem102_detached_host_copy_out_of_the_tuple_is_silent():
    assert_silent(MEM102_TUPLE_OUTPUT_OK, "MEM102")


def test_return_dict_false_gives_a_tuple_of_attached_tensors():
    module, semantic = _semantic("""
        from transformers import AutoModel
        m = AutoModel.from_pretrained("x")
        a = m(ids, return_dict=False)
        b = m(ids)
    """)
    tupled, output = semantic.value(_call_on(module, 4)), semantic.value(_call_on(module, 5))
    assert tupled.type_name != output.type_name == "transformers.ModelOutput"
    assert tupled.element is not None and tupled.element.kind is Kind.TENSOR and tupled.element.graph is Tri.YES


# -- MEM104 (bug_243): a method of a module of the file other than `forward`
# (`model.inference(a, b)`) runs the module's layers; called in an evaluation
# context with autograd on, its call is reported there, as a helper function's
# would be.  bug_243 is a module-level driver after `model.eval()`; here a
# function that builds a NeRF-like model, switches it to eval and renders a
# view per pose.

MEM104_MODULE_METHOD_BUG = """
    import torch
    import torch.nn as nn

    class Field(nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = nn.Sequential(nn.Linear(63, 256), nn.ReLU(), nn.Linear(256, 4))

        def render_view(self, rays):
            rgba = self.mlp(rays)
            return torch.sigmoid(rgba[..., :3])

    def render_path(ckpt, poses, out_dir):
        field = Field().to("cuda")
        field.load_state_dict(torch.load(ckpt, map_location="cpu"))
        field.eval()
        for k, rays in enumerate(poses):
            image = field.render_view(rays.cuda())  # expect: MEM104
            torch.save(image.cpu(), f"{out_dir}/{k}.pt")
"""

MEM104_MODULE_METHOD_OK = MEM104_MODULE_METHOD_BUG.replace(
    "        field.eval()\n        for k, rays in enumerate(poses):\n            image = field.render_view(rays.cuda())  # expect: MEM104\n            torch.save",
    "        field.eval()\n        with torch.no_grad():\n            for k, rays in enumerate(poses):\n                image = field.render_view(rays.cuda())\n                torch.save")

MEM104_MODULE_METHOD_TRAINED = """
    import torch
    import torch.nn as nn

    class Field(nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = nn.Linear(63, 4)

        def render_view(self, rays):
            return self.mlp(rays)

    def fit(batches):
        field = Field().to("cuda")
        opt = torch.optim.SGD(field.parameters(), lr=0.1)
        field.eval()
        for rays, target in batches:
            loss = (field.render_view(rays.cuda()) - target.cuda()).pow(2).mean()
            loss.backward()
            opt.step()
"""


def test_mem104_module_method_called_in_an_evaluation_loop():
    assert_reported(MEM104_MODULE_METHOD_BUG, "MEM104")


def test_mem104_module_method_under_no_grad_is_silent():
    assert "no_grad" in MEM104_MODULE_METHOD_OK
    assert_silent(MEM104_MODULE_METHOD_OK, "MEM104")


def test_mem104_module_method_whose_output_is_trained_on_is_silent():
    assert_silent(MEM104_MODULE_METHOD_TRAINED, "MEM104")


# -- MEM109 (bug_249): a hook bound to a name with `functools.partial` before it
# is registered is the partial's function; and `out[0] if ... else out` stores
# the activation either way.  bug_249 is an extractor class binding a method;
# here module-level functions, the partial of a plain function, and the
# conditional directly in the `append`.

MEM109_PARTIAL_BUG = """
    from collections import defaultdict
    from functools import partial
    import torch

    captured = defaultdict(list)

    def grab(tag, layer, args, out):
        captured[tag].append(out[0] if isinstance(out, tuple) else out)  # expect: MEM109

    net = torch.hub.load("pytorch/vision", "resnet18").cuda()
    for tag, layer in net.named_children():
        fn = partial(grab, tag)
        layer.register_forward_hook(fn)
"""

MEM109_PARTIAL_OK = MEM109_PARTIAL_BUG.replace(
    "captured[tag].append(out[0] if isinstance(out, tuple) else out)  # expect: MEM109",
    "captured[tag].append(out[0].detach().cpu() if isinstance(out, tuple) else out.detach().cpu())")

MEM109_ONE_BRANCH_DETACHED = MEM109_PARTIAL_BUG.replace(
    "captured[tag].append(out[0] if isinstance(out, tuple) else out)",
    "captured[tag].append(out[0].detach().cpu() if isinstance(out, tuple) else out)")


def test_mem109_partial_bound_to_a_name_and_a_conditional_activation():
    assert_reported(MEM109_PARTIAL_BUG, "MEM109")


def test_mem109_one_branch_moved_to_the_host_still_keeps_the_other():
    assert_reported(MEM109_ONE_BRANCH_DETACHED, "MEM109")


def test_mem109_both_branches_on_the_host_are_silent():
    assert_silent(MEM109_PARTIAL_OK, "MEM109")


# -- MEM401 (bug_257): a sentence-embedding model (sentence-transformers, and
# INSTRUCTOR, its subclass) is a torch module, and a loop that runs a module's
# inference method on each element (or on what its body derives from it) is a
# step loop, even when the method turns autograd off itself.  bug_257 is a
# module-level loop over parquet batches with INSTRUCTOR; here a function with
# an aliased SentenceTransformer over a chunk generator.

MEM401_ENCODER_BUG = """
    import torch
    from sentence_transformers import SentenceTransformer as ST

    def index(docs, chunks):
        st = ST("all-MiniLM-L6-v2")
        vectors = []
        for piece in chunks(docs, 512):
            texts = [d.strip() for d in piece]
            vectors.append(st.encode(texts, batch_size=128))
            torch.cuda.empty_cache()  # expect: MEM401
        return vectors
"""

MEM401_ENCODER_OK = MEM401_ENCODER_BUG.replace(
    "            torch.cuda.empty_cache()  # expect: MEM401\n        return vectors",
    "        torch.cuda.empty_cache()\n        return vectors")

MEM401_NOT_A_MODULE = MEM401_ENCODER_BUG.replace(
    "from sentence_transformers import SentenceTransformer as ST", "from mytools import Tokenizer as ST").replace(
    "  # expect: MEM401", "")


def test_mem401_flush_per_element_of_an_encoding_loop():
    assert_reported(MEM401_ENCODER_BUG, "MEM401")


def test_mem401_flush_once_after_the_encoding_loop_is_silent():
    assert_silent(MEM401_ENCODER_OK, "MEM401")


def test_mem401_encode_of_an_object_not_known_as_a_module_is_silent():
    assert_silent(MEM401_NOT_A_MODULE, "MEM401")


def test_sentence_encoder_is_a_module_whose_encode_keeps_no_graph():
    module, semantic = _semantic("""
        from InstructorEmbedding import INSTRUCTOR
        m = INSTRUCTOR("hkunlp/instructor-large", device="cuda")
        a = m.encode(texts)
        b = m.encode(texts, convert_to_tensor=True)
    """)
    model = semantic.value(_call_on(module, 3))
    assert model.kind is Kind.MODULE and model.device is Tri.YES
    host, device = semantic.value(_call_on(module, 4)), semantic.value(_call_on(module, 5))
    assert host.kind is Kind.PLAIN and host.device is not Tri.YES
    assert device.kind is Kind.TENSOR and device.graph is Tri.NO and device.device is Tri.YES


def test_mem104_silent_on_encode_after_eval():
    assert_silent("""
        from sentence_transformers import SentenceTransformer
        def embed(batches):
            st = SentenceTransformer("all-MiniLM-L6-v2", device="cuda")
            st.eval()
            return [st.encode(b) for b in batches]
    """, "MEM104")


def test_return_dict_false_fact_holds_for_the_installed_transformers():
    """The fact behind ``frameworks.MODEL_OUTPUT_TUPLE_KEYWORD``, checked on the
    installed transformers: ``can_return_tuple`` turns the output into a tuple."""
    generic = pytest.importorskip("transformers.utils.generic")
    torch = pytest.importorskip("torch")
    from dataclasses import dataclass

    @dataclass
    class Output(generic.ModelOutput):
        hidden: object = None

    class Tiny:
        @generic.can_return_tuple
        def forward(self, x):
            return Output(hidden=x * 2)

    keyword, value = frameworks.MODEL_OUTPUT_TUPLE_KEYWORD
    tupled = Tiny().forward(torch.ones(2, requires_grad=True), **{keyword: value})
    assert isinstance(tupled, tuple) and torch.is_tensor(tupled[0]) and tupled[0].grad_fn is not None
    assert not isinstance(Tiny().forward(torch.ones(2)), tuple)
