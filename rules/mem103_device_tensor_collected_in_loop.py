"""MEM103 device-tensor-collected-in-loop."""

import ast

from memlint.lint.diagnostic import Applicability, Fix, Severity
from memlint.lint.names import dotted_name, root_name, targets_of
from memlint.lint.patterns import method_call_plan, names_in
from memlint.lint.rule import Rule
from memlint.lint.semantic.stores import STORING_METHODS, leaf_values, store_of
from memlint.lint.semantic.values import Kind, Tri
from memlint.lint.syntax import FOR_TYPES, FUNCTION_TYPES, LOOP_TYPES, is_constant
from memlint.lint.walk import Visitor, visit as walk_visit

#: Keyed stores (``d.setdefault(k, v)``, ``d.update(...)``) overwrite per key: not growth by themselves.
KEYED_METHODS = frozenset({"setdefault", "update"})
#: Calls on the container inside the loop that keep it bounded.
SHRINKING_METHODS = frozenset({"clear", "pop", "popleft", "popitem", "remove"})


class DeviceTensorCollectedInLoop(Rule):
    """## What it does
    Reports a tensor that is on the accelerator and carries no autograd
    graph (detached, or computed under `torch.no_grad()`) stored into a
    container that outlives the loop iteration: `snapshots.append(x.detach())`,
    `preds.extend(...)`, `cache[step] = out` where the container is bound
    before the loop. Tensors nested in dicts, tuples and lists count.

    ## Why is this bad?
    Detaching drops the graph but not the data: every stored tensor still
    occupies accelerator memory until the container is dropped. Memory grows
    linearly with the number of iterations, and a long evaluation or an
    optimisation with thousands of steps runs out of GPU memory.

    ## Example
    ```python
    snapshots = []
    for step in range(steps):
        optimise(x)
        snapshots.append(x.detach().clone())
    ```

    ## Use instead
    ```python
    snapshots = []
    for step in range(steps):
        optimise(x)
        snapshots.append(x.detach().clone().cpu())  # or .item() / .tolist()
    ```

    ## Fix safety
    The fix appends `.cpu()` to the stored tensor. It is unsafe: code that
    later uses the collected tensors on the accelerator (`torch.cat(preds)`
    compared with device tensors) now receives CPU tensors. No fix is
    offered for a conditional or `and`/`or` value: its other branch may be
    no tensor; nor for a value the code moves to the device as it stores it
    (`cache.append(x.to(device))`, `.cuda()`): the program keeps that
    cache on the device on purpose.

    ## Known problems
    Tensors graph-attached when stored are left to MEM102. An attribute of
    a library model moved to the accelerator that is not known to be a
    parameter, buffer or submodule (`model.visual.image_size`) is not taken
    for a device tensor: `.cuda()` moves only those. Loops over a
    fixed structure (a module's layers, a literal range of a few steps),
    containers cleared or popped inside the loop, `deque(maxlen=...)`
    buffers, stores that run only while `len(container)` is below a bound
    (`if len(buf) < cap: buf.append(t)`, a ring buffer) and `d[k] = v` with a key that does not change per iteration
    are not reported (their size is bounded); nor are one-element tensors
    (a loss, a full reduction) kept per batch of an evaluation loop, 512
    bytes each in the caching allocator, nor an integer index into one
    (`loss.data[0]`: a Python number in torch <= 0.3, an `IndexError` since). A list of empty slots filled by
    index (`cache = [None] * n`, then `cache[idx] = latents[i:i + 1]` per
    sample) keeps each value as `append` would, and is reported; a list of
    fixed length whose slots are overwritten by an index that walks a fixed
    structure inside the run loop (`for i, m in enumerate(models):
    caches[i] = new_cache` once per decoding step) replaces, never grows,
    and is not reported. A store that runs on one iteration of its loop
    only (`if step == 0:`, the loop's `range`/`enumerate` counter compared
    with a constant) adds one item per run of that loop and is not reported
    unless a loop around it grows with the run (not a `range` of a count
    the file fixes). An optimizer's walk over its parameters (a `for p in
    ...` over no stream that reads or sets `p.grad`, and neither trains nor
    runs a forward pass) runs once per parameter and is no run loop. A local
    list that gathers the rows of one tensor (`for row in batch`, or its
    chunks: `for i in range(0, len(t), bs)` slicing `t[i:i + bs]`) and
    after the loop is only joined by `torch.cat`/`torch.stack` (the name
    may then hold the joined tensor: `embs = torch.cat(embs)`) holds one
    result for one call and is not reported. A loop must grow with the run:
    walk data or steps (a loop that runs a module's own method on its item,
    `encoder.encode(prompts)`, walks data), or (a `while`) draw batches with
    `next()` or train;
    the micro-batches of one step (a list rebuilt every step), a list made
    afresh for each batch of a loader and filled by an inner loop over
    something that is no stream (`for crop in args.crops`), and a `while`
    loop generating up to a length are not reported (a Lightning callback's
    loop over `trainer.train_dataloader` walks the whole training set). A
    loop inside a module's own method is within one forward pass and not
    reported, unless the method is outside the forward pass and the loop
    walks data and runs a forward pass on it in its own body (`def
    predict(self, loader): for x in loader: out = self(x)`); a sampling
    loop that calls the module's methods step by step is not. Whether a value is on the
    accelerator is inferred from `.cuda()`, `.to(device)`, `device=`, model
    placement and framework hooks that receive device batches (a Lightning
    module's step hooks, a Lightning callback's or prediction writer's
    `on_*_batch_end`, also when their parameters are annotated `Any`), in the same
    file; tensors that arrive on the accelerator from another module are
    not seen.

    ## References
    - [PyTorch FAQ: my out of memory exception handler can't allocate memory](https://pytorch.org/docs/stable/notes/faq.html)
    - [CUDA semantics: memory management](https://pytorch.org/docs/stable/notes/cuda.html#memory-management)
    """

    CODE = "MEM103"
    NAME = "device-tensor-collected-in-loop"
    MESSAGE = "an accelerator tensor is stored in a container that outlives the iteration: device memory grows every iteration"
    SEVERITY = Severity.WARNING
    FIX_TITLE = "Move the stored tensor to the CPU with `.cpu()`"
    FIX_APPLICABILITY = Applicability.UNSAFE
    #: Lightning's step hooks get their batch on the device without any of the other words in the file;
    #: so do the models and loaders an engine prepares (`accelerator.prepare(...)`, `fabric.setup_dataloaders(...)`)
    TRIGGERS = ("cuda", ".to(", "device", "training_step", "validation_step", "test_step", "predict_step", ".prepare(", ".setup(", ".setup_dataloaders(",
                "_batch_end")  # a Lightning callback's batch hooks (`on_predict_batch_end`) get the device batch too
    NEEDS_NAMES = ("cuda", "to", "device", "prepare", "training_step", "validation_step", "test_step", "predict_step",
                   "compute_loss", "prediction_step", "setup", "setup_dataloaders",
                   "on_train_batch_end", "on_validation_batch_end", "on_test_batch_end", "on_predict_batch_end")  # how the model puts values on the accelerator
    FRAMEWORK = "torch"
    VALID = (
        "import torch\ndef f(model, loader):\n    preds = []\n    with torch.no_grad():\n        for x in loader:\n            preds.append(model(x.cuda()).cpu())\n",
        "import torch\ndef f(model, loader):\n    for x in loader:\n        batch_preds = []\n        batch_preds.append(model(x.cuda()).detach())\n",
        "import torch\ndef f(model, x, steps):\n    snaps = []\n    for _ in range(steps):\n        snaps.append(x.detach().clone().cpu())\n",
        "import torch\ndef f(model: torch.nn.Module, loader):\n    outs = []\n    for x in loader:\n        outs.append(model(x.cuda()))\n",
        "import torch\ndef f(self, x):\n    feats = []\n    with torch.no_grad():\n        for block in self.blocks:\n            x = block(x.cuda())\n            feats.append(x)\n    return feats\n",
        "import torch\nfrom collections import deque\ndef f(model, loader):\n    recent = deque(maxlen=10)\n    for x in loader:\n        recent.append(x.cuda())\n",
        "import torch\n@torch.no_grad()\ndef f(model, loader):\n    losses = []\n    for x in loader:\n        losses.append(model(x.cuda()).loss)\n    return torch.stack(losses).mean().item()\n",
    )
    INVALID = (
        "import torch\ndef f(steps):\n    x = torch.zeros(3, device='cuda', requires_grad=True)\n    opt = torch.optim.SGD([x], lr=0.1)\n    snaps = []\n    for _ in range(steps):\n        (x ** 2).sum().backward()\n        opt.step()\n        snaps.append(x.detach().clone())  # expect: MEM103\n",
        "import torch\ndef f(model, loader):\n    preds = []\n    model.cuda().eval()\n    with torch.no_grad():\n        for x, y in loader:\n            preds.append(model(x.cuda()))  # expect: MEM103\n",
        "import torch\ndef f(model, loader, device):\n    model.train()\n    hist = []\n    for i, (x, y) in enumerate(loader):\n        out = model(x.to(device)).detach()\n        hist.append({'out': out, 'y': y})  # expect: MEM103\n",
        "import torch\ndef f(model, loader, device):\n    model.eval()\n    cache = {}\n    while True:\n        x = next(loader)\n        with torch.no_grad():\n            cache[len(cache)] = model(x.to(device))  # expect: MEM103\n",
    )

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute) and node.func.attr in STORING_METHODS and node.func.attr not in KEYED_METHODS:
            self._check(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        if isinstance(node.targets[0], ast.Subscript):
            self._check(node)

    def _check(self, node: ast.Call | ast.Assign) -> None:
        semantic = self.ctx.semantic
        if not semantic.enclosing_loops(node) and not semantic.may_persist(root_name(_receiver(node)) or "", node):
            return  # cheap check first: the rest interprets the function
        function = semantic.function_of(node)
        module_method = function is not None and semantic.is_module_method(function)
        if module_method and semantic.in_forward_pass(function) is not None:
            return  # within one forward pass: no run loop carries it (see SemanticModel.keeper)
        store = store_of(semantic, node)
        keeper = semantic.keeper(store.root, node) if store is not None else None
        if keeper is None or keeper.why == "loop" and not self._grows_with_the_run(keeper.loop):
            return
        if keeper.why == "loop" and self._once_per_run_of(node, keeper.loop) \
                and not self._grows_outside(keeper.loop, store.root):
            return  # `if step == 0: firsts.append(y)`: one item per run of the loop
        if module_method and keeper.why != "loop":
            return  # a module's own method (`predict`) counts only for a run loop of its own
        if keeper.why == "loop" and (self._builds_one_batch(keeper.loop, store.root)
                                     or self._assembles_outer_item(keeper.loop, store.root)):
            return
        if any(semantic.value(value).graph is Tri.YES and not semantic.value(value).leaf for value in store.values):
            return  # attached: MEM102's finding
        evaluation = self._evaluation_loop(node)
        leaves = [leaf for leaf in leaf_values(store.values)
                  if _device_tensor(semantic.value(leaf)) and not (evaluation and semantic.value(leaf).scalar)]
        if not leaves or self._bounded(store.root, node) or self._replaces_slot(node):
            return
        self.report(node, fix=self._fix(leaves))

    def _grows_with_the_run(self, loop: ast.AST) -> bool:
        """The loop's iterations come with the data or the training steps (see
        :meth:`SemanticModel.walks_data`); a loop over ``range(k)`` that
        neither trains nor slices the data (``k`` draft tokens, ``n`` samples)
        makes an output of the size asked for."""
        return self.ctx.semantic.walks_data(loop, counted=False) and not self._walks_parameters(loop)

    def _once_per_run_of(self, node: ast.AST, loop: ast.AST) -> bool:
        """``node`` runs only under ``if i == c`` (or ``c == i``), ``i`` the
        counter of ``loop`` (``for i in range(...)``, ``for i, x in
        enumerate(...)``) and ``c`` a constant: on one iteration of it."""
        if not isinstance(loop, FOR_TYPES):
            return False
        counter = _loop_counter(self.ctx, loop)
        if counter is None:
            return False
        child = node
        for ancestor in self.ctx.semantic.ancestors(node):
            if ancestor is loop:
                return False
            if isinstance(ancestor, ast.If) and child in ancestor.body and _tests_equal_to_constant(ancestor.test, counter):
                return True
            child = ancestor
        return False

    def _grows_outside(self, loop: ast.AST, container: str) -> bool:
        """A loop around ``loop``, with ``container`` bound outside it, grows
        with the run and is not a ``range`` of a count the file fixes."""
        semantic = self.ctx.semantic
        for outer in semantic.enclosing_loops(loop):
            if not semantic.outside(container, outer):
                return False
            fixed = semantic.range_count(outer.iter) if isinstance(outer, FOR_TYPES) else None
            if self._grows_with_the_run(outer) and fixed is None:
                return True
        return False

    def _walks_parameters(self, loop: ast.AST) -> bool:
        """A ``for p in ...`` (not over a stream) whose body reads or sets
        ``p.grad`` and neither trains nor runs a forward pass: an optimizer's
        walk over its parameters (``for p in self.params``), which runs once
        per parameter, not once per batch or step. Moving a gradient to its
        parameter's device (``grad.to(p.data)``) is not data sent to the
        accelerator."""
        semantic = self.ctx.semantic
        if not isinstance(loop, FOR_TYPES) or not isinstance(loop.target, ast.Name) \
                or semantic.value(loop.iter).stream is Tri.YES:
            return False
        item = loop.target.id
        reads_grad = any(isinstance(node, ast.Attribute) and node.attr == "grad" and isinstance(node.value, ast.Name)
                         and node.value.id == item for statement in loop.body for node in ast.walk(statement))
        return reads_grad and not semantic.trains(loop.body) and not any(
            isinstance(node, ast.Call) and semantic.is_forward_call(node)
            for statement in loop.body for node in ast.walk(statement))

    def _builds_one_batch(self, loop: ast.AST, container: str) -> bool:
        """``loop`` walks the rows of one tensor (``for row in batch``) into a
        local list bound just before it, and after the loop the list is only
        joined back into one tensor (``torch.cat(rows)``, ``torch.stack``):
        it holds at most one batch, for one call, and no memory outlives it."""
        semantic = self.ctx.semantic
        if not isinstance(loop, FOR_TYPES) or "." in container:
            return False
        walked = semantic.value(loop.iter)
        if (walked.kind is not Kind.TENSOR or walked.stream is Tri.YES) and not self._slices_one_tensor(loop):
            return False
        unit = semantic.unit_of(loop)
        if not isinstance(unit, FUNCTION_TYPES) or container not in semantic.bound_before(loop):
            return False
        reads = _local_reads(semantic, unit, container)
        if reads is None:
            return False  # a global or a free variable lives on
        rebound = _rebinding_after(semantic, loop, container)
        after = False
        for node in reads:
            if node.lineno <= loop.end_lineno and node.lineno >= loop.lineno:
                continue
            if rebound is not None and node.lineno > rebound.end_lineno:
                continue  # the name holds the joined tensor now (`embs = torch.cat(embs)`), not the list
            if node.lineno < loop.lineno:
                return False  # read before the loop: not a list made for it
            call = semantic.parents.get(node)
            if not (isinstance(call, ast.Call) and call.args and call.args[0] is node
                    and self.ctx.qualified(call.func) in _JOINS):
                return False
            after = True
        return after

    def _slices_one_tensor(self, loop: ast.For | ast.AsyncFor) -> bool:
        """``for i in range(0, len(t), bs)`` (or ``t.size(0)``, ``t.shape[0]``)
        whose body slices ``t[i:i + bs]``, ``t`` a tensor already in memory
        (no stream; or a value moved to the accelerator): the loop walks the
        rows of one tensor in chunks."""
        semantic = self.ctx.semantic
        if not (isinstance(loop.iter, ast.Call) and self.ctx.qualified(loop.iter.func) == "range" and loop.iter.args):
            return False
        stop = loop.iter.args[1] if len(loop.iter.args) > 1 else loop.iter.args[0]
        measured = _measured_tensor(stop)
        if measured is None:
            return False
        value = semantic.value(measured)
        in_memory = value.kind is Kind.TENSOR or value.kind is Kind.UNKNOWN and value.device is Tri.YES  # `x.cuda()` of an unknown `x`
        if not in_memory or value.stream is Tri.YES:
            return False
        index = set(targets_of(loop.target))
        name = dotted_name(measured)
        return any(isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice) and node.slice.lower is not None
                   and dotted_name(node.value) == name and names_in(node.slice.lower) & index
                   for node in ast.walk(loop) if node is not loop.iter)

    def _assembles_outer_item(self, loop: ast.AST, container: str) -> bool:
        """``loop`` walks the item of the loop around it (``for chunk in
        chunks: rows = []; for req in chunk: rows.append(...)``) into a local
        list made afresh in that outer iteration, which is then joined
        (``torch.cat(rows)``) and the joined tensor handed straight to a
        forward pass or an in-file function: the list is one input batch,
        built and dropped once per outer item, never the run's outputs."""
        semantic = self.ctx.semantic
        if not isinstance(loop, FOR_TYPES) or "." in container or not isinstance(loop.iter, ast.Name):
            return False
        outers = semantic.enclosing_loops(loop)
        if not outers or not isinstance(outers[0], FOR_TYPES):
            return False
        outer = outers[0]
        item = {n.id for n in ast.walk(outer.target) if isinstance(n, ast.Name)}
        if loop.iter.id not in item or semantic.outside(container, outer):
            return False
        reads = _local_reads(semantic, semantic.unit_of(loop), container)
        if reads is None:
            return False  # a global or a free variable lives on
        fed = False
        for node in reads:
            if not outer.lineno <= node.lineno <= outer.end_lineno:
                return False  # read after the outer loop: it outlives the item
            parent = semantic.parents.get(node)
            if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute) and parent.func is not node \
                    and parent.func.attr in STORING_METHODS:
                return False  # stored into another container
            if isinstance(parent, (ast.Assign, ast.Return, ast.Yield)) or (
                    isinstance(parent, ast.Attribute) and parent.attr not in STORING_METHODS):
                return False  # aliased or handed out
            if (node.lineno > loop.end_lineno and isinstance(parent, ast.Call) and parent.args
                    and parent.args[0] is node and self.ctx.qualified(parent.func) in _JOINS):
                consumer = semantic.parents.get(parent)
                fed = fed or (isinstance(consumer, ast.Call) and parent in consumer.args
                              and (semantic.is_forward_call(consumer) or semantic.callee(consumer) is not None))
        return fed

    def _evaluation_loop(self, node: ast.AST) -> bool:
        """The innermost run loop around ``node`` does no training step: per-batch
        scalars collected there are bounded by one pass over the data."""
        loops = self.ctx.semantic.run_loops(node)
        return not loops or not self.ctx.semantic.trains(loops[0].body)

    def _bounded(self, container: str, node: ast.Call | ast.Assign) -> bool:
        """The container cannot grow with the number of iterations."""
        semantic = self.ctx.semantic
        loops = semantic.enclosing_loops(node)
        if isinstance(node, ast.Assign) and not _key_varies(node.targets[0], loops):
            return True
        if loops and _shrunk_in(loops[0], container):
            return True
        if self._memoized(node, container) or self._below_capacity(node, container):
            return True
        receiver = _receiver(node)
        return receiver is not None and semantic.value(receiver).type_name == "bounded"

    def _replaces_slot(self, node: ast.AST) -> bool:
        """``lst[i] = v`` where every binding of ``lst`` in its scope makes a
        list (a display, ``[None] * k``, a list comprehension) and the index
        comes from a loop over a fixed structure (``for i, m in
        enumerate(models)`` inside the run loop, over nothing the run loop
        binds per iteration: :meth:`_index_walks_structure`): assigning an
        index of a Python list replaces that element (or raises), so every
        run step overwrites the same few slots. An
        index taken from the batch (``for idx in batch["ids"]``) fills a new
        slot per sample and is still reported."""
        if not isinstance(node, ast.Assign) or not isinstance(node.targets[0], ast.Subscript):
            return False
        target = node.targets[0]
        if not isinstance(target.value, ast.Name) or isinstance(target.slice, ast.Slice):
            return False
        if not self._index_walks_structure(node, target):
            return False
        semantic = self.ctx.semantic
        bindings = semantic.scopes.bindings_of(target.value.id, semantic.scopes.scope_for(target.value))
        if not bindings:
            return False
        for binding in bindings:
            statement = semantic.parents.get(binding.node)
            if not (isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None
                    and _makes_list(statement.value)):
                return False
        return True

    def _index_walks_structure(self, node: ast.AST, target: ast.Subscript) -> bool:
        """Every name of ``target``'s index is the target of a loop around
        ``node`` over no stream, repeated by a loop around it, whose iterable mentions nothing that the
        loops around it bind per iteration (but the list itself, which its
        slot stores do not rebind): ``for i, m in enumerate(models)``, the
        same few slots in every step of the run."""
        semantic = self.ctx.semantic
        loops = semantic.enclosing_loops(node)
        names = names_in(target.slice)
        if not names:
            return False
        for name in names:
            walker = next((position for position, loop in enumerate(loops)
                           if isinstance(loop, FOR_TYPES) and name in targets_of(loop.target)), None)
            if walker is None or walker + 1 == len(loops) or semantic.value(loops[walker].iter).stream is Tri.YES:
                return False  # no loop around it repeats the walk: each index is a new slot filled once
            outer = set().union(*(_names_bound_per_iteration(loop) for loop in loops[walker + 1:])) - {target.value.id}
            if names_in(loops[walker].iter) & outer:
                return False
        return True

    def _below_capacity(self, node: ast.AST, container: str) -> bool:
        """The store runs only while the container is below a size
        (``if len(self.buffer) < self.capacity: self.buffer.append(t)``,
        usually with ``else: self.buffer[self.pos] = t``: a ring buffer):
        it stops growing at that size."""
        semantic = self.ctx.semantic
        child = node
        for ancestor in semantic.ancestors(node):
            if isinstance(ancestor, (*LOOP_TYPES, *FUNCTION_TYPES)):
                return False
            if isinstance(ancestor, ast.If) and child in ancestor.body and _caps_length(ancestor.test, container):
                return True
            child = ancestor
        return False

    def _memoized(self, node: ast.AST, container: str) -> bool:
        """``d[k] = v`` under ``if k not in d:``: a cache, bounded by its distinct keys."""
        if not isinstance(node, ast.Assign) or not isinstance(node.targets[0], ast.Subscript):
            return False
        key = dotted_name(node.targets[0].slice)
        if key is None:
            return False
        for ancestor in self.ctx.semantic.ancestors(node):
            if isinstance(ancestor, LOOP_TYPES):
                return False
            test = ancestor.test if isinstance(ancestor, ast.If) else None
            if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.NotIn)
                    and dotted_name(test.left) == key and root_name(test.comparators[0]) == container):
                return True
        return False

    def _fix(self, leaves: list[ast.expr]) -> Fix | None:
        """``.cpu()`` on the one tensor stored; None for several values, a
        non-tensor, or a tensor the code itself moves there as it stores it
        (``cache.append(x.to(device))``: an on-device cache on purpose)."""
        if len(leaves) != 1 or self.ctx.semantic.value(leaves[0]).kind is not Kind.TENSOR:
            return None
        if _explicit_move(leaves[0]):
            return None
        on_host = method_call_plan(self, leaves[0], "cpu")
        return None if on_host is None else self.fix(on_host)


#: Functions that join a list of tensors into one new tensor (torch 2.13.0
#: ``torch/_torch_docs.py``: ``concat`` and ``concatenate`` are aliases of ``cat``).
_JOINS = frozenset({"torch.cat", "torch.stack", "torch.concat", "torch.concatenate"})

#: Tensor methods that move a tensor to a device the program names.
_MOVES = frozenset({"to", "cuda"})


def _rebinding_after(semantic, loop: ast.AST, container: str) -> ast.Assign | None:
    """The first statement after ``loop`` in its own block that binds
    ``container`` again (``embs = torch.cat(embs, 0)``), or None."""
    parent = semantic.parents.get(loop)
    block = next((b for b in (getattr(parent, f, None) for f in ("body", "orelse", "finalbody"))
                  if isinstance(b, list) and loop in b), None)
    if block is None:
        return None
    for statement in block[block.index(loop) + 1:]:
        if isinstance(statement, ast.Assign) and any(container in targets_of(t) for t in statement.targets):
            return statement
    return None


def _measured_tensor(stop: ast.expr) -> ast.expr | None:
    """``t`` of a length ``len(t)``, ``t.size(0)``, ``t.shape[0]``; None for anything else."""
    if isinstance(stop, ast.Call) and isinstance(stop.func, ast.Name) and stop.func.id == "len" and len(stop.args) == 1:
        return stop.args[0] if dotted_name(stop.args[0]) else None
    if isinstance(stop, ast.Call) and isinstance(stop.func, ast.Attribute) and stop.func.attr == "size" \
            and len(stop.args) == 1 and is_constant(stop.args[0], 0):
        return stop.func.value if dotted_name(stop.func.value) else None
    if isinstance(stop, ast.Subscript) and isinstance(stop.value, ast.Attribute) and stop.value.attr == "shape" \
            and is_constant(stop.slice, 0):
        return stop.value.value if dotted_name(stop.value.value) else None
    return None


def _explicit_move(expr: ast.expr) -> bool:
    """``x.to(...)`` or ``x.cuda(...)``."""
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _MOVES


def _receiver(node: ast.AST) -> ast.expr | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.value
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
        return node.targets[0].value
    return None


def _device_tensor(value) -> bool:
    """An accelerator tensor, a container of them, or something moved to the
    accelerator (``x.cuda()`` of an unknown ``x``: a tensor or a module, and
    modules are not what a loop collects), held without a graph."""
    return value.device is Tri.YES and value.kind in (Kind.TENSOR, Kind.CONTAINER, Kind.UNKNOWN)


def _local_reads(semantic, unit: ast.AST, container: str) -> list[ast.Name] | None:
    """Every read of ``container`` in ``unit`` when it is a local of that
    function; None for a global, a free variable or a unit that is no function."""
    scope = semantic.scopes.own_scope(unit) if isinstance(unit, FUNCTION_TYPES) else None
    if scope is None or container not in scope.bindings:
        return None
    return [node for node in ast.walk(unit)
            if isinstance(node, ast.Name) and node.id == container and isinstance(node.ctx, ast.Load)]


def _loop_counter(ctx, loop: ast.For | ast.AsyncFor) -> str | None:
    """The name that counts ``loop``'s iterations: its target over ``range(...)``,
    or the first name of ``for i, x in enumerate(...)``."""
    call = loop.iter
    if not isinstance(call, ast.Call):
        return None
    qualified = ctx.qualified(call.func)
    if qualified in ("range", "builtins.range") and isinstance(loop.target, ast.Name):
        return loop.target.id
    if qualified in ("enumerate", "builtins.enumerate") and isinstance(loop.target, ast.Tuple) \
            and loop.target.elts and isinstance(loop.target.elts[0], ast.Name):
        return loop.target.elts[0].id
    return None


def _tests_equal_to_constant(test: ast.expr, name: str) -> bool:
    """``test`` is ``name == c`` or ``c == name``, ``c`` a literal constant."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    left, right = test.left, test.comparators[0]
    return any(isinstance(a, ast.Name) and a.id == name and isinstance(b, ast.Constant) and not isinstance(b.value, str)
               for a, b in ((left, right), (right, left)))


def _makes_list(expr: ast.expr) -> bool:
    """``expr`` evaluates to a new Python list: ``[...]``, ``[...] * k``/``k * [...]``, ``[... for ...]``."""
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mult):
        return isinstance(expr.left, ast.List) or isinstance(expr.right, ast.List)
    return isinstance(expr, (ast.List, ast.ListComp))


def _key_varies(target: ast.expr, loops: list[ast.stmt]) -> bool:
    """``d[i] = v`` grows only when the key changes per iteration (and is not ``i % n``)."""
    if not isinstance(target, ast.Subscript) or not loops:
        return False
    keys = _subscript_keys(target)
    if not keys:
        return False
    if any(isinstance(key, ast.BinOp) and isinstance(key.op, ast.Mod) for key in keys):
        return False
    if any(isinstance(key, ast.Call) and dotted_name(key.func) == "len" for key in keys):
        return True
    loop_names = set()
    for loop in loops:
        loop_names |= _names_bound_per_iteration(loop)
    return any(names_in(key) & loop_names for key in keys)


def _subscript_keys(subscript: ast.Subscript) -> list[ast.expr]:
    """The index expressions of ``d[k]`` / ``d[i, j]``, slices left out."""
    index = subscript.slice
    elements = index.elts if isinstance(index, ast.Tuple) else [index]
    return [element for element in elements if not isinstance(element, ast.Slice)]


def _names_bound_per_iteration(loop: ast.stmt) -> set[str]:
    names = set(targets_of(loop.target)) if isinstance(loop, FOR_TYPES) else set()
    collector = _AssignedNames()
    walk_visit(loop.body, collector)
    return names | collector.names


class _AssignedNames(Visitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self.names.update(targets_of(target))

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.names.update(targets_of(node.target))

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.names.update(targets_of(node.target))


def _shrunk_in(loop: ast.stmt, container: str) -> bool:
    """The loop empties, pops from, deletes from or rebinds the container."""
    finder = _ShrinkFinder(container)
    walk_visit(loop.body, finder)
    return finder.found


class _ShrinkFinder(Visitor):
    def __init__(self, container: str) -> None:
        self.container = container
        self.found = False

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute) and node.func.attr in SHRINKING_METHODS:
            if root_name(node.func.value) == self.container:
                self.found = True

    def visit_Delete(self, node: ast.Delete) -> None:
        if any(self.container in names_in(target) for target in node.targets):
            self.found = True

    def visit_Assign(self, node: ast.Assign) -> None:
        if any(self.container in targets_of(target) for target in node.targets):
            self.found = True




def _caps_length(test: ast.expr, container: str) -> bool:
    """``len(container) < bound`` (or ``<=``, or ``bound > len(container)``),
    alone or as a term of an ``and``."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(_caps_length(term, container) for term in test.values)
    if not isinstance(test, ast.Compare) or len(test.ops) != 1:
        return False
    op, measured = test.ops[0], test.left
    if isinstance(op, (ast.Gt, ast.GtE)):
        measured = test.comparators[0]
    elif not isinstance(op, (ast.Lt, ast.LtE)):
        return False
    if not (isinstance(measured, ast.Call) and isinstance(measured.func, ast.Name) and measured.func.id == "len"
            and len(measured.args) == 1 and not measured.keywords):
        return False
    return container in (dotted_name(measured.args[0]), root_name(measured.args[0]))
