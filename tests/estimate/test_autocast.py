"""The emulated autocast: its op lists against the installed torch, its policies, and ops inside composites."""

import pytest
import torch

from memlint.estimate.api import EstimateOptions, estimate
from memlint.estimate.autocast import CPU_POLICIES, CUDA_POLICIES, MODELLED_TORCH, resolve_overload
from memlint.estimate.emulation import KernelEmulation
from memlint.estimate.target import Target
from memlint.estimate.workload import Workload


def _names(policies):
    return sorted(f"aten::{name}" for names in policies.values() for name in names)


@pytest.mark.parametrize(("key", "policies"), [("AutocastCUDA", CUDA_POLICIES), ("AutocastCPU", CPU_POLICIES)])
def test_op_lists_are_the_installed_torch_registrations(key, policies):
    """Every op the installed torch registers an autocast kernel for is listed, once, and nothing else."""
    assert torch.__version__.startswith(MODELLED_TORCH)
    assert _names(policies) == sorted(torch._C._dispatch_get_registrations_for_dispatch_key(key))


def _real_cpu_dtype(op, args):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return op(*args).dtype


def _emulated_dtype(op, args, device):
    meta_args = [a.to("meta") if isinstance(a, torch.Tensor) else a for a in args]
    with KernelEmulation(Target(device, compute_capability=(8, 0) if device == "cuda" else (0, 0))):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return op(*meta_args).dtype


x32, w32, b16 = torch.randn(4, 8), torch.randn(8, 8), torch.randn(4, 8).bfloat16()
CPU_SAMPLES = [  # (op, args): one or more per policy and ops in no list
    (torch.ops.aten.mm.default, (x32, w32)),                            # lower_precision_fp -> bf16
    (torch.ops.aten.linear.default, (x32, w32)),
    (torch.ops.aten.mse_loss.default, (b16, b16)),                      # fp32
    (torch.ops.aten.cat.default, ([x32, b16],)),                        # promote -> fp32
    (torch.ops.aten.stack.default, ([b16, b16],)),                      # promote of bf16 only -> bf16
    (torch.ops.aten.layer_norm.default, (b16, [8])),                    # no CPU list: stays bf16
    (torch.ops.aten.pow.Tensor_Scalar, (b16, 2)),                       # no CPU list (CUDA: fp32)
    (torch.ops.aten.exp.default, (b16,)),
    (torch.ops.aten.sum.default, (b16,)),
]


@pytest.mark.parametrize(("op", "args"), CPU_SAMPLES, ids=[str(op) for op, _ in CPU_SAMPLES])
def test_cpu_policy_gives_the_dtype_real_cpu_autocast_gives(op, args):
    """The CPU target's emulation on meta against torch's own CPU autocast on real tensors."""
    assert _emulated_dtype(op, args, "cpu") == _real_cpu_dtype(op, args)


@pytest.mark.parametrize(("op", "args", "dtype"), [
    (torch.ops.aten.pow.Tensor_Scalar, (b16, 2), torch.float32),        # CUDA fp32 list
    (torch.ops.aten.layer_norm.default, (b16, [8]), torch.float32),
    (torch.ops.aten.sum.default, (b16,), torch.float32),               # fp32_set_opt_dtype
    (torch.ops.aten.softmax.int, (b16, -1), torch.float32),
    (torch.ops.aten.norm.Scalar, (b16,), torch.float32),               # fp32_append_dtype
    (torch.ops.aten.addcmul.default, (x32, b16, b16), torch.float32),   # promote
    (torch.ops.aten.mm.default, (x32, w32), torch.bfloat16),
])
def test_cuda_policy(op, args, dtype):
    """CUDA policies of autocast_mode.cpp (a CPU-only torch cannot run them on CUDA tensors)."""
    assert _emulated_dtype(op, args, "cuda") == dtype


def test_banned_op_raises_as_on_cuda():
    with pytest.raises(RuntimeError, match="unsafe to autocast"):
        _emulated_dtype(torch.ops.aten.binary_cross_entropy.default,
                        (torch.rand(4).bfloat16(), torch.rand(4).bfloat16()), "cuda")


def test_every_listed_op_resolves_to_an_overload():
    for names in list(CUDA_POLICIES.values()) + list(CPU_POLICIES.values()):
        for name in names:
            assert isinstance(resolve_overload(name), torch._ops.OpOverload)


def test_ops_inside_a_composite_module_are_autocast():
    """nn.MultiheadAttention's projections run inside F.multi_head_attention_forward (a Python composite):
    under emulated CUDA bf16 autocast their matmuls produce bf16, and the weight casts are cached (one bf16
    copy of each weight per forward)."""
    dims = []

    class Record(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.bmm):
                dims.append(out.dtype)
            return out

    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True).to("meta")
    x = torch.randn(2, 16, 32, device="meta")
    with KernelEmulation(Target("cuda", compute_capability=(8, 0))):
        with torch.autocast("cpu", dtype=torch.bfloat16), Record():
            out, _ = mha(x, x, x, need_weights=False)
    assert out.dtype == torch.bfloat16
    assert dims and set(dims) == {torch.bfloat16}


def test_weight_casts_are_cached_within_an_autocast_region():
    casts = []

    class Record(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._to_copy.default:
                casts.append(tuple(args[0].shape))
            return func(*args, **(kwargs or {}))

    lin = torch.nn.Linear(8, 8, bias=False).to("meta")
    x = torch.randn(4, 8, device="meta")
    with KernelEmulation(Target("cuda", compute_capability=(8, 0))):
        with torch.autocast("cpu", dtype=torch.bfloat16), Record():
            lin(x)
            lin(x)
        with torch.autocast("cpu", dtype=torch.bfloat16), Record():
            lin(x)
    assert casts.count((8, 8)) == 2  # once per autocast region, not once per call
    assert casts.count((4, 8)) == 3  # activations are cast every call


def test_checkpoint_recomputation_runs_under_the_forward_autocast():
    """Non-reentrant checkpoint restores the CPU autocast state, which carries the emulation: recomputed
    matmuls are bf16 too."""
    seen = []

    class Record(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.overloadpacket is torch.ops.aten.mm:
                seen.append(out.dtype)
            return out

    lin = torch.nn.Linear(8, 8, bias=False).to("meta")
    x = torch.randn(4, 8, device="meta", requires_grad=True)
    with KernelEmulation(Target("cuda", compute_capability=(8, 0))), Record():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = torch.utils.checkpoint.checkpoint(lin, x, use_reentrant=False)
        y.float().sum().backward()
    forward_and_recompute = seen[:2]
    assert forward_and_recompute == [torch.bfloat16, torch.bfloat16]


def test_emulation_is_removed_after_the_trace():
    """Real CPU autocast works as torch's own kernels define it once the trace is over."""
    workload = Workload(module=torch.nn.Linear(8, 8).to("meta"), make_inputs=lambda b: (torch.randn(b, 8),),
                        name="lin")
    estimate(workload, EstimateOptions(batch_size=2, precision="amp-bf16"))
    assert _real_cpu_dtype(torch.ops.aten.pow.Tensor_Scalar, (b16, 2)) == torch.bfloat16
    assert torch.ops.aten.mm.default(x32, w32).dtype == torch.float32
    assert not torch._C._dispatch_tls_is_dispatch_key_included(torch._C.DispatchKey.AutocastCPU)
