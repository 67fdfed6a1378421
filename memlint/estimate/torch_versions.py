"""Memory behaviours that differ between torch releases, for replaying measurements made with an older torch.

The estimator models torch :data:`memlint.estimate.autocast.MODELLED_TORCH`
(its autocast lists, SDPA choice, kernels).  A measurement someone published
with an older torch is replayed with that torch's version (``torch_version``
of the options) and the differences listed in :data:`VERSION_FACTS`, each
with its source; nothing else of the older release is modelled.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VersionFact:
    """A memory behaviour of torch releases before ``until`` (exclusive), with its source."""

    name: str
    until: tuple[int, int]
    what: str
    source: str


VERSION_FACTS = (
    VersionFact(
        "softmax_saves_input", (1, 11),
        "softmax and log_softmax keep their input as well as their output for the backward",
        "pytorch/pytorch#49600 (softmax saved `input` although its backward uses only the output) and "
        "pytorch/pytorch#65242 (\"Avoid saving self for softmax and log_softmax\", September 2021, after the "
        "1.10 branch)"),
)


def parse_version(text: str) -> tuple[int, int]:
    """``"1.10.2"`` -> (1, 10).  Raises ValueError naming the text."""
    parts = str(text).strip().split(".")
    if len(parts) < 2 or not parts[0].isdigit() or not parts[1].split("+")[0].isdigit():
        raise ValueError(f"expected a torch version such as 1.10 or 2.13, got {text!r}")
    return int(parts[0]), int(parts[1].split("+")[0])


def facts_for(version: str | None) -> frozenset[str]:
    """Names of the :data:`VERSION_FACTS` that hold for torch ``version`` (None: the modelled torch: none)."""
    if version is None:
        return frozenset()
    release = parse_version(version)
    return frozenset(fact.name for fact in VERSION_FACTS if release < fact.until)


def make_softmax_saving_input(op_name: str):
    """``AutogradMeta`` kernel of ``aten::_softmax`` / ``_log_softmax`` that also saves the input (torch < 1.11)."""
    import torch  # noqa: PLC0415

    forward_op = getattr(torch.ops.aten, op_name).default
    backward_op = getattr(torch.ops.aten, f"{op_name}_backward_data").default

    class SavingInput(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, dim, half_to_float):
            with torch._C._AutoDispatchBelowAutograd():
                out = forward_op(x, dim, half_to_float)
            ctx.dim, ctx.dtype = dim, x.dtype
            ctx.save_for_backward(x, out)
            return out

        @staticmethod
        def backward(ctx, grad):
            _, out = ctx.saved_tensors
            return backward_op(grad, out, ctx.dim, ctx.dtype), None, None

    def kernel(x, dim, half_to_float):
        return SavingInput.apply(x, dim, half_to_float)

    return kernel
