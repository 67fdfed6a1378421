"""Misses of the fifth, held-out recall family (fixtures/recall bug_137..bug_158:
bug_144 MEM104/MEM102, bug_145 MEM105, bug_154 MEM103, bug_158 MEM109), each
fixed in the semantic model by what the value is, and checked on code of
another style than the reproducer's: every buggy snippet is reported on its
marked lines, and a correct look-alike gets no finding of that code.

The snippets are new code written for these tests."""

from __future__ import annotations

import ast

from memlint.lint.context import FileContext
from memlint.lint.semantic.values import Kind

from .test_recall_styles import assert_reported, assert_silent


def _value_at(source: str, text: str):
    """The semantic model's value of the first expression spelled ``text``."""
    module = ast.parse(source)
    semantic = FileContext("snippet.py", source, module).semantic
    node = next(n for n in ast.walk(module) if isinstance(n, ast.expr) and ast.unparse(n) == text)
    return semantic.value(node)


# MEM109: a hook registered on `dict(model.named_modules())[name]` (bug_158).
# dict() of key/value pairs holds the pairs' second items: the subscript is a
# module, so its `register_forward_hook` is a module hook.

MEM109_BUG = """
    import functools
    import torch

    activations = {}

    def record(layer, module, args, result):
        activations.setdefault(layer, []).append(result)  # expect: MEM109

    def probe(net, images, layers):
        net = net.cuda()
        by_name = dict(net.named_modules())
        for layer in layers:
            by_name[layer].register_forward_hook(functools.partial(record, layer))
        for batch in images:
            net(batch.cuda()).sum().backward()
"""

MEM109_OK = """
    import functools
    import torch

    activations = {}

    def record(layer, module, args, result):
        activations.setdefault(layer, []).append(result.detach().cpu())

    def probe(net, images, layers):
        net = net.cuda()
        by_name = dict(net.named_modules())
        for layer in layers:
            by_name[layer].register_forward_hook(functools.partial(record, layer))
        for batch in images:
            net(batch.cuda()).sum().backward()
"""


def test_mem109_hook_on_a_module_looked_up_in_dict_of_named_modules():
    assert_reported(MEM109_BUG, "MEM109")


def test_mem109_detached_host_copy_from_dict_of_named_modules_is_silent():
    assert_silent(MEM109_OK, "MEM109")


def test_dict_of_pairs_holds_the_second_items_and_dict_of_dict_its_values():
    source = ("import torch.nn as nn\nnet = nn.Linear(2, 2)\npairs = dict(net.named_children())\n"
              "copy = dict({'a': 1})\npairs['x']\ncopy['a']\n")
    assert _value_at(source, "pairs['x']").kind is Kind.MODULE
    assert _value_at(source, "copy['a']").kind is Kind.PLAIN


# MEM104 / MEM102: a local bound to what `.cuda()` returns and then called is a
# module (bug_144: `segmenter = factory().to(device)`): a tensor is not
# callable. Here: `.cuda()`, a `while` loop over an iterator, a results list.

MEM104_BUG = """
    import torch

    def predict_shards(build, shard_iter):
        net = build().cuda()
        kept = []
        while True:
            chunk = next(shard_iter, None)
            if chunk is None:
                break
            logits = net(chunk.cuda())  # expect: MEM104
            kept.append(logits)  # expect: MEM102
        return kept
"""

MEM104_OK = """
    import torch

    @torch.inference_mode()
    def predict_shards(build, shard_iter):
        net = build().cuda()
        kept = []
        while True:
            chunk = next(shard_iter, None)
            if chunk is None:
                break
            logits = net(chunk.cuda())
            kept.append(logits.cpu())
        return kept
"""


def test_mem104_forward_of_a_called_cuda_result_without_no_grad():
    assert_reported(MEM104_BUG, "MEM104")


def test_mem102_graph_of_a_called_cuda_result_kept_in_a_list():
    assert_reported(MEM104_BUG, "MEM102")


def test_mem104_mem102_inference_mode_and_host_copies_are_silent():
    assert_silent(MEM104_OK, "MEM104")
    assert_silent(MEM104_OK, "MEM102")


def test_a_moved_value_that_is_never_called_stays_unknown():
    source = "import torch\ndef f(make, x):\n    thing = make().cuda()\n    return thing.size(0) + x\n"
    assert _value_at(source, "thing").kind is not Kind.MODULE


def test_a_moved_pipeline_is_not_taken_for_a_module():
    source = ("from diffusers import StableDiffusionPipeline\n"
              "def generate(prompts):\n"
              "    pipe = StableDiffusionPipeline.from_pretrained('x').to('cuda')\n"
              "    return [pipe(p).images[0] for p in prompts]\n")
    assert _value_at(source, "pipe").kind is not Kind.MODULE
    assert_silent(source, "MEM104")


# MEM103: `.eval()` of a value moved to the accelerator makes it a module
# (bug_154: `task = load(...).cuda().eval()` at module level). Here: inside
# a function, `.to("cuda").eval()`, a dict slot store under inference_mode.

MEM103_BUG = """
    import torch

    def embed_catalog(restore, items):
        encoder = restore("enc.pt").to("cuda").eval()
        table = {}
        with torch.inference_mode():
            for key, feats in items:
                table[key] = encoder.embed(feats.to("cuda"))  # expect: MEM103
        return table
"""

MEM103_OK = """
    import torch

    def embed_catalog(restore, items):
        encoder = restore("enc.pt").to("cuda").eval()
        table = {}
        with torch.inference_mode():
            for key, feats in items:
                table[key] = encoder.embed(feats.to("cuda")).cpu()
        return table
"""


def test_mem103_device_outputs_of_a_moved_eval_module_kept_per_item():
    assert_reported(MEM103_BUG, "MEM103")


def test_mem103_host_copies_of_a_moved_eval_module_are_silent():
    assert_silent(MEM103_OK, "MEM103")


def test_eval_with_an_argument_or_without_a_move_is_no_module_evidence():
    source = "def f(make, expr):\n    a = make().cuda().eval(expr)\n    b = make().eval()\n    return a, b\n"
    assert _value_at(source, "make().cuda().eval(expr)").kind is not Kind.MODULE
