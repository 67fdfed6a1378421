"""The GPU validation campaign: ``python -m memlint.validate.campaign --out DIR [--dry-run]``.

Runs ``memlint validate`` (CUDA) over a matrix of fixture models and
transformers models built from configs -- batch sizes, fp32 / amp-bf16 /
amp-fp16, Adam / SGD, with and without activation checkpointing -- and, for
the workloads in :data:`SEARCHES`, searches on the GPU for the largest batch
that runs without OOM, recorded next to the estimator's ``max_batch_size``.
Sized for one H200 in under 8 minutes (about 50 short runs plus three searches).

Each record is written to DIR as soon as it is measured; a workload that fails
is recorded with outcome "failed" and the campaign goes on.  ``--dry-run``
estimates only (no GPU needed) and writes records with ``measured: null``.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from memlint.estimate.messages import one_line

MODELS = "fixtures/models"


@dataclass(frozen=True)
class Case:
    """One workload of the matrix: a target and the estimator options that differ from the defaults."""

    target: str
    batch_size: int
    precision: str = "fp32"
    optimizer: str = "adam"
    checkpointing: bool = False

    @property
    def name(self) -> str:
        model = re.sub(r"\W+", "-", self.target.replace(f"{MODELS}/", "").replace(".py", "")).strip("-")
        ckpt = "-ckpt" if self.checkpointing else ""
        return f"{model}-b{self.batch_size}-{self.precision}-{self.optimizer}{ckpt}"

    def options(self):
        from memlint.estimate.api import EstimateOptions  # noqa: PLC0415

        return EstimateOptions(batch_size=self.batch_size, optimizer=self.optimizer, precision=self.precision,
                               checkpointing=self.checkpointing, gpu="auto")


def _grid(target: str, batches, precisions=("fp32", "amp-bf16", "amp-fp16"), optimizers=("adam", "sgd"),
          checkpointing=(False,)) -> list[Case]:
    return [Case(target, b, p, o, c) for b in batches for p in precisions for o in optimizers for c in checkpointing]


def matrix() -> list[Case]:
    """The campaign's workloads (about 60 runs; each a few seconds on an H200)."""
    cases: list[Case] = []
    cases += _grid(f"{MODELS}/mlp.py:build", [64, 1024], precisions=("fp32", "amp-bf16"))
    cases += _grid(f"{MODELS}/cnn_bn.py:build", [64], optimizers=("sgd-momentum",))
    cases += _grid(f"{MODELS}/resnet_like.py:build", [32, 128], optimizers=("sgd-momentum",),
                   checkpointing=(False, True))
    cases += _grid(f"{MODELS}/unet_like.py:build", [16], precisions=("fp32", "amp-bf16"))
    cases += _grid(f"{MODELS}/lstm_lm.py:build", [32], precisions=("fp32", "amp-fp16"))
    cases += _grid(f"{MODELS}/gpt_decoder.py:build", [16], checkpointing=(False, True), optimizers=("adam",))
    cases += _grid(f"{MODELS}/vit_encoder.py:build", [64], precisions=("fp32", "amp-bf16"), optimizers=("adam",))
    for factory in ("gpt2", "bert", "llama"):
        cases += _grid(f"{MODELS}/hf_models.py:{factory}", [8], precisions=("fp32", "amp-bf16"), optimizers=("adam",))
    cases += _grid(f"{MODELS}/hf_models.py:gpt2_small", [8], precisions=("fp32", "amp-bf16"), optimizers=("adam",),
                   checkpointing=(False, True))
    return cases


SEARCHES = [
    Case(f"{MODELS}/hf_models.py:gpt2_small", 1, "amp-bf16", "adam"),
    Case(f"{MODELS}/resnet_like.py:build", 1, "fp32", "sgd-momentum"),
    Case(f"{MODELS}/vit_encoder.py:build", 1, "amp-bf16", "adam"),
]


def _record_path(out: Path, name: str) -> Path:
    return out / f"{name}.json"


def run_case(case: Case, out: Path, dry_run: bool, warmup: int, steps: int) -> dict:
    """Validate one case and write its record; a failure is recorded, never raised."""
    from memlint.validate import record as records  # noqa: PLC0415
    from memlint.validate.session import estimate_only, validate  # noqa: PLC0415

    options = case.options()
    identity_extra = {"campaign": {"case": case.name}}
    try:
        if dry_run:
            options = replace(options, gpu=None)
            result, identity, _ = estimate_only(case.target, [], options, "cuda", warmup, steps)
            identity.update(identity_extra)
            record = records.make_record(records.environment("cpu"), identity, records.estimated_numbers(result),
                                         None, "dry-run", note="estimate only (campaign --dry-run)")
        else:
            outcome = validate(case.target, [], options, "cuda", warmup, steps)
            record = outcome.record
            record["workload"].update(identity_extra)
    except Exception as exc:  # noqa: BLE001 - one failing workload must not stop the campaign
        record = _failed_record(case, options, warmup, steps, exc, dry_run)
    finally:
        _free_cuda()
    records.write_record(record, _record_path(out, case.name))
    return record


def _failed_record(case, options, warmup, steps, exc, dry_run) -> dict:
    from memlint.validate import record as records  # noqa: PLC0415

    identity = records.workload_identity(case.target, [], options, warmup, steps)
    identity["campaign"] = {"case": case.name}
    try:
        env = records.environment("cpu" if dry_run else "cuda")
    except Exception:  # noqa: BLE001
        env = records.environment("cpu")
    return records.make_record(env, identity, None, None, "failed", note=one_line(exc))


def _free_cuda() -> None:
    import gc  # noqa: PLC0415

    gc.collect()
    try:
        import torch  # noqa: PLC0415

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001
        pass


def runs_without_oom(case: Case, batch: int, warmup: int = 1, steps: int = 1) -> bool:
    """True when ``case`` at ``batch`` completes warm-up and measured steps on the GPU without OOM."""
    from memlint.validate.cuda import measure_cuda  # noqa: PLC0415

    try:
        measured = measure_cuda(case.target, [], replace(case.options(), batch_size=batch), warmup, steps)
        return measured.oom is None
    finally:
        _free_cuda()


def largest_batch_on_gpu(case: Case, limit: int = 4096, probe=None) -> int:
    """Largest batch for which ``probe(batch)`` is True (default: runs on the GPU without OOM); 0 if batch 1 fails.

    The search is :func:`memlint.estimate.search.largest_fitting` (doubling, then bisection).
    """
    from memlint.estimate.search import largest_fitting  # noqa: PLC0415

    probe = probe or (lambda batch: runs_without_oom(case, batch))
    return largest_fitting(probe, limit)


def run_search(case: Case, out: Path, dry_run: bool) -> dict:
    """Estimator's max_batch_size (capacity = the GPU's total memory, reserve 0) next to the GPU search."""
    from memlint.estimate.api import max_batch_size  # noqa: PLC0415
    from memlint.estimate.workload import load_workload  # noqa: PLC0415
    from memlint.validate import record as records  # noqa: PLC0415

    name = f"maxbatch-{case.name}"
    options = case.options()
    try:
        if dry_run:
            options = replace(options, gpu="H200-141GB")
            from memlint.estimate.api import resolve_capacity  # noqa: PLC0415

            capacity = resolve_capacity("H200-141GB")[1]
            env = records.environment("cpu")
        else:
            env = records.environment("cuda")
            capacity = env["total_memory"]
        workload = load_workload(case.target, [], None)
        estimated = max_batch_size(workload, options, capacity, reserve=0.0)
        measured = None if dry_run else largest_batch_on_gpu(case)
        identity = records.workload_identity(case.target, [], options, 1, 1)
        identity["campaign"] = {"case": name, "search": "largest batch without OOM", "capacity_bytes": capacity}
        record = records.make_record(env, identity, None, None, "dry-run" if dry_run else "measured")
        record["max_batch_size"] = {"estimated": estimated, "measured": measured}
    except Exception as exc:  # noqa: BLE001
        record = _failed_record(case, options, 1, 1, exc, dry_run)
    records.write_record(record, _record_path(out, name))
    return record


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m memlint.validate.campaign", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="directory for the records (created)")
    parser.add_argument("--dry-run", action="store_true", help="estimate only (no GPU): records with measured = null")
    parser.add_argument("--only", action="append", default=[], metavar="TEXT",
                        help="run only cases whose name contains TEXT (repeatable)")
    parser.add_argument("--no-search", action="store_true", help="skip the largest-batch searches")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    """Run the campaign; exit 2 when --device cuda is impossible (no GPU and no --dry-run)."""
    args = parse_args(argv)
    out = Path(args.out)
    if not args.dry_run:
        from memlint.validate.cuda import cuda_available  # noqa: PLC0415

        if not cuda_available():
            print("memlint: error: the campaign needs a CUDA device (or --dry-run)", file=sys.stderr)
            return 2
    cases = [c for c in matrix() if not args.only or any(t in c.name for t in args.only)]
    searches = [] if args.no_search else [c for c in SEARCHES if not args.only or any(t in c.name for t in args.only)]
    started = time.perf_counter()
    failures = 0
    for index, case in enumerate(cases, 1):
        record = run_case(case, out, args.dry_run, args.warmup, args.steps)
        failures += record["outcome"] == "failed"
        print(f"[{index}/{len(cases)}] {case.name}: {record['outcome']} ({time.perf_counter() - started:.0f} s)",
              file=sys.stderr, flush=True)
    for case in searches:
        record = run_search(case, out, args.dry_run)
        failures += record["outcome"] == "failed"
        print(f"[search] {case.name}: {record.get('max_batch_size')} ({time.perf_counter() - started:.0f} s)",
              file=sys.stderr, flush=True)
    print(f"{len(cases) + len(searches)} records in {out} ({failures} failed)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
