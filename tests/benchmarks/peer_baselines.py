"""fvcore as a peer baseline: a formula estimate from its activation count, next to the CPU ground truth.

    python tests/benchmarks/peer_baselines.py

For every fp32 CPU record of fixtures/validation/cpu this builds the workload
on the CPU, counts its forward activations with ``fvcore.nn.ActivationCountAnalysis``
(outputs of convolutions, linears and matmuls, traced with torch.jit) and
forms the estimate a formula tool makes from it:

    parameters + gradients + optimizer state (Adam: 2 x parameters) + 4 bytes x activations

It writes fixtures/validation/peers/fvcore.json; ``python -m memlint.validate.accuracy``
renders it next to memlint's own error in docs/accuracy.md.
"""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "fixtures" / "validation" / "peers" / "fvcore.json"


def fvcore_formula(target: str, optimizer: str) -> dict:
    """{activations, formula_bytes, unsupported} for one workload (fp32, one micro-batch of the default size)."""
    import torch
    from fvcore.nn import ActivationCountAnalysis

    from memlint.validate.runner import load_real_workload

    workload = load_real_workload(target, [], None, "cpu")
    inputs = workload.make_inputs(workload.default_batch_size)
    module = workload.module.train()
    if isinstance(inputs, dict):  # jit traces positional arguments: call the model with its keywords
        module, inputs = _KeywordCall(module, list(inputs)), tuple(inputs.values())
    args = inputs if isinstance(inputs, tuple) else (inputs,)
    analysis = ActivationCountAnalysis(module, args)
    analysis.unsupported_ops_warnings(False).uncalled_modules_warnings(False).tracer_warnings("none")
    activations = int(analysis.total())
    params = sum(p.numel() * p.element_size() for p in module.parameters())
    state = {"adam": 2, "adamw": 2, "sgd-momentum": 1, "sgd": 0}.get(optimizer, 2) * params
    del torch
    return {"activations": activations, "formula_bytes": params + params + state + 4 * activations,
            "unsupported_ops": sorted(analysis.unsupported_ops())}


def _keyword_call_class():
    import torch

    class KeywordCall(torch.nn.Module):
        """``module(**dict(zip(names, args)))``: positional tracing of a model that takes keyword inputs."""

        def __init__(self, module, names):
            super().__init__()
            self.module, self.names = module, names

        def forward(self, *args):
            output = self.module(**dict(zip(self.names, args)))
            return output.loss if getattr(output, "loss", None) is not None else output

    return KeywordCall


def _KeywordCall(module, names):  # noqa: N802 - reads as the class it builds
    return _keyword_call_class()(module, names)


def main() -> int:
    sys.path.insert(0, str(ROOT))
    results = {}
    for path in sorted((ROOT / "fixtures" / "validation" / "cpu").glob("*-fp32-*.json")):
        record = json.loads(path.read_text())
        target, optimizer = record["workload"]["target"], record["workload"]["options"]["optimizer"]
        try:
            results[path.name] = dict(fvcore_formula(target, optimizer), target=target)
        except Exception as exc:  # noqa: BLE001 - a model jit cannot trace is reported, not fatal
            results[path.name] = {"target": target, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
        print(path.name, results[path.name].get("formula_bytes", results[path.name].get("error")), flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"tool": "fvcore.nn.ActivationCountAnalysis", "results": results}, indent=2) + "\n")
    import subprocess

    subprocess.run([sys.executable, "-m", "memlint.validate.accuracy"], cwd=ROOT, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
