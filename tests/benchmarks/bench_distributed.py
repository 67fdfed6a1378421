"""Time per-rank distributed estimates on the fake process group (not run by the test suite).

    python tests/benchmarks/bench_distributed.py [TARGET]

Default TARGET: GPT-2 small (fixtures/models/hf_models.py:gpt2_small, needs
transformers), AdamW, H100-80GB target; prints peak_allocated and seconds for
no sharding, DDP over 8 ranks and FSDP2 over 8, 64 and 1024 ranks (each a
fresh build of the workload).  Numbers are in docs/estimator.md "Distributed".
"""

import sys
import time

from memlint.estimate.api import EstimateOptions, estimate
from memlint.estimate.workload import load_workload

CASES = [(None, 1), ("ddp", 8), ("fsdp", 8), ("fsdp", 64), ("fsdp", 1024)]


def main(target: str) -> None:
    for parallel, world in CASES:
        workload = load_workload(target, [], None)
        options = EstimateOptions(gpu="H100-80GB", optimizer="adamw", parallel=parallel, world_size=world)
        started = time.perf_counter()
        result = estimate(workload, options)
        print(f"{parallel or 'single':6s} {world:5d} ranks: peak_allocated {result.peak_allocated / 2**30:.3f} GiB, "
              f"{time.perf_counter() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fixtures/models/hf_models.py:gpt2_small")
