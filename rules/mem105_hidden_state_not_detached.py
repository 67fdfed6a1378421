"""MEM105 hidden-state-not-detached."""

import ast
import re

from memlint.lint.diagnostic import Applicability, Severity
from memlint.lint.names import dotted_name, targets_of
from memlint.lint.patterns import names_in
from memlint.lint.rule import Rule
from memlint.lint.signatures import arguments_bound, first_parameter, is_static_method, parameter_names
from memlint.lint.semantic.values import Kind, Tri
from memlint.lint.syntax import FUNCTION_TYPES, LOOP_TYPES, call_arguments
from memlint.lint.walk import Visitor, descendants, visit as walk_visit

#: Helpers of other modules named like these cut the graph (``repackage_hidden``
#: in PyTorch's word-language-model example); a helper of the same file is
#: judged by its body (it calls ``.detach()``).
#: The recurrent state a ``torch.nn`` recurrent module returns, by its place in
#: the call's result (``()`` the whole result, ``(1,)`` its second element):
#: "tensor" or "pair" (an ``(h, c)`` tuple of tensors). torch 2.13.0
#: ``nn/modules/rnn.py``: ``RNN``/``GRU`` return ``(output, h_n)``, ``LSTM``
#: ``(output, (h_n, c_n))``, ``RNNCell``/``GRUCell`` ``h'``, ``LSTMCell`` ``(h_1, c_1)``.
RECURRENT_STATES = {
    "torch.nn.RNN": {(1,): "tensor"},
    "torch.nn.GRU": {(1,): "tensor"},
    "torch.nn.LSTM": {(1,): "pair", (1, 0): "tensor", (1, 1): "tensor"},
    "torch.nn.RNNCell": {(): "tensor"},
    "torch.nn.GRUCell": {(): "tensor"},
    "torch.nn.LSTMCell": {(): "pair", (0,): "tensor", (1,): "tensor"},
}
DETACH_HELPER = re.compile(r"repackage|detach", re.IGNORECASE)


class HiddenStateNotDetached(Rule):
    """## What it does
    Reports recurrent state that is carried from one loop iteration to the
    next and fed back into a module without being detached:
    `h = cell(x, h)`, `h, c = cell(x, (h, c))`, `out, (h, c) = lstm(x, (h, c))`,
    `out, hidden = rnn(x, hidden)`, `self.hidden = ...`, state passed back
    through another name the loop body gives it (`h_in = h_out` then
    `prob, h_out = model(x, h_in)`), or state read back
    from the call's output object later in the loop body (`out = model(x,
    state=state)` then `state = out.state` or `state = out["cache"]`,
    reported at the call, with no fix), in a loop whose
    iterations grow with the run (it trains, iterates a stream of batches,
    or steps an environment or a sampler with the module's output).

    ## Why is this bad?
    The new state is computed from the old one, so its autograd graph
    reaches back through every previous iteration: truncated
    backpropagation through time becomes untruncated. Every step's
    activations stay allocated and memory grows until the run fails (or the
    second `.backward()` raises "Trying to backward through the graph a
    second time").

    ## Example
    ```python
    hidden = model.init_hidden(batch_size)
    for x, y in loader:
        out, hidden = model(x, hidden)
        loss = criterion(out, y)
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    hidden = model.init_hidden(batch_size)
    for x, y in loader:
        hidden = tuple(h.detach() for h in hidden)
        out, hidden = model(x, hidden)
        loss = criterion(out, y)
        loss.backward()
        optimizer.step()
    ```

    ## Fix safety
    The fix detaches the carried state at the top of the loop body:
    `h = h.detach()` where the state is a tensor (an `nn.RNN`/`nn.GRU`
    state, an `RNNCell`/`GRUCell` output, or every assignment in the loop
    gives a tensor), `h = tuple(s.detach() for s in h)` where it is an
    `nn.LSTM`'s or `LSTMCell`'s `(h, c)` pair, each under
    `if h is not None:` when the state may start as None. A state of any
    other structure (a model's own list of per-layer pairs, a dict) gets no
    fix: a wrong guess fails at run time. It is unsafe by design: gradients stop
    flowing into earlier iterations (truncated backpropagation through
    time), so the trained weights differ. State carried across calls of a
    method (`self.hidden` outside a loop) and a loop whose body sits on its
    header line get no fix.

    ## Known problems
    A value passed through a module's layers by index (`for i in
    range(len(net)): X = net[i](X)`) is one forward pass, not recurrent
    state, and is not reported. A test (as pytest collects one, or a `unittest.TestCase` method) that
    runs no backward pass and takes no training step, itself or through
    what it calls, is not reported: its loops (decoding step by step to
    compare with a parallel run) are as long as the test makes them. A
    test that trains is.
    The state is considered cut when it is detached (`.detach()`,
    `.detach_()`), passed to a helper whose name contains "repackage" or
    "detach" or to a local function that calls `.detach()` or first rebinds
    the parameter it receives to a value without a graph
    (`h = tuple(s.data for s in h)`), or re-assigned
    a fresh value anywhere in the loop (even conditionally). A `.detach()`
    whose result is dropped (`for s in state: s.detach()`) is no cut: it
    returns a detached copy, and only `.detach_()` works in place. A loop over
    time steps inside a module's forward pass is backpropagation through
    the sequence on purpose and is not reported, nor is a loop over a fixed
    structure (a loop that calls its own item, `for blk in net.stages:
    h = blk(h)`, walks the callables of one forward pass, also over a model
    handed in from elsewhere and stopped early), nor one unroll of a single sequence: a loop over the time
    steps of one tensor (or a `range`) that takes no training step, whose
    state is bound just before it from values made in the same function or
    outer iteration (`h = model.init_hidden()`), and whose outputs are
    backpropagated after the loop or returned as a tensor for the caller's
    loss (the graph lives for one sequence and the backward frees it). For a `self.` attribute outside a loop,
    assigning it anywhere else in the class than `__init__` counts as a
    reset.

    ## References
    - [PyTorch example: word_language_model `repackage_hidden`](https://github.com/pytorch/examples/blob/main/word_language_model/main.py)
    - [torch.Tensor.detach](https://pytorch.org/docs/stable/generated/torch.Tensor.detach.html)
    """

    CODE = "MEM105"
    NAME = "hidden-state-not-detached"
    MESSAGE = "recurrent state `{names}` is fed back across iterations without `.detach()`: the autograd graph spans every iteration"
    SEVERITY = Severity.ERROR
    FIX_TITLE = "Detach the carried state at the start of each iteration"
    FIX_APPLICABILITY = Applicability.UNSAFE
    TRIGGERS = ("for ", "while ", "self.")
    NEEDS_GRAPH_SOURCE = True
    FRAMEWORK = "torch"
    VALID = (
        "def f(model, loader, opt, crit, h):\n    for x, y in loader:\n        h = h.detach()\n        out, h = model(x, h)\n        crit(out, y).backward()\n        opt.step()\n",
        "def repackage_hidden(h):\n    return tuple(v.detach() for v in h)\ndef f(lstm, loader, opt, crit, hidden):\n    for x, y in loader:\n        hidden = repackage_hidden(hidden)\n        out, hidden = lstm(x, hidden)\n        crit(out, y).backward()\n        opt.step()\n",
        "import torch\ndef f(cell, xs, h):\n    outs = []\n    for x in xs.unbind(1):\n        h = cell(x, h)\n        outs.append(h)\n    return torch.stack(outs)\n",
        "import torch\ndef f(rnn, loader, h):\n    with torch.no_grad():\n        for x in loader:\n            out, h = rnn(x, h)\n",
        "import torch\ndef f(model, loader, opt, crit):\n    for x, y in loader:\n        hidden = model.init_hidden(len(x))\n        out, hidden = model(x, hidden)\n        crit(out, y).backward()\n        opt.step()\n",
    )
    INVALID = (
        "def f(model, loader, opt, crit, hidden):\n    for x, y in loader:\n        out, hidden = model(x, hidden)  # expect: MEM105\n        crit(out, y).backward(retain_graph=True)\n        opt.step()\n",
        "import torch\nimport torch.nn as nn\ndef f(env, n):\n    cell = nn.LSTMCell(4, 8)\n    h = torch.zeros(1, 8)\n    c = torch.zeros(1, 8)\n    obs = env.reset()\n    for t in range(n):\n        h, c = cell(obs, (h, c))  # expect: MEM105\n        obs = env.step(h.argmax().item())\n",
        "def f(lstm, loader, opt, crit, h, c):\n    for x, y in loader:\n        out, (h, c) = lstm(x, (h, c))  # expect: MEM105\n        crit(out, y).backward()\n        opt.step()\n",
        "def f(lstm, loader, opt, crit):\n    h = c = None\n    for x, y in loader:\n        out, (h, c) = lstm(x, (h, c) if h is not None else None)  # expect: MEM105\n        crit(out, y).backward()\n        opt.step()\n",
        "import torch.nn as nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.rnn = nn.GRU(4, 8)\n        self.hidden = None\n    def forward(self, x):\n        out, self.hidden = self.rnn(x, self.hidden)  # expect: MEM105\n        return out\n",
    )

    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) != 1:
            return
        if isinstance(node.value, ast.Call):
            self._check(node, node.targets[0], node.value)
        elif isinstance(node.value, (ast.Attribute, ast.Subscript)) and _in_loop(self.ctx.stack):
            producer = self._producer_in_loop(node)
            if producer is not None and producer not in self.__dict__.setdefault("_indirect", set()):
                if self._check(producer, node.targets[0], producer.value, binding=node):
                    self._indirect.add(producer)

    def _producer_in_loop(self, node: ast.Assign) -> ast.Assign | None:
        """``outputs = model(x, state=state)`` for ``state = outputs.state``
        (or ``outputs["state"]``, ``outputs[1]``) later in the same loop body:
        the state comes back through the call's output object."""
        root = node.value
        while isinstance(root, (ast.Attribute, ast.Subscript)):
            root = root.value
        loops = self.ctx.semantic.enclosing_loops(node)
        if not isinstance(root, ast.Name) or not loops:
            return None
        found = [s for s in self._name_assignments(loops[0]).get(root.id, ()) if s.lineno < node.lineno]
        return found[0] if len(found) == 1 and isinstance(found[0].value, ast.Call) else None

    def _name_assignments(self, loop: ast.AST) -> dict[str, list[ast.Assign]]:
        """``name = ...`` statements of ``loop``'s body by name (once per loop)."""
        memo = self.__dict__.setdefault("_by_loop", {})
        found = memo.get(loop)
        if found is None:
            found = memo[loop] = {}
            for top in loop.body:
                for statement in descendants(top):
                    if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
                        found.setdefault(statement.targets[0].id, []).append(statement)
        return found

    def _check(self, node: ast.Assign, target: ast.expr, call: ast.Call, binding: ast.Assign | None = None) -> bool:
        """Report ``node`` when ``call`` is fed names that ``target`` binds
        again (in ``node`` itself, or in ``binding``, which reads them from
        the call's output) across iterations without a cut."""
        carried = self._carried_names(target, call)
        indirect = binding is not None
        binding = node if binding is None else binding
        in_loop = _in_loop(self.ctx.stack)
        across_calls = all(name.startswith("self.") for name in carried) and not indirect
        if not carried or not (in_loop or across_calls):
            return False  # cheap syntactic checks first: the rest interprets the function
        semantic = self.ctx.semantic
        if semantic.is_untrained_test(semantic.function_of(node)):
            return False  # a test that never trains: decoding step by step to compare, as long as the test says
        if _module_internal(semantic, node) and (in_loop or not across_calls):
            return False  # a loop within one forward pass (`x = layer(x)` over blocks): one step's graph
        if semantic.grad_disabled(node) or semantic.value(call).is_module or not self._produces_graph(call):
            return False
        carried = [name for name in carried if not semantic.value(_target_named(target, name)).is_module]
        if not carried:
            return False  # a module re-wrapped in a loop (`model = wrap(model)`) is not recurrent state
        loop = self._carrying_loop(carried, binding) if not indirect else self._loop_around_start(carried, binding)
        if loop is not None:
            if semantic.is_run_loop(loop) and not _module_internal(semantic, node) and not self._cut_in(loop, carried, binding) \
                    and not self._one_unroll(loop, carried):
                self._report(node, carried, None if indirect else loop)
                return True
        elif across_calls and not semantic.enclosing_loops(node):
            # across calls of a method: only a direct module call (`self.rnn(x, self.hidden)`) counts
            if semantic.is_forward_call(call) and not self._self_state_reset(carried, node):
                self._report(node, carried)
                return True
        return False

    def _report(self, node: ast.Assign, carried: list[str], loop: ast.AST | None = None) -> None:
        fix = self._fix(loop, carried, node) if loop is not None else None
        self.report(node, message=self.MESSAGE.format(names=", ".join(carried)), fix=fix)

    # -- the fix -------------------------------------------------------------
    def _fix(self, loop: ast.AST, carried: list[str], recurrent: ast.Assign):
        """Detach each carried name at the top of the loop body, as its
        structure asks (:meth:`_structure`): ``h = h.detach()`` for a tensor,
        ``h = tuple(s.detach() for s in h)`` for an ``(h, c)`` pair, guarded
        by ``if h is not None:`` where the state may start as None. None when
        the structure of a name is not known (a model's own list of pairs,
        a dict: a wrong guess fails at run time), or the loop's body is on
        its header line."""
        if not isinstance(loop, (ast.For, ast.AsyncFor, ast.While)) or loop.body[0].lineno == loop.lineno:
            return None
        unit = self.ctx.semantic.unit_of(loop)
        structures = [self._structure(name, loop, recurrent) for name in carried]
        if None in structures:
            return None
        code = "".join(_detaching(name, structure, _may_be_none(name, unit))
                       for name, structure in zip(carried, structures))
        return self.fix(self.plan("prepend_to_body", loop, code=code),
                        title=f"Detach {', '.join(f'`{name}`' for name in carried)} at the start of each iteration")

    def _structure(self, name: str, loop: ast.AST, recurrent: ast.Assign) -> str | None:
        """``"tensor"`` or ``"pair"`` (an ``(h, c)`` tuple of tensors): what the
        recurrent call returns at ``name``'s place in the target, by the
        module's type (:data:`RECURRENT_STATES`), else a tensor when every
        assignment of the name in the loop gives a tensor; None: not known."""
        module = self.ctx.semantic.value(recurrent.value.func).type_name
        path = _target_path(recurrent.targets[0], name)
        if module in RECURRENT_STATES and path is not None:
            return RECURRENT_STATES[module].get(path)
        return "tensor" if self._known_tensor(name, loop) else None

    def _known_tensor(self, name: str, loop: ast.AST) -> bool:
        """The name is bound to a tensor by every assignment in the loop."""
        semantic = self.ctx.semantic
        values = [node.value for node in ast.walk(loop) if isinstance(node, ast.Assign) and len(node.targets) == 1
                  and isinstance(node.targets[0], (ast.Name, ast.Attribute)) and dotted_name(node.targets[0]) == name]
        return bool(values) and all(semantic.value(value).kind is Kind.TENSOR for value in values)

    def _carried_names(self, target: ast.expr, call: ast.Call) -> list[str]:
        """Names bound by the assignment that are also passed, bare, to the call."""
        bound = targets_of(target)
        passed = set()
        for argument in call_arguments(call):
            passed |= _bare_names(argument)
        passed |= self._aliased(passed, call)
        return [name for name in bound if name in passed]

    def _aliased(self, passed: set[str], call: ast.Call) -> set[str]:
        """The names that a passed name is another name for in this iteration:
        ``h_out`` for ``h_in`` when the loop body binds ``h_in = h_out`` (its
        one assignment there) before the call. The call then gets the very
        state that the previous iteration's call returned."""
        loops = self.ctx.semantic.enclosing_loops(call)
        if not loops:
            return set()
        assignments = self._name_assignments(loops[0])
        found = set()
        for name in passed:
            statements = assignments.get(name, ())
            if len(statements) == 1 and isinstance(statements[0].value, ast.Name) and statements[0].end_lineno < call.lineno:
                found.add(statements[0].value.id)
        return found

    def _produces_graph(self, call: ast.Call) -> bool:
        semantic = self.ctx.semantic
        return semantic.is_forward_call(call) or semantic.value(call).graph is Tri.YES

    def _carrying_loop(self, carried: list[str], node: ast.AST) -> ast.AST | None:
        """The innermost loop around ``node`` across whose iterations the state lives."""
        semantic = self.ctx.semantic
        for loop in semantic.enclosing_loops(node):
            if all(semantic.outside(name, loop) for name in carried):
                return loop
        return None

    def _loop_around_start(self, carried: list[str], node: ast.AST) -> ast.AST | None:
        """The innermost loop around ``node`` before which every carried name
        is bound (``state = None`` before ``while True:``): a state read back
        from the call's output is carried by that loop (a fresh value given
        elsewhere in it is a cut, found by :meth:`_cut_in`)."""
        semantic = self.ctx.semantic
        for loop in semantic.enclosing_loops(node):
            if all("." in name or name in semantic.bound_before(loop) for name in carried):
                return loop
        return None

    def _one_unroll(self, loop: ast.AST, carried: list[str]) -> bool:
        """``loop`` unrolls one sequence on purpose (backpropagation through
        it): it walks no stream of batches and takes no training step
        itself; every carried name is bound, from values made in the same
        body, by a statement just before the loop in the body that holds it
        (a function's, an outer loop's iteration), so each call or outer
        iteration starts a fresh state; and after the loop that body
        backpropagates or returns a tensor that keeps the graph. The graph
        lives for one sequence and the backward frees it."""
        semantic = self.ctx.semantic
        if not isinstance(loop, (ast.For, ast.AsyncFor)) or not _one_sequence(semantic, loop.iter):
            return False
        if semantic.trains(loop.body):
            return False
        body = _statements_holding(semantic, loop)
        if body is None:
            return False
        index = next(i for i, statement in enumerate(body) if statement is loop)
        before, after = body[:index], body[index + 1:]
        bound_here: set[str] = set()
        fresh: set[str] = set()
        entry = _entry_names(semantic, loop)
        for statement in before:
            if isinstance(statement, ast.Assign):
                names = {name for target in statement.targets for name in targets_of(target)}
                made = semantic.value(statement.value)
                if all(source in bound_here or source in entry or source.startswith("self.") for source in made.sources):
                    fresh |= names
                else:
                    fresh -= names
                bound_here |= names
            else:
                for inner in ast.walk(statement):
                    if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store):
                        fresh.discard(inner.id)
                        bound_here.add(inner.id)
        if not all(name in fresh for name in carried):
            return False
        if semantic.trains(after):
            return True
        made_in_loop = {node.id for node in ast.walk(loop) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
        for statement in after:
            if isinstance(statement, ast.Return) and statement.value is not None:
                returned = semantic.value(statement.value)
                if returned.kind is Kind.TENSOR and returned.graph is not Tri.NO and returned.sources & made_in_loop:
                    return True  # the unrolled outputs go to the caller's loss
        return False

    def _cut_in(self, loop: ast.For | ast.AsyncFor | ast.While, carried: list[str], recurrent: ast.Assign) -> bool:
        """The loop detaches, repackages or re-initialises one of the carried names."""
        finder = _CutFinder(set(carried), recurrent, self.ctx.semantic)
        walk_visit(loop.body, finder)
        return finder.found

    def _self_state_reset(self, carried: list[str], recurrent: ast.Assign) -> bool:
        """A method other than ``__init__`` detaches or re-assigns the attribute."""
        klass = next((a for a in self.ctx.semantic.ancestors(recurrent) if isinstance(a, ast.ClassDef)), None)
        if klass is None:
            return True
        finder = _CutFinder(set(carried), recurrent, self.ctx.semantic, skip_init=True)
        walk_visit(klass.body, finder)
        return finder.found


def _statements_holding(semantic, statement: ast.stmt) -> list[ast.stmt] | None:
    """The statement list (a function's, a loop's, a module's body) that holds ``statement``."""
    parent = semantic.parents.get(statement)
    if parent is None:
        parent = semantic.module
    for field in ("body", "orelse", "finalbody"):
        statements = getattr(parent, field, None)
        if isinstance(statements, list) and any(s is statement for s in statements):
            return statements
    return None


#: Builtins that walk what they are given, item by item.
_PAIRING = frozenset({"zip", "enumerate", "reversed"})


def _one_sequence(semantic, iterable: ast.expr) -> bool:
    """``iterable`` walks one sequence of a known, bounded length: the rows
    (time steps) of a tensor, a ``range``, or ``zip``/``enumerate``/``reversed``
    of those -- not a loader or another stream of batches."""
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id in _PAIRING \
            and iterable.args and not iterable.keywords:
        return all(_one_sequence(semantic, argument) for argument in iterable.args)
    walked = semantic.value(iterable)
    if walked.stream is Tri.YES:
        return False
    return walked.kind is Kind.TENSOR or walked.type_name == "range"


def _entry_names(semantic, loop: ast.AST) -> set[str]:
    """The parameters of the function that holds ``loop``: what a call
    hands in afresh (a state carried across calls and backpropagated twice
    would fail at the second backward, not grow)."""
    unit = semantic.unit_of(loop)
    return parameter_names(unit) if isinstance(unit, FUNCTION_TYPES) else set()


def _module_internal(semantic, node: ast.AST) -> bool:
    """``node`` runs within a module's own computation: its forward pass (and
    the methods it calls on ``self``), a framework hook, or a method that
    trains. Another method of a module (a `sample(features, states)` that
    feeds its LSTM its own state step after step) is checked like any code."""
    function = semantic.function_of(node)
    if function is None or not semantic.is_module_method(function):
        return False
    return semantic.in_forward_pass(function) is not None or semantic.hook_of(function) is not None \
        or semantic.trains(function.body)


def _target_named(target: ast.expr, name: str) -> ast.expr:
    """The target node that binds ``name`` (for its value)."""
    for node in ast.walk(target):
        if isinstance(node, (ast.Name, ast.Attribute)) and dotted_name(node) == name:
            return node
    return target


def _detaching(name: str, structure: str, may_be_none: bool) -> str:
    """The statements that detach ``name`` of ``structure`` (see :meth:`HiddenStateNotDetached._structure`)."""
    value = f"{name}.detach()" if structure == "tensor" else f"tuple(s.detach() for s in {name})"
    if may_be_none:
        return f"if {name} is not None:\n    {name} = {value}\n"
    return f"{name} = {value}\n"


def _target_path(target: ast.expr, name: str, path: tuple[int, ...] = ()) -> tuple[int, ...] | None:
    """Where ``name`` sits in an assignment target: ``()`` for the whole
    target, ``(1,)`` for ``out, h``, ``(1, 0)`` for ``out, (h, c)``; None
    when it is not there or follows a starred element."""
    if isinstance(target, (ast.Tuple, ast.List)):
        for index, element in enumerate(target.elts):
            if isinstance(element, ast.Starred):
                return None
            found = _target_path(element, name, (*path, index))
            if found is not None:
                return found
        return None
    return path if dotted_name(target) == name else None


def _may_be_none(name: str, unit: ast.AST) -> bool:
    """``name`` is a parameter of ``unit`` or is assigned None in it (``h = c = None``)."""
    if isinstance(unit, FUNCTION_TYPES) and name in parameter_names(unit):
        return True
    for node in ast.walk(unit):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value is None:
            if any(dotted_name(target) == name for target in node.targets):
                return True
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple) and isinstance(node.targets[0], ast.Tuple):
            pairs = zip(node.targets[0].elts, node.value.elts)
            if any(dotted_name(t) == name and isinstance(v, ast.Constant) and v.value is None for t, v in pairs):
                return True
    return False


def _in_loop(stack: list[ast.AST]) -> bool:
    """True when the traversal stack has a loop inside the innermost function."""
    for ancestor in reversed(stack):
        if isinstance(ancestor, LOOP_TYPES):
            return True
        if isinstance(ancestor, (*FUNCTION_TYPES, ast.Lambda)):
            return False
    return False


def _bare_names(expr: ast.expr) -> set[str]:
    """``h`` for ``h``, ``{h, c}`` for ``(h, c)`` / ``[h, c]`` / ``(h, c) if h
    is not None else None``; calls and operations are not bare."""
    if isinstance(expr, ast.Starred):
        return _bare_names(expr.value)
    if isinstance(expr, ast.IfExp):  # the state, or a fresh start on the first step
        return _bare_names(expr.body) | _bare_names(expr.orelse)
    if isinstance(expr, (ast.Tuple, ast.List)):
        names = set()
        for element in expr.elts:
            names |= _bare_names(element)
        return names
    name = dotted_name(expr)
    return {name} if name is not None else set()


class _CutFinder(Visitor):
    """Finds a detach, a repackage-style call or a fresh assignment of the carried names."""

    def __init__(self, carried: set[str], recurrent: ast.Assign, semantic, skip_init: bool = False) -> None:
        self.carried = carried
        self.recurrent = recurrent
        self.semantic = semantic
        self.skip_init = skip_init
        self.found = False

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        return not (self.skip_init and node.name == "__init__")

    def visit_Expr(self, node: ast.Expr) -> bool:
        return not _discarded_detach(node)

    def visit_Call(self, node: ast.Call) -> None:
        if not _mentions(node, self.carried):
            return
        if _is_detach(node):
            self.found = True
            return
        local = self.semantic.callee(node)
        if local is not None:
            if _contains_detach(local.body if hasattr(local, "body") else local) or \
                    _callee_cuts(self.semantic, node, local, self.carried):
                self.found = True
            return
        callee = dotted_name(node.func)
        if callee is None:
            return
        short = callee.split(".")[-1]
        if DETACH_HELPER.search(short) or short in ("init_hidden", "init_state", "reset_hidden", "reset_state", "zero_state", "initial_state"):
            self.found = True

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        # for h in hidden: h.detach_()
        if _mentions(node.iter, self.carried) and _contains_detach(node.body):
            self.found = True

    def visit_Assign(self, node: ast.Assign) -> None:
        if node is self.recurrent:
            return
        bound = {name for target in node.targets for name in targets_of(target)}
        if not bound & self.carried:
            return
        if self.semantic.value(node.value).graph is not Tri.YES or _contains_detach(node.value):
            self.found = True


def _callee_cuts(semantic, call: ast.Call, function: ast.AST, carried: set[str]) -> bool:
    """The function of the file that ``call`` runs rebinds the parameter
    that receives a carried name to a value that holds no graph
    (``state = tuple(s.data for s in state)``, ``h = None``) before anything
    else reads it: what the call feeds forward is cut there."""
    if not isinstance(function, FUNCTION_TYPES):
        return False
    received = {parameter for parameter, argument in _parameters_bound(call, function).items()
                if _bare_names(argument) & carried}
    for statement in function.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                and isinstance(statement.targets[0], ast.Name) and statement.targets[0].id in received:
            if semantic.value(statement.value).graph is Tri.NO:
                return True
            received.discard(statement.targets[0].id)
        elif received & names_in(statement):
            return False  # read (or handed on) before any rebinding
        if not received:
            return False
    return False


def _parameters_bound(call: ast.Call, function: ast.AST) -> dict[str, ast.expr]:
    """The parameters of ``function`` that the arguments of ``call`` bind
    (``self`` skipped for a method called on an object)."""
    on_object = isinstance(call.func, ast.Attribute) and first_parameter(function) in ("self", "cls") \
        and not is_static_method(function)
    return arguments_bound(call, function, skip_receiver=on_object)


def _mentions(node: ast.AST, carried: set[str]) -> bool:
    return bool(names_in(node) & carried)


def _is_detach(call: ast.Call) -> bool:
    """``x.detach()`` or ``x.detach_()``."""
    return isinstance(call.func, ast.Attribute) and call.func.attr in ("detach", "detach_")


def _contains_detach(node: ast.AST | list[ast.stmt]) -> bool:
    finder = _DetachCall()
    walk_visit(node, finder)
    return finder.found


def _discarded_detach(statement: ast.Expr) -> bool:
    """``s.detach()`` as a statement of its own: it returns a detached copy
    and leaves ``s`` attached (only ``detach_()`` works in place; torch
    2.13.0 ``torch/_tensor_docs.py``), so dropping the copy cuts nothing."""
    value = statement.value
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "detach"


class _DetachCall(Visitor):
    def __init__(self) -> None:
        self.found = False

    def visit_Expr(self, node: ast.Expr) -> bool:
        return not _discarded_detach(node)

    def visit_Call(self, node: ast.Call) -> None:
        if _is_detach(node):
            self.found = True
