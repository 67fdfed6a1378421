"""Write the published measurements as validation records (fixtures/validation/published/) and refresh docs.

    python tests/benchmarks/published_records.py

Source: the Hugging Face transformers guide "Efficient Training on a Single
GPU" (docs/source/en/perf_train_gpu_one.mdx of huggingface/transformers,
January 2022), which trains bert-large-uncased (sequence classification,
512-token sequences) with the Trainer on a Tesla V100-SXM2-16GB (driver
460.91.03, nvidia-smi's CUDA 11.2) and prints NVML "used" (MiB, floored) after
``trainer.train()``.  The page measured the CUDA context too: 1343 MiB after
``torch.ones((1, 1)).to("cuda")``; it does not state the torch version.

Each record holds the measured number, the source, and the estimate the
estimator made when the record was written; tests/validate/test_published.py
re-estimates and checks the bound of fixtures/validation/bounds.json.
"""

import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "fixtures" / "validation" / "published"
MiB = 2**20
SOURCE = {
    "url": "https://github.com/huggingface/transformers/blob/0016acf7ef421c7fe8eff7945de52c71896c3b01/"
           "docs/source/en/perf_train_gpu_one.mdx (rendered at https://huggingface.co/docs/transformers/"
           "perf_train_gpu_one; later versions of the page changed)",
    "title": "Hugging Face transformers: Efficient Training on a Single GPU",
    "file": "huggingface/transformers docs/source/en/perf_train_gpu_one.mdx (commit 0016acf7ef421c7fe8eff7945de52c71896c3b01)",
    "gpu": "Tesla V100-SXM2-16GB (16160 MiB)",
    "cuda": "11.2 (driver 460.91.03, as nvidia-smi reports it)",
    "torch": None,
    "driver": "460.91.03",
    "measured_with": "pynvml nvmlDeviceGetMemoryInfo(handle).used // 1024**2 after trainer.train() "
                     "(printed as 'GPU memory occupied: N MB')",
    "notes": "torch version not stated (page dated 2022-01-11; torch 1.10 was the release then, 1.11 came in "
             "March 2022); replayed with torch_version 1.10 (its known differences: "
             "memlint/estimate/torch_versions.py), CUDA 11.2 and the context measured on the same page: 1343 MiB "
             "after torch.ones((1, 1)).to('cuda')",
}
CONTEXT = 1343 * MiB
#: The torch the page ran: not stated; in January 2022 the release was 1.10 (1.11 came in March 2022).
TORCH = "1.10"


@dataclass(frozen=True)
class Row:
    """One row of the page: the TrainingArguments and the printed MiB."""

    name: str
    quote: str
    measured_mib: int
    grad_accum: int = 1
    checkpointing: bool = False
    precision: str = "fp32"
    adafactor: bool = False

    @property
    def target(self) -> str:
        factory = "bert_large_classifier_adafactor" if self.adafactor else "bert_large_classifier"
        return f"fixtures/models/published.py:{factory}"

    def options(self):
        from memlint.estimate.api import EstimateOptions

        return EstimateOptions(batch_size=4, grad_accum=self.grad_accum, checkpointing=self.checkpointing,
                               precision=self.precision, set_to_none=False, gpu="V100-16GB", cuda="11.2",
                               cuda_context=CONTEXT, steps=2, torch_version=TORCH)


ROWS = [
    Row("vanilla", "per_device_train_batch_size=4", 14949),
    Row("gradient-accumulation", "per_device_train_batch_size=1, gradient_accumulation_steps=4", 8681, 4),
    Row("gradient-checkpointing", "batch 1, accumulation 4, gradient_checkpointing=True", 6775, 4, True),
    Row("fp16", "per_device_train_batch_size=4, fp16=True", 13939, precision="amp-fp16"),
    Row("accumulation-checkpointing-fp16", "batch 1, accumulation 4, gradient_checkpointing=True, fp16=True",
        7275, 4, True, "amp-fp16"),
    Row("adafactor", "per_device_train_batch_size=4, optim='adafactor'", 12295, adafactor=True),
    Row("all-together", "batch 1, accumulation 4, checkpointing, fp16, optim='adafactor'", 4847, 4, True,
        "amp-fp16", True),
]


def record_for(row: Row) -> dict:
    """The record of one row (schema of memlint/validate/record_schema.json)."""
    from memlint.estimate.api import estimate
    from memlint.estimate.workload import load_workload
    from memlint.validate import record as records

    workload = load_workload(row.target)
    result = estimate(workload, row.options())
    env = {"memlint_version": None, "torch_version": None, "cuda_version": "11.2", "python_version": None,
           "device": "cuda", "gpu_name": "Tesla V100-SXM2-16GB", "total_memory": 16160 * MiB,
           "compute_capability": [7, 0], "driver_version": "460.91.03", "host": None}
    identity = records.workload_identity(row.target, [], row.options(), 0, 1)
    measured = {"peak_allocated": None, "peak_reserved": None, "device_used": row.measured_mib * MiB,
                "active_bytes_peak": None, "inactive_split_bytes_peak": None, "nvml_used_before": 0,
                "nvml_used_peak": row.measured_mib * MiB, "oom": None}
    record = records.make_record(env, identity, records.estimated_numbers(result), measured, "measured",
                                 note=f"published measurement: {row.name}")
    record["source"] = dict(SOURCE, quote=f"GPU memory occupied: {row.measured_mib} MB.", row=row.quote)
    return record


def main() -> int:
    sys.path.insert(0, str(ROOT))
    import subprocess

    from memlint.validate.record import write_record

    for row in ROWS:
        path = write_record(record_for(row), OUT / f"hf-perf-train-gpu-one-{row.name}.json")
        print(path.relative_to(ROOT), flush=True)
    subprocess.run([sys.executable, "-m", "memlint.validate.accuracy"], cwd=ROOT, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
