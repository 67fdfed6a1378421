"""MEM401 empty-cache-in-loop: loop kinds, guards and the unsafe fix."""

import pytest

from rule_helpers import fix_pairs, fixed, lines


@pytest.mark.parametrize(("source", "target"), fix_pairs("MEM401"), ids=lambda p: p.name)
def test_fix_pairs(source, target):
    assert fixed("MEM401", source, unsafe=True) == target.read_text()


@pytest.mark.parametrize(("source", "target"), fix_pairs("MEM401"), ids=lambda p: p.name)
def test_fix_is_not_applied_without_unsafe_fixes(source, target):
    assert fixed("MEM401", source, unsafe=False) == source.read_text()


def test_call_sharing_a_line_gets_no_fix(tmp_path):
    path = tmp_path / "a.py"
    path.write_text("import gc, torch\nmodel.eval()\nfor batch in loader:\n    model(batch)\n    gc.collect(); torch.cuda.empty_cache()\n")
    assert lines("MEM401", path.read_text()) == [5]
    assert fixed("MEM401", path, unsafe=True) == path.read_text()


def test_step_loop_recognised_by_its_work_not_its_names():
    assert lines("MEM401", """
        import torch
        def f(net, xs, opt):
            for x in xs:
                net(x).backward()
                opt.step()
                torch.cuda.empty_cache()
    """) == [7]


def test_memory_module_spelling_and_alias():
    assert lines("MEM401", """
        from torch.cuda import memory as m
        def f(model, loader):
            model.eval()
            for batch in loader:
                model(batch)
                m.empty_cache()
    """) == [7]


def test_lookalike_from_another_library():
    assert lines("MEM401", """
        import jax
        def f(model, loader):
            for batch in loader:
                jax.clear_caches()
                model.empty_cache()
    """) == []
