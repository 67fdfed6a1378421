"""Trace N training steps of a Workload on the meta device while the ledger records memory.

Step structure (each of ``steps`` steps; the first is the warm-up, peaks are
taken over the others)::

    optimizer.zero_grad(set_to_none=...)
    for each of grad_accum micro-batches (micro-batch = batch_size // grad_accum):
        inputs = make_inputs(micro)                        # category input
        with autocast: out = module(inputs); loss = loss_fn(out, inputs) / grad_accum   # forward
        loss.backward()                                    # backward
    optimizer.step()                                       # optimizer

The module is traced as it is -- no copy: the workload's own forward/backward
hooks, ``register_post_accumulate_grad_hook`` hooks (optimizer step in
backward), ``torch.utils.checkpoint`` calls, parametrizations and tensor hooks
all run.  What the estimator itself changes for the trace (precision casts,
checkpoint wrappers, its own hooks) is undone afterwards.  Fresh copies for
repeated estimates come from ``Workload.factory`` (see
:meth:`memlint.estimate.workload.Workload.fresh`).
"""

from __future__ import annotations

from collections import Counter
from contextlib import ExitStack
from typing import Any

from memlint.errors import TargetError, UsageError
from memlint.estimate.messages import one_line
from memlint.estimate.placement import call_on, device_of, keep_devices
from memlint.estimate.tracer import Ledger, ModuleTracker, make_ledger_mode

OPTIMIZER_NAMES = ("sgd", "sgd-momentum", "adam", "adamw", "adagrad", "rmsprop")
#: Optimizers from transformers, traced through their real class when transformers is installed.
TRANSFORMERS_OPTIMIZERS = ("adafactor",)
PRECISIONS = ("fp32", "amp-fp16", "amp-bf16", "bf16", "fp16")


def _tensors(value: Any):
    import torch  # noqa: PLC0415

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


def _cast_inputs(value: Any, dtype):
    import torch  # noqa: PLC0415

    if isinstance(value, torch.Tensor):
        if value.device.type != "meta":
            value = value.to("meta")
        if dtype is not None and value.is_floating_point():
            value = value.to(dtype)
        return value
    if isinstance(value, dict):
        return {k: _cast_inputs(v, dtype) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cast_inputs(v, dtype) for v in value)
    return value


def _call(module, inputs):
    if isinstance(inputs, dict):
        return module(**inputs)
    if isinstance(inputs, (tuple, list)):
        return module(*inputs)
    return module(inputs)


def _is_block(module) -> bool:
    return next(module.children(), None) is not None


def repeated_blocks(root) -> list[tuple[str, Any]]:
    """(FQN, module) of the repeated blocks of ``root`` (what ``--checkpointing`` wraps).

    A repeated block is a child of an ``nn.ModuleList`` / ``nn.Sequential`` (the
    root included) that has submodules of its own (leaf layers such as an
    in-place ReLU are never wrapped) and whose class occurs at least twice among
    that container's children.  Blocks found are not searched further.
    """
    import torch  # noqa: PLC0415

    found: list[tuple[str, Any]] = []

    def visit(module, prefix: str) -> None:
        if isinstance(module, (torch.nn.ModuleList, torch.nn.Sequential)):
            counts = Counter(type(child) for child in module.children() if _is_block(child))
            repeated = {cls for cls, n in counts.items() if n >= 2}
            if repeated:
                for name, child in module.named_children():
                    if type(child) in repeated:
                        found.append((f"{prefix}{name}", child))
                    else:
                        visit(child, f"{prefix}{name}.")
                return
        for name, child in module.named_children():
            visit(child, f"{prefix}{name}.")

    visit(root, "")
    return found


def apply_checkpointing(root) -> list[str]:
    """Wrap every repeated block's forward in non-reentrant ``torch.utils.checkpoint``; returns their FQNs.

    The wrapper is an instance attribute ``forward`` (``del block.forward``
    undoes it, :func:`remove_checkpointing`).  Recomputation restores the
    autocast state of the forward, as ``torch.utils.checkpoint`` does.
    """
    from torch.utils.checkpoint import checkpoint  # noqa: PLC0415

    names = []
    for name, block in repeated_blocks(root):
        original = block.forward

        def forward(*args, _original=original, **kwargs):
            return checkpoint(_original, *args, use_reentrant=False, preserve_rng_state=False, **kwargs)

        forward.memlint_replaced = vars(block).get("forward")  # a user's own instance forward, if any
        block.forward = forward
        names.append(name)
    return names


def remove_checkpointing(root, names: list[str]) -> None:
    """Undo :func:`apply_checkpointing` for the blocks ``names`` (a user's instance ``forward`` is put back)."""
    for name in names:
        block = root.get_submodule(name)
        wrapper = vars(block).get("forward")
        if wrapper is None or not hasattr(wrapper, "memlint_replaced"):
            continue
        if wrapper.memlint_replaced is None:
            del block.forward
        else:
            block.forward = wrapper.memlint_replaced


def _adafactor(params):
    """transformers' Adafactor with the settings of ``Trainer(optim="adafactor")``; UsageError if absent."""
    try:
        from transformers.optimization import Adafactor  # noqa: PLC0415
    except ImportError:
        raise UsageError("--optimizer adafactor needs transformers (its Adafactor class is traced)") from None
    return Adafactor(params, lr=1e-3, scale_parameter=False, relative_step=False, warmup_init=False)


def build_optimizer(name: str | None, params: list, factory, ledger: Ledger):
    """The optimizer for the trace: a named one (built-ins foreach, as CUDA defaults to) or the workload's own.

    Raises UsageError for an unknown name, TargetError when the workload's factory fails.
    """
    import torch  # noqa: PLC0415

    optim = torch.optim
    table = {
        "sgd": (optim.SGD, {"lr": 0.01}),
        "sgd-momentum": (optim.SGD, {"lr": 0.01, "momentum": 0.9}),
        "adam": (optim.Adam, {}),
        "adamw": (optim.AdamW, {}),
        "adagrad": (optim.Adagrad, {}),
        "rmsprop": (optim.RMSprop, {}),
    }
    if name == "adafactor":
        return _adafactor(params)
    if name is not None:
        if name not in table:
            known = ", ".join(OPTIMIZER_NAMES + TRANSFORMERS_OPTIMIZERS)
            raise UsageError(f"unknown optimizer {name!r}; choose from {known}")
        cls, kwargs = table[name]
        return cls(params, foreach=True, **kwargs)
    if factory is None:
        return optim.SGD(params, lr=0.01, foreach=True)
    try:
        optimizer = factory(params)
    except Exception as exc:  # noqa: BLE001
        raise TargetError(f"optimizer factory raised {one_line(exc)}") from None
    if not isinstance(optimizer, optim.Optimizer):
        raise TargetError(f"optimizer factory returned {type(optimizer).__name__}, not a torch.optim.Optimizer")
    for group in optimizer.param_groups:
        if group.get("fused"):
            group["fused"] = False
            group["foreach"] = False
            ledger.report_unsupported(f"{type(optimizer).__name__}(fused=True)",
                                      "fused kernel not available on meta: traced the per-parameter implementation")
        elif "foreach" in group and group["foreach"] is None:
            group["foreach"] = True  # CUDA default (torch/optim/optimizer.py _default_to_fused_or_foreach)
    return optimizer


class StepInBackward:
    """Optimizer step in backward: one optimizer per parameter, stepped by ``register_post_accumulate_grad_hook``.

    The pattern of the PyTorch tutorial "How to save memory by fusing the
    optimizer step into the backward pass": each parameter's optimizer steps
    and zeroes its gradient (set_to_none) as soon as the gradient is
    accumulated, so no full set of gradients is ever alive.
    """

    def __init__(self, name: str | None, params: list, factory, ledger: Ledger):
        self.optimizers = {p: build_optimizer(name, [p], factory, ledger) for p in params}
        self.handles = [p.register_post_accumulate_grad_hook(self._step) for p in params]

    def _step(self, param) -> None:
        optimizer = self.optimizers[param]
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    @property
    def name(self) -> str:
        first = next(iter(self.optimizers.values()))
        return f"{type(first).__name__} per parameter, stepped in backward"

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def host_offload_hooks():
    """``torch.autograd.graph.save_on_cpu`` as it behaves on a GPU, for meta tensors.

    Every tensor autograd saves is copied to host memory when saved (its
    device memory is released once nothing else holds it) and copied back to
    the device when the backward unpacks it (a new device allocation, freed
    with the node).  Source: ``torch/autograd/graph.py`` (``save_on_cpu``:
    ``pack_to_cpu`` -> ``tensor.cpu()``, ``unpack_from_cpu`` -> ``.to(device)``).
    Host copies are not device memory, so only their shapes are kept.
    """
    import torch  # noqa: PLC0415

    def pack(tensor):  # the CUDA device index too: the copy comes back to the device it left
        return (tuple(tensor.shape), tensor.stride(), tensor.dtype, device_of(tensor))

    def unpack(packed):
        shape, stride, dtype, device = packed
        return call_on(device, torch.empty_strided, (shape, stride), {"dtype": dtype, "device": "meta"})

    return torch.autograd.graph.saved_tensors_hooks(pack, unpack)


class _TraceState:
    """What the estimator changed on the module for one trace, so that it can be undone."""

    def __init__(self, module):
        self.module = module
        self.dtypes = {}
        self.checkpointed: list[str] = []
        self.handles: list = []
        self.step_in_backward: StepInBackward | None = None

    def cast(self, dtype) -> None:
        for tensor in list(self.module.parameters()) + list(self.module.buffers()):
            self.dtypes[tensor] = tensor.dtype
        with keep_devices(self.module):  # the cast makes new storages: they stay on their devices
            self.module.to(dtype)

    def undo(self) -> None:
        for handle in self.handles:
            handle.remove()
        if self.step_in_backward is not None:
            self.step_in_backward.remove()
        remove_checkpointing(self.module, self.checkpointed)
        with keep_devices(self.module):
            for tensor, dtype in self.dtypes.items():
                if tensor.dtype != dtype:
                    tensor.data = tensor.data.to(dtype)
        for param in self.module.parameters():
            param.grad = None


def _retag_hooks(params, ledger: Ledger) -> list:
    """Hooks that name gradients and optimizer state as they appear, wherever they are created.

    A gradient pre-hook on every parameter tags the incoming gradient
    (AccumulateGrad keeps that tensor as ``.grad``); a global optimizer-step
    post hook tags the state of every optimizer that steps (the trace's own and
    any the workload's hooks own).
    """
    import torch  # noqa: PLC0415

    def tag_gradient(param):
        def hook(grad):
            if param.grad is None:  # AccumulateGrad keeps this tensor; otherwise it is added and freed
                ledger.retag(grad, "gradient")
            return grad
        return hook

    def tag_state(optimizer, args, kwargs):
        for state in optimizer.state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor):
                    ledger.retag(value, "optimizer_state")

    handles = [p.register_hook(tag_gradient(p)) for p in params]
    from torch.optim.optimizer import register_optimizer_step_post_hook  # noqa: PLC0415

    handles.append(register_optimizer_step_post_hook(tag_state))
    return handles


def trace_training(workload, options, ledger: Ledger, target) -> dict:
    """Trace ``options.trace_steps`` steps into ``ledger``; returns facts for the report.

    target: the :class:`memlint.estimate.target.Target` whose kernels are emulated.
    Facts: checkpointed (FQNs), micro_batch, batch_size, optimizer, kernel_choices, unmodelled, steps.
    """
    import torch  # noqa: PLC0415

    from memlint.estimate.emulation import KernelEmulation  # noqa: PLC0415
    from memlint.estimate.handlers import make_cuda_to_meta_mode  # noqa: PLC0415

    batch = options.batch_size or workload.default_batch_size
    if batch % options.grad_accum:
        raise UsageError(f"--batch-size {batch} is not a multiple of --grad-accum {options.grad_accum}")
    micro_batch = batch // options.grad_accum
    module = workload.module
    state = _TraceState(module)
    emulation = KernelEmulation(target, ledger.note_unmodelled)
    if not target.is_cuda:
        from memlint.estimate.cpu_scratch import ScratchProbe  # noqa: PLC0415

        ledger.scratch_probe = ScratchProbe()
    try:
        optimizer = _prepare(workload, options, ledger, state)
        with ExitStack() as stack:
            stack.enter_context(ModuleTracker(module, ledger))
            stack.enter_context(emulation)
            stack.enter_context(make_ledger_mode(ledger, target))
            stack.enter_context(make_cuda_to_meta_mode(ledger))
            for step in range(options.trace_steps):
                _one_step(workload, module, optimizer, options, micro_batch, ledger, state, step)
            ledger.close()
    finally:
        state.undo()
    if ledger.scratch_probe is not None:
        from memlint.estimate.cpu_scratch import add_measured_scratch  # noqa: PLC0415

        add_measured_scratch(ledger, ledger.scratch_probe)
    name = state.step_in_backward.name if state.step_in_backward else _optimizer_label(optimizer)
    return {"checkpointed": state.checkpointed, "micro_batch": micro_batch, "batch_size": batch,
            "optimizer": name, "kernel_choices": dict(emulation.choices),
            "unmodelled": [{"kernel": what, "module": fqn, "count": n}
                           for (what, fqn), n in sorted(ledger.unmodelled.items())]}


def _prepare(workload, options, ledger: Ledger, state: _TraceState):
    """Precision cast, checkpoint wrappers, the optimizer (or per-parameter optimizers), tracked state."""
    import torch  # noqa: PLC0415

    module = state.module
    module.train()
    if options.precision in ("bf16", "fp16"):
        state.cast(torch.bfloat16 if options.precision == "bf16" else torch.float16)
    if options.checkpointing:
        state.checkpointed = apply_checkpointing(module)
    for param in module.parameters():
        ledger.track(param, "parameter", op="parameter")
    for buffer in module.buffers():
        ledger.track(buffer, "buffer", op="buffer")
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        raise TargetError(f"workload {workload.name!r} has no trainable parameters")
    state.handles = _retag_hooks(params, ledger)
    if options.step_in_backward:
        state.step_in_backward = StepInBackward(options.optimizer, params, workload.optimizer_factory, ledger)
        return None
    return build_optimizer(options.optimizer, params, workload.optimizer_factory, ledger)


def _one_step(workload, module, optimizer, options, micro_batch, ledger, state, step: int) -> None:
    ledger.set_phase("forward", step=step, micro=0)
    if optimizer is not None:
        optimizer.zero_grad(set_to_none=options.set_to_none)
    for micro in range(options.grad_accum):
        ledger.set_phase("forward", micro=micro)
        _micro_step(workload, module, micro_batch, options, ledger)
        for param in module.parameters():
            if param.grad is not None:
                ledger.retag(param.grad, "gradient")
    ledger.set_phase("optimizer")
    if optimizer is not None:
        optimizer.step()


def _autocast(precision: str):
    """The emulated autocast region of the forward: CPU autocast state carries the target's (see autocast.py)."""
    import contextlib  # noqa: PLC0415

    import torch  # noqa: PLC0415

    dtype = {"amp-fp16": torch.float16, "amp-bf16": torch.bfloat16}.get(precision)
    return torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext()


def _make_inputs(workload, micro_batch, ledger, input_dtype):
    import torch  # noqa: PLC0415

    from memlint.estimate.handlers import make_cuda_to_meta_mode  # noqa: PLC0415

    with torch.device("meta"), make_cuda_to_meta_mode():
        try:
            inputs = workload.make_inputs(micro_batch)
        except (TargetError, UsageError):
            raise
        except Exception as exc:  # noqa: BLE001
            raise TargetError(f"make_inputs({micro_batch}) of {workload.name!r} raised {one_line(exc)}") from None
    inputs = _cast_inputs(inputs, input_dtype)
    for tensor in _tensors(inputs):
        ledger.track(tensor, "input", op="input")
        ledger.retag(tensor, "input")
    return inputs


def _micro_step(workload, module, micro_batch, options, ledger) -> None:
    import torch  # noqa: PLC0415

    input_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(options.precision)
    forward_backward(workload, module, _make_inputs(workload, micro_batch, ledger, input_dtype), options, ledger)


def forward_backward(workload, module, inputs, options, ledger) -> None:
    """One micro-batch's forward (under autocast and activation offload as
    ``options`` ask), the loss scaled for gradient accumulation, and its
    backward, with the ledger's phases; ``module`` may be an engine wrapping
    the model (DDP, FSDP2). Raises TargetError naming the workload when the
    forward or the backward fails or the loss does not require grad."""
    import contextlib  # noqa: PLC0415

    import torch  # noqa: PLC0415

    offload = host_offload_hooks() if options.offload_activations else contextlib.nullcontext()
    with offload:
        with _autocast(options.precision):
            try:
                output = _call(module, inputs)
                loss = workload.compute_loss(output, inputs)
            except (TargetError, UsageError):
                raise
            except Exception as exc:  # noqa: BLE001
                where = f" in {ledger.module!r}" if ledger.module else ""
                raise TargetError(f"forward of {workload.name!r}{where} failed: {one_line(exc)}") from None
        if options.grad_accum > 1:
            loss = loss / options.grad_accum
    ledger.tag_forward_survivors()
    del output
    ledger.set_phase("backward")
    if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
        raise TargetError(f"loss of {workload.name!r} does not require grad (is the model frozen?)")
    try:
        loss.backward()
    except (TargetError, UsageError):
        raise
    except Exception as exc:  # noqa: BLE001
        raise TargetError(f"backward of {workload.name!r} failed: {one_line(exc)}") from None
    del loss, inputs


def _optimizer_label(optimizer) -> str:
    """The optimizer's class name, with momentum said for SGD (its state differs: one buffer per parameter)."""
    name = type(optimizer).__name__
    if name == "SGD" and getattr(optimizer, "defaults", {}).get("momentum"):
        return "SGD (momentum)"
    return name
