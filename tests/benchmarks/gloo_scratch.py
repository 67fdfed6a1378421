"""The gloo backend's own scratch inside one collective (torch 2.13.0+cpu, 2 ranks on 127.0.0.1).

For each collective, rank 0 prints the full buffer's bytes and two peaks above
what was live before the call:

* ``allocator``: the profiler's memory timeline (every CPU allocation on the
  calling thread), memlint.validate.cpu.memory_profile;
* ``tensor ledger``: the storages of tensors that aten ops return, as
  memlint.validate.cpu.StorageLedger counts them (the instrument the
  distributed validator gates FSDP2 runs with).

Read by memlint/estimate/distributed.py (GLOO_SCRATCH_FRACTION,
GLOO_SCRATCH_IS_TENSOR).  Run: ``python tests/benchmarks/gloo_scratch.py``.
"""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from memlint.validate.cpu import StorageLedger, memory_profile
from memlint.validate.distributed import free_port

FULL_ELEMENTS = 1 << 18


def _collective(name: str, full, shard) -> None:
    if name == "all_gather":
        dist.all_gather_into_tensor(full, shard)
    elif name == "reduce_scatter":
        dist.reduce_scatter_tensor(shard, full)
    else:
        dist.all_reduce(full)


def run(rank: int, port: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    for name in ("all_gather", "reduce_scatter", "all_reduce"):
        full = torch.zeros(FULL_ELEMENTS)
        shard = torch.zeros(FULL_ELEMENTS // 2)
        dist.barrier()
        with memory_profile() as prof:
            _collective(name, full, shard)
        allocator_peak = max([0] + [v for _, v in prof.timeline])
        ledger = StorageLedger()
        ledger.track(full)
        ledger.track(shard)
        before = ledger.total
        dist.barrier()
        with ledger.mode():
            _collective(name, full, shard)
        if rank == 0:
            print(f"{name:15s} full bytes {full.nbytes:>9,d}  allocator scratch {allocator_peak:>9,d} "
                  f"({allocator_peak / full.nbytes:.2f} x full)  tensor ledger scratch {ledger.peak - before:>9,d}",
                  flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(free_port(),), nprocs=2)
