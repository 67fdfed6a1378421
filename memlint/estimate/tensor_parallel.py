"""Tensor parallel plans and wrapping for ``--parallel tp`` and ``--parallel fsdp+tp``.

The workload is sharded by torch's own tensor parallel:
``torch.distributed.tensor.parallel.parallelize_module`` with ``ColwiseParallel``
(weight ``Shard(0)``: each rank keeps 1/T of the output features, the output stays
sharded on its last dimension) and ``RowwiseParallel`` (weight ``Shard(1)``: it
consumes the sharded input, its partial output is all-reduced to ``Replicate``)
(torch 2.13.0, torch/distributed/tensor/parallel/style.py).  The trace then runs
the step through DTensor under the fake process group of
:mod:`memlint.estimate.distributed`.

Where the plan comes from, in order:

1. The model's own plan.  Hugging Face transformers configs carry
   ``base_model_tp_plan`` (transformers 5.24.0,
   transformers/models/llama/configuration_llama.py ``LlamaConfig.base_model_tp_plan``:
   ``"layers.*.self_attn.q_proj": "colwise"``, ..., ``"layers.*.mlp.down_proj": "rowwise"``),
   with FQNs relative to the base model (``model.base_model_prefix``) and ``*`` for a
   layer index; a built model holds the whole plan, FQNs from the model, in ``_tp_plan``
   (transformers/distributed/mixin.py; LlamaForCausalLM adds ``lm_head:
   colwise_gather_output`` and ``model.embed_tokens: embedding_rowwise``).  Its ``"colwise"`` and ``"rowwise"`` entries are translated; any other
   style (``colwise_gather_output``, ``rowwise_split_input``, ...) is skipped and listed
   in :attr:`TPPlan.skipped`.
2. Otherwise a plan derived from the dataflow of the repeated blocks (the blocks
   ``--checkpointing`` and FSDP2 find; the root when there are none): one forward on
   the meta device, without gradients, records for every tensor which ``nn.Linear``
   outputs it comes from (:class:`_Dataflow`).  A pair (A, B) of linears of one block is
   (Colwise, Rowwise) when B's input comes from A's output through elementwise, view
   and attention ops only -- never through a reduction such as a norm, and never mixed
   with the block's own input (its residual stream) -- and A's output reaches nothing
   else.  Names are never read.

A model whose forward reshapes with a fixed head count (``view(B, T, n_head, ...)``)
breaks once q/k/v are sharded; the trace fails and the error says the forward is not
tensor-parallel-ready.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

from memlint.errors import TargetError, UsageError
from memlint.estimate.messages import one_line

#: The ``--parallel`` modes that use tensor parallel.
TP_MODES = ("tp", "fsdp+tp")
#: Hugging Face plan styles translated: style -> (the module class it applies to, torch's ParallelStyle and
#: its layouts).  transformers 5.24.0, transformers/distributed/tensor_parallel.py ``ALL_PARALLEL_STYLES``:
#: "colwise" = ColwiseParallel(input Replicate, output Shard(-1)), "rowwise" = RowwiseParallel(input
#: Shard(-1), output Replicate) -- torch's defaults.  Not translated (the modules stay replicated):
#: "colwise_gather_output" (ColwiseParallel with output Replicate) and "embedding_rowwise" (the vocabulary
#: sharded), traced as torch's ColwiseParallel(output_layouts=Replicate()) and RowwiseParallel(input_layouts=
#: Replicate()) on nn.Embedding, missed rank 0's tensor peak of 2-process gloo runs: the gathered lm_head
#: +0.02% on the tiny Llama but -8.89% on its GQA variant, both styles -1.69% on the Llama
#: (docs/estimator.md "Tensor parallel"); the other styles were not tried.
HF_STYLES = {
    "colwise": ("Linear", "ColwiseParallel", {}),
    "rowwise": ("Linear", "RowwiseParallel", {}),
}

#: aten ops a column-sharded activation passes through unchanged in meaning (layout ops, attention and
#: its pieces); pointwise ops are recognised by ``torch.Tag.pointwise``.  A reduction (a norm, a mean)
#: is deliberately absent.
_PASS_THROUGH = frozenset({
    "view", "_unsafe_view", "reshape", "permute", "transpose", "t", "unsqueeze", "squeeze", "expand",
    "split", "split_with_sizes", "chunk", "unbind", "select", "slice", "contiguous", "clone", "alias",
    "flatten", "unflatten", "_to_copy", "detach", "native_dropout", "bmm", "mm", "matmul", "baddbmm",
    "_softmax", "_safe_softmax", "softmax", "masked_fill", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention", "scaled_dot_product_attention",
    "_scaled_dot_product_attention_math",
})
#: aten ops that read only the shape of their input: their output is not derived from it, and a
#: sharded input does not escape through them (dropout's mask is made with empty_like).
_SHAPE_ONLY = frozenset({"empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like",
                         "new_empty", "new_zeros", "new_ones", "new_full", "new_empty_strided"})


@dataclass
class TPPlan:
    """A tensor parallel plan: ``styles`` {FQN: a style of :data:`HF_STYLES`} ("colwise" / "rowwise" when derived).

    source: "model" (the model's ``base_model_tp_plan``) or "derived" (:func:`derive_plan`);
    skipped: the model's entries not translated, "FQN pattern: style" each.
    """

    styles: dict[str, str]
    source: str
    skipped: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"source": self.source, "styles": dict(self.styles), "skipped": list(self.skipped)}


def check_tp_options(options) -> None:
    """Raise UsageError (one line, naming the option) for bad ``--tp-size`` / ``--world-size`` with TP."""
    tp_size = getattr(options, "tp_size", None)
    if options.parallel != "fsdp+tp":
        if tp_size is not None:
            raise UsageError(f"--tp-size {tp_size} needs --parallel fsdp+tp (with --parallel tp the TP degree "
                             "is --world-size)")
        return
    if tp_size is None:
        raise UsageError("--parallel fsdp+tp needs --tp-size T (the tensor parallel degree; "
                         "--world-size / T ranks shard with FSDP2)")
    if tp_size < 1 or options.world_size % tp_size:
        raise UsageError(f"--tp-size {tp_size} must be >= 1 and divide --world-size {options.world_size}")


def device_mesh(options):
    """The DeviceMesh of the fake world: 1-D ("tp",) for ``tp``, 2-D (N/T, T) named ("dp", "tp") for ``fsdp+tp``."""
    from torch.distributed.device_mesh import init_device_mesh  # noqa: PLC0415

    if options.parallel == "tp":
        return init_device_mesh("cpu", (options.world_size,), mesh_dim_names=("tp",))
    t = options.tp_size
    return init_device_mesh("cpu", (options.world_size // t, t), mesh_dim_names=("dp", "tp"))


def describe_plan(plan: dict) -> str:
    """One line for the table report from :meth:`TPPlan.to_json`."""
    counts: dict[str, int] = {}
    for style in plan["styles"].values():
        counts[style] = counts.get(style, 0) + 1
    source = "the model's own" if plan["source"] == "model" else "derived from the dataflow"
    line = f"tensor parallel plan ({source}): " + ", ".join(f"{n} {style}" for style, n in counts.items())
    if plan["skipped"]:
        line += f"; not translated: {', '.join(plan['skipped'])}"
    return line


# --- the model's own plan --------------------------------------------------------------------------

def model_plan(module) -> TPPlan | None:
    """The plan of a Hugging Face model's ``config.base_model_tp_plan``, expanded to FQNs of ``module``; or None.

    Wildcards (``layers.*.mlp.up_proj``) match one FQN segment each.  Entries whose style is not in
    :data:`HF_STYLES`, or that match no module of the style's class, are listed in ``skipped``.
    """
    import torch  # noqa: PLC0415

    plan, prefix = _hf_plan(module)
    if not plan:
        return None
    modules = dict(module.named_modules())
    styles: dict[str, str] = {}
    skipped: list[str] = []
    for pattern, style in plan.items():
        if style not in HF_STYLES:
            skipped.append(f"{pattern}: {style}")
            continue
        kind = getattr(torch.nn, HF_STYLES[style][0])
        matches = [name for name, sub in modules.items() if _matches(name, prefix + pattern) and isinstance(sub, kind)]
        if not matches:
            skipped.append(f"{pattern}: {style} (no such nn.{HF_STYLES[style][0]})")
        for name in matches:
            styles[name] = style
    if not styles:
        return None
    return TPPlan(styles, "model", skipped)


def _hf_plan(module) -> tuple[dict, str]:
    """(plan, FQN prefix of its keys): the model's whole ``_tp_plan`` (transformers 5.24.0,
    transformers/distributed/mixin.py: the class's own entries such as ``lm_head``, then the
    config's ``base_model_tp_plan`` and the submodules' plans, all FQNs from the model), else
    ``config.base_model_tp_plan`` under ``base_model_prefix``; ({}, "") when there is none."""
    whole = getattr(module, "_tp_plan", None)
    if isinstance(whole, dict) and whole:
        return whole, ""
    plan = getattr(getattr(module, "config", None), "base_model_tp_plan", None)
    if not isinstance(plan, dict) or not plan:
        return {}, ""
    prefix = getattr(module, "base_model_prefix", "") or ""
    return plan, f"{prefix}." if prefix and hasattr(module, prefix) else ""


def _matches(name: str, pattern: str) -> bool:
    """``pattern`` matches ``name`` segment by segment (``*`` is one segment)."""
    parts, wanted = name.split("."), pattern.split(".")
    return len(parts) == len(wanted) and all(fnmatch.fnmatchcase(p, w) for p, w in zip(parts, wanted))


# --- the derived plan ------------------------------------------------------------------------------

class _Dataflow:
    """Which column-shardable linear outputs each tensor of one forward comes from.

    Per tensor (by id; every tensor is kept alive for the short forward so ids are not reused):
    ``sources`` -- the FQNs of the nn.Linear outputs it is derived from through pass-through ops only
    (None when it is not such a tensor), and ``residual`` -- whether it derives from its block's input.
    ``escaped`` collects the linears whose output reaches anything else (a norm, the residual stream,
    the model's output); ``consumes`` {linear FQN: the sources of its input}, first call only;
    ``order`` the linears in call order, ``scope`` {linear FQN: its block's FQN}.
    """

    def __init__(self):
        self.sources: dict[int, frozenset] = {}
        self.residual: set[int] = set()
        self.escaped: set[str] = set()
        self.consumes: dict[str, frozenset] = {}
        self.order: list[str] = []
        self.scope: dict[str, str] = {}
        self.inside_linear = 0
        self._keep: list[Any] = []

    def remember(self, tensor) -> int:
        self._keep.append(tensor)
        return id(tensor)

    def op(self, func, inputs: list, outputs: list) -> None:
        """Propagate sources and the residual mark from ``inputs`` to ``outputs`` of one aten op."""
        import torch  # noqa: PLC0415

        if self.inside_linear or func.overloadpacket.__name__ in _SHAPE_ONLY:
            return
        in_sources = [self.sources.get(id(t)) for t in inputs]
        sharded = [s for s in in_sources if s is not None]
        mixed_residual = any(id(t) in self.residual and s is None for t, s in zip(inputs, in_sources))
        residual = any(id(t) in self.residual for t in inputs)
        passes = torch.Tag.pointwise in func.tags or func.overloadpacket.__name__ in _PASS_THROUGH
        result = frozenset().union(*sharded) if sharded and passes and not mixed_residual else None
        if sharded and result is None:
            self.escaped.update(*sharded)
        for out in outputs:
            key = self.remember(out)
            if result is not None:
                self.sources[key] = result
            if residual:
                self.residual.add(key)

    def outputs_leave(self, tensors: list) -> None:
        """The model's outputs: whatever linear output reaches them escapes."""
        for tensor in tensors:
            source = self.sources.get(id(tensor))
            if source:
                self.escaped.update(source)


def _flat_tensors(value) -> list:
    import torch  # noqa: PLC0415
    from torch.utils._pytree import tree_flatten  # noqa: PLC0415

    return [v for v in tree_flatten(value)[0] if isinstance(v, torch.Tensor)]


def _record_dataflow(module, inputs, scopes: list[tuple[str, Any]]) -> _Dataflow:
    """Run ``module(inputs)`` once on meta under no_grad with hooks and a dispatch mode; the _Dataflow."""
    import torch  # noqa: PLC0415
    from torch.utils._python_dispatch import TorchDispatchMode  # noqa: PLC0415

    from memlint.estimate.step import _call  # noqa: PLC0415

    from memlint.estimate.handlers import fallback_table  # noqa: PLC0415

    flow = _Dataflow()
    fallbacks = fallback_table()  # data-dependent ops (.item(), nonzero) answered as the tracer does

    class FlowMode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            fallback = fallbacks.get(func.overloadpacket)
            out = fallback(args, kwargs or {})[0] if fallback else func(*args, **(kwargs or {}))
            flow.op(func, _flat_tensors((args, kwargs)), _flat_tensors(out))
            return out

    handles = []
    for scope_name, block in scopes:
        handles.append(block.register_forward_pre_hook(_mark_block_input(flow), with_kwargs=True))
        for name, sub in block.named_modules():
            if isinstance(sub, torch.nn.Linear):
                fqn = f"{scope_name}.{name}".strip(".") if name else scope_name
                flow.scope[fqn] = scope_name
                handles.append(sub.register_forward_pre_hook(_linear_enters(flow, fqn)))
                handles.append(sub.register_forward_hook(_linear_leaves(flow, fqn)))
    try:
        with torch.no_grad(), FlowMode():
            output = _call(module, inputs)
        flow.outputs_leave(_flat_tensors(output))
    finally:
        for handle in handles:
            handle.remove()
    return flow


def _mark_block_input(flow: _Dataflow):
    def hook(block, args, kwargs):
        first = (_flat_tensors(args) or _flat_tensors(kwargs))[:1]  # the hidden state: the first tensor argument
        for tensor in first:
            flow.residual.add(flow.remember(tensor))
    return hook


def _linear_enters(flow: _Dataflow, fqn: str):
    def hook(linear, args):
        if fqn not in flow.consumes and not flow.inside_linear:
            inputs = _flat_tensors(args)
            flow.consumes[fqn] = flow.sources.get(id(inputs[0])) if inputs else None
            flow.order.append(fqn)
        flow.inside_linear += 1
    return hook


def _linear_leaves(flow: _Dataflow, fqn: str):
    def hook(linear, args, output):
        flow.inside_linear -= 1
        if flow.inside_linear:
            return
        for tensor in _flat_tensors(output):
            key = flow.remember(tensor)
            flow.sources[key] = frozenset({fqn})
            flow.residual.add(key)
    return hook


def pair_linears(flow: _Dataflow) -> dict[str, str]:
    """{FQN: "colwise" | "rowwise"} from a recorded dataflow, in call order.

    A linear B becomes rowwise when its input comes only from linears of its own block that have no
    other use (not escaped) and are not already rowwise; those become colwise.
    """
    styles: dict[str, str] = {}
    for fqn in flow.order:
        sources = flow.consumes.get(fqn)
        if not sources or fqn in styles:
            continue
        same_block = all(flow.scope.get(s) == flow.scope[fqn] for s in sources)
        free = all(s not in flow.escaped and styles.get(s, "colwise") == "colwise" for s in sources)
        if same_block and free and fqn not in sources:
            for source in sources:
                styles[source] = "colwise"
            styles[fqn] = "rowwise"
    return styles


def derive_plan(module, inputs) -> TPPlan | None:
    """A plan for ``module`` (on meta) from one meta forward on ``inputs`` (meta tensors); None if no pair is found.

    Scopes: the repeated blocks (:func:`memlint.estimate.step.repeated_blocks`), else the root.
    Raises TargetError when the forward itself fails.
    """
    from memlint.estimate.step import repeated_blocks  # noqa: PLC0415

    scopes = repeated_blocks(module) or [("", module)]
    try:
        flow = _record_dataflow(module, inputs, scopes)
    except (TargetError, UsageError):
        raise
    except Exception as exc:  # noqa: BLE001
        raise TargetError(f"tensor parallel plan: the meta forward failed: {one_line(exc)}") from None
    styles = pair_linears(flow)
    return TPPlan(styles, "derived") if styles else None


def find_plan(module, inputs, name: str) -> TPPlan:
    """The model's own plan, else a derived one; TargetError (one line) when neither exists."""
    plan = model_plan(module) or derive_plan(module, inputs)
    if plan is None:
        raise TargetError(f"--parallel tp: {name!r} has no tensor parallel plan (no base_model_tp_plan, and no "
                          "nn.Linear pair of a repeated block where one consumes the other's output)")
    return plan


# --- wrapping ---------------------------------------------------------------------------------------

def parallelize(module, plan: TPPlan, tp_mesh) -> None:
    """``parallelize_module`` of ``module`` (on meta, outside every mode) with ``plan`` on the 1-D ``tp_mesh``."""
    from torch.distributed.tensor import Replicate  # noqa: PLC0415
    from torch.distributed.tensor import parallel as tp  # noqa: PLC0415

    def style_of(name: str):
        _, cls, layouts = HF_STYLES[name]
        return getattr(tp, cls)(**{key: {"Replicate": Replicate()}[value] for key, value in layouts.items()})

    tp.parallelize_module(module, tp_mesh, {fqn: style_of(style) for fqn, style in plan.styles.items()})


def replicate_rest(module, plan: TPPlan, tp_mesh) -> list[str]:
    """Make every parameter the plan leaves alone a replicated DTensor on ``tp_mesh``; returns the modules' FQNs.

    Why: the optimizer's foreach kernels take one list of all parameters, and DTensor refuses a plain
    tensor beside a DTensor ("got mixed torch.Tensor and DTensor", torch 2.13.0
    torch/distributed/tensor/_dispatch.py), so a tensor parallel model keeps every parameter as a
    DTensor (torch's ``distribute_module`` replicates a module's parameters,
    torch/distributed/tensor/_api.py).  A replicated DTensor holds the same bytes as the plain
    tensor; tied parameters stay one tensor.  While a module runs, its replicated parameters are
    replaced by their local tensors (``DTensor.to_local``: a view, its gradient returns as a
    replicated DTensor), so its forward mixes no DTensor with the plain activations around it.
    """
    import torch  # noqa: PLC0415
    from torch.distributed.tensor import DTensor, Replicate, distribute_tensor  # noqa: PLC0415

    shared: dict[int, Any] = {}
    replicated = []
    planned = {id(sub) for name, sub in module.named_modules() if name in plan.styles}
    for name, sub in module.named_modules():
        keys = tuple(k for k, v in sub._parameters.items() if v is not None and not isinstance(v, DTensor))
        if not keys or name in plan.styles:
            continue
        for key in keys:
            param = sub._parameters[key]
            if id(param) not in shared:
                shared[id(param)] = torch.nn.Parameter(distribute_tensor(param.data, tp_mesh, [Replicate()]),
                                                       requires_grad=param.requires_grad)
            sub._parameters[key] = shared[id(param)]
        sub.register_forward_pre_hook(_LocalParameters(tp_mesh, planned).enter)
        sub.register_forward_hook(_LocalParameters.leave)
        replicated.append(name or "<root>")
    return replicated


class _LocalParameters:
    """Forward hooks: the replicated DTensor parameters of a module and of its submodules (a module may
    use a child's weight without calling the child: ``nn.MultiheadAttention`` and its ``out_proj``)
    replaced by their local tensors while its forward runs.  Read at each call: FSDP2 swaps the
    parameters under fsdp+tp; the planned modules' parameters (a RowwiseParallel bias is replicated
    too) are left to their ParallelStyle: ``planned`` holds their ids."""

    def __init__(self, tp_mesh, planned: set[int]):
        self.tp_mesh = tp_mesh
        self.planned = planned

    def _replicated(self, value) -> bool:
        from torch.distributed.tensor import DTensor, Replicate  # noqa: PLC0415

        return (isinstance(value, DTensor) and value.device_mesh == self.tp_mesh
                and all(isinstance(p, Replicate) for p in value.placements))

    def enter(self, sub, args) -> None:
        saved = [(owner, key, param) for owner in sub.modules() if id(owner) not in self.planned
                 for key, param in owner._parameters.items() if self._replicated(param)]
        sub.__dict__.setdefault("_memlint_tp_saved", []).append(saved)
        for owner, key, param in saved:
            owner._parameters[key] = param.to_local()

    @staticmethod
    def leave(sub, args, output) -> None:
        for owner, key, param in sub.__dict__["_memlint_tp_saved"].pop():
            owner._parameters[key] = param


def shard_module(module, plan: TPPlan, options, mesh) -> list[str]:
    """Tensor parallel on ``mesh["tp"]`` (:func:`parallelize`, :func:`replicate_rest`), then for ``fsdp+tp``
    FSDP2 on ``mesh["dp"]`` (:func:`memlint.estimate.distributed.apply_fully_shard`); the FSDP2 units' FQNs.

    Used by the trace (a meta module) and by the gloo validator (the real module), so both run one wrapping.
    """
    from memlint.estimate.distributed import apply_fully_shard  # noqa: PLC0415

    parallelize(module, plan, mesh["tp"])
    replicate_rest(module, plan, mesh["tp"])
    return apply_fully_shard(module, options, mesh["dp"]) if options.parallel == "fsdp+tp" else []


def plan_of_real_module(module, inputs, name: str) -> TPPlan:
    """:func:`find_plan` for a module with real tensors: derived on a meta copy (nothing of it runs for real)."""
    import copy  # noqa: PLC0415

    import torch  # noqa: PLC0415
    from torch.utils._pytree import tree_map  # noqa: PLC0415

    meta = copy.deepcopy(module).to("meta")
    meta_inputs = tree_map(lambda v: v.to("meta") if isinstance(v, torch.Tensor) else v, inputs)
    return find_plan(meta, meta_inputs, name)


def not_tp_ready(exc: TargetError, name: str) -> TargetError:
    """A forward's failure under TP said as such (one line); any other failure is returned unchanged."""
    if not str(exc).startswith(f"forward of {name!r}"):
        return exc
    inner = str(exc).removeprefix(f"forward of {name!r} ").removeprefix("failed: ")
    return TargetError(f"--parallel tp: the forward of {name!r} is not tensor-parallel-ready: {inner} "
                       "(a head count fixed in a reshape, or fewer heads than ranks? the model must read the local size)")
