"""Measure the CPU ground-truth records and regenerate docs/accuracy.md.

    python tests/benchmarks/cpu_accuracy_table.py [--only NAME]

For every tiny workload of fixtures/models/validation_tiny.py and both configs
(fp32 + Adam, amp-bf16 + SGD-momentum) this runs, for the CPU target,

    memlint validate fixtures/models/validation_tiny.py:NAME --device cpu \
        --precision P --optimizer O --warmup 1 --steps 1 --record fixtures/validation/cpu/NAME-P-O.json

and then ``python -m memlint.validate.accuracy`` to rewrite the tables.  A run
that fails (e.g. oneDNN cannot build a bf16 LSTM on CPU) is reported and skipped.
"""

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = ("mlp", "cnn_bn", "resnet_like", "unet_like", "lstm_lm", "lstm_lm_2layer", "gpt_decoder", "vit_encoder",
             "hf_gpt2", "hf_bert", "hf_llama", "hf_llama_gqa", "hf_t5", "step_in_backward", "hooked")
CONFIGS = (("fp32", "adam"), ("amp-bf16", "sgd-momentum"))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", action="append", default=[])
    args = parser.parse_args()
    out = ROOT / "fixtures" / "validation" / "cpu"
    for name in WORKLOADS:
        if args.only and name not in args.only:
            continue
        for precision, optimizer in CONFIGS:
            record = out / f"{name}-{precision}-{optimizer}.json"
            command = [sys.executable, "-m", "memlint", "validate", f"fixtures/models/validation_tiny.py:{name}",
                       "--device", "cpu", "--precision", precision, "--optimizer", optimizer,
                       "--warmup", "1", "--steps", "1", "--tolerance", "100%", "--record", str(record)]
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
            status = "ok" if done.returncode == 0 else f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
            print(f"{name} {precision} {optimizer}: {status}", flush=True)
    subprocess.run([sys.executable, "-m", "memlint.validate.accuracy"], cwd=ROOT, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
