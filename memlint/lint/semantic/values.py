"""What the semantic model knows about one value: the abstract domain.

A :class:`Value` answers the questions every rule asks — is it a module, a
tensor, a container of tensors, an optimizer; does it hold an autograd graph;
is it on the accelerator; does iterating it yield a growing stream of batches
— each as far as the file shows. Unknown is a first-class answer
(:attr:`Tri.MAYBE`, :attr:`Kind.UNKNOWN`): rules report only on what is
known, so where the model cannot decide, they stay silent.

Values are immutable and hashable: the interpreter compares environments to
find its fixpoint and memoizes call summaries by argument values.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Tri(enum.Enum):
    """Three-valued truth, ordered NO < MAYBE < YES.

    At a control-flow merge the answers join to the larger one ("attached on
    one path" is attached: the analysis is a may-analysis for YES).
    """

    NO = 0
    MAYBE = 1
    YES = 2

    #: Members are singletons compared by identity; ``Enum.__hash__`` hashes the
    #: name in Python code, and the interpreter hashes these in every set test.
    __hash__ = object.__hash__

    def join(self, other: "Tri") -> "Tri":
        """The larger of the two (NO < MAYBE < YES)."""
        return self if self._value_ >= other._value_ else other  # `_value_`: a plain attribute, `value` a slower property

    @staticmethod
    def of(flag: bool) -> "Tri":
        return Tri.YES if flag else Tri.NO


class Kind(enum.Enum):
    """What sort of object a value is."""

    UNKNOWN = "unknown"
    #: A ``torch.Tensor`` (or a TensorFlow tensor, see :attr:`Value.framework`).
    TENSOR = "tensor"
    #: A tuple, list, dict, set, ``ModelOutput`` or generator: holds other values.
    CONTAINER = "container"
    #: An ``nn.Module`` / Keras model or layer: calling it is a forward pass.
    MODULE = "module"
    #: A Python number, string, bool, ``None`` or numpy scalar/array: no autograd graph.
    PLAIN = "plain"
    #: A ``torch.optim.Optimizer`` (or a wrapper of one).
    OPTIMIZER = "optimizer"
    #: An instance of a class: one defined in this file (:attr:`Value.klass`)
    #: or a library type (:attr:`Value.type_name`).
    OBJECT = "object"
    #: A function or other callable that is not a module.
    FUNCTION = "function"

    __hash__ = object.__hash__  # as Tri's


#: Kinds that can hold a tensor (and so an autograd graph).
TENSOR_HOLDING = frozenset({Kind.TENSOR, Kind.CONTAINER, Kind.UNKNOWN, Kind.OBJECT})
#: Cap on :attr:`Value.sources`: values that depend on more names are rare
#: and the cap keeps environments small (the fixpoint compares them).
MAX_SOURCES = 24
#: Nesting depth kept for container elements (``[(x, y), ...]``).
MAX_DEPTH = 3


@dataclass(frozen=True)
class Value:
    """One abstract value.

    Attributes:
        kind: what sort of object it is.
        graph: whether it holds (or is) a tensor with an autograd history:
            YES for forward-pass outputs, losses, and arithmetic on them;
            NO after ``.detach()``/``.item()``, under ``no_grad``, for
            non-differentiable ops.
        device: whether its tensors are on the accelerator.
        leaf: a tensor that requires grad but has no history (a parameter,
            a ``requires_grad=True`` factory): storing it keeps no graph,
            computing with it makes one.
        stream: iterating it yields a number of items that grows with the
            run (a DataLoader, a dataset, a generator of batches).
        framework: "torch", "tensorflow" or "keras" when known.
        klass: qualified name of the in-file class of an OBJECT or MODULE.
        type_name: qualified name of the library type of an OBJECT, MODULE
            or OPTIMIZER (``"accelerate.Accelerator"``, ``"torch.nn.LSTM"``).
        output: for a MODULE, the kind its forward pass returns when known
            (``nn.LSTM`` returns a tuple, ``nn.Linear`` a tensor).
        frozen: for a MODULE, its parameters do not require grad
            (``requires_grad_(False)``): its outputs keep no graph of their own.
        element: for a CONTAINER or stream, the join of its elements.
        items: for a fixed-length tuple, its elements by position.
        scalar: a one-element tensor (a loss, a full reduction).
        sources: names (locals, parameters, ``self.x`` attributes) whose
            values this one was computed from through differentiable
            operations; ``.detach()``/``.item()`` cut the chain.
    """

    kind: Kind = Kind.UNKNOWN
    graph: Tri = Tri.MAYBE
    device: Tri = Tri.MAYBE
    leaf: bool = False
    stream: Tri = Tri.MAYBE
    framework: str | None = None
    klass: str | None = None
    type_name: str | None = None
    output: Kind | None = None
    frozen: bool = False
    element: "Value | None" = None
    items: "tuple[Value, ...] | None" = None
    scalar: bool = False
    sources: frozenset[str] = frozenset()

    # The interpreter makes and compares values by the hundred thousand per
    # run; the generated methods of a frozen dataclass set each field through
    # ``object.__setattr__`` and compare tuples built field by field. These
    # write and compare the instance dict, with the same fields and order.
    def __init__(self, kind: Kind = Kind.UNKNOWN, graph: Tri = Tri.MAYBE, device: Tri = Tri.MAYBE, leaf: bool = False,
                 stream: Tri = Tri.MAYBE, framework: str | None = None, klass: str | None = None,
                 type_name: str | None = None, output: Kind | None = None, frozen: bool = False,
                 element: "Value | None" = None, items: "tuple[Value, ...] | None" = None, scalar: bool = False,
                 sources: frozenset[str] = frozenset()) -> None:
        state = self.__dict__
        state["kind"] = kind
        state["graph"] = graph
        state["device"] = device
        state["leaf"] = leaf
        state["stream"] = stream
        state["framework"] = framework
        state["klass"] = klass
        state["type_name"] = type_name
        state["output"] = output
        state["frozen"] = frozen
        state["element"] = element
        state["items"] = items
        state["scalar"] = scalar
        state["sources"] = sources

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not Value:
            return NotImplemented
        return self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash(tuple(self.__dict__.values()))

    # -- questions rules ask --------------------------------------------------
    @property
    def attached(self) -> bool:
        """Known to hold an autograd graph (a leaf alone does not count)."""
        return self.graph is Tri.YES and not self.leaf

    @property
    def on_accelerator(self) -> bool:
        return self.device is Tri.YES

    @property
    def is_module(self) -> bool:
        return self.kind is Kind.MODULE

    @property
    def is_tensor(self) -> bool:
        return self.kind is Kind.TENSOR

    @property
    def is_container(self) -> bool:
        return self.kind is Kind.CONTAINER

    @property
    def may_hold_tensor(self) -> bool:
        return self.kind in TENSOR_HOLDING

    def evolve(self, **changes) -> "Value":
        """A copy with ``changes`` (what ``dataclasses.replace`` does, without
        its per-call overhead: the interpreter makes many)."""
        new = object.__new__(Value)
        state = new.__dict__
        state.update(self.__dict__)
        state.update(changes)
        return new

    # -- lattice ---------------------------------------------------------------
    def join(self, other: "Value") -> "Value":
        """The value at a merge of two paths (each field joined)."""
        if self is other or self == other:
            return self
        return _join(self, other, MAX_DEPTH)

    def detached(self) -> "Value":
        """The same value with no graph (``.detach()``, ``no_grad``)."""
        return self.evolve(graph=Tri.NO, leaf=False, sources=frozenset())

    def with_sources(self, sources: frozenset[str]) -> "Value":
        if len(sources) > MAX_SOURCES:
            sources = frozenset(sorted(sources)[:MAX_SOURCES])
        return self if sources == self.sources else self.evolve(sources=sources)


def _join_kind(left: Kind, right: Kind) -> Kind:
    if left is right:
        return left
    # A number that arithmetic turned into a tensor (``total = 0.0; total += loss``).
    if {left, right} == {Kind.PLAIN, Kind.TENSOR}:
        return Kind.TENSOR
    return Kind.UNKNOWN


def _join_optional(left: Value | None, right: Value | None, depth: int, placement) -> Value | None:
    if left is None or right is None:
        return left if right is None else right
    return _join(left, right, depth - 1, placement) if depth > 0 else None


def _agreeing_join(left: Tri, right: Tri) -> Tri:
    """YES or NO only when both say so; a YES against a NO is MAYBE."""
    if left is right:
        return left
    return Tri.MAYBE if Tri.NO in (left, right) else left.join(right)


def _join(left: Value, right: Value, depth: int, placement=Tri.join) -> Value:
    items = None
    if left.items is not None and right.items is not None and len(left.items) == len(right.items) and depth > 0:
        items = tuple(_join(a, b, depth - 1, placement) for a, b in zip(left.items, right.items))
    return Value(
        kind=_join_kind(left.kind, right.kind),
        graph=left.graph.join(right.graph),
        device=placement(left.device, right.device),
        leaf=(left.leaf or left.graph is Tri.NO) and (right.leaf or right.graph is Tri.NO) and (left.leaf or right.leaf),
        stream=left.stream.join(right.stream),
        framework=left.framework if left.framework == right.framework else (left.framework or right.framework),
        klass=left.klass if left.klass == right.klass else None,
        type_name=left.type_name if left.type_name == right.type_name else None,
        output=left.output if left.output == right.output else None,
        frozen=left.frozen and right.frozen,
        element=_join_optional(left.element, right.element, depth, placement),
        items=items,
        scalar=left.scalar and right.scalar,
        sources=_capped(left.sources | right.sources),
    )


def join_call_arguments(left: Value, right: Value) -> Value:
    """What a parameter holds when one call of the function passes ``left``
    and another ``right``: as :meth:`Value.join`, except that the placement
    is known only where the calls agree. A function called with a CUDA model
    from ``train`` and a CPU one from ``test_on_cpu`` runs on both, so a
    rule asking "is it on the accelerator?" of its parameter gets MAYBE and
    stays silent. (Within one function a value that is on the device on
    one path is on it when that path runs, so :meth:`Value.join` keeps YES.)"""
    if left is right or left == right:
        return left
    return _join(left, right, MAX_DEPTH, _agreeing_join)


def _capped(sources: frozenset[str]) -> frozenset[str]:
    return sources if len(sources) <= MAX_SOURCES else frozenset(sorted(sources)[:MAX_SOURCES])


def join_all(values) -> Value | None:
    """The join of ``values``; None for none."""
    result = None
    for value in values:
        result = value if result is None else result.join(value)
    return result


def combine(values, kind: Kind | None = None) -> Value:
    """The value of an operation on ``values`` (arithmetic, a differentiable
    op): attached if any input is, on the accelerator if any input is,
    depending on all their sources."""
    graph, device = Tri.NO, Tri.NO
    sources: frozenset[str] = frozenset()
    framework = None
    tensor = False
    scalar = None
    plain = None
    for value in values:
        plain = value.kind is Kind.PLAIN if plain is None else plain and value.kind is Kind.PLAIN
        if value.kind is not Kind.PLAIN:
            scalar = value.scalar if scalar is None else scalar and value.scalar
        graph = graph.join(value.graph)
        device = device.join(value.device)
        sources |= value.sources
        framework = framework or value.framework
        tensor = tensor or value.kind is Kind.TENSOR
    if kind is None and plain:
        return PLAIN  # arithmetic on Python numbers (`step += 1`) is a Python number
    if kind is None:
        kind = Kind.TENSOR if tensor else Kind.UNKNOWN
    return Value(kind=kind, graph=graph, device=device, framework=framework, scalar=bool(scalar), sources=_capped(sources))


UNKNOWN = Value()
#: A Python number, string, None...: no tensor, no graph, not on a device.
PLAIN = Value(Kind.PLAIN, Tri.NO, Tri.NO, stream=Tri.NO)
#: A tensor known to hold no graph, on the CPU.
DETACHED_CPU_TENSOR = Value(Kind.TENSOR, Tri.NO, Tri.NO, framework="torch")


def tensor(graph: Tri = Tri.MAYBE, device: Tri = Tri.MAYBE, sources: frozenset[str] = frozenset(), leaf: bool = False) -> Value:
    """A torch tensor value."""
    return Value(Kind.TENSOR, graph, device, leaf=leaf, framework="torch", sources=sources)


def container(element: Value | None, items: tuple[Value, ...] | None = None, stream: Tri = Tri.NO,
              type_name: str | None = None) -> Value:
    """A container whose elements join to ``element`` (graph and device from them),
    nested at most :data:`MAX_DEPTH` levels (``t = (t, t)`` in a loop would
    otherwise double the value, and the time to compare it, per iteration)."""
    parts = list(items) if items is not None else ([] if element is None else [element])
    if items is not None and element is None:
        element = join_all(items)
    summary = combine(parts, Kind.CONTAINER) if parts else Value(Kind.CONTAINER, Tri.NO, Tri.NO)
    if items is not None:
        items = tuple(_truncated(item, MAX_DEPTH - 1) for item in items)
    return summary.evolve(element=_truncated(element, MAX_DEPTH - 1), items=items, stream=stream, type_name=type_name)


def _truncated(value: Value | None, depth: int) -> Value | None:
    """``value`` with what it holds below ``depth`` more levels forgotten
    (an element or items of unknown kind: the container's own graph,
    device and sources, computed from all of them, stay)."""
    if value is None or (value.element is None and value.items is None):
        return value
    if depth <= 0:
        return value.evolve(element=None, items=None)
    element = _truncated(value.element, depth - 1)
    items = None if value.items is None else tuple(_truncated(item, depth - 1) for item in value.items)
    if element is value.element and (items is None or all(a is b for a, b in zip(items, value.items))):
        return value
    return value.evolve(element=element, items=items)


def module(framework: str = "torch", output: Kind | None = None, type_name: str | None = None,
           klass: str | None = None, device: Tri = Tri.MAYBE) -> Value:
    """A module (model or layer) value."""
    return Value(Kind.MODULE, Tri.NO, device, stream=Tri.NO, framework=framework, output=output,
                 type_name=type_name, klass=klass)


def obj(type_name: str | None = None, klass: str | None = None, stream: Tri = Tri.NO) -> Value:
    """An instance of a library type or of an in-file class."""
    return Value(Kind.OBJECT, Tri.NO, Tri.MAYBE, stream=stream, type_name=type_name, klass=klass)
