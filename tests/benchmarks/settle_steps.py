"""How many traced steps until the caching allocator model settles?  (The default of --steps.)

    python tests/benchmarks/settle_steps.py [--steps 6]

For the fixtures and transformers models (CUDA target, A100, fp32 + Adam and
amp-bf16 + AdamW, each with and without checkpointing) this traces --steps
training steps and prints, per step, the peak allocated and reserved bytes of
the allocator model, then the first step after which neither changes again.
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGETS = [f"fixtures/models/{name}" for name in (
    "mlp.py:build", "cnn_bn.py:build", "resnet_like.py:build", "unet_like.py:build", "lstm_lm.py:build",
    "gpt_decoder.py:build", "vit_encoder.py:build", "hf_models.py:gpt2", "hf_models.py:bert", "hf_models.py:llama")]
CONFIGS = [("fp32", "adam", False), ("amp-bf16", "adamw", False), ("fp32", "adam", True), ("amp-bf16", "adamw", True)]


def settled_after(step_peaks: list[dict]) -> int:
    """The first step index from which allocated and reserved peaks stay the same."""
    last = step_peaks[-1]
    for index, peak in enumerate(step_peaks):
        if all(p["allocated"] == last["allocated"] and p["reserved"] == last["reserved"] for p in step_peaks[index:]):
            return index
    return len(step_peaks) - 1


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from memlint.estimate.api import EstimateOptions, estimate
    from memlint.estimate.workload import load_workload

    worst = 0
    for target in TARGETS:
        workload = load_workload(str(ROOT / target))
        for precision, optimizer, checkpointing in CONFIGS:
            options = EstimateOptions(precision=precision, optimizer=optimizer, checkpointing=checkpointing,
                                      gpu="A100-80GB", steps=args.steps)
            peaks = estimate(workload, options).step_peaks
            step = settled_after(peaks)
            worst = max(worst, step)
            print(f"{target} {precision} {optimizer} ckpt={checkpointing}: settled after step {step} "
                  f"(reserved per step, MiB: {[p['reserved'] >> 20 for p in peaks]})", flush=True)
    print(f"largest settling step: {worst} -> steps needed: {worst + 1} (step 0 is the warm-up)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
