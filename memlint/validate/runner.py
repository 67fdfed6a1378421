"""Build a workload with real tensors on a device and run the training step the estimator traces.

The step structure is the one of memlint/estimate/step.py, statement for
statement, so that a measurement and an estimate describe the same program::

    optimizer.zero_grad(set_to_none=...)
    for each of grad_accum micro-batches:
        inputs = make_inputs(micro_batch)          # created on the device
        with autocast: output = module(inputs); loss = loss_fn(output, inputs) / grad_accum
        del output; loss.backward(); del loss, inputs
    optimizer.step()

The optimizer is built by the estimator's own ``build_optimizer`` (built-ins use
the foreach implementation, as CUDA defaults to), and activation checkpointing
by its ``apply_checkpointing``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable

from memlint.errors import TargetError, UsageError
from memlint.estimate.messages import one_line

AUTOCAST_DTYPES = {"amp-fp16": "float16", "amp-bf16": "bfloat16"}
CAST_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}


def _real_spec_inputs(specs, device) -> Callable[[int], tuple | dict]:
    """``--input`` specs as real tensors: zeros (integer ids 0 are valid indices) on ``device``."""
    import torch  # noqa: PLC0415

    from memlint.estimate.workload import arrange_inputs  # noqa: PLC0415

    def make_inputs(batch_size: int) -> tuple | dict:
        return arrange_inputs(specs, [
            torch.zeros([batch_size if d == "B" else d for d in spec.shape], dtype=getattr(torch, spec.dtype),
                        device=device)
            for spec in specs])

    return make_inputs


def _resize_real(example: Any, batch_size: int, device):
    """Example inputs (tensor / tuple / dict) recreated on ``device`` with dim 0 = batch_size."""
    import torch  # noqa: PLC0415

    def one(value):
        if isinstance(value, torch.Tensor):
            shape = list(value.shape)
            if shape:
                shape[0] = batch_size
            return torch.zeros(shape, dtype=value.dtype, device=device)
        return value

    if isinstance(example, dict):
        return {k: one(v) for k, v in example.items()}
    if isinstance(example, (tuple, list)):
        return tuple(one(v) for v in example)
    return one(example)


def load_real_workload(target: str, inputs=(), batch_size: int | None = None, device: str = "cpu"):
    """Import ``target`` and call its factory under ``torch.device(device)`` (real parameters).

    The counterpart of :func:`memlint.estimate.workload.load_workload`, which builds on
    ``meta``.  Raises TargetError / UsageError with a one-line message.
    """
    import torch  # noqa: PLC0415

    from memlint.estimate.workload import Workload, _import_factory, _to_workload, parse_input_spec  # noqa: PLC0415

    specs = [parse_input_spec(text) for text in inputs]
    factory = _import_factory(target)
    try:
        with torch.device(device):
            result = factory()
    except (TargetError, UsageError):
        raise
    except SystemExit as exc:
        raise TargetError(f"factory {target!r} called sys.exit({exc.code!r}) on device {device!r}") from None
    except Exception as exc:  # noqa: BLE001 - any failure is the factory's
        raise TargetError(f"factory {target!r} raised {one_line(exc)} on device {device!r}") from None
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], torch.nn.Module):
        example = result[1]
        workload = _to_workload(result, target)
        workload.make_inputs = lambda b: _resize_real(example, b, device)
    else:
        workload = _to_workload(result, target)
    assert isinstance(workload, Workload)
    if specs:
        workload.make_inputs = _real_spec_inputs(specs, device)
    if batch_size is not None:
        workload.default_batch_size = int(batch_size)
    if not workload.name:
        workload.name = target
    workload.module = workload.module.to(device)
    return workload


def _to_device(value: Any, device, dtype):
    import torch  # noqa: PLC0415

    if isinstance(value, torch.Tensor):
        if value.device.type != torch.device(device).type:
            value = value.to(device)
        if dtype is not None and value.is_floating_point():
            value = value.to(dtype)
        return value
    if isinstance(value, dict):
        return {k: _to_device(v, device, dtype) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(v, device, dtype) for v in value)
    return value


def _call(module, inputs):
    if isinstance(inputs, dict):
        return module(**inputs)
    if isinstance(inputs, (tuple, list)):
        return module(*inputs)
    return module(inputs)


@dataclass
class PreparedStep:
    """A module, its optimizer and the settings of one training step on a real device."""

    workload: Any
    module: Any
    optimizer: Any
    params: list
    micro_batch: int
    grad_accum: int
    set_to_none: bool
    device: str
    autocast_dtype: Any
    input_dtype: Any
    checkpointed: list
    step_in_backward: object = None  # a StepInBackward when options.step_in_backward

    def autocast(self):
        """The autocast context of the forward pass (a null context without AMP)."""
        import torch  # noqa: PLC0415

        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(torch.device(self.device).type, dtype=self.autocast_dtype)

    def run(self, on_phase: Callable[[str], None] | None = None) -> None:
        """One training step; ``on_phase(name)`` is called when forward/backward/optimizer begins."""
        import torch  # noqa: PLC0415

        note = on_phase or (lambda phase: None)
        note("forward")
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=self.set_to_none)
        for _ in range(self.grad_accum):
            note("forward")
            with torch.device(self.device):
                inputs = self.workload.make_inputs(self.micro_batch)
            inputs = _to_device(inputs, self.device, self.input_dtype)
            with self.autocast():
                output = _call(self.module, inputs)
                loss = self.workload.compute_loss(output, inputs)
            if self.grad_accum > 1:
                loss = loss / self.grad_accum
            del output
            note("backward")
            loss.backward()
            del loss, inputs
        note("optimizer")
        if self.optimizer is not None:
            self.optimizer.step()


def prepare_step(workload, options, device: str) -> PreparedStep:
    """Apply the options (precision casts, checkpointing, optimizer or optimizer step in backward) to a real workload.

    Raises UsageError (batch not a multiple of grad_accum; activation offload,
    which this runner does not apply) or TargetError (no trainable parameters).
    """
    import torch  # noqa: PLC0415

    from memlint.estimate.step import StepInBackward, apply_checkpointing, build_optimizer  # noqa: PLC0415
    from memlint.estimate.tracer import Ledger  # noqa: PLC0415

    options.validate()
    if options.offload_activations:
        raise UsageError("activation offload (save_on_cpu) is an advisor remedy; the validator does not run it")
    batch = options.batch_size or workload.default_batch_size
    if batch % options.grad_accum:
        raise UsageError(f"--batch-size {batch} is not a multiple of --grad-accum {options.grad_accum}")
    module = workload.module
    module.train()
    cast = CAST_DTYPES.get(options.precision)
    if cast:
        module.to(getattr(torch, cast))
    checkpointed = apply_checkpointing(module) if options.checkpointing else []
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        raise TargetError(f"workload {workload.name!r} has no trainable parameters")
    in_backward = optimizer = None
    if options.step_in_backward:
        in_backward = StepInBackward(options.optimizer, params, workload.optimizer_factory, Ledger())
    else:
        optimizer = build_optimizer(options.optimizer, params, workload.optimizer_factory, Ledger())
    autocast = AUTOCAST_DTYPES.get(options.precision)
    return PreparedStep(
        workload=workload, module=module, optimizer=optimizer, params=params,
        micro_batch=batch // options.grad_accum, grad_accum=options.grad_accum,
        set_to_none=options.set_to_none, device=device,
        autocast_dtype=getattr(torch, autocast) if autocast else None,
        input_dtype=getattr(torch, cast) if cast else None,
        checkpointed=checkpointed, step_in_backward=in_backward,
    )
