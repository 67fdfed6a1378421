"""Which CPU kernels allocate scratch?  Probe every distinct op of a traced CPU step.

    python tests/benchmarks/cpu_scratch_scan.py [TARGET ...] [--precision P] [--optimizer O]

Traces each target for the CPU target with every aten op recorded (not only
memlint.estimate.cpu_scratch.PROBED_OPS), runs each distinct call once for
real under the profiler (memlint.estimate.cpu_scratch) and prints the ops
whose kernels allocated scratch.  This is how PROBED_OPS was chosen.
"""

import argparse
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TARGETS = [f"fixtures/models/validation_tiny.py:{name}" for name in
                   ("cnn_bn", "resnet_like", "unet_like", "lstm_lm", "vit_encoder", "gpt_decoder", "hf_bert")]


def scan(target: str, precision: str, optimizer: str) -> dict[str, int]:
    """{op: largest scratch (bytes) over its distinct calls} for one target."""
    from memlint.estimate import cpu_scratch, handlers
    from memlint.estimate.api import EstimateOptions, estimate
    from memlint.estimate.workload import load_workload

    original = handlers.dispatch_rules

    def rules_with_every_op(target_):
        rules = original(target_)
        rules.probed = _EveryOp()
        return rules

    probes = []
    real_add = cpu_scratch.add_measured_scratch

    def keep(ledger, probe):
        probes.append(probe)

    handlers.dispatch_rules, cpu_scratch.add_measured_scratch = rules_with_every_op, keep
    try:
        estimate(load_workload(target), EstimateOptions(device="cpu", precision=precision, optimizer=optimizer))
    finally:
        handlers.dispatch_rules, cpu_scratch.add_measured_scratch = original, real_add
    largest: dict[str, int] = defaultdict(int)
    for sig, nbytes in probes[0].measure().items():
        if nbytes:
            largest[sig[0]] = max(largest[sig[0]], nbytes)
    return dict(largest)


class _EveryOp(dict):
    """A probe table that says yes to every op."""

    def __contains__(self, name):
        return True

    def __getitem__(self, name):
        return lambda args: True


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("targets", nargs="*", default=DEFAULT_TARGETS)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--optimizer", default="adam")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    for target in args.targets:
        found = scan(target, args.precision, args.optimizer)
        print(target, {op: nbytes for op, nbytes in sorted(found.items(), key=lambda kv: -kv[1])})
    return 0


if __name__ == "__main__":
    sys.exit(main())
