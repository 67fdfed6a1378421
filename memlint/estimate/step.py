"""Run two training steps of a Workload on the meta device while the ledger records memory.

Step structure (each of the 2 steps; the second is the steady state)::

    optimizer.zero_grad(set_to_none=...)
    for each of grad_accum micro-batches (micro-batch = batch_size // grad_accum):
        inputs = make_inputs(micro)            # category input
        out = module(inputs); loss = loss_fn(out, inputs) / grad_accum   # forward (autocast)
        loss.backward()                        # backward
    optimizer.step()                           # optimizer
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

from memlint.errors import TargetError, UsageError
from memlint.estimate.tracer import Ledger, ModuleTracker, make_ledger_mode

OPTIMIZER_NAMES = ("sgd", "sgd-momentum", "adam", "adamw", "adagrad", "rmsprop")
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


def apply_checkpointing(root, semantics=None) -> list[str]:
    """Wrap repeated blocks in non-reentrant ``torch.utils.checkpoint``; returns their FQNs.

    A repeated block is a child of an ``nn.ModuleList`` / ``nn.Sequential`` (the
    root included) that has submodules of its own (leaf layers such as an
    in-place ReLU are never wrapped) and whose class occurs at least twice among
    that container's children.  Wrapped blocks are not searched further.  ``semantics``: the
    CudaSemanticsMode to re-enter when the autograd engine recomputes a block
    on its own thread (as CUDA checkpointing re-enters autocast; its weight-cast
    cache is cleared when the recomputation ends).
    """
    import torch  # noqa: PLC0415
    from torch.utils.checkpoint import checkpoint  # noqa: PLC0415

    wrapped: list[str] = []

    from torch.overrides import _get_current_function_mode_stack  # noqa: PLC0415

    def wrap(block) -> None:
        original = block.forward

        def run(*args, **kwargs):
            if semantics is None or semantics in _get_current_function_mode_stack():
                return original(*args, **kwargs)
            with semantics:
                try:
                    return original(*args, **kwargs)
                finally:
                    semantics.clear_cast_cache()

        def forward(*args, **kwargs):
            return checkpoint(run, *args, use_reentrant=False, preserve_rng_state=False, **kwargs)

        block.forward = forward

    def visit(module, prefix: str) -> None:
        if isinstance(module, (torch.nn.ModuleList, torch.nn.Sequential)):
            counts = Counter(type(child) for child in module.children() if _is_block(child))
            repeated = {cls for cls, n in counts.items() if n >= 2}
            if repeated:
                for name, child in module.named_children():
                    if type(child) in repeated:
                        wrap(child)
                        wrapped.append(f"{prefix}{name}")
                    else:
                        visit(child, f"{prefix}{name}.")
                return
        for name, child in module.named_children():
            visit(child, f"{prefix}{name}.")

    visit(root, "")
    return wrapped


def build_optimizer(name: str | None, params: list, factory, ledger: Ledger):
    """The optimizer for the trace: a named built-in (foreach, as CUDA defaults to) or the workload's own.

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
    if name is not None:
        if name not in table:
            raise UsageError(f"unknown optimizer {name!r}; choose from {', '.join(OPTIMIZER_NAMES)}")
        cls, kwargs = table[name]
        return cls(params, foreach=True, **kwargs)
    if factory is None:
        return optim.SGD(params, lr=0.01, foreach=True)
    try:
        optimizer = factory(params)
    except Exception as exc:  # noqa: BLE001
        first = (str(exc).strip().splitlines() or [""])[0]
        raise TargetError(f"optimizer factory raised {type(exc).__name__}: {first}") from None
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


def prepare_module(workload, options, ledger: Ledger, semantics=None):
    """Deep-copy the workload's module, apply precision casts and checkpointing, register params/buffers."""
    import torch  # noqa: PLC0415

    module = copy.deepcopy(workload.module)
    module.train()
    if options.precision in ("bf16", "fp16"):
        module.to(torch.bfloat16 if options.precision == "bf16" else torch.float16)
    wrapped = apply_checkpointing(module, semantics) if options.checkpointing else []
    for param in module.parameters():
        ledger.track(param, "parameter", op="parameter")
    for buffer in module.buffers():
        ledger.track(buffer, "buffer", op="buffer")
    return module, wrapped


def trace_training(workload, options, ledger: Ledger, cc: tuple[int, int]) -> dict:
    """Trace two steps into ``ledger``; returns facts for the report (checkpointed blocks, micro-batch)."""
    import torch  # noqa: PLC0415

    from memlint.estimate.handlers import make_cuda_semantics_mode  # noqa: PLC0415

    batch = options.batch_size or workload.default_batch_size
    if batch % options.grad_accum:
        raise UsageError(f"--batch-size {batch} is not a multiple of --grad-accum {options.grad_accum}")
    micro_batch = batch // options.grad_accum
    autocast = {"amp-fp16": torch.float16, "amp-bf16": torch.bfloat16}.get(options.precision)
    input_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(options.precision)

    semantics = make_cuda_semantics_mode(autocast, cc)
    module, wrapped = prepare_module(workload, options, ledger, semantics)
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        raise TargetError(f"workload {workload.name!r} has no trainable parameters")
    optimizer = build_optimizer(options.optimizer, params, workload.optimizer_factory, ledger)

    with ModuleTracker(module, ledger), make_ledger_mode(ledger):
        for step in range(2):
            ledger.set_phase("forward", step=step, micro=0)
            optimizer.zero_grad(set_to_none=options.set_to_none)
            for micro in range(options.grad_accum):
                ledger.set_phase("forward", micro=micro)
                _micro_step(workload, module, micro_batch, input_dtype, options.grad_accum, semantics, ledger)
                for param in params:
                    if param.grad is not None:
                        ledger.retag(param.grad, "gradient")
            ledger.set_phase("optimizer")
            optimizer.step()
            for state in optimizer.state.values():
                for value in state.values():
                    if isinstance(value, torch.Tensor):
                        ledger.retag(value, "optimizer_state")
        ledger.close()
    return {"checkpointed": wrapped, "micro_batch": micro_batch, "batch_size": batch,
            "optimizer": type(optimizer).__name__, "kernel_choices": dict(semantics.choices)}


def _micro_step(workload, module, micro_batch, input_dtype, grad_accum, semantics, ledger) -> None:
    import torch  # noqa: PLC0415

    from memlint.estimate.handlers import make_cuda_to_meta_mode  # noqa: PLC0415

    with torch.device("meta"), make_cuda_to_meta_mode():
        try:
            inputs = workload.make_inputs(micro_batch)
        except (TargetError, UsageError):
            raise
        except Exception as exc:  # noqa: BLE001
            raise TargetError(f"make_inputs({micro_batch}) of {workload.name!r} raised {type(exc).__name__}: {exc}") from None
    inputs = _cast_inputs(inputs, input_dtype)
    for tensor in _tensors(inputs):
        ledger.track(tensor, "input", op="input")
        ledger.retag(tensor, "input")
    with semantics:
        try:
            output = _call(module, inputs)
            loss = workload.compute_loss(output, inputs)
        except (TargetError, UsageError):
            raise
        except Exception as exc:  # noqa: BLE001
            where = f" in {ledger.module!r}" if ledger.module else ""
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            raise TargetError(f"forward of {workload.name!r}{where} failed: {type(exc).__name__}: {first}") from None
        if grad_accum > 1:
            loss = loss / grad_accum
        semantics.clear_cast_cache()
        ledger.tag_forward_survivors()
        del output
        ledger.set_phase("backward")
        if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
            raise TargetError(f"loss of {workload.name!r} does not require grad (is the model frozen?)")
        loss.backward()
        semantics.clear_cast_cache()
    del loss, inputs
