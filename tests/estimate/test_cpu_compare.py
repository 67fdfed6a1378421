"""Compare the traced (unrounded) peak with a real CPU run of the same step."""

import torch

from memlint.estimate.api import EstimateOptions, estimate
from memlint.estimate.workload import Workload


def _real_cpu_peak(model, batch):
    """Peak live tensor bytes of a real CPU step, measured with a storage-tracking dispatch mode."""
    from memlint.estimate.tracer import Ledger, make_ledger_mode

    # Instrument a real CPU run with the same ledger logic, but on real (cpu) tensors: we track
    # storages by weakref exactly like the tracer, so compare only the live-bytes accounting.
    live = {}
    peak = [0]
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    def track(t):
        st = t.untyped_storage()
        key = st._cdata
        if key in live:
            return
        live[key] = st.nbytes()
        peak[0] = max(peak[0], sum(live.values()))
        weakref.finalize(st, live.pop, key, None)

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for v in tree_flatten(out)[0]:
                if isinstance(v, torch.Tensor):
                    track(v)
            return out

    for p in model.parameters():
        track(p)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=True)
    with Mode():
        for _ in range(2):
            opt.zero_grad()
            x = torch.randn(batch, 64)
            model(x).pow(2).mean().backward()
            del x
            opt.step()
    del Ledger, make_ledger_mode
    return peak[0]


def test_traced_peak_matches_real_cpu_step():
    torch.manual_seed(0)
    real = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
    cpu_peak = _real_cpu_peak(real, 32)
    meta_model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)).to("meta")
    workload = Workload(module=meta_model, make_inputs=lambda b: (torch.randn(b, 64),),
                        loss_fn=lambda out, inputs: out.pow(2).mean(),
                        optimizer_factory=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), name="tiny")
    result = estimate(workload, EstimateOptions(batch_size=32))
    tensor_peak = result.peak_tensor_bytes - result.by_category.get("workspace", 0)
    assert abs(tensor_peak - cpu_peak) <= 0.05 * cpu_peak
