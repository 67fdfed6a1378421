"""``memlint estimate --format summary``: the estimate as ``torch.cuda.memory_summary()`` prints it.

The layout follows ``memory_summary`` of torch 2.13.0 (``torch/cuda/memory.py``):
a 75-column box, the rows below (each with "from large pool" / "from small
pool" sub-rows), the columns Cur Usage / Peak Usage / Tot Alloc / Tot Freed,
and its unit rules (a size switches to the next binary unit while the row's
"all" value is at least 768 KiB; a count to K/M while it is at least 750,000),
so that it can be compared line by line with a real one.  The values come
from the snapshot replay of the allocator model
(:func:`memlint.estimate.snapshot.record_step`): "Cur" is the end of the
traced step, "Peak" the peak since the first measured step began (as after
``torch.cuda.reset_peak_memory_stats()`` following a warm-up step), "Tot"
the totals over the whole trace, warm-up included.
"""

from __future__ import annotations

#: (memory_stats key, row title, kind) in memory_summary's order (torch/cuda/memory.py, torch 2.13.0).
POOL_ROWS = (
    ("allocated_bytes", "Allocated memory", "size"),
    ("active_bytes", "Active memory", "size"),
    ("requested_bytes", "Requested memory", "size"),
    ("reserved_bytes", "GPU reserved memory", "size"),
    ("inactive_split_bytes", "Non-releasable memory", "size"),
    ("allocation", "Allocations", "count"),
    ("active", "Active allocs", "count"),
    ("segment", "GPU reserved segments", "count"),
    ("inactive_split", "Non-releasable allocs", "count"),
)
PLAIN_ROWS = (("oversize_allocations", "Oversize allocations"), ("oversize_segments", "Oversize GPU segments"))
COLUMNS = ("current", "peak", "allocated", "freed")
WIDTH = 75
#: Unit thresholds of memory_summary: 768 KiB for sizes, 750,000 for counts (torch/cuda/memory.py).
SIZE_STEP, COUNT_STEP = 768 * 1024, 750 * 1000


def format_size(value: int, reference: int) -> str:
    """``value`` bytes in the unit memory_summary picks for ``reference`` bytes (integer division)."""
    unit = "B  "
    for next_unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        if reference < SIZE_STEP:
            break
        unit = next_unit
        value //= 1024
        reference /= 1024
    return f"{value:6d} {unit}"


def format_count(value: int, reference: int) -> str:
    """A count in the unit memory_summary picks for ``reference`` (K, M)."""
    unit = " "
    for next_unit in ("K", "M"):
        if reference < COUNT_STEP:
            break
        unit = next_unit
        value //= 1000
        reference /= 1000
    return f"{value:7d} {unit} "


def _cells(stats: dict, prefix: str, references: dict, formatter) -> str:
    return " | ".join(formatter(stats[prefix + part], references[part]) for part in COLUMNS)


def format_summary(stats: dict[str, int], device: int = 0, abbreviated: bool = False) -> str:
    """The ``memory_summary()`` text for a flat ``memory_stats()`` dict (bytes and counts).

    Raises KeyError when ``stats`` lacks one of the keys the summary shows.
    """
    rule, double = "-" * WIDTH, "=" * WIDTH
    lines = [double, f" {'':16} PyTorch CUDA memory summary, device ID {device:<17d} ", rule,
             f"  {'':9} CUDA OOMs: {stats['num_ooms']:<12d} | {'':6} cudaMalloc retries: "
             f"{stats['num_alloc_retries']:<8d}  ",
             double, "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  "]
    for key, name, kind in POOL_ROWS:
        formatter = format_size if kind == "size" else format_count
        lines.append(rule)
        references = {part: stats[f"{key}.all.{part}"] for part in COLUMNS}
        pools = [("all", name)] if abbreviated else [("all", name), ("large_pool", "      from large pool"),
                                                     ("small_pool", "      from small pool")]
        for pool, label in pools:
            lines.append(f" {label:<21} | {_cells(stats, f'{key}.{pool}.', references, formatter)} ")
    for key, name in PLAIN_ROWS:
        lines.append(rule)
        prefix = f"{key}."
        references = {part: stats[prefix + part] for part in COLUMNS}
        lines.append(f" {name:<21} | {_cells(stats, prefix, references, format_count)} ")
    lines.append(double)
    return "|" + "|\n|".join(lines) + "|\n"
