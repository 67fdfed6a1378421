"""MEM114 top-level-loop-keeps-state."""

from __future__ import annotations

import ast

from memlint.lint.diagnostic import Diagnostic, Severity
from memlint.lint.rule import Rule
from memlint.lint.syntax import FUNCTION_TYPES
from memlint.rules._notebook import cell_statements, names_held, quoted, released_after
from memlint.rules._training import calls_in

_LOOPS = (ast.For, ast.AsyncFor, ast.While)


class TopLevelLoopKeepsState(Rule):
    """## What it does
    Reports, in a notebook, a training or evaluation loop at a cell's top
    level (not inside a function): a loop that runs a backward pass, an
    optimizer step or a forward pass (itself or through the file's
    functions), and that leaves top-level names holding a tensor with
    an autograd graph or on the GPU (the last batch, outputs and loss) when
    the cell ends. Names that the same cell deletes (`del loss, out`) or
    rebinds to a value without tensor memory (`loss = None`) after the loop
    do not count. The outermost such loop is reported, once.

    ## Why is this bad?
    In a script, a training loop's last batch, outputs and loss die with the
    function (or the process). In a notebook the kernel lives on: the loop's
    variables are globals and keep the last iteration's tensors (and a
    forward output its autograd graph with every saved activation), while
    the next cells run. Re-running the cell, or the next experiment, then starts
    with that memory still taken, and `torch.cuda.empty_cache()` cannot free
    it.

    ## Example
    ```python
    # %%
    for x, y in loader:
        x, y = x.cuda(), y.cuda()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    ```

    ## Use instead
    ```python
    # %%
    def train_epoch():
        for x, y in loader:
            x, y = x.cuda(), y.cuda()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()

    train_epoch()
    ```
    or `del x, y, loss` at the end of the cell.

    ## Known problems
    Names are judged as the semantic model knows their values: a loop whose
    outputs come from another module's functions (unknown values) is not
    reported. A `del` in a later cell is not looked at: between the cells
    the memory is taken anyway. A loss whose backward pass already ran
    without `retain_graph` (in the loop, or in the file's function that
    returns it) is not named: backward freed its graph's saved tensors and
    a 0-d tensor is left. A loop that walks the layers of one model and
    does not train (`for layer in net: X = layer(X); print(X.shape)`, also
    `for i in range(len(net)): X = net[i](X)`) is one forward pass, not a
    training or evaluation loop, and is not reported.

    ## References
    - [PyTorch FAQ: my model reports "cuda runtime error(2): out of memory"](https://pytorch.org/docs/stable/notes/faq.html#my-model-reports-cuda-runtime-error-2-out-of-memory)
    - [IPython: the interactive namespace](https://ipython.readthedocs.io/en/stable/interactive/reference.html)
    """

    CODE = "MEM114"
    NAME = "top-level-loop-keeps-state"
    MESSAGE = ("a training loop at the cell's top level leaves its last batch, outputs and loss alive in the kernel "
               "after the cell ends; wrap it in a function or `del` them")
    SEVERITY = Severity.INFO
    NOTEBOOK_ONLY = True
    TRIGGERS = ("for ", "while ")
    FRAMEWORK = "torch"
    INVALID = (
        "# %%\nimport torch\nimport torch.nn as nn\nmodel = nn.Linear(8, 1).cuda()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "# %%\nfor step in range(100):  # expect: MEM114\n    x = torch.randn(16, 8).cuda()\n    loss = model(x).pow(2).mean()\n"
        "    loss.backward()\n    opt.step()\n    opt.zero_grad()\n",
        "# %%\nimport torch\nimport torch.nn as nn\nmodel = nn.Linear(8, 1).cuda()\n"
        "loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 8)), batch_size=8)\n"
        "# %%\nmodel.eval()\nwith torch.no_grad():\n    for (x,) in loader:  # expect: MEM114\n        preds = model(x.cuda())\n",
        "# %%\nimport torch\nimport torch.nn as nn\nmodel = nn.Linear(8, 1).cuda()\nopt = torch.optim.Adam(model.parameters())\n"
        "# %%\nfor epoch in range(3):  # expect: MEM114\n    for i in range(10):\n        out = model(torch.randn(4, 8).cuda())\n"
        "        loss = out.mean()\n        loss.backward()\n        opt.step()\n        opt.zero_grad()\n    print(epoch)\n",
    )
    VALID = (
        "# %%\nimport torch\nimport torch.nn as nn\nmodel = nn.Linear(8, 1).cuda()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "# %%\ndef train():\n    for step in range(100):\n        x = torch.randn(16, 8).cuda()\n        loss = model(x).pow(2).mean()\n"
        "        loss.backward()\n        opt.step()\n        opt.zero_grad()\ntrain()\n",
        "# %%\nimport torch\nimport torch.nn as nn\nmodel = nn.Linear(8, 1).cuda()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "# %%\nfor step in range(100):\n    x = torch.randn(16, 8).cuda()\n    loss = model(x).pow(2).mean()\n"
        "    loss.backward()\n    opt.step()\n    opt.zero_grad()\ndel x, loss\n",
        "# %%\nimport torch\nimport torch.nn as nn\nmodel = nn.Linear(8, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "# %%\nlosses = []\nfor step in range(100):\n    loss = model(torch.randn(16, 8)).pow(2).mean()\n"
        "    loss.backward()\n    opt.step()\n    opt.zero_grad()\n    losses.append(loss.item())\nloss = None\n",
        "# %%\nimport torch\nfor name in ['a', 'b']:\n    print(name.upper())\n",
    )

    def visit_For(self, node: ast.For) -> None:
        self._check(node)

    def visit_While(self, node: ast.While) -> None:
        self._check(node)

    def _check(self, loop: ast.For | ast.AsyncFor | ast.While) -> None:
        ctx = self.ctx
        if ctx.notebook is None:
            return
        semantic = ctx.semantic
        if semantic.function_of(loop) is not None or semantic.enclosing_loops(loop):
            return
        if any(isinstance(a, (*FUNCTION_TYPES, ast.ClassDef, ast.Lambda)) for a in semantic.ancestors(loop)):
            return
        if not self._steps(loop):
            return
        held = {name: node for name, node in names_held(ctx, loop).items() if not self._spent_loss(node, loop)}
        if not held:
            return
        statement = self._top_statement(loop)
        cell = ctx.notebook.cell_of(statement.lineno)
        later = [s for s in cell_statements(ctx).get(cell.number, []) if s.lineno > statement.end_lineno]
        kept = set(held) - released_after(ctx, set(held), later)
        if not kept:
            return
        kind = "a training" if semantic.trains(loop) else "an evaluation"
        message = (f"{kind} loop at the cell's top level leaves {quoted(kept)} alive in the kernel after the cell "
                   "ends (the last iteration's tensors, graphs and GPU memory); wrap the loop in a function or "
                   "`del` them at the end of the cell")
        self._report_header(loop, message)

    def _steps(self, loop: ast.AST) -> bool:
        """The loop trains, or runs a forward pass (itself or through the file's functions)."""
        semantic = self.ctx.semantic
        if semantic.trains(loop):
            return True
        if semantic.walks_one_forward(loop):
            return False  # `for layer in net: X = layer(X)`: one forward through the layers, no step
        for call in calls_in(loop):
            if semantic.is_forward_call(call):
                return True
            callee = semantic.callee(call)
            if callee is not None and semantic.canonical(callee).runs_forward:
                return True
        return False

    def _spent_loss(self, name: ast.Name, loop: ast.AST) -> bool:
        """The last binding of ``name`` is a loss whose backward pass already
        ran, without ``retain_graph``: the loop calls ``name.backward()`` after
        binding it, or it is the result of a call of the file's function that
        returns the very name it ran ``.backward()`` on (``loss =
        compute_loss(batch)``). Backward frees the graph's saved tensors
        (torch 2.13.0 ``torch/autograd/__init__.py`` ``backward``:
        ``retain_graph`` defaults to ``create_graph``, False): what stays is
        a 0-d tensor, not the step's activations."""
        semantic = self.ctx.semantic
        if _backward_on(semantic, name.id, loop, after=name):
            return True
        statement = semantic.parents.get(name)
        if not (isinstance(statement, ast.Assign) and statement.targets == [name] and isinstance(statement.value, ast.Call)):
            return False
        callee = semantic.callee(statement.value)
        if not isinstance(callee, FUNCTION_TYPES):
            return False
        returned = [r.value for r in semantic.own_nodes(callee, (ast.Return,))]
        return bool(returned) and all(isinstance(r, ast.Name) and _backward_on(semantic, r.id, callee) for r in returned)

    def _top_statement(self, node: ast.AST) -> ast.stmt:
        """The module-level statement that holds ``node``."""
        parents = self.ctx.semantic.parents
        while parents.get(node) is not self.ctx.module:
            node = parents[node]
        return node

    def _report_header(self, loop: ast.For | ast.AsyncFor | ast.While, message: str) -> None:
        """Report the loop's first line (``for x in loader:``), not its whole body."""
        start, _ = self.ctx.span(loop)
        head_end = self.ctx.span(loop.iter if isinstance(loop, (ast.For, ast.AsyncFor)) else loop.test)[1]
        self.ctx.diagnostics.append(Diagnostic(self.CODE, self.NAME, self.SEVERITY, message, self.ctx.path,
                                               start[0], start[1], head_end[0], head_end[1]))


def _backward_on(semantic, name: str, unit: ast.AST, after: ast.AST | None = None) -> bool:
    """``unit`` (a function, or a loop's body) calls ``name.backward()``
    without ``retain_graph``/``create_graph`` (after ``after``, when given)."""
    nodes = semantic.own_nodes(unit, (ast.Call,)) if isinstance(unit, FUNCTION_TYPES) else \
        [n for n in ast.walk(unit) if isinstance(n, ast.Call)]
    for call in nodes:
        func = call.func
        if not (isinstance(func, ast.Attribute) and func.attr == "backward" and isinstance(func.value, ast.Name)
                and func.value.id == name and not call.keywords):
            continue
        if after is not None and (call.lineno, call.col_offset) <= (after.lineno, after.col_offset):
            continue
        if semantic.is_backward_call(call):
            return True
    return False
