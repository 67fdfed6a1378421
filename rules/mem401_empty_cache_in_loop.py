"""MEM401 empty-cache-in-loop."""

from __future__ import annotations

import re

import libcst as cst

from memlint.lint.diagnostic import Applicability, Edit, Fix, Severity
from memlint.lint.rule import Rule
from memlint.rules._training import (
    LOOP_TYPES, has_modulo, is_backward, is_optimizer_step, local_callees, method_name, walk,
)

EMPTY_CACHE = frozenset({"torch.cuda.empty_cache", "torch.cuda.memory.empty_cache"})
COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
#: Lightning (and HF Trainer) hooks that the framework calls once per batch.
PER_STEP_HOOKS = frozenset({
    "training_step", "validation_step", "test_step", "predict_step", "on_train_batch_start", "on_train_batch_end",
    "on_validation_batch_start", "on_validation_batch_end", "on_test_batch_start", "on_test_batch_end",
    "on_before_backward", "on_after_backward", "on_before_optimizer_step", "on_before_zero_grad", "optimizer_step",
    "on_step_end", "on_step_begin",
})
#: A loop over these runs a few times per run (epochs, models, folds): a cache flush per iteration is cheap.
_COARSE_TARGET = re.compile(r"epoch|\bep\b|model|ckpt|checkpoint|config|cfg|trial|fold|seed|experiment|\brun\b|file|path|name", re.I)
#: A loop over batches or steps.
_STEP_TARGET = re.compile(r"batch|loader|\bstep|\biter|sample|\bdata\b|inputs", re.I)
#: Model methods that run a whole inference step.
_INFERENCE_METHODS = frozenset({"generate", "predict", "sample", "infer", "encode", "decode", "embed"})
#: Guards that make a flush occasional or a reaction to memory pressure.
_MEMORY_GUARD = re.compile(r"memory_allocated|memory_reserved|mem_get_info|max_memory|memory_stats|oom|OutOfMemory", re.I)


class EmptyCacheInLoop(Rule):
    """## What it does
    Reports `torch.cuda.empty_cache()` (any import spelling) called on every
    iteration of a step loop: a `for`/`while` loop over batches or steps, or
    one that runs a forward, `.backward()` or optimizer step itself. Also
    reported: the call inside a function of this file that such a loop (or a
    comprehension) calls once per item, and inside Lightning per-batch hooks
    (`training_step`, `on_train_batch_end`, ...).

    ## Why is this bad?
    `empty_cache()` frees no live tensor. It returns the caching allocator's
    unused blocks to the driver, so the next step must get them back with
    `cudaMalloc` (slow and synchronising) before it can run: every step pays
    for it, and fragmentation is not reduced. It only changes what
    `nvidia-smi` shows.

    ## Example
    ```python
    for batch in loader:
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        torch.cuda.empty_cache()
    ```

    ## Use instead
    ```python
    for batch in loader:
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    torch.cuda.empty_cache()  # once, if another process needs the memory
    ```

    ## Fix safety
    The fix deletes the call statement (or turns it into `pass` when it is
    the only statement of its block); it is unsafe because another process
    sharing the GPU may rely on the memory being handed back. Calls that are
    part of a larger expression or share a line with other statements get
    no fix.

    ## Options
    No configuration; the deliberate choices are: a flush guarded by a
    periodic condition (`if step % 1000 == 0:`) or by a memory-pressure test
    (`if torch.cuda.memory_reserved() > limit:`), or inside an `except`
    handler (out-of-memory recovery), is not reported; neither is a loop
    over epochs, models, checkpoints, folds or files (a few flushes per run).

    ## Known problems
    A loop is recognised as a step loop by its target/iterable names
    (`batch`, `loader`, `step`, ...) or by the forward/backward/step calls
    in its own body; a loop over batches spelled otherwise, with the work in
    a helper, is missed. Helpers are followed one call deep, within the file.

    ## References
    - [CUDA memory management (torch.cuda.empty_cache)](https://pytorch.org/docs/stable/notes/cuda.html#memory-management)
    - [torch.cuda.empty_cache](https://pytorch.org/docs/stable/generated/torch.cuda.empty_cache.html)
    """

    CODE = "MEM401"
    NAME = "empty-cache-in-loop"
    MESSAGE = "`torch.cuda.empty_cache()` in a loop frees no live tensor and forces slow re-allocation every iteration"
    SEVERITY = Severity.WARNING
    FIX_TITLE = "Remove the `empty_cache()` call"
    TRIGGERS = ("empty_cache",)
    NEEDS_NAMES = ("empty_cache",)
    VALID = (
        "import torch\ndef train(model, loader, opt):\n    for batch in loader:\n        model(batch).backward()\n        opt.step()\n    torch.cuda.empty_cache()\n",
        "import torch\ndef train(model, loader, opt):\n    for step, batch in enumerate(loader):\n        model(batch).backward()\n        if step % 1000 == 0:\n            torch.cuda.empty_cache()\n",
        "import torch\ndef fit(trainer, epochs):\n    for epoch in range(epochs):\n        trainer.train_one_epoch()\n        torch.cuda.empty_cache()\n",
        "import torch\ndef bench(names, x):\n    for name in names:\n        model = load(name).cuda()\n        model(x)\n        del model\n        torch.cuda.empty_cache()\n",
        "import torch\ndef run(model, loader):\n    for batch in loader:\n        try:\n            model(batch)\n        except torch.cuda.OutOfMemoryError:\n            torch.cuda.empty_cache()\n",
        "import mylib\ndef run(model, loader):\n    for batch in loader:\n        mylib.empty_cache()\n",
    )
    INVALID = (
        "import torch\ndef train(model, loader, opt):\n    for batch in loader:\n        model(batch).backward()\n        opt.step()\n        torch.cuda.empty_cache()  # expect: MEM401\n",
        "from torch.cuda import empty_cache as ec\ndef infer(model, xs):\n    i = 0\n    while i < len(xs):\n        out = model(xs[i])\n        ec()  # expect: MEM401\n        i += 1\n",
        "import torch as T\nimport gc\ndef free():\n    gc.collect()\n    T.cuda.empty_cache()  # expect: MEM401\ndef run(model, batches):\n    return [model(b) for b in batches if free() is None]\n",
        "import torch\nclass Lit:\n    def training_step(self, batch, idx):\n        loss = self.model(batch)\n        torch.cuda.empty_cache()  # expect: MEM401\n        return loss\n",
    )

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualified(node.func) not in EMPTY_CACHE or self._guarded(node):
            return
        flow = self.ctx.dataflow
        loops = flow.enclosing_loops(node)
        if loops:
            if self._step_loop(loops[0]):
                self.report(node, fix=self._removal(node))
            return
        comprehension = self._comprehension(node)
        if comprehension is not None:
            if not self._coarse_comprehension(comprehension):
                self.report(node, fix=self._removal(node))
            return
        function = flow.scope_node(node)
        if isinstance(function, cst.FunctionDef) and self._per_step_function(function):
            self.report(node, message="`torch.cuda.empty_cache()` runs once per step (in a function called per batch): it frees no live tensor and forces slow re-allocation", fix=self._removal(node))

    # -- where the call runs ---------------------------------------------
    def _guarded(self, node: cst.CSTNode) -> bool:
        for ancestor in self.ctx.dataflow.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
                return False
            if isinstance(ancestor, cst.ExceptHandler):
                return True
            if isinstance(ancestor, (cst.If, cst.IfExp, cst.While)):
                test = self.ctx.code(ancestor.test)
                if has_modulo(ancestor.test) or _MEMORY_GUARD.search(test):
                    return True
        return False

    def _comprehension(self, node: cst.CSTNode) -> cst.CSTNode | None:
        for ancestor in self.ctx.dataflow.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
                return None
            if isinstance(ancestor, COMPREHENSIONS):
                return ancestor
        return None

    def _step_loop(self, loop: cst.CSTNode) -> bool:
        """A loop whose iterations are training/inference steps (not epochs or models)."""
        header = self.ctx.code(loop.target) + " " + self.ctx.code(loop.iter) if isinstance(loop, cst.For) else ""
        if header and _COARSE_TARGET.search(self.ctx.code(loop.target)):
            return False
        if header and _STEP_TARGET.search(header):
            return True
        return self._does_step_work(loop.body, skip_loops=True)

    def _does_step_work(self, body: cst.CSTNode, skip_loops: bool) -> bool:
        """True when ``body`` runs a forward pass, ``.backward()`` or an optimizer step itself."""
        flow = self.ctx.dataflow
        for node in walk(body):
            if not isinstance(node, cst.Call):
                continue
            if skip_loops and any(isinstance(a, LOOP_TYPES) and a is not body for a in self._ancestors_within(node, body)):
                continue
            if is_backward(node, self.ctx) or is_optimizer_step(node) or flow.is_forward_call(node):
                return True
            if method_name(node) in _INFERENCE_METHODS and flow.value(node.func.value).is_model:
                return True
        return False

    def _ancestors_within(self, node: cst.CSTNode, body: cst.CSTNode):
        for ancestor in self.ctx.dataflow.ancestors(node):
            if ancestor is body:
                return
            yield ancestor

    def _per_step_function(self, function: cst.FunctionDef) -> bool:
        """A Lightning per-batch hook, or a function called once per item of a step loop or comprehension."""
        name = function.name.value
        flow = self.ctx.dataflow
        if name in PER_STEP_HOOKS and isinstance(next(flow.ancestors(function), None), cst.IndentedBlock) and self._in_class(function):
            return True
        units = [self.ctx.module, *flow.functions.values()]
        for unit in units:
            for node in walk(unit.body if isinstance(unit, cst.FunctionDef) else unit):
                if isinstance(node, LOOP_TYPES):
                    if function in local_callees(node.body, flow.functions) and self._step_loop(node):
                        return True
                elif isinstance(node, COMPREHENSIONS):
                    if function in local_callees(node, flow.functions) and not self._coarse_comprehension(node):
                        return True
        return False

    def _coarse_comprehension(self, node: cst.CSTNode) -> bool:
        return bool(_COARSE_TARGET.search(self.ctx.code(node.for_in.target)))

    def _in_class(self, function: cst.FunctionDef) -> bool:
        return any(isinstance(a, cst.ClassDef) for a in self.ctx.dataflow.ancestors(function))

    # -- the fix -------------------------------------------------------------
    def _removal(self, call: cst.Call) -> Fix | None:
        parents = self.ctx.dataflow.parents
        expr = parents.get(call)
        line = parents.get(expr) if expr is not None else None
        if not isinstance(expr, cst.Expr) or not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
            return None
        block = parents.get(line)
        if isinstance(block, cst.IndentedBlock) and len(block.body) > 1:
            start, end = self.ctx.span(line)
            source_lines = self.ctx.source.splitlines(keepends=True)
            before = source_lines[start[0] - 1][: start[1] - 1]
            if before.strip():
                return None
            edit = Edit(start[0], 1, end[0] + 1, 1, "")
        else:
            edit = self.ctx.edit_replacing(call, "pass")
        return Fix(title=self.FIX_TITLE, applicability=Applicability.UNSAFE, edits=(edit,))
