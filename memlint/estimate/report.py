"""Rendering of an Estimate: rich table, JSON document, timeline plot (matplotlib, lazy)."""

from __future__ import annotations

import json
import os
from typing import TextIO

from memlint.estimate.units import GiB, format_bytes

#: Width of the tables when the output is not a terminal (a pipe, a file): wide
#: enough that no row or header wraps, as a log or ``grep`` wants (rich's own
#: default there is 80 columns); ``COLUMNS`` in the environment wins. A choice of ours.
PIPED_WIDTH = 1000


def report_console(file: TextIO | None = None):
    """A rich Console for the estimate's report on ``file`` (None: stdout): the terminal's width on a
    terminal, else :data:`PIPED_WIDTH` columns unless ``COLUMNS`` is set."""
    from rich.console import Console  # noqa: PLC0415

    console = Console(file=file, highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = PIPED_WIDTH
    return console


def module_name(result, fqn: str) -> str:
    """``layers.1 (Linear)``: the FQN with its class, as the trace recorded it (the FQN alone without a ledger)."""
    from memlint.estimate.plot import module_label  # noqa: PLC0415

    classes = result.ledger.module_classes if result.ledger is not None else {}
    return module_label(fqn, classes) or fqn


def shown(text) -> str:
    """Untrusted text (module names and FQNs, which a model chooses freely:
    ``add_module("\\x1b[2J...", ...)``, a target, a workload name) for rich
    output: control characters escaped (:func:`memlint.report.text.printable`),
    then rich markup escaped, so ``[red]x[/red]`` prints as typed."""
    from rich.markup import escape  # noqa: PLC0415

    from memlint.report.text import printable  # noqa: PLC0415

    return escape(printable(str(text)))


def render_table(result, verdict=None, max_batch: int | None = None, file: TextIO | None = None) -> None:
    """Print categories, the three numbers, the verdict and the top-10 modules by activation bytes."""
    from rich.table import Table  # noqa: PLC0415

    console = report_console(file)
    console.print(f"[bold]memlint estimate[/] {shown(result.workload)}  batch={result.batch_size} "
                  f"micro-batch={result.micro_batch} optimizer={shown(result.optimizer)} "
                  f"precision={shown(result.options.precision)}  target={shown(result.target)}")
    table = Table(title="Memory at peak (steady-state step)", min_width=34)  # the title on one line
    table.add_column("category")
    table.add_column("bytes", justify="right")
    table.add_column("share", justify="right")
    total = sum(result.by_category.values()) or 1
    for category, nbytes in sorted(result.by_category.items(), key=lambda kv: -kv[1]):
        if nbytes:
            table.add_row(category, format_bytes(nbytes), f"{100 * nbytes / total:.1f}%")
    console.print(table)
    console.print(_numbers_table(result, Table))
    if result.devices:
        console.print(_devices_table(result, Table))
    _print_checkpointing(console, result)
    if result.by_module:
        modules = Table(title="Top modules by activation bytes", min_width=31)  # the title on one line
        modules.add_column("module")
        modules.add_column("activations", justify="right")
        for name, nbytes in sorted(result.by_module.items(), key=lambda kv: -kv[1])[:10]:
            modules.add_row(shown(module_name(result, name)), format_bytes(nbytes))
        console.print(modules)
    for op in result.unsupported_ops:
        console.print(f"[yellow]unsupported on meta:[/] {shown(op['op'])} in {shown(op['module'] or '<root>')} "
                      f"(x{op['count']}): {shown(op['fallback'])}")
    for item in result.unmodelled:
        console.print(f"[yellow]not modelled:[/] {shown(item['kernel'])} -- module {shown(item['module'])} "
                      f"(x{item['count']})")
    if verdict is not None:
        word = "[green]fits[/]" if verdict.fits else "[red]does not fit[/]"
        console.print(f"Verdict: {word} in {format_bytes(verdict.capacity_bytes)} with "
                      f"{verdict.reserve:.0%} reserve: headroom {verdict.headroom_bytes / GiB:+.2f} GiB "
                      f"({verdict.headroom_fraction:+.1%})" + _largest_device_note(result))
    if max_batch is not None:
        from memlint.estimate.api import MAX_BATCH_SEARCH_LIMIT  # noqa: PLC0415

        if max_batch >= MAX_BATCH_SEARCH_LIMIT:
            console.print(f"Largest batch size that fits: [bold]at least {max_batch}[/] (the search stops there)")
        else:
            console.print(f"Largest batch size that fits: [bold]{max_batch}[/]")


def _numbers_table(result, table_class):
    """The three numbers with their meanings (CUDA names; on the CPU target the CPU allocator's)."""
    title = "Predicted memory" if result.options.device == "cpu" else "Predicted CUDA memory"
    if result.devices:  # placed on several devices: these count them all in one ledger
        title += " (all devices in one ledger)"
    numbers = table_class(title=title)
    numbers.add_column("metric")
    numbers.add_column("value", justify="right")
    numbers.add_column("meaning")
    if result.options.device == "cpu":
        numbers.add_row("peak_allocated", format_bytes(result.peak_allocated),
                        "CPU allocator peak (every byte asked for, no rounding, no cache)")
        return numbers
    numbers.add_row("peak_allocated", format_bytes(result.peak_allocated), "torch.cuda.max_memory_allocated()")
    numbers.add_row("peak_reserved", format_bytes(result.peak_reserved), "torch.cuda.max_memory_reserved()")
    numbers.add_row("fragmentation", format_bytes(result.fragmentation_bytes),
                    "reserved - allocated at the allocated peak (inactive_split_bytes.all.peak "
                    f"{format_bytes(result.memory_stats.get('inactive_split_bytes.all.peak', 0))})")
    numbers.add_row("device_used", format_bytes(result.device_used), "nvidia-smi / NVML used (incl. CUDA context)")
    return numbers


def _largest_device_note(result) -> str:
    """`` on cuda:1, the device that needs the most`` when the workload is placed on several devices."""
    if not result.devices:
        return ""
    largest = max(result.devices, key=lambda d: d["device_used"])["device"]
    return f" on {largest}, the device that needs the most"


def _devices_table(result, table_class):
    """Each device's three numbers when the workload is placed on several (the verdict's device marked)."""
    largest = max(result.devices, key=lambda d: d["device_used"])["device"]
    table = table_class(title="Memory per device (placement)")
    for column in ("device", "peak_allocated", "peak_reserved", "device_used"):
        table.add_column(column, justify="left" if column == "device" else "right")
    for entry in result.devices:
        mark = " (largest)" if entry["device"] == largest else ""
        table.add_row(entry["device"] + mark, format_bytes(entry["peak_allocated"]),
                      format_bytes(entry["peak_reserved"]), format_bytes(entry["device_used"]))
    return table


def _print_checkpointing(console, result) -> None:
    """Say what --checkpointing wrapped, or that it found nothing to wrap."""
    if not result.options.checkpointing:
        return
    if result.checkpointed:
        names = [shown(name) for name in result.checkpointed]
        text = ", ".join(names[:6]) + (f", ... ({len(names)} blocks)" if len(names) > 6 else "")
        console.print(f"Checkpointed blocks: {text}")
    else:
        console.print("[yellow]--checkpointing found no repeated blocks to checkpoint[/] "
                      "(children of an nn.ModuleList/nn.Sequential whose class occurs twice): nothing was wrapped")


def render_json(result, verdict=None, max_batch: int | None = None) -> str:
    """The JSON document: ``Estimate.to_json()`` plus ``verdict`` and ``max_batch_size`` (null when not asked)."""
    document = result.to_json()
    classes = result.ledger.module_classes if result.ledger is not None else {}
    for entry in document["by_module"]:
        entry["class"] = classes.get(entry["module"])
    document["verdict"] = verdict.to_json() if verdict is not None else None
    document["max_batch_size"] = max_batch
    if max_batch is not None:
        from memlint.estimate.api import MAX_BATCH_SEARCH_LIMIT  # noqa: PLC0415

        document["max_batch_size_is_search_limit"] = max_batch >= MAX_BATCH_SEARCH_LIMIT
    return json.dumps(document, indent=2)


def plot_timeline(result, path: str, verdict=None, gpu: str | None = None) -> None:
    """Write the memory timeline plot (.png or .svg): :func:`memlint.estimate.plot.write_plot`.

    verdict: the fit verdict (draws the capacity and usable-limit lines); gpu: the target's name.
    Raises UsageError when matplotlib is missing or the suffix is not .png/.svg.
    """
    from memlint.estimate.plot import write_plot  # noqa: PLC0415 - matplotlib only with --plot

    write_plot(result, path, verdict, gpu)


def render_advice(rows, file: TextIO | None = None, notes: dict[str, str] | None = None) -> None:
    """Print the advisor's rows (:class:`memlint.estimate.advisor.Remedy`), best first.

    The table holds the remedies that lower device_used (what the verdict
    counts). Under it, by name: those that lower only peak_allocated (the
    caching allocator keeps its segments reserved, so the device memory does
    not move), those that save nothing for this model (e.g. plain SGD when the
    optimizer already keeps no state), and the remedies not offered, with why
    (``notes``, e.g. no bf16 below sm80). With no remedy that lowers
    device_used there is no table, only that sentence. The JSON keeps every row.
    """
    from rich.table import Table  # noqa: PLC0415

    helpful = [row for row in rows if row.saved > 0]
    allocated_only = [row for row in rows if row.saved <= 0 < row.saved_allocated]
    idle = [row.title for row in rows if row.saved <= 0 and row.saved_allocated <= 0]
    console = report_console(file)
    if helpful:
        console.print(_advice_table(helpful, Table))
    else:
        console.print("No remedy lowers device_used for this model (each was re-estimated).")
    if allocated_only:
        names = ", ".join(f"{row.title} (-{format_bytes(row.saved_allocated)})" for row in allocated_only)
        console.print(f"Lower peak_allocated only, not device_used (peak_reserved does not drop: the caching "
                      f"allocator reserves whole segments): {shown(names)}", soft_wrap=True)
    if idle:
        console.print(f"Save nothing for this model (not shown): {shown(', '.join(idle))}", soft_wrap=True)
    for name, why in (notes or {}).items():
        console.print(f"Not offered: {shown(name)} -- {shown(why)}", soft_wrap=True)


def _advice_table(rows, table_class):
    table = table_class(title="Remedies, each re-estimated", title_justify="left")
    numeric = ("#", "device_used", "saved", "needs", "FLOPs")
    for column in ("#", "remedy", "device_used", "saved", "needs", "fits", "FLOPs", "cost"):
        table.add_column(column, justify="right" if column in numeric else "left")
    for rank, row in enumerate(rows, start=1):
        fits = "-" if row.fits is None else ("yes" if row.fits else "no")
        flops = "-" if row.flops_change is None else f"{row.flops_change:+.0%}"
        table.add_row(str(rank), _remedy_title(row), format_bytes(row.device_used), format_bytes(row.saved),
                      format_bytes(row.required_bytes), fits, flops, shown(row.cost))
    return table


def _remedy_title(row) -> str:
    """The remedy's title; checkpointing names the blocks it wrapped."""
    if row.key != "checkpointing" or not row.checkpointed:
        return shown(row.title)
    names = [shown(name) for name in row.checkpointed]
    text = ", ".join(names[:3]) + (f", ... ({len(names)} blocks)" if len(names) > 3 else "")
    return f"{shown(row.title)}: {text}"
