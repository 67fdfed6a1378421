"""Benchmark ``memlint estimate`` (not a test): GPT-2 small and a 7B Llama-shaped decoder.

Budgets (docs/estimator.md): GPT-2 small < 5 s; 7B < 30 s and < 2 GiB peak RSS.
Each case runs in a fresh subprocess so that its peak RSS is its own.

    python tests/benchmarks/bench_estimate.py [gpt2|llama7b ...]
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CASES = {
    "gpt2": ("gpt2_small", dict(optimizer="adamw", precision="amp-bf16", gpu="A100-80GB", batch_size=8)),
    "llama7b": ("llama_7b", dict(optimizer="adamw", precision="bf16", gpu="H100-80GB", batch_size=1,
                                 checkpointing=True)),
}


def run_case(name: str) -> dict:
    factory, options = CASES[name]
    sys.path.insert(0, str(ROOT))
    started = time.perf_counter()
    from memlint.estimate.api import EstimateOptions, estimate
    from memlint.estimate.workload import load_workload

    imported = time.perf_counter()
    workload = load_workload(f"{ROOT}/fixtures/models/hf_models.py:{factory}")
    built = time.perf_counter()
    result = estimate(workload, EstimateOptions(**options))
    done = time.perf_counter()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "case": name, "options": options,
        "import_s": round(imported - started, 2), "build_s": round(built - imported, 2),
        "estimate_s": round(done - built, 2), "total_s": round(done - started, 2),
        "peak_rss_GiB": round(rss / 2**30, 3), "ops": result.num_ops,
        "peak_allocated_GiB": round(result.peak_allocated / 2**30, 3),
        "peak_reserved_GiB": round(result.peak_reserved / 2**30, 3),
        "device_used_GiB": round(result.device_used / 2**30, 3),
        "unsupported": [u["op"] for u in result.unsupported_ops],
    }


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--child":
        print(json.dumps(run_case(argv[1])))
        return 0
    for name in argv or list(CASES):
        out = subprocess.run([sys.executable, __file__, "--child", name], capture_output=True, text=True)
        if out.returncode:
            print(out.stderr[-2000:], file=sys.stderr)
            return out.returncode
        print(out.stdout.strip().splitlines()[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
