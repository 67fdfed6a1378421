"""MEM112 retry-inside-oom-handler."""

from __future__ import annotations

import ast

from memlint.lint.diagnostic import Severity
from memlint.lint.names import dotted_name
from memlint.lint.rule import Rule
from memlint.lint.syntax import FUNCTION_TYPES

#: Calls that free or report, not retry (their names are the library's own).
_NOT_A_RETRY = frozenset({
    "print", "len", "str", "repr", "int", "float", "isinstance", "getattr", "setattr", "hasattr", "range",
    "torch.cuda.empty_cache", "torch.cuda.synchronize", "torch.cuda.reset_peak_memory_stats", "gc.collect",
    "torch.cuda.memory_summary", "torch.cuda.memory_allocated", "torch.cuda.memory_reserved", "time.sleep",
})


class RetryInsideOomHandler(Rule):
    """## What it does
    Reports a step run again inside the `except` block that caught an
    out-of-memory error: `except torch.cuda.OutOfMemoryError:` (or an
    `except RuntimeError as e:` whose `if "out of memory" in str(e):` branch,
    or `is_oom_error(e)`, takes it) that runs a forward pass, `.backward()`
    or an optimizer step, calls a function of the file that does, calls the
    enclosing function again (a recursive retry), or repeats the one call a
    `try` block of one statement made (`out = generate(batch)` in both).

    ## Why is this bad?
    While the handler runs, the exception is alive, and with it its
    traceback: every frame of the failed step and every tensor those frames
    hold (activations, the half-built graph, the batch). The retry starts
    with that memory still allocated, so it runs out of memory again even
    at a smaller batch size, or fragments what is left.

    ## Example
    ```python
    try:
        loss = model(batch).loss
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        loss = model(batch[: len(batch) // 2]).loss
    ```

    ## Use instead
    ```python
    oom = False
    try:
        loss = model(batch).loss
    except torch.cuda.OutOfMemoryError:
        oom = True
    if oom:  # the exception and its frames are gone here
        torch.cuda.empty_cache()
        loss = model(batch[: len(batch) // 2]).loss
    ```

    ## Known problems
    A handler that only frees memory, logs, lowers a batch size or sets a
    flag, and lets the loop around it retry, is what the rule asks for and
    is not reported. Forward passes are known by the semantic model (a
    module of the file, a model built or moved here); a retry through a
    function of another file is seen only when the `try` block made the same
    call. A handler that re-raises before the retry is not told apart.

    ## References
    - [PyTorch FAQ: my out of memory exception handler can't allocate memory](https://pytorch.org/docs/stable/notes/faq.html#my-out-of-memory-exception-handler-can-t-allocate-memory)
    """

    CODE = "MEM112"
    NAME = "retry-inside-oom-handler"
    MESSAGE = "the step is retried inside the out-of-memory handler: the live exception keeps the failed step's tensors allocated during the retry"
    SEVERITY = Severity.WARNING
    TRIGGERS = ("OutOfMemoryError", "out of memory", "is_oom_error", "should_reduce_batch_size")
    FRAMEWORK = "torch"
    VALID = (
        "import torch\ndef step(model, batch):\n    oom = False\n    try:\n        out = model(batch)\n    except torch.cuda.OutOfMemoryError:\n        oom = True\n    if oom:\n        torch.cuda.empty_cache()\n        out = model(batch[:1])\n    return out\n",
        "import torch\ndef run(model, loader, bs):\n    for batch in loader:\n        try:\n            model(batch).sum().backward()\n        except RuntimeError as e:\n            if 'out of memory' in str(e):\n                torch.cuda.empty_cache()\n                bs //= 2\n            else:\n                raise\n",
        "import torch\ndef step(model, batch):\n    try:\n        return model(batch)\n    except RuntimeError as e:\n        if 'shape' in str(e):\n            return model(batch.reshape(1, -1))\n        raise\n",
        "import torch\ndef step(model, batch, log):\n    try:\n        return model(batch)\n    except torch.cuda.OutOfMemoryError:\n        log.warning('oom at %d', len(batch))\n        torch.cuda.empty_cache()\n        return None\n",
    )
    INVALID = (
        "import torch\ndef fit(model, opt, loader, step):\n    for batch in loader:\n        try:\n            step(model, opt, batch)\n        except RuntimeError as err:\n            if 'out of memory' not in str(err):\n                raise\n            torch.cuda.empty_cache()\n            step(model, opt, batch[: len(batch) // 2])  # expect: MEM112\n",
        "import torch\nimport torch.nn as nn\ndef step(batch):\n    model = nn.Linear(4, 4).cuda()\n    try:\n        out = model(batch)\n    except torch.cuda.OutOfMemoryError:\n        torch.cuda.empty_cache()\n        out = model(batch[:1])  # expect: MEM112\n    return out\n",
        "import torch\ndef train_step(model, batch, opt):\n    try:\n        loss = model(batch).sum()\n        loss.backward()\n    except RuntimeError as e:\n        if 'out of memory' in str(e):\n            torch.cuda.empty_cache()\n            return train_step(model, batch[: len(batch) // 2], opt)  # expect: MEM112\n        raise\n    opt.step()\n",
        "import torch\ndef infer(pipe, prompts):\n    try:\n        images = pipe.generate(prompts)\n    except torch.OutOfMemoryError:\n        images = [pipe.generate([p]) for p in prompts]  # expect: MEM112\n    return images\n",
    )

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        semantic = self.ctx.semantic
        branch = semantic.oom_branch(node)
        if not branch:
            return
        try_node = semantic.parents.get(node)
        tried = self._tried_callees(try_node) if isinstance(try_node, (ast.Try, getattr(ast, "TryStar", ast.Try))) else set()
        function = semantic.function_of(node)
        for statement in branch:
            retry = self._retry_in(statement, tried, function)
            if retry is not None:
                self.report(retry)
                return

    def _tried_callees(self, try_node: ast.Try) -> set[str]:
        """The dotted callee of the one call a ``try`` block of one statement
        makes (``images = pipe.generate(prompts)``): the operation that ran
        out of memory. A longer block does not say which call failed."""
        found = set()
        if len(try_node.body) != 1:
            return found
        for statement in try_node.body:
            value = getattr(statement, "value", None)
            if isinstance(value, ast.Await):
                value = value.value
            if isinstance(value, ast.Call):
                name = dotted_name(value.func)
                if name is not None and name not in _NOT_A_RETRY and self.ctx.qualified(value.func) not in _NOT_A_RETRY:
                    found.add(name)
        return found

    def _retry_in(self, statement: ast.stmt, tried: set[str], function) -> ast.AST | None:
        semantic = self.ctx.semantic
        if isinstance(statement, (*FUNCTION_TYPES, ast.ClassDef)):
            return None
        for node in ast.walk(statement):
            if not isinstance(node, ast.Call):
                continue
            if semantic.is_forward_call(node) or semantic.is_backward_call(node) or semantic.is_optimizer_step(node):
                return statement
            callee = semantic.callee(node)
            if callee is not None and (callee is function or semantic.trains(callee.body if isinstance(callee, FUNCTION_TYPES) else [])
                                       or semantic.forward_calls(callee)):
                return statement
            if isinstance(function, FUNCTION_TYPES) and dotted_name(node.func) in (function.name, f"self.{function.name}"):
                return statement
            if dotted_name(node.func) in tried:
                return statement
        return None
