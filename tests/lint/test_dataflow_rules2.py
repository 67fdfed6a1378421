"""Shared helpers added for the MEM103/MEM304/MEM305 rules (memlint/lint/patterns.py)."""

from __future__ import annotations

import ast

from memlint.lint.context import FileContext
from memlint.lint.patterns import collection_target, is_dataset_class, leaf_values, outlives_iteration


def _context(source: str) -> FileContext:
    return FileContext("t.py", source, ast.parse(source))


def _calls(module: ast.Module, method: str) -> list[ast.Call]:
    """The calls of ``.<method>(...)``, in source order."""
    found = [
        node
        for node in ast.walk(module)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method
    ]
    return sorted(found, key=lambda node: (node.lineno, node.col_offset))


def test_leaf_values_looks_through_literals():
    source = "{'a': x, 'b': (y, [z])}"
    expr = ast.parse(source, mode="eval").body
    assert [ast.get_source_segment(source, leaf) for leaf in leaf_values([expr])] == ["x", "y", "z"]


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
    classes = [s for s in ctx.module.body if isinstance(s, ast.ClassDef)]
    assert [is_dataset_class(k, ctx) for k in classes] == [True, True, False]
