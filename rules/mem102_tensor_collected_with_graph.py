"""MEM102 tensor-collected-with-graph."""

import ast

from memlint.lint.diagnostic import Fix, Severity
from memlint.lint.patterns import method_call_plan
from memlint.lint.rule import Rule
from memlint.lint.names import dotted_name, root_name, targets_of
from memlint.lint.semantic.stores import STORING_METHODS, comprehension_store, effect_store, leaf_values, store_of
from memlint.lint.semantic.interpreter import Context
from memlint.lint.semantic.values import UNKNOWN, Kind
from memlint.lint.syntax import FUNCTION_TYPES


class TensorCollectedWithGraph(Rule):
    """## What it does
    Reports a graph-attached tensor stored into a container that outlives
    the iteration of a training or evaluation loop: `outputs.append(out)`,
    `lst.extend(...)`, `self.outputs.append({"loss": loss})` in a per-batch
    hook, `history[key].append(loss)`, `d[k] = out` into a dict defined
    outside the loop, `preds = [model(x) for x in loader]`, an append from
    a closure the loop calls, or a call such as `buffer.add(logits)` whose
    method (defined in the same file) stores its argument. Tensors nested in
    dicts, tuples and lists count. In a module's own methods only a store
    kept across a loop of the method that walks data and runs a forward
    pass counts (an `encode(self, sentences)` that extends a list with each
    slice's output), not one inside the forward pass (`forward` and what it
    calls), nor across a loop that calls each of its items (`for blk in
    blocks: x = blk(x)`: one pass through the layers). A loop that calls a
    module's layer at its counter (`for i in range(len(net)): X = net[i](X)`)
    walks that module's layers, not the run: what it collects is one
    forward pass's features.

    ## Why is this bad?
    The stored tensor keeps a reference to the autograd graph that produced
    it, so every iteration's activations stay allocated until the container
    is dropped — usually the end of the epoch or the run. Memory grows
    linearly with the number of iterations.

    ## Example
    ```python
    outputs = []
    for x, y in loader:
        out = model(x)
        loss = criterion(out, y)
        loss.backward()
        outputs.append(out)
    ```

    ## Use instead
    ```python
    outputs = []
    for x, y in loader:
        out = model(x)
        loss = criterion(out, y)
        loss.backward()
        outputs.append(out.detach().cpu())
    ```

    ## Fix safety
    The fix appends `.detach()` to the stored expression when it is known
    to be one tensor — not a tuple or model output (`.detach()` would fail
    on them), not a dict or list literal, not a conditional or `and`/`or`
    value whose other branch may be no tensor. It keeps the value and device
    and drops only the graph: safe.

    ## Known problems
    A test (as pytest collects one, or a `unittest.TestCase` method) that
    runs no backward pass and takes no training step, itself or through
    what it calls, is not reported: its loops (decoding step by step to
    compare with a parallel run) are as long as the test makes them. A
    test that trains is.
    A comprehension inside a loop over values of the loop's own iteration
    (`conds = [c.to(dtype) for c in conds]`, `conds` bound in the body)
    holds one batch's items and is not reported, nor is one over `zip`
    with what this step's forward pass returned (`[t(o) for t, o in
    zip(targets, outputs)]`: `zip` stops at the output's rows), nor one that
    calls each of its items on the same input (`[head(z) for head in
    heads]`: callables of one step, not batches). A list whose elements are later stacked and backpropagated on purpose
    (`torch.stack(losses).sum().backward()`) is not reported, also when the
    container is persistent state (`policy.saved_log_probs`, `self.trace`)
    that another function of the file (a method of the same class for
    `self.x`) reads and backpropagates (REINFORCE's per-episode update),
    or reads and turns into a loss it returns, which its caller (up to
    three callers up) binds and backpropagates (A3C's `calculate_total_loss`),
    also when a caller hands the items to a method of the object that keeps
    them (`agent.remember((r, logp))`) and another method of that object's
    class unpacks and backpropagates them.
    An item written as the sum of its old value and a tensor
    (`totals[k] = totals.get(k, 0.0) + loss`, `acc[k] = acc[k] + loss`)
    adds into a total rather than storing a new item: that is MEM101's
    finding, and this rule stays silent on it. A store under a key that is
    the same at every iteration (`stats["loss"] = loss`, a key that folds
    to a constant) overwrites one slot and is not reported: the dict holds
    one step. Containers
    passed across functions are followed only within the same file; a
    module of another file that stores what it is given is not seen.

    ## References
    - [PyTorch FAQ: memory usage grows in the training loop](https://pytorch.org/docs/stable/notes/faq.html)
    """

    CODE = "MEM102"
    NAME = "tensor-collected-with-graph"
    MESSAGE = "a graph-attached tensor is stored in a container that outlives the iteration: its autograd graph stays alive"
    SEVERITY = Severity.ERROR
    FIX_TITLE = "Add `.detach()` to the stored tensor"
    TRIGGERS = ("+= [", "+=[", "append", "extend", "insert", ".add(", "] =", "appendleft", ".put(", "update", "setdefault", " for ", "(")
    NEEDS_GRAPH_SOURCE = True
    FRAMEWORK = "torch"
    VALID = (
        "import torch.nn as nn\ndef f(loader):\n    model = nn.Linear(4, 2)\n    outs = []\n    for x in loader:\n        outs.append(model(x).detach().cpu())\n",
        "import torch\nimport torch.nn as nn\ndef f(loader):\n    model = nn.Linear(4, 2)\n    outs = []\n    with torch.no_grad():\n        for x in loader:\n            outs.append(model(x))\n",
        "import torch\ndef f(model, chunks, opt):\n    losses = []\n    for c in chunks:\n        losses.append(model(c).loss)\n    torch.stack(losses).mean().backward()\n",
        "import torch.nn as nn\ndef f(loader):\n    model = nn.Linear(4, 2)\n    outs = []\n    for x in loader:\n        outs.append(model(x).argmax(-1))\n",
        "import torch.nn as nn\ndef f(loader):\n    model = nn.Linear(4, 2)\n    for x in loader:\n        tmp = []\n        tmp.append(model(x))\n",
        "import torch.nn as nn\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])\n    def forward(self, x):\n        feats = []\n        for block in self.blocks:\n            x = block(x)\n            feats.append(x)\n        return feats\n",
    )
    INVALID = (
        "def f(model, loader, opt):\n    model.train()\n    outs = []\n    for x in loader:\n        out = model(x)\n        outs.append(out)  # expect: MEM102\n",
        "def f(model, loader, crit):\n    hist = []\n    for x, y in loader:\n        loss = crit(model(x), y)\n        loss.backward()\n        hist.append({'loss': loss, 'n': len(x)})  # expect: MEM102\n",
        "import torch.nn as nn\ndef f(loader):\n    model = nn.Linear(4, 2)\n    cache = {}\n    for i, x in enumerate(loader):\n        cache[i] = model(x)  # expect: MEM102\n",
        "import lightning as L\nclass M(L.LightningModule):\n    def __init__(self, net):\n        super().__init__()\n        self.net = net\n        self.step_outputs = []\n    def training_step(self, batch, idx):\n        loss = self.net(batch).sum()\n        self.step_outputs.append(loss)  # expect: MEM102\n        return loss\n",
        "def f(model, loader, opt):\n    hist = []\n    for x in loader:\n        loss = model(x).sum()\n        hist += [loss]  # expect: MEM102\n        loss.backward()\n",
        "import torch\nfrom torch.utils.data import DataLoader\ndef f(model: torch.nn.Module, data):\n    loader = DataLoader(data, batch_size=8)\n    preds = [model(x) for x in loader]  # expect: MEM102\n    return preds\n",
    )

    def visit_Call(self, node: ast.Call) -> None:
        semantic = self.ctx.semantic
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in STORING_METHODS:
            if _plain_arguments(semantic, node):
                return  # `losses.append(loss.item())`: cheap check first
            if self._may_outlive(func.value, node):
                store = store_of(semantic, node)
                if store is not None:
                    self._check(store)
        elif isinstance(func, (ast.Attribute, ast.Name)) and _named_local_collector(semantic, node):
            store = effect_store(semantic, node)
            if store is not None:
                self._check(store)

    def visit_Assign(self, node: ast.Assign) -> None:
        target = node.targets[0]
        if isinstance(target, ast.Subscript) and not _plain_values(self.ctx.semantic, (node.value,)) \
                and self._may_outlive(target.value, node):
            store = store_of(self.ctx.semantic, node)
            if store is not None:
                self._check(store)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.value, (ast.List, ast.Tuple)) and not _plain_values(self.ctx.semantic, (node.value,)) \
                and self._may_outlive(node.target, node):
            store = store_of(self.ctx.semantic, node)
            if store is not None:
                self._check(store)

    def _may_outlive(self, container: ast.expr, node: ast.AST) -> bool:
        """Cheap, syntactic: the storage is in a loop's reach or is persistent state,
        outside a module's forward pass (see :meth:`_check`)."""
        root = root_name(container)
        semantic = self.ctx.semantic
        if root is None or not (semantic.enclosing_loops(node) or semantic.may_persist(root, node)):
            return False
        function = semantic.function_of(node)
        return function is None or not semantic.is_module_method(function) or semantic.in_forward_pass(function) is None

    def visit_ListComp(self, node: ast.ListComp | ast.SetComp | ast.DictComp) -> None:
        semantic = self.ctx.semantic
        element = node.value if isinstance(node, ast.DictComp) else node.elt
        if semantic.holds_no_graph(element) or not any(isinstance(child, ast.Call) for child in ast.walk(element)) \
                or semantic.iterates_fixed_structure(node) or semantic.iterates_items_of_iteration(node):
            return  # a forward pass is a call, and a batch comes from a stream: cheap checks first
        function = semantic.function_of(node)
        if function is not None and semantic.is_module_method(function):
            return
        store = comprehension_store(semantic, node)
        if store is None or semantic.grad_disabled(node):
            return
        attached = [leaf for leaf in leaf_values(store.values) if semantic.value(leaf).attached]
        if attached:
            self.report(node, message=f"{self.MESSAGE} (the comprehension gathers one per batch)")

    visit_SetComp = visit_DictComp = visit_ListComp

    def _check(self, store) -> None:
        semantic = self.ctx.semantic
        node = store.node
        keeper = None if semantic.grad_disabled(node) else semantic.keeper(store.root, node)
        if keeper is None:
            return
        function = semantic.function_of(node)
        if function is not None and semantic.is_module_method(function) and not self._own_run(function, keeper):
            return  # outputs gathered inside a forward pass: the graph being built, or MEM108's finding
        if semantic.is_untrained_test(function):
            return  # a test that never trains: outputs gathered to compare, as many as the test makes
        leaves = leaf_values(store.values)
        attached = [leaf for leaf in leaves if semantic.value(leaf).attached]
        if not attached or self._trained_on_later(store.root, node) or self._trained_on_by_its_class(store):
            return
        if store.via is None and function is not None and self._reported_at_callers(attached, function):
            return
        message = None if store.via is None else f"{self.MESSAGE} (the call stores it into `{store.via}`)"
        fix = self._fix(attached, store.values) if store.via is None else None
        self.report(node, message=message, fix=fix)

    def _own_run(self, method: ast.AST, keeper) -> bool:
        """A module's method outside its forward pass keeps what it stores
        across the iterations of a loop of its own that walks data and runs
        a forward pass (``def encode(self, sentences): for i in range(0,
        len(sentences), bs): out.extend(self(...))``): a run over the data,
        as a function of the file would make (see
        :meth:`SemanticModel.keeper`). A store into state that only the
        module's callers repeat stays theirs."""
        return keeper.why == "loop" and self.ctx.semantic.in_forward_pass(method) is None

    def _reported_at_callers(self, attached: list[ast.expr], function: ast.AST) -> bool:
        """The graph comes in through the arguments of a helper that the
        file calls (``log_stat(key, loss)``, ``pool.push_and_pop(fake)``):
        interpreted without its callers' arguments, what it stores is not
        attached. Its call sites are reported; the helper also serves
        plain numbers."""
        semantic = self.ctx.semantic
        if not semantic.call_sites_of(function):
            return False
        alone = semantic.analyse(function, Context((), semantic.context_of(function).grad))
        return not any(alone.values.get(leaf, UNKNOWN).attached for leaf in attached)

    def _trained_on_later(self, root: str, node: ast.AST) -> bool:
        """The container feeds a backward pass (losses stacked and summed on
        purpose): in the same unit, or, for persistent state (``self.x``,
        ``policy.saved_log_probs``), in a function of the file (a method of
        the same class for ``self.x``) that backpropagates what it reads from
        the container (REINFORCE's per-episode update)."""
        semantic = self.ctx.semantic
        if semantic.backpropagated(root, semantic.unit_of(node)):
            return True
        container = _container_name(node) or root  # `self.trace["logp"].append(...)`: the dict `self.trace`
        return container is not None and "." in container and self._backpropagated_elsewhere(container, node)

    def _backpropagated_elsewhere(self, root: str, node: ast.AST) -> bool:
        semantic = self.ctx.semantic
        function = semantic.function_of(node)
        owner = semantic.class_of_method(function) if function is not None and root.startswith("self.") else None
        for unit in semantic.functions:
            if unit is function:
                continue
            if root.startswith("self.") and (owner is None or semantic.class_of_method(unit) is not owner):
                continue
            if _backpropagates_what_it_reads(semantic, unit, root):
                return True
        return False

    def _trained_on_by_its_class(self, store) -> bool:
        """A call of the file's method that stores into its object's state
        (``agent.remember(item)`` appending to ``self.memory``), where a
        method of that object's class reads that state and backpropagates
        what it reads (``for r, p in self.memory: (-p.log() * r).backward()``):
        the per-episode update, seen from the caller."""
        semantic = self.ctx.semantic
        call = store.node
        if store.via is None or not store.via.startswith("self.") or not isinstance(call, ast.Call) \
                or not isinstance(call.func, ast.Attribute):
            return False
        klass = semantic.classes.get(semantic.value(call.func.value).klass)
        if klass is None:
            return False
        methods = [method for info in klass.mro() for method in info.methods.values()]
        return any(_backpropagates_what_it_reads(semantic, method, store.via) for method in methods)

    def _fix(self, attached: list[ast.expr], stored: tuple[ast.expr, ...]) -> Fix | None:
        if len(attached) != 1 or len(stored) != 1 or stored[0] is not attached[0]:
            return None
        value = attached[0]
        if self.ctx.semantic.value(value).kind is not Kind.TENSOR:
            return None  # a tuple or model output has no `.detach()`
        detached = method_call_plan(self, value, "detach")
        return None if detached is None else self.fix(detached)


def _backpropagates_what_it_reads(semantic, unit: ast.AST, root: str) -> bool:
    """``unit`` binds names from ``root`` (``batch = self.trace``, ``for r, p
    in self.trace``) and backpropagates one of them, itself or through what
    it returns (see :func:`_feeds_backward`)."""
    bound = _bound_from(unit, root)
    return bool(bound) and _feeds_backward(semantic, unit, bound)


#: How many callers deep a returned loss is followed to the backward pass
#: (A3C: ``calculate_actor_loss`` -> ``calculate_total_loss`` -> ``run``).
_RETURN_DEPTH = 3


def _feeds_backward(semantic, unit: ast.AST, names: set[str], depth: int = 0) -> bool:
    """One of ``names`` (locals of ``unit``) flows into a backward pass that
    ``unit`` runs, or into what ``unit`` returns to a caller of the file that
    binds the result and backpropagates it, or returns it on (a loss built
    from the episode's buffer in a helper, backpropagated by the caller)."""
    if names & semantic.canonical(unit).backpropagated:
        return True
    if depth >= _RETURN_DEPTH or not isinstance(unit, FUNCTION_TYPES) or not names & semantic.returns(unit).sources:
        return False
    for call in semantic.call_sites_of(unit):
        statement = semantic.parents.get(call)
        caller = semantic.unit_of(call)
        if isinstance(statement, ast.Assign) and statement.value is call:
            received = {n for t in statement.targets for n in targets_of(t)}
            if received and _feeds_backward(semantic, caller, received, depth + 1):
                return True
    return False


def _bound_from(unit: ast.AST, root: str) -> set[str]:
    """The names ``unit`` binds from what it reads of ``root``."""
    found: set[str] = set()
    for binding in ast.walk(unit):
        if isinstance(binding, ast.Assign):
            read, targets = binding.value, binding.targets
        elif isinstance(binding, (ast.For, ast.AsyncFor, ast.comprehension)):
            read, targets = binding.iter, [binding.target]
        else:
            continue
        if any(isinstance(n, (ast.Attribute, ast.Name)) and dotted_name(n) == root for n in ast.walk(read)):
            found.update(n for t in targets for n in targets_of(t))
    return found


def _plain_arguments(semantic, call: ast.Call) -> bool:
    """Everything the call stores is, by its syntax alone, a Python value or a detached tensor."""
    values = [*call.args, *(k.value for k in call.keywords)]
    return bool(values) and all(not isinstance(v, ast.Starred) and semantic.holds_no_graph(v) for v in values)


def _plain_values(semantic, values) -> bool:
    """Every leaf of the stored literals (``{"lr": 0.1}``, ``[x.item()]``) is,
    by its syntax alone, a Python value or a detached tensor."""
    leaves = leaf_values(values)
    return bool(leaves) and all(semantic.holds_no_graph(leaf) for leaf in leaves)


def _named_local_collector(semantic, call: ast.Call) -> bool:
    return semantic.may_call_local(call) and (call.func.attr if isinstance(call.func, ast.Attribute) else call.func.id) in semantic.collecting_functions()


def _container_name(node: ast.AST) -> str | None:
    """The dotted name of the container a store writes into: ``policy.saved``
    for ``policy.saved.append(x)`` / ``policy.saved[k] = x``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return dotted_name(node.func.value)
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
        return dotted_name(node.targets[0].value)
    return None
