"""MEM203 zero-grad-keeps-grads: the fix pairs and argument shapes."""

import pytest

from rule_helpers import fix_pairs, fixed, lines


@pytest.mark.parametrize(("source", "target"), fix_pairs("MEM203"), ids=lambda p: p.name)
def test_fix_pairs(source, target):
    assert fixed("MEM203", source, unsafe=True) == target.read_text()


@pytest.mark.parametrize(("source", "target"), fix_pairs("MEM203"), ids=lambda p: p.name)
def test_fix_is_not_applied_as_safe(source, target):
    """Dropping `set_to_none=False` changes results (None gradients are skipped by optimizers)."""
    assert fixed("MEM203", source, unsafe=False) == source.read_text()


def test_set_to_none_from_a_variable_is_not_reported():
    assert lines("MEM203", "def f(opt, flag):\n    opt.zero_grad(set_to_none=flag)\n") == []


def test_star_args_are_not_reported():
    assert lines("MEM203", "def f(opt, args):\n    opt.zero_grad(*args)\n") == []
