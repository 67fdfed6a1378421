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
