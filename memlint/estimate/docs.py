"""The generated tables of docs/estimator.md, from the estimator's own data tables.

Run ``python -m memlint.estimate.docs`` to rewrite the block between the
markers; tests/estimate/test_docs.py checks the committed page matches, so the
page says what the code does: op handlers, context measurements, version
facts, autocast list sizes, CPU scratch probes and the GPU catalog.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "estimator.md"
BEGIN, END = "<!-- BEGIN GENERATED (python -m memlint.estimate.docs) -->", "<!-- END GENERATED -->"
MiB = 2**20


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def handler_table() -> list[str]:
    """Markdown lines: one row per op handler (op, target device, memory modelled, source)."""
    from memlint.estimate.handlers import OP_HANDLERS  # noqa: PLC0415

    lines = ["### Op handlers", "", "| op | target | memory modelled | source |", "|---|---|---|---|"]
    for handler in OP_HANDLERS.values():
        lines.append(f"| `{handler.op}` | {handler.device} | {_escape(handler.memory)} | {_escape(handler.source)} |")
    return lines


def context_table() -> list[str]:
    """Markdown lines: the CUDA context measurements the model picks from (MiB, GPU, CUDA, loading, source)."""
    from memlint.estimate.overheads import CONTEXT_MEASUREMENTS  # noqa: PLC0415

    lines = ["### CUDA context measurements", "", "| GPU | sm | CUDA | loading | MiB | what | source |",
             "|---|---|---|---|---|---|---|"]
    for row in CONTEXT_MEASUREMENTS:
        lines.append(f"| {row.gpu} | {row.cc[0]}{row.cc[1]} | {row.cuda[0]}.{row.cuda[1]} | {row.loading} | "
                     f"{row.nbytes // MiB} | {_escape(row.what)} | {_escape(row.source)} |")
    return lines


def version_table() -> list[str]:
    """Markdown lines: behaviours of torch releases older than the modelled one, with their sources."""
    from memlint.estimate.autocast import MODELLED_TORCH  # noqa: PLC0415
    from memlint.estimate.torch_versions import VERSION_FACTS  # noqa: PLC0415

    lines = [f"### Older torch releases (modelled torch: {MODELLED_TORCH})", "",
             "| behaviour | torch before | source |", "|---|---|---|"]
    for fact in VERSION_FACTS:
        lines.append(f"| {_escape(fact.what)} | {fact.until[0]}.{fact.until[1]} | {_escape(fact.source)} |")
    return lines


def autocast_table() -> list[str]:
    """Markdown lines: the modelled torch's autocast op lists per policy, CUDA and CPU (first 8 ops each)."""
    from memlint.estimate.autocast import CPU_POLICIES, CUDA_POLICIES, MODELLED_TORCH  # noqa: PLC0415

    lines = [f"### Autocast op lists (torch {MODELLED_TORCH})", "", "| policy | CUDA ops | CPU ops |", "|---|---|---|"]
    for policy in CUDA_POLICIES:
        cuda, cpu = CUDA_POLICIES[policy], CPU_POLICIES[policy]
        lines.append(f"| `{policy}` | {len(cuda)}: {', '.join(cuda[:8])}{', ...' if len(cuda) > 8 else ''} | "
                     f"{len(cpu)}: {', '.join(cpu[:8])}{', ...' if len(cpu) > 8 else ''} |")
    return lines


def scratch_table() -> list[str]:
    """Markdown lines: the CPU kernels whose scratch is measured by running them, and when."""
    from memlint.estimate.cpu_scratch import PROBE_LIMIT_BYTES, PROBED_OPS  # noqa: PLC0415

    lines = ["### CPU kernels whose scratch is measured", "",
             f"Each distinct call runs once for real (operands up to {PROBE_LIMIT_BYTES // MiB} MiB).", "",
             "| op | probed when |", "|---|---|"]
    for op, predicate in PROBED_OPS.items():
        doc = (predicate.__doc__ or "always").strip().splitlines()[0] if predicate.__name__ != "_always" else "always"
        lines.append(f"| `{op}` | {_escape(doc)} |")
    return lines


def catalog_table() -> list[str]:
    """Markdown lines: the GPU catalog (capacity in MiB, compute capability, source)."""
    from memlint.estimate.gpus import CATALOG  # noqa: PLC0415

    lines = ["### GPU catalog", "", "| name | MiB | sm | source |", "|---|---|---|---|"]
    for spec in CATALOG.values():
        cc = spec.compute_capability
        lines.append(f"| {spec.name} | {spec.memory_total // MiB} | {cc[0]}{cc[1]} | {_escape(spec.source)} |")
    return lines


def generated_block() -> str:
    """The generated part of docs/estimator.md."""
    parts = [handler_table(), context_table(), version_table(), autocast_table(), scratch_table(), catalog_table()]
    return "\n\n".join("\n".join(part) for part in parts) + "\n"


def update_doc(doc: Path = DOC_PATH) -> None:
    """Rewrite the generated block of ``doc`` (between :data:`BEGIN` and :data:`END`)."""
    text = doc.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    doc.write_text(f"{head}{BEGIN}\n{generated_block()}{END}{tail}")


if __name__ == "__main__":  # pragma: no cover - a maintenance script
    update_doc()
    print(f"updated {DOC_PATH}", file=sys.stderr)
