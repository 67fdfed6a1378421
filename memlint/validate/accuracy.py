"""Accuracy bounds and the docs/accuracy.md tables, computed from validation records.

Bounds live in fixtures/validation/bounds.json (the single source of truth; the
replay test and docs/accuracy.md both read it).  A bound is a fraction:
|estimated - measured| / measured must not exceed it.  ``known_deviations``
widen a bound for named targets/precisions, each with the mechanism that
explains the gap.

Run ``python -m memlint.validate.accuracy`` to regenerate docs/accuracy.md.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORDS_DIR = ROOT / "fixtures" / "validation"
BOUNDS_PATH = RECORDS_DIR / "bounds.json"
DOC_PATH = ROOT / "docs" / "accuracy.md"
NUMBERS = {"cuda": ("peak_allocated", "peak_reserved", "device_used"), "cpu": ("cpu_peak", "cpu_tensor_peak"),
           "published": ("peak_allocated", "peak_reserved", "device_used")}
CAMPAIGN_COMMAND = "python -m memlint.validate.campaign --out fixtures/validation/h200"


def load_bounds(path: Path = BOUNDS_PATH) -> dict:
    """The bounds document (see module docstring)."""
    return json.loads(Path(path).read_text())


PEERS_DIR = RECORDS_DIR / "peers"


def record_files(directory: Path = RECORDS_DIR) -> list[Path]:
    """Every record ``*.json`` under ``directory`` (recursively), bounds.json and peers/ excluded, sorted."""
    return sorted(p for p in Path(directory).rglob("*.json")
                  if p.name != BOUNDS_PATH.name and "peers" not in p.relative_to(directory).parts)


def _matches(deviation: dict, device: str, number: str, target: str, precision: str) -> bool:
    return (deviation["device"] == device and deviation["number"] in ("*", number)
            and any(name in target for name in deviation["targets"])
            and precision in deviation["precisions"])


def bound_for(bounds: dict, device: str, number: str, target: str, precision: str) -> tuple[float, str | None]:
    """(bound, mechanism or None) for one number of one workload; raises KeyError for an unknown number."""
    bound = bounds[device][number]
    for deviation in bounds.get("known_deviations", []):
        if _matches(deviation, device, number, target, precision):
            return max(bound, deviation["bound"]), deviation["mechanism"]
    return bound, None


def relative_error(estimated: int | None, measured: int | None) -> float | None:
    """(estimated - measured) / measured, or None when either is missing or measured is 0."""
    if estimated is None or not measured:
        return None
    return (estimated - measured) / measured


#: The estimate each measured number is compared with (CPU records hold a CPU-target estimate).
ESTIMATE_OF = {"cpu_peak": "peak_allocated", "cpu_tensor_peak": "peak_tensor_bytes"}


def estimated_value(record: dict, number: str) -> int | None:
    """The estimate a record holds for ``number`` (see :data:`ESTIMATE_OF`)."""
    estimated = record.get("estimated") or {}
    return estimated.get(ESTIMATE_OF.get(number, number))


def record_kind(record: dict) -> str:
    """"published" for a measurement someone published (the record names its source), else the device."""
    return "published" if record.get("source") else record["environment"]["device"]


def rows(records: list[dict]) -> list[dict]:
    """Flat table rows: one per (record, number) that has a measurement."""
    out = []
    for record in records:
        device = record_kind(record)
        measured = record.get("measured") or {}
        for number in NUMBERS[device]:
            value = measured.get(number)
            if value is None:
                continue
            estimated = estimated_value(record, number)
            options = record["workload"]["options"]
            target = record["workload"]["target"]
            if options.get("parallel"):  # a distributed record: rank 0 of a real multi-process run
                target += f" ({options['parallel']}, {options['world_size']} ranks)"
            out.append({"device": device, "target": target, "note": record.get("note") or "",
                        "precision": options["precision"],
                        "optimizer": options["optimizer"] or (record.get("estimated") or {}).get("optimizer"),
                        "batch_size": _batch(record), "checkpointing": options["checkpointing"],
                        "grad_accum": options.get("grad_accum", 1),
                        "number": number, "measured": value, "estimated": estimated,
                        "error": relative_error(estimated, value)})
    return out


def _batch(record: dict) -> int | None:
    """The batch size run: the option, else dim 0 of the first recorded input (times grad_accum)."""
    options = record["workload"]["options"]
    shapes = record["workload"].get("input_shapes") or []
    if options.get("batch_size"):
        return options["batch_size"]
    return shapes[0]["shape"][0] * options.get("grad_accum", 1) if shapes and shapes[0]["shape"] else None


def _short(target: str) -> str:
    return target.replace("fixtures/models/", "").replace(".py:", ":")


def _mib(value: int) -> str:
    return f"{value / 2**20:.3f}"


def render_markdown(records: list[dict], bounds: dict) -> str:
    """The generated part of docs/accuracy.md: bounds, per-workload tables, summaries."""
    lines = ["<!-- generated by `python -m memlint.validate.accuracy`; do not edit by hand -->", ""]
    lines += ["### Bounds (from fixtures/validation/bounds.json)", "", "| device | number | bound | status |",
              "|---|---|---|---|"]
    for device in ("cuda", "cpu", "published"):
        for number, bound in bounds.get(device, {}).items():
            lines.append(f"| {device} | {number} | {bound:.0%} | {bounds.get(f'{device}_status', '')} |")
    deviations = bounds.get("known_deviations", [])
    lines += ["", "Known deviations (bound widened, mechanism stated):" if deviations else
              "Known deviations: none (no bound is widened for a named workload).", ""]
    for deviation in deviations:
        lines.append(f"- {deviation['device']} / {deviation['number']} / {', '.join(deviation['targets'])} "
                     f"/ {', '.join(deviation['precisions'])}: bound {deviation['bound']:.0%}. {deviation['mechanism']}")
    table = rows(records)
    lines += _published_section([r for r in table if r["device"] == "published"], bounds)
    for device, title in (("cuda", "CUDA records"), ("cpu", "CPU ground-truth records")):
        subset = [r for r in table if r["device"] == device]
        lines += ["", f"### {title}", ""]
        if not subset:
            lines.append("No records yet." if device == "cpu" else
                         f"No CUDA records yet: they await a GPU run of `{CAMPAIGN_COMMAND}`.")
            continue
        lines += ["| workload | precision | optimizer | batch | ckpt | number | measured MiB | estimated MiB | error |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in subset:
            error = "-" if r["error"] is None else f"{r['error']:+.2%}"
            lines.append(f"| {_short(r['target'])} | {r['precision']} | {r['optimizer']} | {r['batch_size']} | "
                         f"{'yes' if r['checkpointing'] else 'no'} | {r['number']} | {_mib(r['measured'])} | "
                         f"{_mib(r['estimated'])} | {error} |")
        lines += ["", "| number | records | median abs error | max abs error |", "|---|---|---|---|"]
        for number in NUMBERS[device]:
            errors = [abs(r["error"]) for r in subset if r["number"] == number and r["error"] is not None]
            if errors:
                lines.append(f"| {number} | {len(errors)} | {statistics.median(errors):.2%} | {max(errors):.2%} |")
    return "\n".join(lines) + "\n"


def _published_section(subset: list[dict], bounds: dict) -> list[str]:
    """The table of published measurements: the row, measured and estimated MiB, error, bound."""
    lines = ["", "### Published measurements (fixtures/validation/published)", ""]
    if not subset:
        return lines + ["No published records."]
    lines += ["| record | precision | optimizer | batch (micro x steps) | ckpt | number | measured MiB | estimated MiB "
              "| error | bound |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in subset:
        bound = bounds.get("published", {}).get(r["number"])
        lines.append(f"| {r['note'].replace('published measurement: ', '')} | {r['precision']} | {r['optimizer']} | "
                     f"{r['batch_size']} ({r['batch_size'] // r['grad_accum']} x {r['grad_accum']}) | "
                     f"{'yes' if r['checkpointing'] else 'no'} | {r['number']} | "
                     f"{_mib(r['measured'])} | {_mib(r['estimated'])} | {r['error']:+.2%} | "
                     f"{'-' if bound is None else f'{bound:.0%}'} |")
    errors = [abs(r["error"]) for r in subset if r["error"] is not None]
    lines += ["", f"Median |error| {statistics.median(errors):.2%}, worst {max(errors):.2%} over {len(errors)} rows."]
    return lines


BEGIN, END = "<!-- BEGIN GENERATED -->", "<!-- END GENERATED -->"


def render_peers(peers: dict, records: list[dict]) -> str:
    """The fvcore peer table: a formula estimate from fvcore's activation count vs the CPU truth and memlint."""
    by_name = {f"{Path(r['workload']['target']).name}": r for r in records
               if record_kind(r) == "cpu" and not r["workload"]["options"].get("parallel")
               and r["workload"]["options"]["precision"] == "fp32"}
    lines = ["", f"### Peer baseline: a formula estimate from {peers['tool']}", "",
             "parameters + gradients + optimizer state + 4 bytes x fvcore's activation count (fp32 records; "
             "`python tests/benchmarks/peer_baselines.py`).", "",
             "| workload | measured cpu_peak MiB | memlint error | formula (fvcore) error | fvcore unsupported ops |",
             "|---|---|---|---|---|"]
    for result in peers["results"].values():
        record = by_name.get(Path(result["target"]).name)
        if record is None:
            continue
        measured = record["measured"]["cpu_peak"]
        ours = relative_error(estimated_value(record, "cpu_peak"), measured)
        if "error" in result:
            lines.append(f"| {_short(result['target'])} | {_mib(measured)} | {ours:+.2%} | (fvcore failed: "
                         f"{result['error']}) | |")
            continue
        theirs = relative_error(result["formula_bytes"], measured)
        unsupported = ", ".join(result["unsupported_ops"][:4]) + ("..." if len(result["unsupported_ops"]) > 4 else "")
        lines.append(f"| {_short(result['target'])} | {_mib(measured)} | {ours:+.2%} | {theirs:+.2%} | {unsupported} |")
    return "\n".join(lines) + "\n"


def generated_block(directory: Path = RECORDS_DIR) -> str:
    """The generated part of docs/accuracy.md from the records, the bounds and the peer baselines."""
    records = [json.loads(p.read_text()) for p in record_files(directory)]
    generated = render_markdown(records, load_bounds(directory / BOUNDS_PATH.name))
    peers = directory / "peers" / "fvcore.json"
    if peers.is_file():
        generated += render_peers(json.loads(peers.read_text()), records)
    return generated


def update_doc(doc: Path = DOC_PATH, directory: Path = RECORDS_DIR) -> str:
    """Rewrite the generated block of ``doc`` (between BEGIN/END markers) from :func:`generated_block`."""
    generated = generated_block(directory)
    text = doc.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    new = f"{head}{BEGIN}\n{generated}{END}{tail}"
    doc.write_text(new)
    return new


if __name__ == "__main__":  # pragma: no cover - a maintenance script
    update_doc()
    print(f"updated {DOC_PATH.relative_to(ROOT)}", file=sys.stderr)
