"""What calls, attribute reads and iteration yield: the transfer functions of
the semantic model, reading the data tables of :mod:`.frameworks` and
:mod:`.torch_ops`.

Every function here takes the file's
:class:`~memlint.lint.semantic.model.SemanticModel` and, for calls, the
running :class:`~memlint.lint.semantic.interpreter.Interpreter` (to record
forward and backward passes, call sites and writes into containers).
"""

from __future__ import annotations

import ast
import re

from memlint.lint.names import dotted_name, targets_of
from memlint.lint.semantic import frameworks as fw
from memlint.lint.semantic import torch_ops as ops
from memlint.lint.semantic.interpreter import (
    CONTAINER_BUILTINS,
    PLAIN_BUILTINS,
    STORING_METHODS,
    CallInfo,
    CallSite,
    Context,
    Effect,
    device_of_literal,
    literal_flag,
)
from memlint.lint.semantic.scopes import BindingKind
from memlint.lint.semantic.values import (
    PLAIN,
    UNKNOWN,
    Kind,
    Tri,
    Value,
    combine,
    container,
    join_all,
    module,
    obj,
    tensor,
)
from memlint.lint.syntax import FOR_TYPES, FUNCTION_TYPES, is_constant
from memlint.lint.walk import descendants, file_memo
from memlint.lint.semantic.constants import literal_arguments, unreachable_for_arguments
from memlint.lint.signatures import (arguments_bound, first_parameter, parameter_defaults, parameter_names,
                                     positional_parameters)

#: A ``range`` over at most this many steps is a fixed structure (layers,
#: heads, a few augmentations), not a stream that grows with the run.
SMALL_RANGE = 16
#: Methods whose receiver is an lr scheduler's type.
_SCHEDULER = "lr_scheduler"
MODEL_OUTPUT = "transformers.ModelOutput"
DATALOADER = "torch.utils.data.DataLoader"


# ======================================================================================
# calls
# ======================================================================================
def evaluate_call(model, call: CallInfo, interpreter) -> Value:
    """The value of ``call`` (see the module docstring)."""
    func = call.node.func
    local = _local_target(model, func)
    if local is not None:
        return _call_local_definition(model, local, call, interpreter)
    made = _made_by_factory(model, func)
    if made is not None:
        return local_call(model, made, call, interpreter)
    qualified = model.qualified(func)  # None for what is not a dotted name
    if qualified is not None:
        head = qualified.split(".")[0]
        if head in model.library_roots or (isinstance(func, ast.Name) and qualified == func.id and not _bound_locally(model, func)):
            result = library_call(model, qualified, call, interpreter)
            if result is not None:
                return result
    if isinstance(func, ast.Attribute):
        dotted = model.scopes.dotted.of(func)
        if dotted is not None and dotted in model.module_evidence(interpreter.unit):
            return call_value(model, interpreter.expr(func), call, interpreter)  # `self.model(b)`: used as a module
        receiver = interpreter.expr(func.value)
        return method_call(model, receiver, func.attr, call, interpreter)
    callee = interpreter.expr(func)
    return call_value(model, callee, call, interpreter)


def _made_by_factory(model, func: ast.expr):
    """The in-file ``def`` a plain name denotes when it is bound once to what
    a function of the file returns (``step = make_step(model, opt)``, where
    ``make_step`` returns a ``def`` of its body), with no argument bound in
    advance; None otherwise."""
    if not isinstance(func, ast.Name):
        return None
    bindings = model.scopes.bindings_of(func.id, model.scopes.scope_for(func))
    if len(bindings) != 1 or bindings[0].kind is not BindingKind.ASSIGNMENT:
        return None  # cheap check first
    found = model.callable_definition(func)
    if found is None or found[1] != 0 or not isinstance(found[0], FUNCTION_TYPES):
        return None
    return found[0]


def _bound_locally(model, name: ast.Name) -> bool:
    return bool(model.scopes.bindings_of(name.id, model.scopes.scope_for(name)))


def _local_target(model, func: ast.expr):
    """The in-file ``def`` or class a plain-name callee refers to."""
    if not isinstance(func, ast.Name):
        return None
    bindings = model.scopes.bindings_of(func.id, model.scopes.scope_for(func))
    definitions = [b for b in bindings if b.kind in (BindingKind.FUNCTION, BindingKind.CLASS)]
    if len(definitions) != len(bindings) or not definitions:
        return None
    if len(definitions) == 1:
        return definitions[0].node
    return _reaching_definition(model, func, [b.node for b in definitions])


def _reaching_definition(model, func: ast.Name, definitions: list[ast.AST]):
    """Of several top-level ``def``/``class`` statements of one name (a
    notebook that redefines ``step()`` cell after cell), the one a call in
    the module's own top-level code runs: the last defined before it, the
    statements running in order. None for a call inside a function (it runs
    whenever it is called) or when a definition is nested in a block."""
    module = model.module
    if model.unit_of(func) is not module or any(model.parents.get(d) is not module for d in definitions):
        return None
    statement = func
    while model.parents.get(statement) is not module:
        statement = model.parents.get(statement)
        if statement is None:
            return None
    before = [d for d in definitions if module.body.index(d) < module.body.index(statement)]
    return before[-1] if before else None


def _call_local_definition(model, definition: ast.AST, call: CallInfo, interpreter) -> Value:
    if isinstance(definition, ast.ClassDef):
        klass = model.classes.of(definition)
        return instantiate(model, klass, call, interpreter) if klass is not None else UNKNOWN
    return local_call(model, definition, call, interpreter)


def instantiate(model, klass, call: CallInfo, interpreter) -> Value:
    """``Klass(...)``: an instance; ``__init__`` runs with the call's arguments."""
    instance = model.instance_of(klass)
    init = klass.method("__init__")
    if init is not None:
        local_call(model, init, call, interpreter, receiver=instance)
    if instance.kind is Kind.MODULE and instance.framework == "torch":
        instance = instance.evolve(device=Tri.YES if model.moves_itself(klass) else construction_device(model, call))
        if model.parameterless_class(klass):
            instance = instance.evolve(frozen=True)  # no parameter to record a graph for
    return instance


def construction_device(model, call: CallInfo) -> Tri:
    """Where a module built by ``call`` holds its parameters: on the CPU,
    where ``nn.Module`` constructors create them (torch 2.13
    ``torch/nn/modules/linear.py`` ``factory_kwargs``), unless the call names a
    ``device=``, runs inside a context that sets another device
    (:data:`~.frameworks.DEVICE_CONTEXTS`), or the file sets a default device."""
    if "device" in call.keywords:
        return device_of_value(call.argument_node(99, "device"), call.keywords["device"]) or Tri.MAYBE
    if model.sets_default_device():
        return Tri.MAYBE
    position = model.index.position_of(call.node)
    for ancestor in model.index.ancestors_at(position) if position is not None else ():
        if isinstance(ancestor, (ast.With, ast.AsyncWith)) and any(_sets_device(model, item.context_expr) for item in ancestor.items):
            return Tri.MAYBE
    return Tri.NO


def _sets_device(model, context: ast.expr) -> bool:
    if not isinstance(context, ast.Call):
        return False
    if model.qualified(context.func) in fw.DEVICE_CONTEXTS:
        return True
    return isinstance(context.func, ast.Attribute) and context.func.attr in fw.DEVICE_CONTEXT_METHODS


def local_call(model, function: ast.AST, call: CallInfo, interpreter, receiver: Value | None = None) -> Value:
    """A call of a function of this file: the callee interpreted with the
    call's arguments; its result, training steps and writes into persistent
    state are the call's."""
    bound, originals = bind_arguments(function, call, receiver)
    grad = interpreter.state.grad
    site = CallSite(call.node, function, bound, grad)
    decorated = model.decorator_grad(function) if isinstance(function, FUNCTION_TYPES) else None
    summary = model.summary(function, Context(bound, decorated if decorated is not None else grad))
    if summary is None:
        interpreter.record_call_site(site, (), False, frozenset())
        return UNKNOWN
    effects = _exported_effects(model, function, summary)
    backpropagated = _map_sources(summary.backpropagated, originals)
    interpreter.record_call_site(site, effects, summary.trains, backpropagated, summary.runs_forward)
    returned = summary.returns
    if returned is None:
        return PLAIN
    returned = _returned_for_literals(model, function, call.node, summary) or returned
    mapped = _map_sources(returned.sources, originals)
    if isinstance(function, FUNCTION_TYPES) and _is_generator(model, function):
        return returned.evolve(sources=mapped)
    return returned.with_sources(mapped) if returned.may_hold_tensor else returned


def _returned_for_literals(model, function: ast.AST, call: ast.Call, summary) -> Value | None:
    """What ``function`` returns for this ``call`` when the literals it
    passes (and the literal defaults it leaves) rule out some of its
    ``return`` statements (``def top_k(..., reduction="mean"): if reduction
    == "mean": return acc.item()`` ... ``return acc``, called with
    ``reduction="mean"``): the join of the returns that can run; None when
    the literals rule none out (or all)."""
    if not isinstance(function, FUNCTION_TYPES):
        return None
    returns = [r for r in model.own_nodes(function, (ast.Return,)) if r.value is not None]
    if len(returns) < 2:
        return None
    env = literal_arguments(model, call, function)
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None
    for name, default in parameter_defaults(function):
        if name not in env and isinstance(default, ast.Constant) and not _passed(model, call, function, name):
            env[name] = default.value
    if not env:
        return None
    kept = [r for r in returns if not unreachable_for_arguments(model, r, function, env)]
    if not kept or len(kept) == len(returns):
        return None
    values = [summary.values[r.value] for r in kept if r.value in summary.values]
    return join_all(values) if values else None


def _passed(model, call: ast.Call, function: ast.AST, name: str) -> bool:
    """``call`` gives parameter ``name`` of ``function`` an argument (by position or keyword)."""
    on_object = isinstance(call.func, ast.Attribute) and model.class_of_method(function) is not None
    return name in arguments_bound(call, function, skip_receiver=on_object)


def _is_generator(model, function: ast.AST) -> bool:
    return bool(model.own_nodes(function, (ast.Yield, ast.YieldFrom)))


def _exported_effects(model, function: ast.AST, summary) -> tuple[Effect, ...]:
    """The callee's writes into persistent state, its own and those of the
    calls it makes on itself (``self._add(v)``)."""
    effects = list(summary.effects)
    receiver = first_parameter(function)
    for inner, inner_effects in summary.call_effects.items():
        target = inner.func.value if isinstance(inner.func, ast.Attribute) else None
        if receiver is not None and isinstance(target, ast.Name) and target.id == receiver:
            effects.extend(inner_effects)
        elif isinstance(inner.func, ast.Name):
            effects.extend(e for e in inner_effects if not e.target.startswith("self."))
    return tuple(effects)


def _map_sources(names: frozenset[str], originals: dict[str, Value]) -> frozenset[str]:
    mapped: set[str] = set()
    for name in names:
        original = originals.get(name)
        if original is not None:
            mapped |= original.sources
    return frozenset(mapped)


def bind_arguments(function: ast.AST, call: CallInfo, receiver: Value | None):
    """The callee's parameters bound to the call's arguments: ``(name,
    value)`` pairs with the caller's sources stripped, and the original
    argument values by parameter name."""
    arguments = function.args
    positional = [a.arg for a in positional_parameters(arguments)]
    bound: dict[str, Value] = {}
    if receiver is not None and positional:
        bound[positional[0]] = receiver
        positional = positional[1:]
    starred = any(isinstance(a, ast.Starred) for a in call.node.args)
    if not starred:
        for name, value in zip(positional, call.positional):
            bound[name] = value
    names = set(positional) | {a.arg for a in arguments.kwonlyargs}
    extra = []
    for name, value in call.keywords.items():
        if name in names:
            bound[name] = value
        else:
            extra.append(value)
    if arguments.kwarg is not None:  # `def add(self, **transition)`: a dict of the other keywords
        bound[arguments.kwarg.arg] = container(join_all(extra) if extra else None, type_name="dict")
    if arguments.vararg is not None and not starred:
        rest = call.positional[len(positional):]
        bound[arguments.vararg.arg] = container(join_all(rest) if rest else None, items=tuple(rest))
    originals = dict(bound)
    stripped = tuple(sorted((name, value.with_sources(frozenset())) for name, value in bound.items()))
    return stripped, originals


def call_value(model, callee: Value, call: CallInfo, interpreter) -> Value:
    """Calling a value: a module runs its forward pass, a class of the file
    (or a module class passed as ``Type[nn.Module]``) makes an instance, an
    object with ``__call__`` runs it."""
    if callee.kind is Kind.MODULE:
        return forward(model, callee, call, interpreter)
    if callee.kind is Kind.FUNCTION and callee.type_name and "module" in fw.roles_of_base(callee.type_name):
        return module(type_name=callee.type_name)
    if callee.device is Tri.YES and could_be_module(callee):
        # moved with `.cuda()`/`.to(device)` and called: only a module is both
        return forward(model, as_module(callee), call, interpreter)
    klass = model.classes.get(callee.klass)
    if callee.kind is Kind.FUNCTION and klass is not None:
        return instantiate(model, klass, call, interpreter)
    if callee.kind is Kind.OBJECT and klass is not None and klass.method("__call__") is not None:
        return local_call(model, klass.method("__call__"), call, interpreter, receiver=callee)
    if callee.kind is Kind.OBJECT and callee.type_name and fw.OPTIMIZER_NAMESPACE.match(callee.type_name):
        # an optimizer class held in a value (`getattr(torch.optim, name)`): calling it builds one
        return library_call(model, callee.type_name, call, interpreter) or unknown_call(call)
    return unknown_call(call)


def unknown_call(call: CallInfo) -> Value:
    """A call the file does not explain: its result is unknown."""
    return UNKNOWN


def forward(model, callee: Value, call: CallInfo, interpreter) -> Value:
    """A forward pass of ``callee`` on the call's arguments."""
    if callee.framework == "keras":
        return Value(Kind.TENSOR, Tri.MAYBE, Tri.MAYBE, framework="tensorflow")
    disables_grad = callee.type_name in fw.NO_GRAD_FORWARD_TYPES
    interpreter.record_forward(call.node, grad=Tri.NO if disables_grad else None)
    arguments = call.arguments
    sources = frozenset().union(*(a.sources for a in arguments)) if arguments else frozenset()
    device = _forward_device(callee, arguments)
    graph = Tri.NO if disables_grad or non_differentiable_metric(callee) else _forward_graph(callee, arguments, interpreter.state.grad)
    klass = model.classes.get(callee.klass)
    forward_method = klass.method("forward") if klass is not None else None
    if forward_method is not None:
        result = local_call(model, forward_method, call, interpreter, receiver=callee)
        if result.graph is Tri.MAYBE or (result.graph is Tri.YES and graph is not Tri.YES):
            result = result.evolve(graph=graph)
        if result.device is Tri.MAYBE:
            result = result.evolve(device=device)
        return result.with_sources(result.sources | sources) if result.may_hold_tensor else result
    kind = callee.output or Kind.UNKNOWN
    type_name = None
    scalar = bool(callee.type_name and callee.type_name.endswith("Loss") and "reduction" not in call.keywords)
    if callee.type_name and callee.type_name.startswith("transformers.") and not _returns_tuple(call):
        kind, type_name = Kind.CONTAINER, MODEL_OUTPUT
    value = Value(kind, graph, device, framework="torch", type_name=type_name, scalar=scalar, sources=sources)
    if kind in (Kind.CONTAINER, Kind.UNKNOWN) and type_name is None:
        value = value.evolve(element=tensor(graph, device))  # a tensor or a tuple of them: tensors either way
    return value


def non_differentiable_metric(callee: Value) -> bool:
    """``callee`` is a torchmetrics metric whose value carries no graph
    (:data:`~.frameworks.NON_DIFFERENTIABLE_METRICS`: ``Accuracy``, ``F1Score``, ...)."""
    name = callee.type_name
    return bool(name) and name.split(".", 1)[0] == fw.METRICS_ROOT and name.rsplit(".", 1)[-1] in fw.NON_DIFFERENTIABLE_METRICS


def _returns_tuple(call: CallInfo) -> bool:
    """A library model's forward asked for a plain tuple of tensors (``return_dict=False``)."""
    keyword, value = fw.MODEL_OUTPUT_TUPLE_KEYWORD
    return is_constant(call.argument_node(99, keyword), value)


def _no_grad_hub_model(call: CallInfo) -> str | None:
    """The wrapper type of a ``torch.hub.load`` of a repository of
    :data:`~fw.NO_GRAD_HUB_MODELS` (its literal ``"owner/name[:ref]"``), unless
    the call passes ``autoshape=False``; None otherwise."""
    repository = call.node.args[0] if call.node.args else None
    for keyword in call.node.keywords:
        if keyword.arg == "repo_or_dir":
            repository = keyword.value
        elif keyword.arg == "autoshape" and not (isinstance(keyword.value, ast.Constant) and keyword.value.value is True):
            return None
    if not (isinstance(repository, ast.Constant) and isinstance(repository.value, str)):
        return None
    return fw.NO_GRAD_HUB_MODELS.get(repository.value.split(":", 1)[0])


def parameterless(callee: Value) -> bool:
    """A module with no parameters (a torch.nn loss, :data:`~.frameworks.PARAMETERLESS_MODULES`,
    a torchmetrics metric, :func:`~.frameworks.is_state_only_metric`): its output
    has a graph only when an input has one."""
    return callee.type_name in fw.PARAMETERLESS_MODULES or fw.is_state_only_metric(callee.type_name)


def _forward_device(callee: Value, arguments: list[Value]) -> Tri:
    if callee.device is Tri.YES or any(a.device is Tri.YES for a in arguments):
        return Tri.YES
    if callee.device is Tri.NO and arguments and all(a.device is Tri.NO for a in arguments):
        return Tri.NO
    return Tri.MAYBE


def _forward_graph(callee: Value, arguments: list[Value], grad: Tri) -> Tri:
    if grad is Tri.NO:
        return Tri.NO
    if callee.frozen or parameterless(callee):
        inputs = combine(arguments).graph if arguments else Tri.NO
        return inputs if grad is Tri.YES else Tri.NO if inputs is Tri.NO else Tri.MAYBE
    return Tri.YES if grad is Tri.YES else Tri.MAYBE


# -- methods ----------------------------------------------------------------------------
def method_call(model, receiver: Value, name: str, call: CallInfo, interpreter) -> Value:
    """``receiver.name(...)``."""
    klass = model.classes.get(receiver.klass)
    if klass is not None:
        method = klass.method(name)
        if method is None and receiver.kind is not Kind.FUNCTION and isinstance(call.node.func, ast.Attribute) and not (
                receiver.kind is Kind.MODULE and name not in model.assigned_attributes(klass)):
            # `self.encoder(x)`: the attribute's value (assigned in the class, or used as a module) is called;
            # a module's `state_dict()`/`cuda()` that the class does not define is nn.Module's, below
            return call_value(model, interpreter.expr(call.node.func), call, interpreter)
        if method is not None:
            if receiver.kind is Kind.FUNCTION:  # a classmethod or staticmethod called on the class
                return local_call(model, method, call, interpreter, receiver=receiver if _is_classmethod(model, method) else None)
            if name == "forward" and receiver.kind is Kind.MODULE:
                return forward(model, receiver, call, interpreter)
            return local_call(model, method, call, interpreter, receiver=receiver)
        if receiver.kind is Kind.FUNCTION and name in ("from_pretrained", "from_config") and klass.is_module:
            return model.instance_of(klass)
    if name == "backward":
        return _backward_method(model, receiver, call, interpreter)
    if receiver.kind is Kind.MODULE:
        return module_method(model, receiver, name, call, interpreter)
    if receiver.kind is Kind.TENSOR:
        return tensor_method(receiver, name, call, interpreter)
    if receiver.kind is Kind.OPTIMIZER:
        return optimizer_method(model, receiver, name, call, interpreter)
    if receiver.kind is Kind.CONTAINER:
        return container_method(model, receiver, name, call, interpreter)
    if receiver.kind is Kind.OBJECT and receiver.type_name:
        return library_object_method(model, receiver, name, call, interpreter)
    if receiver.kind is Kind.UNKNOWN:
        owner = model.sole_method_owner(name) if receiver.klass is None else None
        if owner is not None and name in _LIBRARY_METHOD_NAMES and not _takes_these_keywords(owner.method(name), call) \
                and not _not_a_mode_switch(name, call):
            owner = None  # `seen.add(x)`, `d.update(...)`: a library method of that name
        if owner is not None:
            return local_call(model, owner.method(name), call, interpreter, receiver=model.instance_of(owner))
        return unknown_receiver_method(model, receiver, name, call, interpreter)
    return UNKNOWN


#: Method names that libraries define everywhere: an unknown receiver
#: calling one is not taken for an instance of a class of the file that
#: happens to define a method of that name.
_LIBRARY_METHOD_NAMES = frozenset({
    "step", "zero_grad", "backward", "forward", "to", "cuda", "cpu", "train", "eval", "parameters",
    "named_parameters", "state_dict", "load_state_dict", "item", "detach", "append", "extend", "get", "items",
    "keys", "values", "pop", "update", "add", "put", "run", "fit", "predict", "save", "load", "log", "reset",
    "close", "read", "write", "format", "copy", "clear", "sum", "mean", "view", "reshape", "apply", "__init__",
    "__call__", "setup", "prepare", "generate", "encode", "decode", "sample",
})


#: ``nn.Module``'s mode switches and how many positional arguments they take:
#: ``train(self, mode: bool = True)``, ``eval(self)`` (torch 2.13.0 torch/nn/modules/module.py).
_MODE_SWITCH_ARGUMENTS = {"train": 1, "eval": 0}


def _not_a_mode_switch(name: str, call: CallInfo) -> bool:
    """``learner.train(feed)``: called with more arguments than ``nn.Module``'s
    ``train``/``eval`` take, or with a tensor, container or module where
    ``train`` takes a bool, so not that library method."""
    taken = _MODE_SWITCH_ARGUMENTS.get(name)
    if taken is None or any(isinstance(a, ast.Starred) for a in call.node.args):
        return False
    return len(call.positional) > taken or any(
        v.kind in (Kind.TENSOR, Kind.CONTAINER, Kind.MODULE) for v in call.positional)


def _takes_these_keywords(method: ast.AST, call: CallInfo) -> bool:
    """The call passes keywords and the file's method accepts them
    (``buffer.add(obs=o, q=q)`` against ``def add(self, **transition)``):
    ``set.add``/``list.append`` take none."""
    if not call.keywords or not isinstance(method, FUNCTION_TYPES):
        return False
    return method.args.kwarg is not None or set(call.keywords) <= parameter_names(method)


def _is_classmethod(model, method: ast.AST) -> bool:
    return any((model.qualified(d) or dotted_name(d)) == "classmethod" for d in method.decorator_list)


def _backward_method(model, receiver: Value, call: CallInfo, interpreter) -> Value:
    """``loss.backward()``, ``accelerator.backward(loss)``, ``engine.backward(loss)``."""
    first = call.argument(0)
    engine = receiver.kind in (Kind.OBJECT, Kind.MODULE) or (receiver.type_name in fw.BACKWARD_ENGINES)
    if first is not None and (engine or (receiver.kind is Kind.UNKNOWN and _receiver_not_local(model, call))):
        interpreter.record_backward(call.node, first)
    else:
        interpreter.record_backward(call.node, receiver)
    return PLAIN


def _receiver_not_local(model, call: CallInfo) -> bool:
    """The receiver of ``x.backward(arg)`` is not assigned in this unit (a
    parameter, an attribute, a global): an engine like ``accelerator``."""
    return _not_assigned_in_unit_of(model, call.node, call.node.func.value)


def _not_assigned_in_unit_of(model, node: ast.AST, receiver: ast.expr) -> bool:
    """``receiver`` is a dotted name that the unit around ``node`` does not
    assign: a parameter, an attribute, a global, an import."""
    name = dotted_name(receiver)
    if name is None:
        return False
    if "." in name:
        return True
    unit = model.unit_of(node)
    scope = model.scopes.own_scope(unit) if unit is not model.module else model.scopes.module_scope
    bindings = scope.bindings.get(name, []) if scope is not None else []
    return all(b.kind in (BindingKind.PARAMETER, BindingKind.IMPORT) for b in bindings)


def module_method(model, receiver: Value, name: str, call: CallInfo, interpreter) -> Value:
    """A method of a module (torch 2.13 ``torch/nn/modules/module.py``)."""
    if name in ("forward", "__call__"):
        return forward(model, receiver, call, interpreter)
    if name in ops.MODULE_RETURNING_METHODS:
        moved = _moved_module(receiver, name, call)
        if isinstance(call.node.func, ast.Attribute):
            # modules move in place: `model.cuda()` alone moves it, and so does `model.eval().cpu()`
            interpreter.refine(_chain_root(call.node.func.value), moved)
        return moved
    if name in ops.MODULE_PARAMETER_METHODS:
        return _named(name, tensor(Tri.YES, receiver.device, leaf=True))
    if name in ops.MODULE_CHILDREN_METHODS:
        child = module(receiver.framework or "torch", device=receiver.device)
        return child if name.startswith("get_") else _named(name, child)
    if name in ("buffers", "named_buffers"):
        return _named(name, tensor(Tri.NO, receiver.device))
    if name == "state_dict":
        device = Tri.NO if model.offloads_state_dict(call.node) else receiver.device
        return container(tensor(Tri.NO, device), type_name="dict")
    if name in ops.MODULE_DETACHED_METHODS:
        return PLAIN
    if name in fw.NO_GRAD_MODULE_METHODS:
        return tensor(Tri.NO, receiver.device)
    if name in fw.SENTENCE_ENCODER_METHODS and receiver.type_name in fw.SENTENCE_ENCODERS:
        interpreter.record_forward(call.node, grad=Tri.NO)  # `encode` runs the model's forward under no_grad
        on_device = is_constant(call.argument_node(99, "convert_to_tensor"), True) or is_constant(
            call.argument_node(99, "convert_to_numpy"), False)
        return tensor(Tri.NO, receiver.device) if on_device else PLAIN.evolve(type_name=fw.NUMPY_ARRAY)
    if name == "manual_backward" and call.argument(0) is not None:
        interpreter.record_backward(call.node, call.argument(0))
        return PLAIN
    if name == "optimizers":
        return Value(Kind.OPTIMIZER, Tri.NO, Tri.MAYBE)
    if name in ("log", "log_dict", "print", "save_hyperparameters", "toggle_optimizer", "untoggle_optimizer"):
        return PLAIN
    if _runs_layers(receiver, name, call):
        return forward(model, receiver, call, interpreter)
    return Value(Kind.UNKNOWN, Tri.MAYBE, receiver.device)


def _runs_layers(receiver: Value, name: str, call: CallInfo) -> bool:
    """``model.encode(src, mask)``: a method of a model from another file
    (not one of nn.Module's own) given data: it runs the model's layers,
    a forward pass as far as autograd is concerned."""
    if receiver.klass is not None or receiver.framework != "torch" or name in ops.MODULE_OWN_METHODS or name.startswith("_"):
        return False
    if receiver.type_name and receiver.type_name.startswith("transformers."):
        return False  # PreTrainedModel's own API (save_pretrained, resize_token_embeddings, ...)
    # positional, keyword or `**inputs`: `model.sample(cond=batch)` hands the model the same data as
    # `model.sample(batch)`, and `model.get_image_features(**inputs)` the entries of a moved batch
    return any(a.kind is Kind.TENSOR or a.kind is Kind.CONTAINER and not _holds_only_plain(a)
               or a.kind is Kind.UNKNOWN and a.device is Tri.YES
               for a in (*call.positional, *call.keywords.values(), *call.spread))


def _holds_only_plain(value: Value) -> bool:
    """A container known to hold only Python numbers, strings and the like
    (``mode_kwargs=dict(n_samples=100)``): options, not data to run layers on."""
    contents = [*(value.items or ()), *([value.element] if value.element is not None else [])]
    return bool(contents) and all(item.kind is Kind.PLAIN for item in contents)


def _named(method: str, element: Value) -> Value:
    """What ``parameters()`` (elements) or ``named_parameters()`` (``(name, element)`` pairs) returns."""
    if method.startswith("named_"):
        element = container(None, items=(PLAIN, element))
    return container(element, stream=Tri.NO)


def _chain_root(expr: ast.expr) -> ast.expr:
    """``model`` in ``model.eval().train()``: the object a chain of module-returning calls starts from."""
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in ops.MODULE_RETURNING_METHODS:
        expr = expr.func.value
    return expr


def _moved_module(receiver: Value, name: str, call: CallInfo) -> Value:
    if name == "cuda":
        return receiver.evolve(device=Tri.YES)
    if name == "cpu":
        return receiver.evolve(device=Tri.NO)
    if name == "to":
        return receiver.evolve(device=_target_device(call, receiver.device))
    if name == "requires_grad_":
        flag = literal_flag(call.argument_node(0, "requires_grad"))
        return receiver.evolve(frozen=flag is Tri.NO) if call.node.args or call.node.keywords else receiver.evolve(frozen=False)
    return receiver


def _optimizer_state_device(call: CallInfo) -> Tri:
    """Where an optimizer built by ``call`` keeps its state: YES when the
    parameters it is given are known to be on the accelerator (``Adam(
    net.parameters())`` of a model moved there), since its per-parameter
    state (``exp_avg``, ``momentum_buffer``) is created beside each parameter
    (torch 2.13.0 ``torch/optim/adam.py`` ``_init_group``: ``torch.zeros_like(p,
    memory_format=torch.preserve_format)``); MAYBE otherwise."""
    params = call.argument(0, "params")
    return Tri.YES if params is not None and params.device is Tri.YES else Tri.MAYBE


def optimizer_method(model, receiver: Value, name: str, call: CallInfo, interpreter) -> Value:
    """``step`` is recorded; ``state_dict()`` of an optimizer whose state is on
    the accelerator holds those tensors as they are (torch 2.13.0
    ``torch/optim/optimizer.py`` ``Optimizer.state_dict`` packs ``self.state``
    without moving it), so a checkpoint of it is device data. Anything else:
    plain."""
    if name == "step":
        interpreter.record_optimizer_step(call.node)
    if name == "state_dict" and receiver.device is Tri.YES:
        return container(tensor(Tri.NO, Tri.YES), type_name="dict")
    return PLAIN


def library_object_method(model, receiver: Value, name: str, call: CallInfo, interpreter) -> Value:
    """Methods of engines (accelerate, Fabric), GradScaler, studies, schedulers."""
    type_name = receiver.type_name or ""
    if type_name in fw.GRAD_SCALERS:
        if name == "scale" and call.argument(0) is not None:
            return call.argument(0)
        if name == "state_dict":
            return container(PLAIN, type_name="dict")  # scale, growth factors, tracker: Python numbers
        if name == "step":
            interpreter.record_optimizer_step(call.node)
        return PLAIN
    if type_name in fw.ENGINE_TYPES.values() or type_name in fw.BACKWARD_ENGINES:
        if name in fw.PREPARE_METHODS:
            return _prepared(call)
        if name in ("unwrap_model",):
            first = call.argument(0)
            return first if first is not None and first.kind is Kind.MODULE else module()
        if name in ("autocast", "accumulate", "no_sync", "main_process_first", "join_uneven_inputs"):
            return obj(type_name=f"{type_name}.{name}")
        if name in fw.GATHERING_METHODS and call.argument(0) is not None:
            return call.argument(0)
        return UNKNOWN
    if type_name.startswith(ops.DISTRIBUTION_NAMESPACE):
        if name in ops.DISTRIBUTION_SAMPLING_METHODS:
            return tensor(Tri.NO, receiver.device)
        if name in ops.DISTRIBUTION_DIFFERENTIABLE_METHODS:
            computed = combine([receiver, *call.arguments]).evolve(kind=Kind.TENSOR, framework="torch", type_name=None)
            return interpreter._computed(computed.evolve(scalar=False))
        return UNKNOWN
    if could_be_module(receiver) and name in _MODULE_USE_METHODS and not names_python_module(model, call.node.func.value):
        return module_method(model, as_module(receiver), name, call, interpreter)
    if name in ("to", "cuda") and fw.NOT_MODEL_CLASS.search(type_name.rsplit(".", 1)[-1]):
        return receiver  # a pipeline's move returns the same object, not a module (diffusers ``DiffusionPipeline.to`` returns ``self``)
    return UNKNOWN


#: Methods that, called on an instance of a library class, use it as a module.
_MODULE_USE_METHODS = ops.MODULE_RETURNING_METHODS | ops.MODULE_EVIDENCE_METHODS | ops.MODULE_PARAMETER_METHODS


def names_python_module(model, node: ast.expr) -> bool:
    """``node`` is a name that only ``import pkg`` / ``import pkg.sub as alias``
    statements bind: a Python module, whose attributes are that module's
    functions and classes. A Python module is never an ``nn.Module``
    instance, so ``utils.train(net, ...)`` or ``utils.eval(...)`` calls a
    function of another file (which the model does not follow: its result is
    unknown); it is not a mode switch of a model named ``utils``."""
    if not isinstance(node, ast.Name):
        return False
    found = model.scopes.binding_scope(node.id, model.scopes.scope_for(node))
    bindings = found.bindings.get(node.id, []) if found is not None else []
    return bool(bindings) and all(b.kind is BindingKind.IMPORT and isinstance(model.parents.get(b.node), ast.Import)
                                  for b in bindings)


def could_be_module(value: Value) -> bool:
    """An instance of a library class the tables do not know, that use may show to be a module."""
    return (value.kind is Kind.UNKNOWN or value.kind is Kind.OBJECT) and value.klass is None and not (
        value.type_name and (fw.NOT_MODULE_TYPES.match(value.type_name) or value.type_name in _KNOWN_OBJECT_TYPES
                             or value.type_name.startswith("torch.")
                             or fw.NOT_MODEL_CLASS.search(value.type_name.rsplit(".", 1)[-1])))


_KNOWN_OBJECT_TYPES = frozenset({"torch.amp.GradScaler", "optuna.study.Study", _SCHEDULER, "torch.device", "torch.dtype", "BaseException"})


def as_module(value: Value) -> Value:
    """``value``, now known to be a module."""
    known = module(value.framework or "torch", type_name=value.type_name, device=value.device)
    return known.evolve(frozen=True) if value.frozen else known


def _prepared(call: CallInfo) -> Value:
    """``accelerator.prepare(model, optimizer, loader)``: each argument, on
    the device (a loader yields device batches). An argument the file does
    not explain (a parameter: a model, an optimizer, a scheduler or a loader)
    yields device batches when it is iterated: of what ``prepare`` takes, only
    a ``DataLoader`` is iterable, and its prepared copy moves each batch to
    the device (accelerate 1.15.0 ``accelerator.py`` ``_prepare_one`` -> ``_prepare_data_loader`` ->
    ``data_loader.py`` ``prepare_data_loader(..., put_on_device=device_placement)``,
    ``device_placement=True`` by default; lightning 2.6.6 ``fabric.py``
    ``setup_dataloaders(..., move_to_device=True)``)."""
    prepared = []
    for value in call.positional:
        if value.kind is Kind.MODULE:
            prepared.append(value.evolve(device=Tri.YES))
        elif value.stream is Tri.YES or value.kind is Kind.UNKNOWN and value.stream is Tri.MAYBE:
            element = value.element or UNKNOWN
            prepared.append(value.evolve(element=element.evolve(device=Tri.YES)))
        else:
            prepared.append(value)
    if len(prepared) == 1:
        return prepared[0]
    return container(join_all(prepared), items=tuple(prepared))


def tensor_method(receiver: Value, name: str, call: CallInfo, interpreter) -> Value:
    """A ``torch.Tensor`` method."""
    device = receiver.device
    if name in ops.DETACHING_METHODS:
        kind = ops.DETACHING_METHODS[name]
        if kind == "tensor":
            return tensor(Tri.NO, device)
        return PLAIN
    if name == "cpu":
        return receiver.evolve(device=Tri.NO)
    if name == "cuda":
        return interpreter._computed(receiver.evolve(device=Tri.YES, leaf=False))
    if name == "to":
        if _casts_to_integer(call):
            return tensor(Tri.NO, _target_device(call, device))
        return interpreter._computed(receiver.evolve(device=_target_device(call, device), leaf=False))
    if name == "type":
        if not call.node.args and not call.node.keywords:
            return PLAIN
        return tensor(Tri.NO, device) if _casts_to_integer(call) else interpreter._computed(receiver.evolve(leaf=False))
    if name in ops.INTEGER_CAST_METHODS or name in ops.NONDIFFERENTIABLE:
        return tensor(Tri.NO, device)
    if name in ops.PYTHON_RESULT:
        return PLAIN
    if name in ops.VALUES_AND_INDICES and (name not in ops.TUPLE_ONLY_WITH_DIM or call.node.args or call.node.keywords):
        return _return_type(name, interpreter._computed(receiver.evolve(kind=Kind.TENSOR, leaf=False)))
    if name in ops.TUPLE_RESULT:
        part = interpreter._computed(receiver.evolve(kind=Kind.TENSOR, leaf=False))
        return container(part)
    if name == "requires_grad_":
        return tensor(Tri.YES, device, leaf=True) if literal_flag(call.argument_node(0, "requires_grad")) is not Tri.NO else tensor(Tri.NO, device)
    if name in ("register_hook", "retain_grad", "backward"):
        return PLAIN
    if name.endswith("_") and name not in ("requires_grad_",):
        return receiver  # in place: the same tensor
    combined = combine([receiver.evolve(leaf=False), *call.arguments])
    result = combined.evolve(kind=Kind.TENSOR, device=device if device is not Tri.MAYBE else combined.device)
    if name in ops.FULL_REDUCTIONS and not call.node.args and not call.node.keywords:
        result = result.evolve(scalar=True)
    return interpreter._computed(result)


def _casts_to_integer(call: CallInfo) -> bool:
    for argument in [*call.node.args, *(k.value for k in call.node.keywords if k.arg == "dtype")]:
        name = dotted_name(argument)
        if name is not None and name.split(".")[-1] in ops.INTEGER_DTYPES:
            return True
    return False


def _target_device(call: CallInfo, current: Tri) -> Tri:
    """Where ``x.to(...)`` puts ``x``: a ``device``/positional argument that is
    no dtype. A device literal or a variable holding one decides; a
    ``torch.device`` gives its device; a tensor argument gives its device;
    any other device argument (``args.device``, a rank) is taken for the
    accelerator: the code moves the tensor to its training device."""
    candidates = [(k.value, call.keywords.get(k.arg)) for k in call.node.keywords if k.arg == "device"]
    candidates += [(node, value) for node, value in zip(call.node.args, call.positional) if not isinstance(node, ast.Starred)]
    for node, value in candidates:
        if value is None:
            continue
        device = device_of_value(node, value)
        if device is not None:
            return device
    return current


#: ``x.device`` of a tensor known to be on the CPU: a device that names the CPU.
_CPU_DEVICE = PLAIN.evolve(type_name="device:cpu")


def device_of_value(node: ast.expr, value: Value) -> Tri | None:
    """The device an argument in a device position names; None for a dtype or a flag."""
    literal = device_of_literal(node)
    if literal is not Tri.MAYBE:
        return literal
    if value.kind is Kind.TENSOR:
        return value.device
    if value.type_name == "torch.dtype" or _is_dtype_name(node) or is_constant(node, True) or is_constant(node, False):
        return None
    if value.type_name in ("device:cpu", "device:accelerator", "torch.device") or value.kind is Kind.PLAIN and value.device is Tri.YES:
        return value.device if value.device is not Tri.MAYBE else Tri.YES
    return Tri.YES


def _is_dtype_name(node: ast.AST) -> bool:
    name = dotted_name(node)
    return name is not None and (name.split(".")[-1] in ops.INTEGER_DTYPES or name.split(".")[-1] in _FLOAT_DTYPES)


_FLOAT_DTYPES = frozenset({"float", "float16", "float32", "float64", "half", "double", "bfloat16", "complex64", "complex128", "dtype"})


def container_method(model, receiver: Value, name: str, call: CallInfo, interpreter) -> Value:
    """A method of a list, dict, tuple, set or ModelOutput."""
    if name in STORING_METHODS:
        stored = _stored_value(receiver, name, call)
        if stored is not None:
            receiver_node = call.node.func.value
            interpreter.update_container(receiver_node, stored)
            interpreter.record_collect(receiver_node, stored, call.node)
        if name == "setdefault":
            return _set_default(receiver, stored)
        return PLAIN
    if receiver.stream is Tri.YES and name in fw.STREAM_PIPELINE_METHODS:
        return receiver  # `ds.shuffle(1000).batch(32)`: still the stream of batches
    element = receiver.element or UNKNOWN
    if name in ("pop", "get", "popleft", "__getitem__", "popitem"):
        return element
    if name == "items":
        return container(None, stream=Tri.NO) if receiver.element is None else container(
            container(None, items=(PLAIN, element)), stream=Tri.NO)
    if name == "values":
        return container(receiver.element, stream=Tri.NO)
    if name == "keys":
        return container(PLAIN, stream=Tri.NO)
    if name == "copy":
        return receiver
    if name in ("index", "count"):
        return PLAIN
    if name == "to_tuple" and receiver.type_name == MODEL_OUTPUT:
        return container(receiver.evolve(kind=Kind.TENSOR, type_name=None))
    return UNKNOWN


def _set_default(receiver: Value, default: Value | None) -> Value:
    """What ``d.setdefault(key, default)`` returns: the item already there
    or ``default`` (``meters.setdefault(name, Meter())`` is a ``Meter``)."""
    if default is None:
        return receiver.element or UNKNOWN
    return default if receiver.element is None else receiver.element.join(default)


def _stored_value(receiver: Value, name: str, call: CallInfo) -> Value | None:
    arguments = call.arguments
    if not arguments:
        return None
    if name in ("extend", "update"):
        return join_all(element_of(a) for a in arguments)
    if name in ("insert", "setdefault") and len(call.positional) >= 2:
        return call.positional[1]
    return join_all(arguments)


def unknown_receiver_method(model, receiver: Value, name: str, call: CallInfo, interpreter) -> Value:
    """A method called on a value the model cannot name: the method tells
    what it is only when no other kind has it (``.detach()`` only tensors)."""
    if name in ops.TENSOR_ONLY_METHODS or (_holds_tensors(receiver) and name not in _CONTAINER_METHODS):
        return tensor_method(receiver.evolve(kind=Kind.TENSOR), name, call, interpreter)
    if name in ops.SHARED_TENSOR_MODULE_METHODS:
        moved = tensor_method(receiver.evolve(kind=Kind.TENSOR), name, call, interpreter)
        if name == "requires_grad_":
            # a tensor that requires no grad, or a module all of whose parameters do not
            # (torch 2.13.0 torch/nn/modules/module.py Module.requires_grad_): carried as
            # ``frozen`` for when the value turns out to be a module (``.eval()``)
            frozen = literal_flag(call.argument_node(0, "requires_grad")) is Tri.NO
            return moved.evolve(kind=receiver.kind, type_name=receiver.type_name, frozen=frozen)
        return moved.evolve(kind=receiver.kind, type_name=receiver.type_name, frozen=receiver.frozen)
    if name in ("append", "extend", "insert", "appendleft"):
        return container_method(model, container(receiver.element), name, call, interpreter)
    if _mode_switch_of_moved(receiver, name, call):
        return module_method(model, as_module(receiver), name, call, interpreter)
    if name == "step" and _is_unnamed_step(model, call, interpreter):
        interpreter.record_optimizer_step(call.node)
        return PLAIN
    if name in ("items", "values", "keys") and receiver.graph is not Tri.YES:
        return container(None, stream=Tri.NO)
    if receiver.graph is Tri.YES:
        return Value(Kind.UNKNOWN, Tri.YES, receiver.device, sources=receiver.sources)
    return UNKNOWN


def _mode_switch_of_moved(receiver: Value, name: str, call: CallInfo) -> bool:
    """``x.cuda().eval()`` / ``x.to(device).train()`` on a value of unknown
    kind: only tensors and modules were moved (``device`` YES), and a tensor
    has no ``eval``/``train`` (torch 2.13.0 ``torch/_tensor.py``: no such
    methods; ``torch/nn/modules/module.py`` ``Module.eval``/``train(mode)``),
    so the receiver is a module."""
    if receiver.device is not Tri.YES or name not in ("eval", "train") or call.node.keywords:
        return False
    args = call.node.args
    return not args if name == "eval" else len(args) <= 1 and all(isinstance(a, (ast.Constant, ast.Name)) for a in args)


#: Methods of Python containers (a forward pass's output may be a tuple or dict).
_CONTAINER_METHODS = frozenset({"append", "extend", "insert", "pop", "items", "keys", "values", "get", "index", "count", "copy", "update", "to_tuple"})


def _holds_tensors(value: Value) -> bool:
    """A forward pass's output of unknown structure: a tensor or a tuple of tensors."""
    return value.kind is Kind.UNKNOWN and value.element is not None and value.element.kind is Kind.TENSOR


def _is_unnamed_step(model, call: CallInfo, interpreter) -> bool:
    """``x.step()`` on a value of unknown kind is an optimizer step when it
    takes no data argument (at most a closure), its unit runs a backward
    pass, and ``x`` is used as an optimizer there (``x.zero_grad()``,
    ``x.param_groups``), is the only object the unit steps (a scheduler
    stepped beside it is not taken for a second optimizer), or, when the
    unit uses nothing as an optimizer, is the first object stepped after a
    backward call in its block (``OptimizerUsage.stepped_after_backward``:
    PyTorch steps the optimizer before the scheduler)."""
    args = call.node.args
    if call.node.keywords or len(args) > 1:
        return False
    if args and not isinstance(args[0], (ast.Name, ast.Attribute, ast.Lambda)):
        return False
    unit = model.unit_of(call.node)
    if not model.runs_backward(unit):
        return False
    receiver = dotted_name(call.node.func.value)
    if receiver is not None and receiver in _loss_taking_backward_receivers(model, unit, interpreter):
        return False  # an engine that runs the backward and steps: its step clears the gradients
    usage = model.optimizer_usage(unit)
    return receiver is not None and (receiver in usage.used_as_optimizer or usage.stepped == {receiver} or (
        not usage.used_as_optimizer and receiver in usage.stepped_after_backward))


def _loss_taking_backward_receivers(model, unit: ast.AST, interpreter) -> set[str]:
    """Objects the unit hands a loss to (``x.backward(loss)``, syntactically)
    that the environment does not show as a type that leaves gradients to the
    caller: of the engines with that method (:data:`~.frameworks.BACKWARD_ENGINES`),
    the one with a ``step()`` as well is DeepSpeed's, whose step clears the
    gradients (:data:`~.frameworks.SELF_CLEARING_ENGINES`), so stepping the
    same object needs no ``zero_grad``. Instances of the file's own classes
    are read instead."""
    found = set()
    for node in model.own_nodes(unit, (ast.Call,)):
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr == "backward" and node.args):
            continue
        name = dotted_name(func.value)
        if name is None:
            continue
        owner = interpreter.state.env.get(name)
        if owner is not None and (owner.klass is not None or owner.kind is Kind.TENSOR or (
                owner.type_name in fw.BACKWARD_ENGINES and owner.type_name not in fw.SELF_CLEARING_ENGINES)):
            continue
        found.add(name)
    return found


# -- library functions by qualified name -------------------------------------------------------
def library_call(model, qualified: str, call: CallInfo, interpreter) -> Value | None:
    """A call of a library callable (or a builtin); None when the tables say nothing."""
    if "." not in qualified:
        return builtin_call(model, qualified, call, interpreter)
    head, _, rest = qualified.partition(".")
    last = qualified.rsplit(".", 1)[-1]
    if last in ("from_pretrained", "from_config", "from_single_file") and qualified.count(".") >= 2:
        owner = qualified.rsplit(".", 2)[-2]
        made = qualified.rsplit(".", 1)[0]
        return module(type_name=made) if not fw.NOT_MODEL_CLASS.search(owner) else obj(type_name=made)
    if qualified in fw.MODULE_WRAPPERS:
        wrapped = call.argument(fw.MODULE_WRAPPERS[qualified])
        if wrapped is not None and (wrapped.kind is Kind.MODULE or qualified != "copy.deepcopy"):
            if wrapped.kind is Kind.MODULE and qualified in fw.DEVICE_PLACING_WRAPPERS and wrapped.device is Tri.NO:
                return wrapped.evolve(device=Tri.MAYBE)
            return wrapped if wrapped.kind is Kind.MODULE else module()
        if qualified == "copy.deepcopy":
            return wrapped if wrapped is not None else UNKNOWN
        return module()
    if qualified == "torch.hub.load" and (wrapper := _no_grad_hub_model(call)) is not None:
        return module(type_name=wrapper)
    if qualified in fw.MODEL_FACTORIES or qualified.startswith(("torchvision.models.", "timm.models.")) and last[:1].islower() and "." not in qualified[len("torchvision.models."):]:
        return module(type_name=qualified)
    if last in fw.HOST_STATE_DICTS and (qualified in fw.HOST_STATE_DICTS[last] or _offloaded_by_options(model, call)):
        return container(tensor(Tri.NO, Tri.NO), type_name="dict")
    if qualified == fw.DEEPSPEED_INITIALIZE:
        return _deepspeed_initialized(call)
    if qualified in fw.STREAM_FACTORIES:
        return container(Value(Kind.UNKNOWN, Tri.NO, Tri.MAYBE), stream=Tri.YES, type_name=DATALOADER)
    if qualified in fw.GRAD_SCALERS:
        return obj(type_name="torch.amp.GradScaler")
    if qualified in fw.ENGINE_TYPES:
        return obj(type_name=fw.ENGINE_TYPES[qualified])
    if qualified in fw.OPTIMIZER_FACTORIES or fw.OPTIMIZER_NAMESPACE.match(qualified):
        return Value(Kind.OPTIMIZER, Tri.NO, _optimizer_state_device(call), type_name=qualified)
    if fw.LR_SCHEDULER_NAMESPACE.match(qualified):
        return obj(type_name=_SCHEDULER)
    if qualified in ("collections.defaultdict", "collections.OrderedDict", "collections.Counter"):
        return container(None, type_name="dict")
    if qualified == "collections.deque":
        bounded = "maxlen" in call.keywords or len(call.positional) >= 2
        first = call.argument(0)
        return container(element_of(first) if first is not None else None, type_name="bounded" if bounded else None)
    if qualified in ("wandb.init", "wandb.sdk.wandb_init.init"):
        return obj(type_name="wandb.init")
    if qualified == "optuna.create_study":
        return obj(type_name="optuna.study.Study")
    if qualified in fw.GRAPH_KEEPING_COLLECTIVES:
        reduced = call.argument(*fw.GRAPH_KEEPING_COLLECTIVES[qualified])
        return reduced if reduced is not None else UNKNOWN
    if head in fw.TF_PACKAGES:
        return tensorflow_call(qualified, call)
    if head == "torch":
        return torch_call(model, qualified, call, interpreter)
    if head == "transformers" and fw.MODULE_NAMESPACE.match(qualified):
        return module(type_name=qualified)
    if qualified in fw.NUMPY_ARRAY_FACTORIES:
        return PLAIN.evolve(type_name=fw.NUMPY_ARRAY)
    if head in ("numpy", "math", "random", "time", "os", "json", "pickle", "logging", "sys", "re"):
        return PLAIN
    if qualified in fw.SENTENCE_ENCODERS:
        placed = device_of_value(call.argument_node(99, "device"), call.keywords["device"]) if "device" in call.keywords else None
        return module(type_name=qualified, device=placed or Tri.MAYBE)
    if fw.is_state_only_metric(qualified):
        # a torchmetrics metric: a module without parameters, its states on the CPU until moved
        return module(output=Kind.TENSOR, type_name=qualified, device=construction_device(model, call)).evolve(frozen=True)
    if last[:1].isupper() and head != "torch":
        # An instance of a library class the tables do not know: an object
        # whose use may still show it is a module (``MyNet().cuda()``).
        return Value(Kind.OBJECT, Tri.NO, Tri.MAYBE, type_name=qualified)
    if qualified in ("tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "itertools.cycle", "itertools.islice"):
        first = call.argument(0)
        return first if first is not None else UNKNOWN
    if qualified == "itertools.chain":
        return container(join_all(element_of(a) for a in call.positional), stream=join_all(call.positional).stream if call.positional else Tri.NO)
    return None


def _dict_values_of(argument: Value) -> Value:
    """The values of ``dict(argument)``: a mapping's own values, or the second
    item of each pair of an iterable of key/value pairs (Python 3 docs,
    "Built-in Types", ``class dict(iterable)``: each item is an iterable of
    exactly two objects, the second being the value), as in
    ``dict(model.named_modules())``."""
    if argument.type_name == "dict":
        return element_of(argument)
    pair = element_of(argument)
    if pair.kind is Kind.CONTAINER and pair.items is not None and len(pair.items) == 2:
        return pair.items[1]
    return pair


def builtin_call(model, name: str, call: CallInfo, interpreter) -> Value | None:
    """The builtins whose results matter for tensors and streams."""
    first = call.argument(0)
    if name in PLAIN_BUILTINS:
        return PLAIN
    if name == "range":
        return container(PLAIN, stream=_range_stream(call), type_name="range")
    if name in CONTAINER_BUILTINS:
        return container(element_of(first) if first is not None else None, stream=first.stream if first is not None else Tri.NO)
    if name == "dict":
        values = [_dict_values_of(a) for a in call.positional] + list(call.keywords.values())
        return container(join_all(values), type_name="dict")
    if name == "enumerate" and first is not None:
        return container(container(None, items=(PLAIN, element_of(first))), stream=first.stream)
    if name == "zip" and call.positional:
        elements = tuple(element_of(a) for a in call.positional)
        return container(container(None, items=elements), stream=_zip_stream(call.positional))
    if name == "iter" and first is not None:
        return first
    if name == "next" and first is not None:
        return element_of(first)
    if name in ("sum", "max", "min") and first is not None:
        parts = [element_of(first)] if len(call.positional) == 1 else call.positional
        return interpreter._computed(combine(parts))
    if name in ("abs", "round") and first is not None:
        return first if first.kind is not Kind.PLAIN else PLAIN
    if name in ("map", "filter"):
        return container(None, stream=call.positional[1].stream if len(call.positional) > 1 else Tri.MAYBE)
    if name == "getattr" and first is not None and first.kind is Kind.OBJECT and first.type_name == "torch":
        return _torch_attribute_by_name(call)
    if name == "getattr" and first is not None and first.kind is Kind.OBJECT and first.type_name in fw.OPTIMIZER_CLASS_NAMESPACES:
        return _optimizer_class_by_name(call, first.type_name)
    return None


def _optimizer_class_by_name(call: CallInfo, namespace: str) -> Value | None:
    """``getattr(torch.optim, "SGD")`` is ``torch.optim.SGD``; with a run-time
    name (``getattr(torch.optim, args.optimizer)``), one of its optimizer
    classes (:data:`~.frameworks.OPTIMIZER_CLASS_NAMESPACES`)."""
    named = call.argument_node(1)
    if isinstance(named, ast.Constant) and isinstance(named.value, str):
        return library_attribute(f"{namespace}.{named.value}")
    return library_attribute(fw.OPTIMIZER_CLASS_NAMESPACES[namespace]) if named is not None and len(call.node.args) == 2 else None


def _offloaded_by_options(model, call: CallInfo) -> bool:
    """``get_model_state_dict(model, options=StateDictOptions(cpu_offload=True))``."""
    options = call.argument_node(2, "options")
    return options is not None and model.offloading_options(options, "cpu_offload")


def _deepspeed_initialized(call: CallInfo) -> Value:
    """``(engine, optimizer, dataloader, scheduler)`` of ``deepspeed.initialize``."""
    wrapped = call.argument(1, "model")
    engine = module(type_name="deepspeed.DeepSpeedEngine", device=Tri.YES,
                    output=wrapped.output if wrapped is not None and wrapped.kind is Kind.MODULE else None)
    optimizer = Value(Kind.OPTIMIZER, Tri.NO, Tri.YES, type_name="deepspeed.DeepSpeedEngine.optimizer")
    return container(None, items=(engine, optimizer, UNKNOWN, obj(type_name=_SCHEDULER)))


def _torch_attribute_by_name(call: CallInfo) -> Value | None:
    """``getattr(torch, "cuda")`` is ``torch.cuda``; ``getattr(torch, device_type)``
    (with or without a default) is the device module picked at run time."""
    named = call.argument_node(1)
    if isinstance(named, ast.Constant) and isinstance(named.value, str):
        return library_attribute(f"torch.{named.value}")
    return library_attribute(fw.RUNTIME_DEVICE_MODULE) if named is not None else None


def _zip_stream(values: list[Value]) -> Tri:
    """``zip`` stops at its shortest argument: one that is no stream (a fixed
    container, or what a forward pass returned, whose items are one batch's
    rows or heads) bounds it."""
    stream = Tri.YES
    for value in values:
        if value.stream is Tri.NO or _one_forward_result(value):
            return Tri.NO
        if value.stream is Tri.MAYBE:
            stream = Tri.MAYBE
    return stream


def _one_forward_result(value: Value) -> bool:
    """A graph-attached tensor or model output that is not known to be a
    stream: iterating it yields the rows (or heads) of one step's result."""
    return value.graph is Tri.YES and value.stream is not Tri.YES and value.kind in (Kind.TENSOR, Kind.UNKNOWN)


def _range_stream(call: CallInfo) -> Tri:
    args = call.node.args
    if not args or any(isinstance(a, ast.Starred) for a in args):
        return Tri.MAYBE
    bound = args[0] if len(args) == 1 else args[1]
    if isinstance(bound, ast.Constant) and type(bound.value) is int and bound.value <= SMALL_RANGE:
        return Tri.NO
    return Tri.MAYBE


def _members_device(arguments: list[Value]) -> Tri:
    """Where an ``nn.Sequential``/``nn.ModuleList``/``nn.ModuleDict`` built
    from ``arguments`` holds its parameters: where its members are, since a
    container creates no parameters of its own (torch 2.13.0
    ``torch/nn/modules/container.py``: ``__init__`` only registers the
    modules given). Members are the module arguments, or the elements of a
    list/tuple/dict argument (``nn.ModuleList([copy(m) for _ in betas])``).
    YES when every member is on the accelerator, NO when every one is on
    the CPU, MAYBE otherwise."""
    devices = set()
    for argument in arguments:
        member = argument.element if argument.kind is Kind.CONTAINER and argument.element is not None else argument
        if member.kind is not Kind.MODULE:
            return Tri.MAYBE
        devices.add(member.device)
    return devices.pop() if len(devices) == 1 else Tri.MAYBE


def torch_call(model, qualified: str, call: CallInfo, interpreter) -> Value | None:
    """``torch.*`` functions and constructors (torch 2.13)."""
    parts = qualified.split(".")
    last = parts[-1]
    namespace = ".".join(parts[:-1])
    arguments = call.arguments
    if fw.MODULE_NAMESPACE.match(qualified) and qualified not in fw.NOT_MODULES:
        output = Kind.CONTAINER if last in ops.TUPLE_OUTPUT_MODULES else (None if last in ops.MODULE_CONTAINERS else Kind.TENSOR)
        device = construction_device(model, call)
        if last in ops.MODULE_CONTAINERS and arguments:
            device = _members_device(arguments)
        built = module(output=output, type_name=qualified, device=device)
        return built.evolve(frozen=True) if qualified in fw.PARAMETERLESS_MODULES else built  # no parameter to record a graph for
    if qualified in ("torch.nn.Parameter", "torch.nn.parameter.Parameter"):
        first = call.argument(0)
        return tensor(Tri.YES, first.device if first is not None else Tri.MAYBE, leaf=True)
    if qualified in fw.LEGACY_VARIABLE and call.argument(0) is not None:
        first = call.argument(0)
        if literal_flag(call.argument_node(1, "requires_grad")) is Tri.YES:
            return tensor(Tri.YES, first.device, leaf=True)
        return tensor(Tri.NO, first.device)
    if qualified in ("torch.device",):
        node, value = call.argument_node(0, "type"), call.argument(0, "type")
        device = device_of_value(node, value) if node is not None and value is not None else Tri.MAYBE
        return Value(Kind.OBJECT, Tri.NO, device or Tri.MAYBE, type_name="torch.device")
    differentiated = call.argument(0, fw.AUTOGRAD_FUNCTIONS[qualified][0]) if qualified in fw.AUTOGRAD_FUNCTIONS else None
    if qualified == "torch.autograd.backward" and differentiated is not None:
        interpreter.record_backward(call.node, differentiated)
        return PLAIN
    if qualified == "torch.autograd.grad" and differentiated is not None:
        interpreter.record_backward(call.node, differentiated)
        create_graph = literal_flag(call.argument_node(99, "create_graph"))
        return container(tensor(Tri.YES if create_graph is Tri.YES else Tri.NO, differentiated.device))
    if qualified.startswith("torch.utils.checkpoint."):
        function = call.argument(0)
        inputs = call.positional[1:]
        if function is not None and function.kind is Kind.MODULE:
            interpreter.record_forward(call.node)
        graph = Tri.NO if interpreter.state.grad is Tri.NO else Tri.YES
        return Value(Kind.UNKNOWN, graph, _forward_device(function or UNKNOWN, inputs), sources=combine(inputs).sources if inputs else frozenset())
    if namespace == "torch.nn.functional" and last in ops.FUNCTIONAL_LOSSES:
        return interpreter._computed((combine(arguments)).evolve(kind=Kind.TENSOR, scalar="reduction" not in call.keywords))
    if qualified.startswith(ops.DISTRIBUTION_NAMESPACE) and last[:1].isupper():
        parameters = combine(arguments) if arguments else UNKNOWN
        graph = Tri.NO if interpreter.state.grad is Tri.NO or not arguments else parameters.graph
        return Value(Kind.OBJECT, graph, parameters.device, type_name=qualified, sources=parameters.sources)
    if qualified in fw.LEGACY_CUDA_TENSOR_TYPES:
        return tensor(Tri.NO, Tri.YES)
    if namespace not in ("torch", "torch.nn.functional", "torch.linalg", "torch.fft", "torch.special"):
        return _torch_namespace_call(qualified, call)
    if last in ops.FACTORIES:
        return _factory(qualified, call)
    if last in ops.NONDIFFERENTIABLE:
        return tensor(Tri.NO, combine(arguments).device if arguments else Tri.NO)
    if last in ops.PYTHON_RESULT:
        return PLAIN
    if last in ("save", "manual_seed", "set_grad_enabled", "set_default_dtype", "set_printoptions", "set_num_threads",
                "use_deterministic_algorithms", "set_float32_matmul_precision", "is_tensor", "is_grad_enabled"):
        if last == "set_grad_enabled" and isinstance(call.node, ast.Call):
            _set_grad_statement(model, call, interpreter)
        return PLAIN
    if last == "load":
        return Value(Kind.UNKNOWN, Tri.NO, Tri.MAYBE)
    if last in ("no_grad", "enable_grad", "inference_mode", "autocast"):
        return obj(type_name=qualified)
    if last in ("cat", "stack", "concat", "concatenate", "hstack", "vstack", "dstack", "column_stack", "block_diag", "cartesian_prod"):
        first = call.positional[0] if call.positional else None
        pieces = [element_of(first)] if first is not None and first.kind is Kind.CONTAINER else arguments
        return interpreter._computed((combine(pieces)).evolve(kind=Kind.TENSOR))
    if last in ops.VALUES_AND_INDICES and (last not in ops.TUPLE_ONLY_WITH_DIM or len(call.node.args) > 1 or "dim" in call.keywords):
        return _return_type(last, interpreter._computed((combine(call.positional[:1])).evolve(kind=Kind.TENSOR)))
    if last in ops.TUPLE_RESULT:
        return container(interpreter._computed((combine(call.positional[:1] or arguments)).evolve(kind=Kind.TENSOR)))
    return interpreter._computed((combine(arguments)).evolve(kind=Kind.TENSOR, framework="torch"))


def _return_type(op: str, values: Value) -> Value:
    """The named tuple ``op`` (one of ``torch_ops.VALUES_AND_INDICES``)
    returns: ``values`` (what the op computed from its input) and the
    indices (no graph), or two differentiable tensors for ``aminmax``."""
    second = values if op in ops.ALL_FIELDS_DIFFERENTIABLE else tensor(Tri.NO, values.device)
    return container(None, items=(values, second), type_name=ops.RETURN_TYPES_PREFIX + op)


def _set_grad_statement(model, call: CallInfo, interpreter) -> None:
    """``torch.set_grad_enabled(False)`` as a statement sets the mode for what follows."""
    parent = model.parents.get(call.node)
    if isinstance(parent, ast.Expr):
        interpreter.state.grad = literal_flag(call.argument_node(0, "mode"))


def _torch_namespace_call(qualified: str, call: CallInfo) -> Value:
    if qualified.rsplit(".", 1)[-1][:1].isupper():
        return Value(Kind.OBJECT, Tri.NO, Tri.MAYBE, type_name=qualified)  # SummaryWriter, GradScaler, Stream...
    if qualified.startswith(("torch.cuda.", "torch.backends.", "torch.distributed.", "torch.utils.", "torch.jit.", "torch.hub.", "torch.onnx.")):
        return PLAIN if qualified.startswith(("torch.cuda.", "torch.backends.")) else UNKNOWN
    return UNKNOWN


def _factory(qualified: str, call: CallInfo) -> Value:
    requires_grad = literal_flag(call.argument_node(99, "requires_grad"))
    device = None
    last = qualified.rsplit(".", 1)[-1]
    if "device" in call.keywords:
        device = device_of_value(call.argument_node(99, "device"), call.keywords["device"]) or Tri.MAYBE
    if device is None:
        if last.endswith("_like") and call.positional:
            device = call.positional[0].device
        elif last in ("tensor", "as_tensor") and call.positional and call.positional[0].kind is Kind.TENSOR:
            device = call.positional[0].device
        else:
            device = Tri.NO
    if requires_grad is Tri.YES:
        return tensor(Tri.YES, device, leaf=True)
    return tensor(Tri.NO, device)


def tensorflow_call(qualified: str, call: CallInfo | None = None) -> Value:
    """TensorFlow / Keras calls: Keras models and layers are modules of the
    ``keras`` framework; ``tf.function(f)`` is a traced function, sessions
    and gradient tapes are objects of their type; other ops make TensorFlow
    tensors."""
    last = qualified.rsplit(".", 1)[-1]
    if qualified in fw.TF_SESSION_GETTERS:
        return obj(type_name=fw.SESSION)
    if ".keras." in f".{qualified}." or qualified.startswith("keras."):
        if last in ("Sequential", "Model", "load_model") or last in fw.KERAS_MODEL_CALLS or (
                ".layers." in qualified and last[:1].isupper()) or ".applications." in qualified:
            return module("keras", type_name=qualified)
    if qualified in fw.TF_FUNCTIONS:
        # tf.function(func, input_signature, ...): a fixed signature traces one concrete function
        fixed = call is not None and (fw.TF_FUNCTION_SIGNATURE in call.keywords or len(call.positional) >= 2)
        return Value(Kind.FUNCTION, Tri.NO, Tri.NO, framework="tensorflow",
                     type_name=fw.TF_FUNCTION_SIGNED if fixed else fw.TF_FUNCTION)
    if qualified in fw.TF_SESSIONS:
        return obj(type_name=fw.SESSION)
    if qualified in fw.TF_TAPES:
        return obj(type_name=fw.GRADIENT_TAPE)
    return Value(Kind.TENSOR, Tri.MAYBE, Tri.MAYBE, framework="tensorflow")


# ======================================================================================
# attributes and iteration
# ======================================================================================
def library_attribute(qualified: str) -> Value:
    """The value of an imported name or library attribute (``torch.float16``, ``nn``)."""
    if _LEGACY_TENSOR_TYPE.match(qualified):
        # `Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor`: a tensor
        # constructor, never a module (what calling it on the way to a loss might suggest)
        return Value(Kind.FUNCTION, Tri.NO, Tri.NO, type_name=qualified)
    if qualified.startswith("torch.") and qualified.count(".") == 1:
        name = qualified.split(".")[1]
        if name in ops.INTEGER_DTYPES or name in _FLOAT_DTYPES:
            return Value(Kind.OBJECT, Tri.NO, Tri.NO, type_name="torch.dtype")
    return Value(Kind.OBJECT, Tri.NO, Tri.NO, type_name=qualified)


#: The legacy typed tensor classes (torch 2.13.0 torch/__init__.py, torch/cuda/__init__.py).
_LEGACY_TENSOR_TYPE = re.compile(r"^torch\.(?:cuda\.)?(?:Float|Double|Half|BFloat16|Byte|Char|Short|Int|Long|Bool|)Tensor$")


#: Attributes that Python's object model gives every class, function and module, as text
#: (Python 3 reference, "Data model", 3.2 "The standard type hierarchy": ``__name__``,
#: ``__qualname__`` and ``__module__`` are strings, ``__doc__`` a string or None), so
#: ``model.__class__.__name__`` is a ``str`` whatever device the model is on.
_NAME_ATTRIBUTES = frozenset({"__name__", "__qualname__", "__module__", "__doc__"})
#: An instance's class (``__class__``, the same reference section): a callable, no tensor.
_CLASS_OF_INSTANCE = Value(Kind.FUNCTION, Tri.NO, Tri.NO, stream=Tri.NO)


def attribute_of(model, base: Value, attr: str, node: ast.Attribute, interpreter) -> Value:
    """``base.attr``."""
    if attr in _NAME_ATTRIBUTES:
        return PLAIN
    if attr == "__class__":
        return _CLASS_OF_INSTANCE
    klass = model.classes.get(base.klass)
    if klass is not None and base.kind in (Kind.OBJECT, Kind.MODULE, Kind.OPTIMIZER):
        value = model.class_attribute(klass, attr, interpreter)
        if value is not UNKNOWN or base.kind is not Kind.MODULE:
            return value
    if base.kind is Kind.TENSOR:
        if attr == "device" and base.device is Tri.NO:
            return _CPU_DEVICE  # `torch.zeros(n, device=x.device)` is where `x` is: here the CPU
        if attr in ops.METADATA_ATTRIBUTES:
            return PLAIN
        if attr in ops.DETACHED_ATTRIBUTES:
            return tensor(Tri.NO, base.device).evolve(scalar=base.scalar)  # the same shape
        if attr in ("T", "mT", "H", "mH", "real", "imag"):
            return base.evolve(leaf=False)
        return Value(Kind.FUNCTION, Tri.NO, Tri.NO)
    if base.kind is Kind.CONTAINER and base.items is not None and (base.type_name or "").startswith(ops.RETURN_TYPES_PREFIX):
        fields = ops.RETURN_TYPE_FIELDS.get(base.type_name[len(ops.RETURN_TYPES_PREFIX):], ())
        if attr in fields:
            return base.items[fields.index(attr)]  # `x.max(dim=1).values`
    if base.kind is Kind.CONTAINER and base.type_name == MODEL_OUTPUT:
        if attr in fw.MODEL_OUTPUT_TENSORS:
            return tensor(base.graph, base.device, base.sources).evolve(scalar=attr == "loss")
        return Value(Kind.UNKNOWN, base.graph, base.device, sources=base.sources)
    if base.kind is Kind.MODULE:
        if attr == "module":
            return base
        if attr in ops.SUBMODULE_DICTS:  # `self._modules`: the module's own submodules, by name
            return container(module(base.framework or "torch", device=base.device), stream=Tri.NO, type_name="dict")
        if attr in ("weight", "bias"):
            return tensor(Tri.YES, base.device, leaf=True)
        if klass is None and model.submodule_name(attr, interpreter):
            return module(base.framework or "torch", device=base.device)
        # Of a library module, another attribute may be a parameter or buffer (on the module's
        # device) or any plain instance attribute (`model.visual.image_size`, a config int or
        # tuple): `Module._apply` (what `.cuda()`/`.to()` run, torch 2.13.0
        # torch/nn/modules/module.py) moves only `_parameters`, `_buffers` and `_modules`, and
        # `Module.__getattr__` serves only those three, so its device is not known.
        return Value(Kind.UNKNOWN, Tri.MAYBE, base.device if klass is not None else _not_known_moved(base.device))
    if base.kind is Kind.PLAIN:
        return PLAIN
    if base.kind is Kind.OBJECT and base.type_name in fw.LIGHTNING_TRAINERS and attr in fw.LIGHTNING_TRAINER_DATA:
        return container(Value(Kind.UNKNOWN, Tri.NO, Tri.MAYBE), stream=Tri.YES, type_name=DATALOADER)  # `trainer.train_dataloader`
    if base.kind is Kind.OBJECT and base.type_name in fw.DEVICE_BACKEND_MODULES:
        return library_attribute(f"{base.type_name}.{attr}")  # `device_module.empty_cache`
    if base.kind is Kind.UNKNOWN and (base.graph is Tri.YES or base.device is Tri.YES):
        # a forward pass's output (a tensor, a tuple or a model output): `outputs.loss`
        if attr in ops.METADATA_ATTRIBUTES:
            return PLAIN
        if attr in ops.DETACHED_ATTRIBUTES:
            return tensor(Tri.NO, base.device)
        # a field of a forward pass's output of tensors (`vae.encode(x).latent_dist`)
        # holds that pass's tensors too: `.latent_dist.mode()` is one of them
        element = base.element if _holds_tensors(base) else None
        return Value(Kind.UNKNOWN, base.graph, base.device, sources=base.sources, element=element)
    return UNKNOWN


def _not_known_moved(device: Tri) -> Tri:
    """A module's device for an attribute that ``.cuda()`` may not have moved:
    NO stays NO (nothing of a CPU module is on the accelerator), else MAYBE."""
    return Tri.NO if device is Tri.NO else Tri.MAYBE


def element_of(value: Value) -> Value:
    """What iterating or unpacking ``value`` gives."""
    if value.kind is Kind.CONTAINER or (value.kind in (Kind.OBJECT, Kind.UNKNOWN) and value.element is not None):
        return value.element if value.element is not None else UNKNOWN
    if value.kind is Kind.TENSOR:
        return value.evolve(leaf=False, stream=Tri.NO)
    if value.kind is Kind.MODULE and value.type_name in ops.PARAMETER_CONTAINERS:
        # a ParameterList yields its parameters, a ParameterDict its keys
        return tensor(Tri.YES, value.device, leaf=True) if ops.PARAMETER_CONTAINERS[value.type_name] == "parameters" else PLAIN
    if value.kind is Kind.MODULE:
        return module(value.framework or "torch", device=value.device)
    if value.kind is Kind.PLAIN:
        return PLAIN
    if value.kind is Kind.UNKNOWN and value.graph is Tri.YES:
        return Value(Kind.UNKNOWN, Tri.YES, value.device, sources=value.sources)
    if value.kind is Kind.UNKNOWN and value.device is Tri.YES:
        # the parts of something on the accelerator (a batch a framework moved there) are there too
        return Value(Kind.UNKNOWN, value.graph, Tri.YES, sources=value.sources)
    return UNKNOWN


#: Annotations whose argument is a class, not an instance (``Type[nn.Module]``).
_CLASS_ANNOTATIONS = frozenset({"type", "typing.Type", "typing_extensions.Type", "Type"})
#: Annotations whose argument is what the value is (``Optional[nn.Module]``).
_WRAPPING_ANNOTATIONS = frozenset({"typing.Optional", "typing.Union", "Optional", "Union", "typing.Annotated", "Annotated"})


def annotation_value(model, annotation: ast.expr) -> Value | None:
    """What a parameter annotated with ``annotation`` is, when the annotation says."""
    while isinstance(annotation, ast.Subscript):
        wrapper = model.qualified(annotation.value) or dotted_name(annotation.value)
        inner = annotation.slice.elts[0] if isinstance(annotation.slice, ast.Tuple) and annotation.slice.elts else annotation.slice
        if wrapper in _CLASS_ANNOTATIONS:
            qualified = model.qualified(inner)
            return Value(Kind.FUNCTION, Tri.NO, Tri.NO, type_name=qualified) if qualified else None
        if wrapper not in _WRAPPING_ANNOTATIONS:
            return None  # list[...], dict[...], Callable[...]: a container or a function
        annotation = inner
    if isinstance(annotation, ast.BinOp):  # nn.Module | None
        annotation = annotation.left
    if isinstance(annotation, ast.Name):
        for binding in model.scopes.bindings_of(annotation.id, model.scopes.scope_for(annotation)):
            if binding.kind is BindingKind.CLASS:
                klass = model.classes.of(binding.node)
                return model.instance_of(klass) if klass is not None else None
    qualified = model.qualified(annotation)
    if qualified is None or qualified in _UNINFORMATIVE_ANNOTATIONS:
        return None
    if "module" in fw.roles_of_base(qualified):
        return module("keras" if "keras" in fw.roles_of_base(qualified) else "torch", type_name=qualified)
    if qualified in ("torch.Tensor", "torch.FloatTensor"):
        return tensor()
    if "optimizer" in fw.roles_of_base(qualified) or fw.OPTIMIZER_NAMESPACE.match(qualified):
        return Value(Kind.OPTIMIZER, Tri.NO, Tri.MAYBE, type_name=qualified)
    if qualified in fw.STREAM_FACTORIES:
        return container(Value(Kind.UNKNOWN, Tri.NO, Tri.MAYBE), stream=Tri.YES, type_name=DATALOADER)
    if qualified in fw.STREAM_TYPES:
        return container(Value(Kind.UNKNOWN, Tri.NO, Tri.MAYBE), stream=Tri.YES, type_name=qualified)
    if qualified.rsplit(".", 1)[-1][:1].isupper():
        return Value(Kind.OBJECT, Tri.NO, Tri.MAYBE, type_name=qualified)  # an instance of a library class
    return None


#: Annotations that say nothing of the value (Python 3.12 ``typing.Any``): a framework
#: hook's parameter annotated so is what the framework passes.
_UNINFORMATIVE_ANNOTATIONS = frozenset({"typing.Any", "typing_extensions.Any", "object", "builtins.object"})


def hook_parameter(klass, function: ast.AST, name: str, index: int) -> Value | None:
    """A framework hook's parameter, by its place in the framework's signature."""
    hook = klass.hook(function.name)
    if hook is None:
        return None
    roles = _HOOK_SIGNATURES.get((hook.role, hook.name), ("batch", "index") if hook.batch_on_device else ())
    if not 1 <= index <= len(roles):
        return None
    role = roles[index - 1]
    if role == "batch" and name == fw.LIGHTNING_ITERATOR_PARAMETER and hook.role == "lightning_module":
        return container(Value(Kind.UNKNOWN, Tri.NO, Tri.MAYBE), stream=Tri.YES)
    if role == "batch":
        moved = hook.batch_on_device and not _iterates_itself(klass)
        return Value(Kind.UNKNOWN, Tri.NO, Tri.YES if moved else Tri.MAYBE)
    if role == "module":
        return module(device=Tri.YES)
    if role == "trainer":
        return obj(type_name="lightning.pytorch.Trainer")
    if role == "outputs":
        return Value(Kind.UNKNOWN, Tri.MAYBE, Tri.YES)
    if role == "index":
        return PLAIN
    return None


def _iterates_itself(klass) -> bool:
    """A LightningModule step hook of ``klass`` takes the data iterator: its batches are not moved to the device."""
    if "lightning_module" not in klass.roles:
        return False
    for method in klass.methods.values():
        if fw.LIGHTNING_ITERATOR_PARAMETER in parameter_names(method):
            return True
    return False


#: Positional parameters (after ``self``) of framework hooks, by role
#: (lightning/pytorch/core/hooks.py and callbacks/callback.py, lightning 2.6.6;
#: transformers/trainer.py, transformers 5.24.0).
_HOOK_SIGNATURES = {
    ("lightning_module", "on_train_batch_end"): ("outputs", "batch", "index"),
    ("lightning_module", "on_validation_batch_end"): ("outputs", "batch", "index"),
    ("lightning_module", "on_test_batch_end"): ("outputs", "batch", "index"),
    ("lightning_module", "on_predict_batch_end"): ("outputs", "batch", "index"),
    ("lightning_callback", "on_train_batch_end"): ("trainer", "module", "outputs", "batch", "index"),
    ("lightning_callback", "on_validation_batch_end"): ("trainer", "module", "outputs", "batch", "index"),
    ("lightning_callback", "on_test_batch_end"): ("trainer", "module", "outputs", "batch", "index"),
    ("lightning_callback", "on_predict_batch_end"): ("trainer", "module", "outputs", "batch", "index"),
    ("lightning_callback", "on_train_batch_start"): ("trainer", "module", "batch", "index"),
    ("lightning_callback", "on_before_backward"): ("trainer", "module", "outputs"),
    ("lightning_callback", "on_after_backward"): ("trainer", "module"),
    ("lightning_callback", "on_train_epoch_end"): ("trainer", "module"),
    ("lightning_callback", "on_validation_epoch_end"): ("trainer", "module"),
    ("hf_trainer", "compute_loss"): ("module", "batch"),
    ("hf_trainer", "training_step"): ("module", "batch"),
    ("hf_trainer", "prediction_step"): ("module", "batch"),
}


# ======================================================================================
# syntactic evidence
# ======================================================================================
def differentiated_expressions(model, calls: list[ast.Call]) -> list[ast.expr]:
    """The expressions the unit's backward calls differentiate: ``loss`` in
    ``loss.backward()``, ``scaler.scale(loss).backward()``,
    ``accelerator.backward(loss)``, ``self.manual_backward(loss)``,
    ``torch.autograd.backward/grad(loss, ...)``; ``crit(out, y)`` in
    ``crit(out, y).backward()``."""
    found: list[ast.expr] = []
    for call in calls:
        func = call.func
        method = func.attr if isinstance(func, ast.Attribute) else None
        positional = [a for a in call.args if not isinstance(a, ast.Starred)]
        if method == "backward":
            receiver = func.value
            if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute) and receiver.func.attr == "scale" and receiver.args:
                found.append(receiver.args[0])
            elif positional and (_not_assigned_in_unit(model, call, receiver) or _engine_built_here(model, receiver)
                                 or engine_by_use(model, call, receiver)):
                found.append(positional[0])
            else:
                found.append(receiver)
        elif method == "manual_backward" and positional:
            found.append(positional[0])
        elif model.qualified(func) in fw.AUTOGRAD_FUNCTIONS:
            first = _autograd_differentiated(call, fw.AUTOGRAD_FUNCTIONS[model.qualified(func)][0])
            if first is not None:
                found.extend(first.elts if isinstance(first, (ast.List, ast.Tuple)) else [first])
    return found


def _autograd_differentiated(call: ast.Call, keyword: str) -> ast.expr | None:
    """The tensors ``torch.autograd.backward/grad`` differentiates: the first
    positional argument, or the keyword that names it (``tensors=``/``outputs=``)."""
    if call.args and not isinstance(call.args[0], ast.Starred):
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg == keyword), None)


def summed_terms(differentiated: list[ast.expr]) -> set[str]:
    """Names added, as terms, into the expressions a unit's backward calls
    differentiate (:func:`differentiated_expressions`): ``actor_loss`` and
    ``critic_loss`` in ``(actor_loss + critic_loss).backward()``, ``aux`` in
    ``(main - 0.1 * aux).backward()``. Each term of a sum that is
    backpropagated is a loss term: a tensor term holds a graph (the
    interpreter upgrades only values known to be tensors)."""
    names: set[str] = set()
    for expr in differentiated:
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub)):
            _add_terms(names, expr, 0)
    return names


def _add_terms(names: set[str], node: ast.expr, depth: int) -> None:
    if depth > 8:
        return
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        _add_terms(names, node.left, depth + 1)
        _add_terms(names, node.right, depth + 1)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        _add_terms(names, node.operand, depth + 1)
    elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
        weighted = node.left if _is_number(node.right) else node.right if _is_number(node.left) and isinstance(node.op, ast.Mult) else None
        if weighted is not None:
            _add_terms(names, weighted, depth + 1)
    else:
        _add_name(names, node)


def _is_number(node: ast.expr) -> bool:
    """A numeric literal, signed or not (``0.5``, ``-0.5``)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)


def _engine_built_here(model, receiver: ast.expr) -> bool:
    """``accelerator = Accelerator(...)`` before ``accelerator.backward(loss)``: an engine, by its construction."""
    if not isinstance(receiver, ast.Name):
        return False
    built = model.assignment_before(receiver)
    return built is not None and isinstance(built.value, ast.Call) and (
        model.qualified(built.value.func) in fw.ENGINE_TYPES or model.qualified(built.value.func) in fw.BACKWARD_ENGINES)


def engine_by_use(model, call: ast.Call, receiver: ast.expr) -> bool:
    """``accelerator.backward(loss)`` where the unit also calls a method on
    ``accelerator`` that no tensor has and a training engine has
    (``accelerator.prepare(...)``, ``accelerator.accumulate(model)``,
    :data:`~.frameworks.ENGINE_ONLY_METHODS`): the receiver is an engine
    built elsewhere (``accelerator = helpers.make_accelerator(args)``), and
    the argument is the loss, not a gradient for a tensor's backward."""
    name = dotted_name(receiver)
    if name is None:
        return False
    for other in model._calls_of_unit(model.unit_of(call)):
        func = other.func
        if isinstance(func, ast.Attribute) and func.attr in fw.ENGINE_ONLY_METHODS and dotted_name(func.value) == name:
            return True
    return False


def _not_assigned_in_unit(model, call: ast.Call, receiver: ast.expr) -> bool:
    name = dotted_name(receiver)
    if name is None:
        return False
    if "." in name:
        return True
    unit = model.unit_of(call)
    scope = model.scopes.own_scope(unit) if unit is not model.module else model.scopes.module_scope
    bindings = scope.bindings.get(name, []) if scope is not None else []
    return all(b.kind in (BindingKind.PARAMETER, BindingKind.IMPORT) for b in bindings)


def _add_name(names: set[str], node: ast.expr) -> None:
    name = dotted_name(node)
    if name is not None:
        names.add(name)


def module_evidence_names(model, calls: list[ast.Call], mode_switches: bool = True) -> set[str]:
    """Names the unit uses as modules: it calls a module-only method on them
    (``model.eval()``, ``model.cuda().eval()``, ``net.parameters()``), or
    calls them on the way to a value it backpropagates (``loss =
    crit(model(x), y); loss.backward()``: ``model`` and ``crit`` are
    differentiable callables, and a call of the file or a library is not
    one of these names), or moves them in place and calls them
    (:func:`_moved_in_place_and_called`)."""
    names: set[str] = _differentiated_callees(model, calls) | _moved_in_place_and_called(model, calls)
    for call in calls:
        func = call.func
        if not isinstance(func, ast.Attribute) or func.attr not in ops.MODULE_EVIDENCE_METHODS:
            continue
        if not mode_switches and func.attr in ops.MODULE_MODE_METHODS:
            continue
        receiver = func.value
        while isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute) and receiver.func.attr in ops.MODULE_RETURNING_METHODS:
            receiver = receiver.func.value
        func = ast.Attribute(value=receiver, attr=func.attr)
        if func.attr == "eval" and (call.args or call.keywords):
            continue  # the builtin-like `x.eval(expr)` of other libraries
        if func.attr == "train" and (call.keywords or len(call.args) > 1 or (call.args and not isinstance(call.args[0], (ast.Constant, ast.Name)))):
            continue  # `nn.Module.train(mode=True)` takes at most a flag
        if func.attr == "train" and call.args and isinstance(call.args[0], ast.Name) and _bound_to_display(model, call.args[0]):
            continue  # `learner.train(feed)` with `feed = {...}`: a dict, list or tuple is no flag
        if names_python_module(model, func.value):
            continue  # `import utils; utils.train(net)`: a function of another file
        if func.attr in ops.SHARED_STATE_METHODS and dotted_name(func.value) in stepped_names(model):
            continue  # `self._optimizer.state_dict()` of an optimizer the file steps
        _add_name(names, func.value)
    return names


def stepped_names(model) -> frozenset[str]:
    """Dotted names the file calls ``.step()`` on anywhere (``self._optimizer``,
    ``scheduler``): optimizers, schedulers, scalers -- never a module
    (:data:`~.torch_ops.STEPPED_OBJECT_METHOD`)."""
    found = model.index.memo.get("stepped names")
    if found is None:
        found = frozenset(name for call in model.index.of_type(ast.Call)
                          if isinstance(call.func, ast.Attribute) and call.func.attr == ops.STEPPED_OBJECT_METHOD
                          and (name := dotted_name(call.func.value)) is not None)
        model.index.memo["stepped names"] = found
    return found


def _bound_to_display(model, name: ast.Name) -> bool:
    """``name`` was last bound to a dict, list, set or tuple display or comprehension."""
    statement = model.assignment_before(name)
    return statement is not None and isinstance(statement.value, (
        ast.Dict, ast.DictComp, ast.List, ast.ListComp, ast.Set, ast.SetComp, ast.Tuple))


def _moved_in_place_and_called(model, calls: list[ast.Call]) -> set[str]:
    """Names the unit moves with a discarded ``x.to(device)`` (``.cuda()``,
    ``.half()``, ...: ``torch_ops.IN_PLACE_MODULE_MOVES``) and also calls
    (``x(batch)``): only a module is moved in place and callable (torch
    2.13.0 ``torch/nn/modules/module.py``: ``Module.to``/``cuda``/``half``
    modify the module in place and return it; ``Tensor.to`` returns a new
    tensor, and a tensor is not callable). Only names the unit does not
    assign (a parameter, an attribute, a global): a local is known by what
    built it, and a library object that also moves in place and is callable
    (a diffusers pipeline) is not a module."""
    moved, called = set(), set()
    for call in calls:
        func = call.func
        if isinstance(func, (ast.Name, ast.Attribute)):
            called.add(dotted_name(func))
        if (isinstance(func, ast.Attribute) and func.attr in ops.IN_PLACE_MODULE_MOVES and isinstance(model.parents.get(call), ast.Expr)
                and _not_assigned_in_unit_of(model, call, func.value)):
            moved.add(dotted_name(func.value))
    return (moved & called | _bound_from_move_and_called(model, calls, called)) - {None}


def _bound_from_move_and_called(model, calls: list[ast.Call], called: set[str]) -> set[str]:
    """Locals bound once in the unit to what ``x.to(device)`` or ``x.cuda()``
    returns and then called (``net = factory().to(device); net(batch)``):
    ``Module.to``/``cuda`` return the module itself, ``Tensor.to``/``cuda`` a
    tensor, and a tensor is not callable (torch 2.13.0
    ``torch/nn/modules/module.py`` ``Module.to``; ``torch/_tensor.py`` defines
    no ``__call__``), so the called result is a module. Only the two
    accelerator moves, which the pre-parse gate knows
    (:data:`memlint.lint.vocabulary.GRAPH_SOURCE_NAMES`)."""
    found = set()
    for call in calls:
        func = call.func
        if not (isinstance(func, ast.Attribute) and func.attr in ("to", "cuda")):
            continue
        statement = model.parents.get(call)
        if not (isinstance(statement, ast.Assign) and statement.value is call and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name) and statement.targets[0].id in called):
            continue
        name = statement.targets[0].id
        unit = model.unit_of(call)
        scope = model.scopes.own_scope(unit) if unit is not model.module else model.scopes.module_scope
        if scope is not None and len(scope.bindings.get(name, [])) == 1:
            found.add(name)
    return found


def _differentiated_callees(model, calls: list[ast.Call]) -> set[str]:
    """Names called in the chain of assignments that leads to a backward pass of the unit."""
    if not calls:
        return set()
    unit = model.unit_of(calls[0])
    expressions = differentiated_expressions(model, calls) + _arguments_differentiated_by_callees(model, calls)
    if not expressions:
        return set()
    wanted: set[str] = set()
    callees: set[str] = set()
    for expression in expressions:
        _chain_names(model, expression, wanted, callees)
    assignments = [node for node in model.own_nodes(unit, (ast.Assign, ast.AugAssign, ast.AnnAssign)) if node.value is not None]
    changed = True
    while changed:
        changed = False
        for node in assignments:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if not any(name in wanted for target in targets for name in targets_of(target)):
                continue
            if _chain_names(model, node.value, wanted, callees):
                changed = True
    return callees


def _arguments_differentiated_by_callees(model, calls: list[ast.Call]) -> list[ast.expr]:
    """Arguments given to a function of the file (``loss_batch(crit, out, y,
    opt)``) for parameters that its own backward pass differentiates through
    (``loss = crit(out, y); loss.backward()``): a callable that made one of
    them (``out = model(x)``) is differentiable. One call deep."""
    found: list[ast.expr] = []
    for call in calls:
        callee = _local_target(model, call.func)
        if not isinstance(callee, FUNCTION_TYPES) or any(isinstance(a, ast.Starred) for a in call.args):
            continue
        differentiated = _differentiated_parameters(model, callee)
        if not differentiated:
            continue
        names = [a.arg for a in positional_parameters(callee.args)]
        found.extend(argument for name, argument in zip(names, call.args) if name in differentiated)
        found.extend(k.value for k in call.keywords if k.arg in differentiated)
    return found


def _differentiated_parameters(model, function: ast.AST) -> frozenset[str]:
    """Parameters of ``function`` that its backward calls differentiate through
    its own assignments (memoized per function)."""
    key = ("differentiated parameters", id(function))
    found = model.index.memo.get(key)
    if found is None:
        calls = model.own_nodes(function, (ast.Call,))
        wanted: set[str] = set()
        for expression in differentiated_expressions(model, calls):
            _chain_names(model, expression, wanted, set())
        assignments = [n for n in model.own_nodes(function, (ast.Assign, ast.AugAssign, ast.AnnAssign)) if n.value is not None]
        changed = True
        while changed and wanted:
            changed = False
            for node in assignments:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(name in wanted for target in targets for name in targets_of(target)) and \
                        _chain_names(model, node.value, wanted, set()):
                    changed = True
        found = model.index.memo[key] = frozenset(wanted & {a.arg for a in positional_parameters(function.args)})
    return found


def _chain_names(model, expression: ast.expr, wanted: set[str], callees: set[str]) -> bool:
    """Add the names ``expression`` reads to ``wanted`` and the unknown
    callables it calls to ``callees``; True when ``wanted`` grew."""
    grew = False
    for child in descendants(expression):
        if isinstance(child, ast.Call) and _callable_name(child.func) and (child.args or child.keywords):
            # a forward takes inputs: `self.make_inputs()` builds them
            name = dotted_name(child.func)
            if name is not None and _local_target(model, child.func) is None and model.qualified(child.func) is None \
                    and _own_method(model, child.func) is None:
                callees.add(name)
        elif isinstance(child, (ast.Name, ast.Attribute)):
            name = dotted_name(child)
            if name is not None and name not in wanted:
                wanted.add(name)
                grew = True
    return grew


def _own_method(model, func: ast.expr):
    """The method of the file's class that ``self.name`` denotes inside a
    method of that class (``self.calculate_loss(...)``), or None: such a
    call runs code of the file, it is no module's forward pass."""
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        return None
    function = model.function_of(func)
    klass = model.class_of_method(function) if function is not None else None
    if klass is None or first_parameter(function) != func.value.id:
        return None
    return klass.method(func.attr)


def _callable_name(func: ast.expr) -> bool:
    """A name or ``self.name`` that is called (``model(x)``, ``self.head(z)``),
    not a method call on a value (``x.to(d)``, ``out.sum()``)."""
    if isinstance(func, ast.Name):
        return True
    return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self"


def rebound_in(loop: ast.AST, every_iteration: bool = False) -> frozenset[str]:
    """Names a loop gives a fresh value every iteration: its ``for`` target,
    and names assigned (``=``) a value that does not read the name itself
    (``h = model.init_hidden()``, not ``h = cell(x, h)``). With
    ``every_iteration``, an assignment under a periodic condition
    (``if (step + 1) % report_every == 0: total = 0``) does not count: it
    resets the name once every N iterations, and the iterations between
    keep adding into the same value. A name read through another name
    that the loop makes an alias of it (``h_in = h_out`` ... ``h_out =
    cell(x, h_in)``) is read too."""
    def collect() -> frozenset[str]:
        found: set[str] = set()
        if isinstance(loop, FOR_TYPES):
            found.update(targets_of(loop.target))
        aliases = _aliases_in(loop)
        stack = list(loop.body)
        while stack:
            node = stack.pop()
            if isinstance(node, (*FUNCTION_TYPES, ast.Lambda, ast.ClassDef)):
                continue
            if every_iteration and isinstance(node, ast.If) and _periodic(node.test):
                stack.extend(node.orelse)
                continue
            if isinstance(node, ast.Assign):
                read = _read_names(node.value)
                read |= {original for name in read for original in aliases.get(name, ())}
                for target in node.targets:
                    found.update(name for name in targets_of(target) if name not in read)
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                read = _read_names(node.value)
                found.update(name for name in targets_of(node.target) if name not in read)
            elif isinstance(node, FOR_TYPES):
                found.update(targets_of(node.target))
            stack.extend(ast.iter_child_nodes(node))
        return frozenset(found)

    return file_memo(("rebound", id(loop), every_iteration), collect)


def _aliases_in(loop: ast.AST) -> dict[str, set[str]]:
    """``{alias: {name}}`` for each ``alias = name`` of two bare names in
    ``loop``'s body (not in nested functions)."""
    aliases: dict[str, set[str]] = {}
    stack = list(loop.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (*FUNCTION_TYPES, ast.Lambda, ast.ClassDef)):
            continue
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Name)):
            aliases.setdefault(node.targets[0].id, set()).add(node.value.id)
        stack.extend(ast.iter_child_nodes(node))
    return aliases


def _periodic(test: ast.expr) -> bool:
    """``test`` holds ``a % b``: true once every ``b`` iterations (``step % log_every == 0``)."""
    return any(isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) for node in ast.walk(test))


def _read_names(node: ast.AST) -> set[str]:
    names = set()
    for child in descendants(node):
        name = dotted_name(child) if isinstance(child, (ast.Name, ast.Attribute)) else None
        if name is not None:
            names.add(name)
    return names


# ======================================================================================
# loops and repetition
# ======================================================================================
def is_run_loop(model, loop: ast.AST) -> bool:
    """Whether ``loop``'s iterations grow with the run (see
    :meth:`SemanticModel.run_loops`)."""
    if isinstance(loop, ast.While):
        return not is_constant(loop.test, False)
    if not isinstance(loop, FOR_TYPES):
        return False
    iterable = model.value(loop.iter)
    if iterable.stream is Tri.YES:
        return True
    if literal_iterable(loop.iter):
        return False  # a literal range of a few steps, a tuple or list display
    if model.trains(loop.body):
        return True  # a training loop, whatever it iterates
    if iterable.stream is Tri.NO and not model.walks_file_contents(loop):
        return False  # a fixed structure: layers, heads, a container of the file (not the files of a directory)
    over_range = iterable.type_name == "range" and not _range_of_structure(model, loop.iter)
    return feeds_items_forward(model, loop, over_range=over_range, pulls_next=True)


def feeds_items_forward(model, loop: ast.AST, over_range: bool = False, pulls_next: bool = False) -> bool:
    """``loop`` walks data, whatever the model knows of its iterable: a name
    derived from its item (:func:`_with_derived_names`) feeds a forward pass
    or is moved to the accelerator (``batch = {k: v.to(device) ...}`` then
    ``model(batch["ids"])``); with ``over_range``, any forward pass per
    step; with ``pulls_next``, a ``next()`` from a stream. Not a loop over
    layers that calls each item (``x = layer(x)``)."""
    analysis = model.analysis_of(loop)
    targets = _with_derived_names(loop, _with_comprehension_targets(loop, set(targets_of(loop.target)), analysis), analysis)
    for call in model._calls_within(loop):
        if pulls_next and _is_next(model, call):
            return True
        forward = call in analysis.forward_calls or call in analysis.forwarding_calls
        if forward and _calls_the_item(call, targets, analysis):
            continue  # `x = layer(x)` over layers: each item is a callable of one forward pass, not a batch
        if forward and (over_range or _mentions(call, targets, analysis)):
            return True  # a forward pass per batch, or per step of `range(steps)` (sampling, benchmarking)
        if _moves_to_device(call, analysis) and _mentions(call.func.value, targets, analysis):
            return True
        if not over_range and _module_method_on(call, targets, analysis):
            return True
    return False


def _module_method_on(call: ast.Call, targets: set[str], analysis) -> bool:
    """``call`` runs a method of a module on the loop's item (``encoder.encode(prompts)``,
    ``vae.decode(z)`` with ``prompts`` the item): the module's own work,
    per item, not one of ``nn.Module``'s methods (``load_state_dict``, ``to``:
    :data:`~.torch_ops.MODULE_OWN_METHODS`)."""
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr in ops.MODULE_OWN_METHODS or func.attr.startswith("_"):
        return False
    receiver = analysis.values.get(func.value)
    if receiver is None or receiver.kind is not Kind.MODULE:
        return False
    arguments = [*call.args, *(k.value for k in call.keywords)]
    return any(_mentions(argument, targets, analysis) for argument in arguments)


def _with_comprehension_targets(loop: ast.AST, targets: set[str], analysis) -> set[str]:
    """``targets`` and the variables of the comprehensions in ``loop`` that
    iterate them (``t`` in ``x, y = (t.to(device) for t in batch)``): each
    is a part of the loop's item."""
    found = set(targets)
    for node in ast.walk(loop):
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            for clause in node.generators:
                if _mentions(clause.iter, found, analysis):
                    found.update(targets_of(clause.target))
    return found


def _with_derived_names(loop: ast.AST, targets: set[str], analysis) -> set[str]:
    """``targets`` and the names that ``loop``'s body binds, in source order,
    from expressions that mention them (``image = cv2.imread(path)`` in
    ``for path in paths:``): each holds a part of this iteration's item,
    through library calls whose results the model cannot trace. Not a name
    bound before the loop (state carried across iterations, ``h = blk(h)``)
    nor the result of calling the item itself (a layer's output)."""
    found = set(targets)
    before = analysis.bound_before.get(loop, frozenset())
    assignments = sorted((node for node in ast.walk(loop) if isinstance(node, ast.Assign)), key=lambda node: (node.lineno, node.col_offset))
    for statement in assignments:
        value = statement.value
        if isinstance(value, ast.Call) and _calls_the_item(value, found, analysis) or not _mentions(value, found, analysis):
            continue
        for target in statement.targets:
            found.update(name for name in targets_of(target) if name not in before)
    return found


def calls_its_item(model, loop: ast.AST) -> bool:
    """``loop`` is a ``for`` whose body calls its own item on other values
    (``for i, blk in enumerate(blocks): x = blk(x)``, or the layer of a
    module at its counter, ``x = net[i](x)``): it walks callables --
    the layers of one forward pass -- whatever the model knows of what it
    iterates. Unlike :func:`_calls_the_item`, only the arguments' own names
    count: ``x`` carried through the layers is not the loop's item, though
    its value depends on the index that ``enumerate`` gives."""
    if not isinstance(loop, FOR_TYPES):
        return False
    targets = set(targets_of(loop.target))
    analysis = model.analysis_of(loop)
    for call in model._calls_within(loop):
        callee_is_item = isinstance(call.func, ast.Name) and call.func.id in targets
        if (callee_is_item or _indexed_layer(call.func, targets, analysis)) and not any(
                isinstance(node, ast.Name) and node.id in targets
                for argument in [*call.args, *(k.value for k in call.keywords)] for node in ast.walk(argument)):
            return True
    return False


def _calls_the_item(call: ast.Call, targets: set[str], analysis) -> bool:
    """The call's callee is the loop's own item and its arguments are not
    (``for block in blocks: x = block(x)``): the loop walks callables -- the
    layers of one forward pass, the members of an ensemble -- not batches."""
    if not (isinstance(call.func, ast.Name) and call.func.id in targets or _indexed_layer(call.func, targets, analysis)):
        return False
    return not any(_mentions(argument, targets, analysis) for argument in [*call.args, *(k.value for k in call.keywords)])


def _indexed_layer(func: ast.expr, targets: set[str], analysis) -> bool:
    """``net[i]`` with ``i`` the loop's counter and ``net`` a module (an
    ``nn.Sequential``/``nn.ModuleList``, whose ``__getitem__`` returns a
    submodule: torch 2.13.0 torch/nn/modules/container.py): the loop calls
    the layers of one model by index (``for i in range(len(net)): X = net[i](X)``)."""
    if not (isinstance(func, ast.Subscript) and isinstance(func.slice, ast.Name) and func.slice.id in targets):
        return False
    indexed = analysis.values.get(func.value)
    return indexed is not None and indexed.kind is Kind.MODULE


def _moves_to_device(call: ast.Call, analysis) -> bool:
    """``x.cuda()`` / ``x.to(device)`` that puts ``x`` on the accelerator (not a dtype cast)."""
    if not isinstance(call.func, ast.Attribute) or call.func.attr not in ("to", "cuda"):
        return False
    before = analysis.values.get(call.func.value)
    after = analysis.values.get(call)
    return after is not None and after.device is Tri.YES and (before is None or before.device is not Tri.YES)


def is_run_comprehension(model, node: ast.AST) -> bool:
    """A comprehension whose iterations grow with the run: it iterates a
    stream of batches, or feeds what it iterates to a forward pass or moves
    it to the accelerator (and does not iterate a fixed structure). Calling
    each item on the same input (``[prompt(embeds) for prompt in prompts]``)
    walks callables, not batches (see :func:`_calls_the_item`)."""
    analysis = model.analysis_of(node)
    calls = model._calls_within(node)
    for clause in node.generators:
        iterable = analysis.values.get(clause.iter)
        if iterable is None:
            continue
        if iterable.stream is Tri.YES:
            return True
        if iterable.stream is Tri.NO:
            continue
        targets = set(targets_of(clause.target))
        for call in calls:
            forward = call in analysis.forward_calls or call in analysis.forwarding_calls
            if forward and _calls_the_item(call, targets, analysis):
                continue  # `[head(z) for head in heads]`: callables of one forward pass, not batches
            if forward and _mentions(call, targets, analysis):
                return True
            if _moves_to_device(call, analysis) and _mentions(call.func.value, targets, analysis):
                return True
    return False


def literal_iterable(iterable: ast.expr) -> bool:
    """A tuple/list/set display, ``range`` of a small integer literal, or the
    first few items of a stream (``dataset.take(1)``: tf.data ``Dataset.take``,
    ``itertools.islice(it, 3)``)."""
    if isinstance(iterable, (ast.Tuple, ast.List, ast.Set)):
        return True
    if isinstance(iterable, ast.Call) and iterable.args and not iterable.keywords:
        name = iterable.func.attr if isinstance(iterable.func, ast.Attribute) else getattr(iterable.func, "id", None)
        count = iterable.args[-1] if name == "islice" else iterable.args[0] if name == "take" else None
        if isinstance(count, ast.Constant) and type(count.value) is int and count.value <= SMALL_RANGE:
            return True
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id == "range" and iterable.args:
        bound = iterable.args[0] if len(iterable.args) == 1 else iterable.args[1]
        return isinstance(bound, ast.Constant) and type(bound.value) is int and bound.value <= SMALL_RANGE
    return False


def _range_of_structure(model, iterable: ast.expr) -> bool:
    """``range(len(x))`` (or ``range(x.size(0))``...) where ``x`` is a module
    or a fixed container: a loop over a structure, not over the run."""
    node = iterable
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "enumerate" and node.args:
        node = node.args[0]
    if not (isinstance(node, ast.Call) and node.args):
        return False
    bound = node.args[-1] if len(node.args) <= 2 else node.args[1]
    if isinstance(bound, ast.Call) and isinstance(bound.func, ast.Name) and bound.func.id == "len" and bound.args:
        measured = model.value(bound.args[0])
        return measured.kind is Kind.MODULE or measured.stream is Tri.NO
    return False


def _is_next(model, call: ast.Call) -> bool:
    return isinstance(call.func, ast.Name) and call.func.id == "next" and model.qualified(call.func) == "next"


def _mentions(node: ast.AST, names: set[str], analysis) -> bool:
    for child in ast.walk(node):
        if isinstance(child, ast.Name) and child.id in names:
            return True
        value = analysis.values.get(child)
        if value is not None and value.sources & names:
            return True
    return False


def driven_functions(model) -> dict:
    """Functions that a driver of the file calls repeatedly: the objective of
    ``study.optimize(objective)``, the closure of ``optimizer.step(closure)``."""
    from memlint.lint.semantic.model import Repetition

    found: dict = {}
    for call in model.index.of_type(ast.Call):
        driven = _driven_function(model, call)
        if driven is not None:
            found[driven] = Repetition("driver", True, dotted_name(call.func) or "")
    for function in model.functions:
        if function not in found and _takes_trial(model, function):
            found[function] = Repetition("driver", True, "optuna.Trial")
    return found


def _takes_trial(model, function: ast.AST) -> bool:
    """``function`` has a parameter annotated with a study's trial type
    (``def objective(trial: optuna.Trial)``, :data:`fw.TRIAL_TYPES`): only a
    study makes trials, so it is an objective the study runs once per
    trial, wherever the file hands it over (a wrapper, a returned closure)."""
    arguments = getattr(function, "args", None)
    if arguments is None:
        return False
    parameters = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    return any(parameter.annotation is not None and model.qualified(parameter.annotation) in fw.TRIAL_TYPES
               for parameter in parameters)


def _driven_function(model, call: ast.Call) -> ast.AST | None:
    """The function ``study.optimize(f)`` / ``optimizer.step(closure)`` /
    ``hyperopt.fmin(f, ...)`` runs repeatedly."""
    if isinstance(call.func, (ast.Name, ast.Attribute)) and (call.args or call.keywords):
        parameter = fw.REPEATING_DRIVER_FUNCTIONS.get(model.qualified(call.func))
        if parameter is not None:
            keyword, position = parameter
            argument = call.args[position] if len(call.args) > position else next(
                (k.value for k in call.keywords if k.arg == keyword), None)
            if isinstance(argument, ast.Lambda):
                return argument
            return _local_target(model, argument) if isinstance(argument, ast.Name) else None
    if not isinstance(call.func, ast.Attribute) or call.func.attr not in fw.REPEATING_DRIVERS or not call.args:
        return None
    receiver = model.value(call.func.value)
    if call.func.attr == "optimize" and receiver.type_name != "optuna.study.Study" and receiver.kind is not Kind.UNKNOWN:
        return None
    if call.func.attr == "step" and receiver.kind not in (Kind.OPTIMIZER, Kind.UNKNOWN):
        return None
    argument = call.args[fw.REPEATING_DRIVERS[call.func.attr]]
    if isinstance(argument, ast.Lambda):
        return argument
    return _local_target(model, argument) if isinstance(argument, ast.Name) else None
