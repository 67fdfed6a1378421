import os, torch, torch.distributed as dist, torch.multiprocessing as mp
from memlint.validate.cpu import memory_profile
from memlint.validate.distributed import free_port
def run(rank, port):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    n = 1 << 18  # elements of the full buffer
    for name in ("all_gather", "reduce_scatter", "all_reduce"):
        full = torch.zeros(n); shard = torch.zeros(n // 2)
        dist.barrier()
        with memory_profile() as prof:
            if name == "all_gather": dist.all_gather_into_tensor(full, shard)
            elif name == "reduce_scatter": dist.reduce_scatter_tensor(shard, full)
            else: dist.all_reduce(full)
        peak = max([0] + [v for _, v in prof.timeline])
        end = prof.timeline[-1][1] if prof.timeline else 0
        if rank == 0: print(name, "full bytes", full.nbytes, "scratch peak", peak, "ratio", peak / full.nbytes, "live after", end, flush=True)
    dist.destroy_process_group()
if __name__ == "__main__":
    mp.spawn(run, args=(free_port(),), nprocs=2)
