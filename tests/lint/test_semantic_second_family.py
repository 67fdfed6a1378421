"""Facts of the semantic model added for the second family of rules
(MEM108-MEM112, MEM306-MEM308): which methods run within a module's forward
pass, which names hold a call's inputs, which loops walk the data."""

from __future__ import annotations

import ast

from .test_semantic import model_of, node_at


def _function(module: ast.AST, name: str) -> ast.FunctionDef:
    return next(n for n in ast.walk(module) if isinstance(n, ast.FunctionDef) and n.name == name)


def test_forward_pass_methods_follow_self_calls():
    model, module = model_of("""
        import torch.nn as nn
        class Base(nn.Module):
            def _norm(self, x):
                return x
        class Net(Base):
            def _attend(self, x):
                return self._norm(x)
            def unused(self, x):
                return x
            def forward(self, x):
                return self._attend(x)
    """)
    net = next(info for info in model.classes.by_node.values() if info.name == "Net")
    names = {m.name for m in model.forward_pass_methods(net)}
    assert names == {"forward", "_attend", "_norm"}
    assert model.in_forward_pass(_function(module, "unused")) is None
    assert model.in_forward_pass(_function(module, "_attend")) is net


def test_a_class_that_is_no_module_has_no_forward_pass():
    model, module = model_of("""
        class Runner:
            def forward(self, x):
                return x
    """)
    assert model.in_forward_pass(_function(module, "forward")) is None


def test_lightning_hooks_are_not_forward_passes():
    model, module = model_of("""
        import lightning as L
        class Lit(L.LightningModule):
            def forward(self, x):
                return self.training_step(x, 0)
            def training_step(self, batch, idx):
                return batch
    """)
    assert model.in_forward_pass(_function(module, "training_step")) is None


def test_input_derived_names_close_over_assignments():
    model, module = model_of("""
        class A:
            def forward(self, result, n=1):
                hidden = result.hidden_states
                last = hidden[-1]
                bias = self.table[0]
                count = 0
                count += n
                return last
    """)
    names = model.input_derived(_function(module, "forward"))
    assert {"result", "n", "hidden", "last", "count"} <= names
    assert "bias" not in names and "self" not in names


def test_walks_data_loops():
    model, module = model_of("""
        from torch.utils.data import DataLoader
        def f(model, data, n):
            loader = DataLoader(data)
            for x in loader:
                pass
            for i in range(0, len(data), 8):
                chunk = data[i:i + 8]
            for layer in [1, 2, 3]:
                pass
            pos = 0
            while pos < n:
                pos += 1
    """)
    loops = [n for n in ast.walk(module) if isinstance(n, (ast.For, ast.While))]
    loops.sort(key=lambda n: n.lineno)
    assert [model.walks_data(loop) for loop in loops] == [True, True, False, False]


def test_counted_range_walks_data_only_when_it_trains():
    model, module = model_of("""
        def f(model, x, opt, n):
            for i in range(n):
                x = model(x)
            for i in range(n):
                model(x).sum().backward()
                opt.step()
    """)
    loops = sorted((n for n in ast.walk(module) if isinstance(n, ast.For)), key=lambda n: n.lineno)
    assert [model.walks_data(loop, counted=False) for loop in loops] == [False, True]
    assert model.walks_data(loops[0]) is True


def test_callable_definition_resolves_references():
    model, module = model_of("""
        import functools
        def plain(m, i, o):
            pass
        def factory(name):
            def inner(m, i, o):
                pass
            return inner
        class Probe:
            def save(self, m, i, o):
                pass
            def install(self, layer):
                layer.register_forward_hook(self.save)
        hooks = [plain, lambda m, i, o: None, functools.partial(plain, 1), factory("x"), unknown]
    """)
    listed = next(n for n in ast.walk(module) if isinstance(n, ast.List))
    found = [model.callable_definition(e) for e in listed.elts]
    assert [(getattr(f[0], "name", "lambda"), f[1]) if f else None for f in found] == [
        ("plain", 0), ("lambda", 0), ("plain", 1), ("inner", 0), None]
    install = node_at(module, 13)
    method, bound = model.callable_definition(install.args[0])
    assert (method.name, bound) == ("save", 1)


def test_oom_branch_of_handlers():
    model, module = model_of("""
        import torch
        def oom_text(e):
            return "out of memory" in str(e)
        def f(step):
            try:
                step()
            except torch.cuda.OutOfMemoryError:
                a = 1
            try:
                step()
            except RuntimeError as e:
                if oom_text(e):
                    b = 2
                raise
            try:
                step()
            except KeyError:
                if "out of memory":
                    c = 3
            try:
                step()
            except RuntimeError as e:
                if "shape" in str(e):
                    d = 4
    """)
    handlers = sorted((n for n in ast.walk(module) if isinstance(n, ast.ExceptHandler)), key=lambda n: n.lineno)
    branches = [model.oom_branch(h) for h in handlers]
    assert [b[0].targets[0].id if b else None for b in branches] == ["a", "b", None, None]
