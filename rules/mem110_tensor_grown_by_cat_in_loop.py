"""MEM110 tensor-grown-by-cat-in-loop."""

from __future__ import annotations

import ast

from memlint.lint.diagnostic import Severity
from memlint.lint.names import dotted_name
from memlint.lint.rule import Rule
from memlint.lint.semantic.values import Kind, Tri

#: Concatenations whose first argument is the sequence of pieces.
TORCH_CONCATENATIONS = frozenset({
    "torch.cat", "torch.concat", "torch.concatenate", "torch.stack", "torch.vstack", "torch.hstack",
    "torch.row_stack", "torch.dstack", "torch.column_stack",
})
TF_CONCATENATIONS = frozenset({"tensorflow.concat", "tensorflow.experimental.numpy.concatenate", "tensorflow.stack"})


class TensorGrownByCatInLoop(Rule):
    """## What it does
    Reports a tensor that a loop over the data grows by concatenating it
    with a new piece on every iteration: `preds = torch.cat((preds, logits))`
    (also `torch.stack`, `torch.vstack`, `torch.hstack`, `torch.concat`),
    where `preds` lives across the iterations of a loop that walks the data
    (a loader, a dataset, slices of the data, a `while` that draws batches
    or trains) and the result is on the accelerator or holds an autograd
    graph; and the TensorFlow twin, `x = tf.concat([x, y], 0)` in a Python
    loop over the data. A first iteration that starts the tensor
    (`if preds is None: preds = logits`, or the conditional expression
    `preds = logits if preds is None else torch.cat((preds, logits))`) is
    no reset.

    ## Why is this bad?
    Each concatenation allocates a new tensor of the whole size so far and
    copies everything into it: after `n` batches the loop has copied
    `n²/2` batches' worth of data, and the allocator holds the old and the
    new copy at each step, fragmenting device memory as the blocks grow.
    When the pieces are graph-attached, every intermediate result is saved
    for backward: memory grows quadratically with the number of batches.

    ## Example
    ```python
    preds = torch.empty(0, device="cuda")
    for x, y in loader:
        logits = model(x.cuda())
        preds = torch.cat((preds, logits))
    ```

    ## Use instead
    ```python
    preds = []
    for x, y in loader:
        logits = model(x.cuda())
        preds.append(logits.detach().cpu())
    preds = torch.cat(preds)  # once
    ```

    ## Known problems
    Loops over a fixed structure (layers, heads, the micro-batches of one
    step) and loops of a module's methods (autoregressive generation, whose
    output length is bounded) are not reported. A tensor on the CPU without
    a graph (only copy time grows) is not reported. Where the model cannot
    tell that the tensor is on the accelerator (it comes from another
    module), the rule is silent. TensorFlow tensors are reported in a loop
    over the data whatever their device (TensorFlow places them on the GPU
    when there is one).

    ## References
    - [torch.cat](https://pytorch.org/docs/stable/generated/torch.cat.html)
    - [PyTorch forum: torch.cat in a loop is slow and uses a lot of memory](https://discuss.pytorch.org/t/appending-to-a-tensor/2665)
    """

    CODE = "MEM110"
    NAME = "tensor-grown-by-cat-in-loop"
    MESSAGE = "a tensor is grown by concatenation on every iteration of a loop over the data: memory and copy time grow quadratically"
    SEVERITY = Severity.WARNING
    TRIGGERS = ("cat(", "stack(", "concat", "cat as", "stack as")
    NEEDS_NAMES = ("cat", "stack", "vstack", "hstack", "concat", "concatenate", "row_stack", "dstack", "column_stack")
    VALID = (
        "import torch\ndef f(model, loader):\n    preds = []\n    for x in loader:\n        preds.append(model(x.cuda()).detach().cpu())\n    return torch.cat(preds)\n",
        "import torch\ndef f(model, loader):\n    preds = torch.empty(0)\n    with torch.no_grad():\n        for x in loader:\n            preds = torch.cat((preds, model(x).cpu()))\n    return preds\n",
        "import torch\nimport torch.nn as nn\nclass Dense(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.layers = nn.ModuleList([nn.Conv2d(8, 8, 3) for _ in range(4)])\n    def forward(self, x):\n        out = x\n        for layer in self.layers:\n            out = torch.cat([out, layer(out)], 1)\n        return out\n",
        "import torch\ndef f(model, loader):\n    for x in loader:\n        out = x.cuda()\n        for t in range(4):\n            out = torch.cat((out, model(out)), 1)\n",
        "import torch\ndef f(model, idx, steps):\n    idx = idx.cuda()\n    for _ in range(steps):\n        nxt = model(idx)[:, -1:].argmax(-1)\n        idx = torch.cat((idx, nxt), dim=1)\n    return idx\n",
    )
    INVALID = (
        "import torch\ndef f(model, loader):\n    model.cuda().eval()\n    preds = torch.empty(0, device='cuda')\n    with torch.no_grad():\n        for x, y in loader:\n            logits = model(x.cuda())\n            preds = torch.cat((preds, logits))  # expect: MEM110\n    return preds\n",
        "import torch\ndef f(model, loader):\n    model.to('cuda').eval()\n    outs = None\n    for x in loader:\n        out = model(x.cuda())\n        if outs is None:\n            outs = out\n        else:\n            outs = torch.cat([outs, out], dim=0)  # expect: MEM110\n    return outs\n",
        "import torch\ndef f(model, loader, device):\n    feats = torch.zeros(0, 128, device=device)\n    for batch in loader:\n        feats = torch.vstack([feats, model(batch.to(device))])  # expect: MEM110\n    return feats\n",
        "import tensorflow as tf\ndef f(model, images):\n    dataset = tf.data.Dataset.from_tensor_slices(images).batch(64)\n    preds = tf.zeros([0, 10])\n    for x in dataset:\n        preds = tf.concat([preds, model(x, training=False)], 0)  # expect: MEM110\n    return preds\n",
    )

    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) != 1:
            return
        name = dotted_name(node.targets[0])
        call = _growing_call(node.value, name) if name is not None else None
        if call is None:
            return
        qualified = self.ctx.qualified(call.func)
        framework = "torch" if qualified in TORCH_CONCATENATIONS else "tensorflow" if qualified in TF_CONCATENATIONS else None
        if framework is None:
            return
        loop = self._growing_loop(name, node)
        if loop is None:
            return
        value = self.ctx.semantic.value(call)
        if framework == "torch":
            if value.kind is not Kind.TENSOR:
                return
            if value.attached:
                self.report(node, message="a graph-attached tensor is grown by concatenation on every iteration of a loop over the data: every intermediate result is kept for backward, memory grows quadratically")
            elif value.device is Tri.YES:
                self.report(node)
        elif value.framework == "tensorflow":
            self.report(node)

    def _growing_loop(self, name: str, node: ast.Assign) -> ast.AST | None:
        """The loop over the data across whose iterations ``name`` keeps
        growing: it is bound before the loop, and every other assignment to it
        in the loop starts it when it is empty (under a test that reads it)."""
        semantic = self.ctx.semantic
        loops = semantic.run_loops(node)
        if not loops:
            return None
        loop = loops[0]
        if not semantic.walks_data(loop, counted=False) or semantic.bounded_by_enclosing_iteration(loop):
            return None
        if semantic.carried_loop(name, node) is loop:
            return loop
        if name not in semantic.bound_before(loop) and "." not in name:
            return None
        for other in ast.walk(loop):
            if other is node or not isinstance(other, (ast.Assign, ast.AnnAssign)):
                continue
            targets = other.targets if isinstance(other, ast.Assign) else [other.target]
            if any(dotted_name(target) == name for target in targets) and not self._starts_when_empty(other, name, loop):
                return None
        return loop

    def _starts_when_empty(self, assignment: ast.AST, name: str, loop: ast.AST) -> bool:
        for ancestor in self.ctx.semantic.ancestors(assignment):
            if ancestor is loop:
                return False
            if isinstance(ancestor, ast.If) and any(dotted_name(n) == name for n in ast.walk(ancestor.test)):
                return True
        return False


def _growing_call(value: ast.expr, name: str) -> ast.Call | None:
    """The call of ``value`` that takes ``name`` among its pieces (cheap,
    syntactic: the tensor is one of its own pieces): ``value`` itself, or
    the branch of a conditional expression that tests ``name`` whose other
    branch starts the tensor (``preds = logits if preds is None else
    torch.cat((preds, logits))``)."""
    candidates = [value]
    if isinstance(value, ast.IfExp) and any(dotted_name(n) == name for n in ast.walk(value.test)):
        candidates = [value.body, value.orelse]
    for candidate in candidates:
        if isinstance(candidate, ast.Call) and candidate.args and isinstance(candidate.args[0], (ast.Tuple, ast.List)) \
                and any(dotted_name(piece) == name for piece in candidate.args[0].elts):
            return candidate
    return None
