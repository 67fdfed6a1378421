"""``memlint.Workload``: what one training step is made of, and how to load it from a target.

A target is ``path/to/file.py:factory`` or ``package.module:factory``.  The
factory is called with no arguments under ``torch.device("meta")`` (so
``nn.Module`` constructors allocate no real memory) and may return

* an ``nn.Module`` -- inputs must then come from ``--input`` specs;
* ``(module, example_inputs)`` -- a tensor, tuple of tensors or dict of
  tensors whose dim 0 is the batch dimension;
* a :class:`Workload`.

Input specs: ``"float32[B,3,224,224]"``, ``"int64[B,1024]"`` -- a torch dtype
name and a shape whose entries are integers or ``B`` (the batch size) -- each
optionally named, ``"input_ids=int64[B,512]"``: named inputs are passed as
keyword arguments (``module(input_ids=..., labels=...)``, what Hugging Face
models take), unnamed ones positionally; one command gives all its inputs
named or none.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from memlint.errors import TargetError, UsageError
from memlint.suggest import close_matches, did_you_mean
from memlint.estimate.messages import one_line

_DTYPES = {
    "float32", "float", "float16", "half", "bfloat16", "float64", "double",
    "int64", "long", "int32", "int", "int16", "short", "int8", "uint8", "bool",
    "complex64", "complex128",
}
_SPEC_RE = re.compile(r"^\s*(?:([A-Za-z_][A-Za-z0-9_]*)\s*=\s*)?([A-Za-z0-9_]+)\s*\[\s*([^\]]*)\]\s*$")


@dataclass
class InputSpec:
    """A parsed ``--input``: dtype name (a torch dtype), shape (ints and the string ``"B"``)
    and the keyword it is passed as (``""``: positional)."""

    dtype: str
    shape: tuple[int | str, ...]
    text: str = ""
    name: str = ""

    def make(self, batch_size: int):
        """A meta tensor of this spec with ``B`` replaced by ``batch_size``."""
        import torch  # noqa: PLC0415

        shape = [batch_size if d == "B" else d for d in self.shape]
        return torch.zeros(shape, dtype=getattr(torch, self.dtype), device="meta")


def parse_input_spec(text: str) -> InputSpec:
    """Parse ``"float32[B,3,224,224]"`` or ``"input_ids=int64[B,512]"``; raises UsageError naming the spec
    when it does not parse."""
    match = _SPEC_RE.match(text)
    if not match:
        raise UsageError(f"cannot parse --input {text!r} (expected e.g. float32[B,3,224,224], int64[B,1024] "
                         "or input_ids=int64[B,512])")
    name, dtype, dims_text = match.group(1) or "", match.group(2), match.group(3)
    if dtype not in _DTYPES:
        raise UsageError(f"--input {text!r}: unknown dtype {dtype!r} (use a torch dtype name such as float32, int64)")
    dims: list[int | str] = []
    for part in dims_text.split(","):
        part = part.strip()
        if part == "B":
            dims.append("B")
        elif part.isdigit() and int(part) > 0:
            dims.append(int(part))
        else:
            raise UsageError(f"--input {text!r}: bad dimension {part!r} (positive integer or B)")
    return InputSpec(dtype, tuple(dims), text, name)


def check_input_names(specs: list[InputSpec]) -> None:
    """All specs named (keyword inputs) or none (positional), no name twice; raises UsageError naming the spec."""
    named = [spec for spec in specs if spec.name]
    if named and len(named) != len(specs):
        unnamed = next(spec for spec in specs if not spec.name)
        raise UsageError(f"--input {unnamed.text!r} has no name while others have one: name every input "
                         "(input_ids=int64[B,512]) or none")
    seen: set[str] = set()
    for spec in named:
        if spec.name in seen:
            raise UsageError(f"--input {spec.text!r}: the input {spec.name!r} is given twice")
        seen.add(spec.name)


def arrange_inputs(specs: list[InputSpec], tensors: list) -> tuple | dict:
    """The module's arguments: a dict by name for named specs (keyword arguments), else a tuple."""
    if specs and specs[0].name:
        return {spec.name: tensor for spec, tensor in zip(specs, tensors)}
    return tuple(tensors)


def default_loss(output: Any, inputs: Any = None):
    """The loss used when a workload gives none (documented in docs/estimator.md).

    * a tensor with one element -> itself;
    * an object with a non-None ``.loss`` (Hugging Face ``ModelOutput``) or a
      mapping with a ``"loss"`` key -> that;
    * any other tensor -> ``output.float().mean()``;
    * a tuple/list/mapping -> the sum of ``t.float().mean()`` over its floating tensors.
    Raises TargetError when the output holds no floating tensor.
    """
    import torch  # noqa: PLC0415

    del inputs
    if isinstance(output, torch.Tensor):
        return output if output.numel() == 1 else output.float().mean()
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, dict):
        loss = output.get("loss")
    if isinstance(loss, torch.Tensor):
        return loss
    values = output.values() if isinstance(output, dict) else output
    if hasattr(output, "to_tuple"):
        values = output.to_tuple()
    terms = [t.float().mean() for t in values if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not terms:
        raise TargetError(f"cannot derive a loss from model output of type {type(output).__name__}; give Workload.loss_fn")
    return sum(terms[1:], terms[0])


@dataclass
class Workload:
    """One training step's ingredients.

    module: the ``nn.Module`` (built on the meta device, or moved there).
    make_inputs: batch size (int) -> inputs for ``module(...)``: a tensor, a tuple
        of positional args, or a dict of keyword args.
    loss_fn: ``(output, inputs) -> scalar Tensor``; None -> :func:`default_loss`.
    optimizer_factory: ``params -> torch.optim.Optimizer``; None -> plain SGD
        (no state) unless ``EstimateOptions.optimizer`` names one.
    default_batch_size: batch size used when the options give none.
    name: a label for reports.
    factory: ``() -> Workload`` building a fresh copy (new module, hooks and all);
        :func:`load_workload` sets it, so that each estimate traces its own build.
        Without it the module is traced in place (state that the workload's own
        hooks create, e.g. optimizers inside hooks, then persists between estimates).
    """

    module: Any
    make_inputs: Callable[[int], Any]
    loss_fn: Callable[[Any, Any], Any] | None = None
    optimizer_factory: Callable[[Any], Any] | None = None
    default_batch_size: int = 1
    name: str = ""
    factory: Callable[[], "Workload"] | None = None

    def fresh(self) -> "Workload":
        """A new build from :attr:`factory` (TargetError if that fails), or this workload without one."""
        if self.factory is None:
            return self
        return self.factory()

    def compute_loss(self, output: Any, inputs: Any):
        """Apply ``loss_fn`` or :func:`default_loss`."""
        if self.loss_fn is not None:
            return self.loss_fn(output, inputs)
        return default_loss(output, inputs)


def _import_factory(target: str) -> Callable[[], Any]:
    if ":" not in target:
        raise TargetError(f"target {target!r} must be path/to/file.py:factory or package.module:factory")
    where, _, attr = target.rpartition(":")
    if not attr.isidentifier():
        raise TargetError(f"target {target!r}: {attr!r} is not a factory name")
    try:
        if where.endswith(".py") or "/" in where or "\\" in where:
            path = Path(where)
            if not path.is_file():
                raise TargetError(f"target {target!r}: file {where} not found")
            mod_name = "_memlint_target_" + re.sub(r"\W", "_", str(path.resolve()))
            _importable_beside(path)
            spec = importlib.util.spec_from_file_location(mod_name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = module
            spec.loader.exec_module(module)
        else:
            _importable_from_working_directory()
            module = importlib.import_module(where)
    except TargetError:
        raise
    except SystemExit as exc:  # the target module ran `sys.exit()` on import
        raise TargetError(f"cannot import {where!r} for target {target!r}: it called sys.exit({exc.code!r})") from None
    except Exception as exc:  # noqa: BLE001 - any import failure is the target's fault
        raise TargetError(f"cannot import {where!r} for target {target!r}: {one_line(exc)}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        names = [name for name in vars(module) if not name.startswith("_") and callable(vars(module)[name])]
        hint = did_you_mean(close_matches(attr, names))
        raise TargetError(f"target {target!r}: {where} has no callable {attr!r}" + (f"; {hint}" if hint else ""))
    return factory


def _importable_beside(path: Path) -> None:
    """Let a ``path/to/file.py:factory`` target import its sibling modules
    (``from model import Net``), as ``python path/to/file.py`` does: the
    file's directory goes first on ``sys.path``."""
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)


def _importable_from_working_directory() -> None:
    """Let ``package.module:factory`` name a module of the project memlint
    runs in, as ``python -m`` and ``uvicorn module:app`` do: the working
    directory goes at the end of ``sys.path`` (installed packages win)."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)


def _resize_batch(example: Any, batch_size: int):
    """Recreate example inputs (tensor / tuple / dict) on meta with dim 0 set to batch_size."""
    import torch  # noqa: PLC0415

    def one(value):
        if isinstance(value, torch.Tensor):
            shape = list(value.shape)
            if shape:
                shape[0] = batch_size
            return torch.zeros(shape, dtype=value.dtype, device="meta")
        return value

    if isinstance(example, dict):
        return {k: one(v) for k, v in example.items()}
    if isinstance(example, (tuple, list)):
        return tuple(one(v) for v in example)
    return one(example)


def _batch_of(example: Any) -> int:
    import torch  # noqa: PLC0415

    values = example.values() if isinstance(example, dict) else (
        example if isinstance(example, (tuple, list)) else [example])
    for value in values:
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            return int(value.shape[0])
    return 1


def load_workload(target: str, inputs: list[str] | tuple[str, ...] = (), batch_size: int | None = None) -> Workload:
    """Import ``target``, call its factory on the meta device and wrap the result in a Workload.

    inputs: ``--input`` spec strings (override the factory's inputs when given).
    batch_size: overrides ``default_batch_size`` when given.
    Raises TargetError (bad target, factory raised, wrong return type, no inputs)
    or UsageError (bad input spec), each with a one-line message naming it.
    The workload's :attr:`Workload.factory` rebuilds it (the import is not repeated).
    """
    specs = [parse_input_spec(text) for text in inputs]
    check_input_names(specs)
    factory = _import_factory(target)

    def build() -> Workload:
        workload = _build_on_meta(factory, target, specs, batch_size)
        workload.factory = build
        return workload

    return build()


def _build_on_meta(factory, target: str, specs: list, batch_size: int | None) -> Workload:
    """Call ``factory`` on the meta device and wrap the result (see :func:`load_workload`)."""
    import torch  # noqa: PLC0415

    from memlint.estimate.handlers import make_cuda_to_meta_mode  # noqa: PLC0415

    try:
        with torch.device("meta"), make_cuda_to_meta_mode():
            result = factory()
    except (TargetError, UsageError):
        raise
    except SystemExit as exc:
        raise TargetError(f"factory {target!r} called sys.exit({exc.code!r})") from None
    except Exception as exc:  # noqa: BLE001
        raise TargetError(f"factory {target!r} raised {one_line(exc)}") from None
    workload = _to_workload(result, target)
    if specs:
        workload.make_inputs = _spec_inputs(specs)
    if batch_size is not None:
        workload.default_batch_size = int(batch_size)
    if not workload.name:
        workload.name = target
    compiled = getattr(workload.module, "_orig_mod", None)  # torch.compile wrapper: trace the eager module
    if isinstance(compiled, torch.nn.Module):
        workload.module = compiled
    if any(p.device.type != "meta" for p in workload.module.parameters()):
        workload.module = workload.module.to("meta")
    return workload


def _spec_inputs(specs: list[InputSpec]) -> Callable[[int], tuple | dict]:
    def make_inputs(batch_size: int) -> tuple | dict:
        return arrange_inputs(specs, [spec.make(batch_size) for spec in specs])

    return make_inputs


def _no_inputs(target: str) -> Callable[[int], Any]:
    def make_inputs(batch_size: int):
        raise TargetError(f"target {target!r} returns a bare module: give its inputs with --input, e.g. float32[B,784]")

    return make_inputs


def _to_workload(result: Any, target: str) -> Workload:
    import torch  # noqa: PLC0415

    if isinstance(result, Workload):
        if not isinstance(result.module, torch.nn.Module):
            raise TargetError(f"factory {target!r} returned a Workload whose module is {type(result.module).__name__}, not an nn.Module")
        return result
    if isinstance(result, torch.nn.Module):
        return Workload(module=result, make_inputs=_no_inputs(target))
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], torch.nn.Module):
        example = result[1]
        return Workload(module=result[0], make_inputs=lambda b: _resize_batch(example, b),
                        default_batch_size=_batch_of(example))
    raise TargetError(
        f"factory {target!r} returned {type(result).__name__}; expected an nn.Module, (module, inputs) or memlint.Workload")
