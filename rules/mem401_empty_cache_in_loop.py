"""MEM401 empty-cache-in-loop."""

from __future__ import annotations

import ast
import re

from memlint.lint.diagnostic import Applicability, Fix, Severity
from memlint.lint.names import dotted_name, targets_of
from memlint.lint.rule import Rule
from memlint.lint.semantic.frameworks import DEVICE_BACKEND_MODULES
from memlint.lint.semantic.operations import literal_iterable, rebound_in
from memlint.lint.semantic.values import Tri
from memlint.lint.syntax import FUNCTION_TYPES, LOOP_TYPES, WITH_TYPES
from memlint.rules._training import has_modulo, is_backward, is_optimizer_step, method_name, walk

#: Calls that hand the caching allocator's free blocks back to the driver: each
#: backend's `empty_cache` (torch 2.13.0), and library wrappers of it —
#: accelerate 1.15.0 utils/memory.py `clear_device_cache` and `release_memory`
#: (both call `torch.<backend>.empty_cache()`).
EMPTY_CACHE = frozenset({
    "torch.cuda.empty_cache", "torch.cuda.memory.empty_cache", "torch.accelerator.empty_cache",
    "torch.accelerator.memory.empty_cache", "torch.xpu.empty_cache", "torch.mps.empty_cache",
    "torch.npu.empty_cache", "torch.mlu.empty_cache",
    "accelerate.utils.clear_device_cache", "accelerate.utils.memory.clear_device_cache",
    "accelerate.utils.release_memory", "accelerate.utils.memory.release_memory"})
#: Module methods that run a whole inference step.
_INFERENCE_METHODS = frozenset({"generate", "predict", "sample", "infer", "encode", "decode", "embed"})
#: Guards that make a flush occasional or a reaction to memory pressure.
_MEMORY_GUARD = re.compile(r"memory_allocated|memory_reserved|mem_get_info|max_memory|memory_stats|oom|OutOfMemory", re.I)


class EmptyCacheInLoop(Rule):
    """## What it does
    Reports `torch.cuda.empty_cache()` (any import spelling) called on every
    iteration of a step loop: a `for`/`while` loop over batches or steps, or
    one that runs a forward, `.backward()` or optimizer step itself. Also
    reported: the call inside a function of this file that such a loop (or a
    comprehension) calls once per item, inside Lightning per-batch hooks
    (`training_step`, `on_train_batch_end`, ...), and a flush under no
    condition in a method of a module's forward pass (`forward` and the
    methods it calls on `self`) or in a function of this file that such a
    method calls: `Module.__call__` runs it once per batch.

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
    A periodic condition that also runs the optimizer step
    (`if (i + 1) % grad_accum == 0: optimizer.step()`) is the
    gradient-accumulation boundary, not an occasional flush: a flush under
    it runs once per training step and is reported.

    ## Known problems
    A loop is recognised as a step loop when it iterates a stream of
    batches or runs a forward, backward or optimizer step in its own body
    (or through a helper of the file, one call deep), or when its body
    enters a grad-disabled context (`with torch.inference_mode():`) around a
    call given the loop's element, or runs grad-disabled itself (in a
    `@torch.inference_mode()` function, inside `with torch.no_grad():`) and
    binds the result of such a call: one inference step per item, even when
    the model comes from another file; or when its body runs an inference
    method of a module (`encoder.encode(texts)`, `model.generate(ids)`) on
    the loop's element or on what the body derives from it, also when that
    method turns autograd off itself (a sentence-transformers model's
    `encode`). The element of a `while` loop (a
    worker serving a queue) is what its body takes by a call each iteration
    (`job = queue.get()`), and so is that of a `for` whose own variable
    the body never reads (`for _ in range(n_batches): tokens =
    store.get_batch_tokens(k)`). A loop over items whose per-item work is in
    another file and runs without such a context is missed.

    ## References
    - [CUDA memory management (torch.cuda.empty_cache)](https://pytorch.org/docs/stable/notes/cuda.html#memory-management)
    - [torch.cuda.empty_cache](https://pytorch.org/docs/stable/generated/torch.cuda.empty_cache.html)
    """

    CODE = "MEM401"
    NAME = "empty-cache-in-loop"
    MESSAGE = "`torch.cuda.empty_cache()` in a loop frees no live tensor and forces slow re-allocation every iteration"
    SEVERITY = Severity.WARNING
    FIX_TITLE = "Remove the `empty_cache()` call"
    FIX_APPLICABILITY = Applicability.UNSAFE
    TRIGGERS = ("empty_cache", "clear_device_cache", "release_memory")
    NEEDS_NAMES = ("empty_cache", "clear_device_cache", "release_memory")
    FRAMEWORK = "torch"
    VALID = (
        "import torch\ndef validate(model, data):\n    model(data)\n    torch.cuda.empty_cache()\ndef train(model, loader, opt, every):\n    for step, batch in enumerate(loader):\n        model(batch).backward()\n        opt.step()\n        if step % every == 0:\n            validate(model, batch)\n",
        "import torch\ndef train(model, loader, opt):\n    for batch in loader:\n        model(batch).backward()\n        opt.step()\n    torch.cuda.empty_cache()\n",
        "import torch\ndef train(model, loader, opt):\n    for step, batch in enumerate(loader):\n        model(batch).backward()\n        if step % 1000 == 0:\n            torch.cuda.empty_cache()\n",
        "import torch\ndef fit(trainer, epochs):\n    for epoch in range(epochs):\n        trainer.train_one_epoch()\n        torch.cuda.empty_cache()\n",
        "import torch\ndef bench(names, x):\n    for name in names:\n        model = load(name).cuda()\n        model(x)\n        del model\n        torch.cuda.empty_cache()\n",
        "import torch\ndef run(model, loader):\n    for batch in loader:\n        try:\n            model(batch)\n        except torch.cuda.OutOfMemoryError:\n            torch.cuda.empty_cache()\n",
        "import mylib\ndef run(model, loader):\n    for batch in loader:\n        mylib.empty_cache()\n",
        "import torch\ndef train(model, loader, opt, accum):\n    for i, batch in enumerate(loader):\n        model(batch).loss.backward()\n        if (i + 1) % accum == 0:\n            opt.step()\n            opt.zero_grad()\n            if (i + 1) % (accum * 500) == 0:\n                torch.cuda.empty_cache()\n",
    )
    INVALID = (
        "import torch\ndef train(model, loader, opt):\n    for batch in loader:\n        model(batch).backward()\n        opt.step()\n        torch.cuda.empty_cache()  # expect: MEM401\n",
        "from torch.cuda import empty_cache as ec\ndef infer(model, xs):\n    model.eval()\n    i = 0\n    while i < len(xs):\n        out = model(xs[i])\n        ec()  # expect: MEM401\n        i += 1\n",
        "import torch as T\nimport gc\ndef free():\n    gc.collect()\n    T.cuda.empty_cache()  # expect: MEM401\ndef run(model, batches):\n    model.eval()\n    return [model(b) for b in batches if free() is None]\n",
        "import torch\nimport lightning as L\nclass Lit(L.LightningModule):\n    def training_step(self, batch, idx):\n        loss = self.model(batch)\n        torch.cuda.empty_cache()  # expect: MEM401\n        return loss\n",
        "import torch\ndef train(model, loader, opt, device='cuda'):\n    backend = getattr(torch, device, torch.cuda)\n    for batch in loader:\n        opt.zero_grad()\n        model(batch).sum().backward()\n        opt.step()\n        backend.empty_cache()  # expect: MEM401\n",
        "from accelerate.utils import clear_device_cache\ndef train(model, loader, opt):\n    for step, batch in enumerate(loader):\n        model(batch).loss.backward()\n        opt.step()\n        clear_device_cache(garbage_collection=True)  # expect: MEM401\n",
        "import torch\ndef train(model, loader, opt, accum):\n    for i, batch in enumerate(loader):\n        (model(batch).loss / accum).backward()\n        if (i + 1) % accum == 0:\n            opt.step()\n            opt.zero_grad()\n            torch.cuda.empty_cache()  # expect: MEM401\n",
    )

    def visit_Call(self, node: ast.Call) -> None:
        if not self._flushes(node) or self._guarded(node):
            return
        semantic = self.ctx.semantic
        loops = semantic.enclosing_loops(node)
        if loops:
            if self._step_loop(loops[0]):
                self.report(node, fix=self._removal(node))
            return
        comprehension = semantic.comprehension_of(node)
        if comprehension is not None:
            if semantic.is_run_comprehension(comprehension):
                self.report(node, fix=self._removal(node))
            return
        function = semantic.function_of(node)
        if isinstance(function, FUNCTION_TYPES) and self._per_step_function(function, self._unconditional(node, function)):
            self.report(node, message="`torch.cuda.empty_cache()` runs once per step (in a function called per batch): it frees no live tensor and forces slow re-allocation", fix=self._removal(node))

    def _flushes(self, call: ast.Call) -> bool:
        """``call`` empties the cache: by its import spelling, or through a
        device module picked at run time (``getattr(torch, device).empty_cache()``)."""
        if self.ctx.qualified(call.func) in EMPTY_CACHE:
            return True
        func = call.func
        return isinstance(func, ast.Attribute) and func.attr == "empty_cache" and \
            self.ctx.semantic.value(func.value).type_name in DEVICE_BACKEND_MODULES

    # -- where the call runs ---------------------------------------------
    def _guarded(self, node: ast.AST) -> bool:
        """Inside an ``except`` handler, or under a periodic or memory-checking condition."""
        return self.ctx.semantic.first_ancestor_verdict(node, "MEM401 guard", self._guard_verdict, False)

    def _guard_verdict(self, ancestor: ast.AST) -> bool | None:
        if isinstance(ancestor, (*FUNCTION_TYPES, ast.Lambda)):
            return False
        if isinstance(ancestor, ast.ExceptHandler):
            return True
        if isinstance(ancestor, (ast.If, ast.IfExp, ast.While)):
            if _MEMORY_GUARD.search(self.ctx.code(ancestor.test)):
                return True
            if has_modulo(ancestor.test) and not self._steps_optimizer(ancestor):
                return True
        return None

    def _steps_optimizer(self, guard: ast.AST) -> bool:
        """The periodic ``if`` runs an optimizer step in one of its branches
        (``if (i + 1) % accum == 0: optimizer.step()``): its period is the
        gradient-accumulation boundary, so a flush under it runs once per
        training step, not occasionally. A step inside a loop nested in the
        ``if`` does not count."""
        if not isinstance(guard, ast.If):
            return False
        semantic = self.ctx.semantic
        for node in walk([*guard.body, *guard.orelse]):
            if isinstance(node, ast.Call) and is_optimizer_step(node, semantic) and not self._in_nested_loop(node, guard):
                return True
        return False

    def _step_loop(self, loop: ast.For | ast.AsyncFor | ast.While) -> bool:
        """A loop whose iterations are training or inference steps: a run loop
        that does step work itself (not an epoch loop around a batch loop,
        not a loop over models or checkpoints that runs a whole job each)."""
        cache = self.__dict__.setdefault("_step_loops", {})
        if loop not in cache:
            semantic = self.ctx.semantic
            cache[loop] = not self._new_module_each_iteration(loop) and (
                semantic.is_run_loop(loop) and self._does_step_work(loop) or self._infers_per_element(loop)
                or self._module_infers_per_element(loop))
        return cache[loop]

    def _module_infers_per_element(self, loop: ast.AST) -> bool:
        """``loop`` is a ``for`` whose body (not a loop nested in it) runs an
        inference method of a module (``encoder.encode(texts)``,
        ``model.generate(ids)``) on the loop's element or on what the body
        derives from it (``part = df[df.batch == n]``, ``texts =
        part.text.tolist()``): one inference step per item, whether the
        method turns autograd off itself or not. Not a loop over a literal
        or over a module's own members."""
        if not isinstance(loop, (ast.For, ast.AsyncFor)) or literal_iterable(loop.iter) or self._over_module_members(loop.iter):
            return False
        semantic = self.ctx.semantic
        derived = set(targets_of(loop.target))
        calls = []
        for node in walk(loop.body):
            if self._in_nested_loop(node, loop):
                continue
            if isinstance(node, ast.Assign) and any(isinstance(n, ast.Name) and n.id in derived for n in ast.walk(node.value)):
                derived.update(name for target in node.targets for name in targets_of(target))
            elif isinstance(node, ast.Call) and method_name(node) in _INFERENCE_METHODS:
                calls.append(node)
        return any(_mentions_any(call, derived) and semantic.value(call.func.value).is_module for call in calls)

    def _infers_per_element(self, loop: ast.AST) -> bool:
        """``loop`` is a ``for`` that, in its own body, enters a grad-disabled
        context (``with torch.inference_mode():``) and binds there the result
        of a call given the loop's element (``codes = engine.generate(text)``):
        one inference step per item (an utterance, an image, a request),
        whatever runs it -- a model of another file included. Not a loop over
        a module's own members (``model.named_parameters()``), nor in-place
        work whose result is dropped (``p.copy_(src[name])``). The element
        of a ``while`` loop is what its body takes by a call before the
        context (``item = queue.get()``, ``batch = next(it)``): a worker
        loop serving one request per iteration; so is that of a ``for``
        whose own variable the body never reads (``for _ in
        range(n_batches): tokens = store.get_batch_tokens(k)``): a counter,
        each iteration drawing its batch by a call."""
        if isinstance(loop, ast.While):
            targets = self._taken_per_iteration(loop)
        elif literal_iterable(loop.iter) or self._over_module_members(loop.iter):
            return False
        else:
            targets = set(targets_of(loop.target))
            if not _reads_any(loop.body, targets):
                targets = self._taken_per_iteration(loop)
        semantic = self.ctx.semantic
        if semantic.grad_mode(loop) is Tri.NO:  # the loop itself runs grad-disabled (`@torch.inference_mode()` method)
            return any(self._binds_call_of(statement, targets) for statement in walk(loop.body)
                       if not self._in_nested_loop(statement, loop))
        for node in walk(loop.body):
            if not isinstance(node, WITH_TYPES) or self._in_nested_loop(node, loop):
                continue
            if not any(semantic.grad_mode_of_context(item.context_expr) is Tri.NO for item in node.items):
                continue
            if any(self._binds_call_of(statement, targets) for statement in walk(node.body)):
                return True
        return False

    @staticmethod
    def _binds_call_of(statement: ast.AST, targets: set[str]) -> bool:
        """``statement`` binds the result of a call given one of ``targets``."""
        return isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and statement.value is not None and any(
            isinstance(call, ast.Call) and _mentions_any(call, targets) for call in walk(statement.value))

    def _taken_per_iteration(self, loop: ast.AST) -> set[str]:
        """Names the body of ``loop`` (not a nested loop or context) binds
        to the result of a call (``chunk_id, sentences = queue.get()``):
        each iteration's new element."""
        taken = set()
        for node in walk(loop.body):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and not self._in_nested_loop(node, loop) and \
                    not any(isinstance(a, WITH_TYPES) for a in self._ancestors_within(node, loop)):
                for target in node.targets:
                    taken.update(targets_of(target))
        return taken

    def _ancestors_within(self, node: ast.AST, loop: ast.AST) -> list[ast.AST]:
        found = []
        for ancestor in self.ctx.semantic.ancestors(node):
            if ancestor is loop:
                break
            found.append(ancestor)
        return found

    def _over_module_members(self, iterable: ast.expr) -> bool:
        """``iterable`` is a module (an ``nn.ModuleList``) or what a module's
        method hands out (``model.parameters()``, ``model.named_modules()``)."""
        semantic = self.ctx.semantic
        if semantic.value(iterable).is_module:
            return True
        while isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.args:
            iterable = iterable.args[0]  # enumerate(model.parameters()), zip(...)
        return isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute) and \
            semantic.value(iterable.func.value).is_module

    def _new_module_each_iteration(self, loop: ast.AST) -> bool:
        """The loop builds or loads the module it runs, once per iteration
        (a sweep over models or checkpoints: one whole job per iteration)."""
        semantic = self.ctx.semantic
        fresh = rebound_in(loop)
        return any(semantic.is_forward_call(call) and dotted_name(call.func) in fresh
                   for call in walk(loop.body) if isinstance(call, ast.Call))

    def _does_step_work(self, loop: ast.For | ast.AsyncFor | ast.While) -> bool:
        """True when the body of ``loop`` (not of a loop nested in it) runs a
        forward pass, ``.backward()`` or an optimizer step itself."""
        semantic = self.ctx.semantic
        for node in walk(loop.body):
            if not isinstance(node, ast.Call) or self._in_nested_loop(node, loop):
                continue
            if is_backward(node, self.ctx) or is_optimizer_step(node, semantic) or semantic.is_forward_call(node):
                return True
            if method_name(node) in _INFERENCE_METHODS and semantic.value(node.func.value).is_module:
                return True
            callee = semantic.callee(node)
            if callee is not None and not _loops_over_run(semantic, callee) and (
                    semantic.canonical(callee).trains or semantic.canonical(callee).runs_forward):
                return True  # `train_step(batch)`: a step, not a whole epoch
        return False

    def _in_nested_loop(self, node: ast.AST, loop: ast.AST) -> bool:
        for ancestor in self.ctx.semantic.ancestors(node):
            if ancestor is loop:
                return False
            if isinstance(ancestor, LOOP_TYPES):
                return True
        return False

    def _per_step_function(self, function: ast.FunctionDef | ast.AsyncFunctionDef, every_call: bool = False) -> bool:
        """A framework hook called once per batch, or a function called once
        per iteration of a step loop or of a comprehension over a stream.
        ``every_call``: the flush runs on every call of ``function`` (under
        no condition); then a method of a module's forward pass, or a
        function such a method calls, counts too: ``Module.__call__`` runs
        it once per forward, i.e. per batch. A conditional flush there is
        left alone (an opt-in memory setting of the library)."""
        semantic = self.ctx.semantic
        repetition = semantic.repetition(function)
        if repetition is not None and repetition.reason == "hook":
            return True
        if every_call and semantic.in_forward_pass(function) is not None:
            return True
        for call in semantic.call_sites_of(function):
            if self._guarded(call):  # `if step % N == 0: log_validation(...)`: every N steps, not each one
                continue
            caller = semantic.function_of(call)
            if every_call and caller is not None and semantic.in_forward_pass(caller) is not None:
                return True  # an op function that a module's forward calls
            loops = semantic.enclosing_loops(call)
            if loops and self._step_loop(loops[0]):
                return True
            comprehension = semantic.comprehension_of(call)
            if not loops and comprehension is not None and semantic.is_run_comprehension(comprehension):
                return True
        return False

    def _unconditional(self, node: ast.AST, function: ast.AST) -> bool:
        """``node`` runs on every call of ``function``: no ``if``, loop,
        ``try`` or conditional expression of ``function`` encloses it."""
        for ancestor in self.ctx.semantic.ancestors(node):
            if ancestor is function:
                return True
            if isinstance(ancestor, (ast.If, ast.IfExp, ast.Try, ast.BoolOp, ast.Match, *LOOP_TYPES)):
                return False
        return False

    # -- the fix -------------------------------------------------------------
    def _removal(self, call: ast.Call) -> Fix | None:
        """Delete the statement ``call`` makes up (its whole lines), or turn
        it into ``pass`` when it is the only statement of its block; None
        when the call is part of a larger expression or shares a line."""
        parents = self.ctx.semantic.parents
        statement = parents.get(call)
        if not isinstance(statement, ast.Expr):
            return None
        block = _block_of(statement, parents[statement])
        if self._after_code_on_its_line(statement) or _shares_a_line(statement, block):
            return None
        return self.fix(self.plan("remove_statement", statement))

    def _after_code_on_its_line(self, statement: ast.stmt) -> bool:
        """True when code precedes ``statement`` on its first line (``for b in x: f()``)."""
        (line, col), _ = self.ctx.span(statement)
        return bool(self.ctx.line(line)[: col - 1].strip())


def _mentions_any(call: ast.Call, names: set[str]) -> bool:
    """One of ``names`` is among ``call``'s arguments (``engine.synthesize(text, ...)``)."""
    arguments = [*call.args, *(k.value for k in call.keywords)]
    return any(isinstance(n, ast.Name) and n.id in names for a in arguments for n in ast.walk(a))


def _reads_any(body: list[ast.stmt], names: set[str]) -> bool:
    """A statement of ``body`` reads one of ``names``."""
    return any(isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in names
               for statement in body for node in ast.walk(statement))


def _loops_over_run(semantic, function: ast.AST) -> bool:
    """``function`` has a run loop of its own (a whole epoch per call)."""
    return any(semantic.is_run_loop(loop) for loop in semantic.own_nodes(function, (ast.For, ast.AsyncFor, ast.While)))


def _block_of(statement: ast.stmt, parent: ast.AST) -> list[ast.stmt]:
    """The statement list of ``parent`` (its body, ``else:`` or ``finally:``) that holds ``statement``."""
    blocks = (getattr(parent, field, None) for field in ("body", "orelse", "finalbody"))
    return next(block for block in blocks if isinstance(block, list) and any(item is statement for item in block))


def _shares_a_line(statement: ast.stmt, block: list[ast.stmt]) -> bool:
    """True when another statement of ``block`` is on a line of ``statement`` (``a(); b()``)."""
    return any(
        other is not statement and other.lineno <= statement.end_lineno and statement.lineno <= other.end_lineno
        for other in block
    )
