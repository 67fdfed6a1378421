"""Shared helpers added for the MEM103/MEM304/MEM305 rules (memlint/lint/patterns.py)."""

from __future__ import annotations

import libcst as cst

from memlint.lint.context import FileContext
from memlint.lint.patterns import collection_target, is_dataset_class, leaf_values, outlives_iteration


def _context(source: str) -> FileContext:
    return FileContext("t.py", source, cst.parse_module(source))


def _calls(module: cst.Module, method: str) -> list[cst.Call]:
    found: list[cst.Call] = []

    class Finder(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            if isinstance(node.func, cst.Attribute) and node.func.attr.value == method:
                found.append(node)

    module.visit(Finder())
    return found


def test_leaf_values_looks_through_literals():
    expr = cst.parse_expression("{'a': x, 'b': (y, [z])}")
    assert [cst.Module([]).code_for_node(leaf) for leaf in leaf_values([expr])] == ["x", "y", "z"]


def test_outlives_iteration_for_loop_and_per_batch_hook():
    source = (
        "def f(loader):\n    keep = []\n    for x in loader:\n        tmp = []\n        keep.append(x)\n        tmp.append(x)\n"
        "class M:\n    def validation_step(self, b, i):\n        self.outs.append(b)\n    def helper(self, b):\n        self.outs.append(b)\n"
    )
    ctx = _context(source)
    results = []
    for call in _calls(ctx.module, "append"):
        container, _ = collection_target(call)
        results.append((container, outlives_iteration(ctx.dataflow, container, call)))
    assert results == [("keep", True), ("tmp", False), ("self.outs", True), ("self.outs", False)]


def test_is_dataset_class_through_imports_and_names():
    source = (
        "import torch.utils.data as tud\nfrom mylib import Base\n"
        "class A(tud.IterableDataset):\n    pass\nclass ImagesDataset(Base):\n    pass\nclass Plain(Base):\n    pass\n"
    )
    ctx = _context(source)
    classes = [s for s in ctx.module.body if isinstance(s, cst.ClassDef)]
    assert [is_dataset_class(k, ctx) for k in classes] == [True, True, False]
