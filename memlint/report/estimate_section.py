"""The memory section of ``memlint check`` reports: recipe with provenance, numbers, verdict, advisor.

``render_estimates(run, console)`` (rich, for the ``full`` format) and
``render_estimates_plain(run, stream)`` (a few plain lines for ``concise``).
Sizes are printed in GiB (2**30 bytes) with 2 decimals, savings in the
binary unit that shows them (MiB = 2**20, KiB = 2**10 bytes). Paths, targets,
errors and notes come from the linted tree and are escaped
(:func:`~memlint.report.text.printable`).
"""

from __future__ import annotations

import contextlib
import os

from memlint.report.text import printable, printable_name

GiB = 2**30
#: Columns of the tables when the report is not on a terminal (a pipe, a file):
#: no row or header wraps (rich's default there is 80); ``COLUMNS`` wins. A choice of ours,
#: as memlint.estimate.report.PIPED_WIDTH.
PIPED_WIDTH = 1000


@contextlib.contextmanager
def _unwrapped(console):
    """``console`` at :data:`PIPED_WIDTH` columns while it writes to no terminal and ``COLUMNS`` is unset."""
    if console.is_terminal or "COLUMNS" in os.environ:
        yield console
        return
    previous = console.width
    console.width = PIPED_WIDTH
    try:
        yield console
    finally:
        console.width = previous


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / GiB:.2f} GiB"


def _saved(n: int | None) -> str:
    """A saving in the unit that shows it (2 MiB is not "0.00 GiB")."""
    if n is None:
        return "-"
    for unit, size in (("GiB", GiB), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def _value_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.0%}" if value < 1 else f"{value:g}"
    return "-" if value is None else printable(str(value))


def verdict_line(item) -> str:
    """One sentence: needs X GiB of Y GiB on GPU -> fits / does not fit, largest batch."""
    from memlint.integrate.result import deciding_device  # noqa: PLC0415

    est = item.estimate
    batch = item.recipe["batch-size"].value
    device, used = deciding_device(est)
    where = f" ({device} of {len(est.devices)} devices, the one that needs the most)" if device else ""
    head = f"batch {batch}: device_used {_gib(used)}{where}"
    if item.verdict is None:
        return head + " (no target GPU configured: no verdict)"
    v = item.verdict
    word = "fits" if v.fits else "does NOT fit"
    text = (f"{head} on {item.gpu} ({_gib(v.capacity_bytes)}, {_gib(v.usable_bytes)} usable with "
            f"{v.reserve:.0%} reserve): {word}, headroom {v.headroom_bytes / GiB:+.2f} GiB")
    if item.max_batch == 0:
        text += "; even batch size 1 does not fit"
    elif item.max_batch is not None:
        from memlint.integrate.result import largest_batch_text  # noqa: PLC0415

        text += f"; largest batch that fits: {largest_batch_text(item)}"
    return text


def render_estimates(run, console) -> None:
    """Print every ``run.estimates`` entry as rich tables on ``console`` (a rich Console; tables unwrapped
    when it is no terminal)."""
    with _unwrapped(console):
        for item in getattr(run, "estimates", []):
            _render_estimate(item, console)


def _render_estimate(item, console) -> None:
    from rich.table import Table
    from rich.text import Text

    console.print()
    console.print(Text(f"Memory estimate: {printable_name(item.path)}", style="bold"),
                  Text(f"  target {printable(item.target)}", style="dim"))
    if item.error:
        console.print(Text(f"  estimate failed: {printable(item.error)}", style="red"))
        return
    recipe = Table(title="Training recipe", title_justify="left", show_edge=False)
    for column in ("setting", "value", "from"):
        recipe.add_column(column)
    for key, value in item.recipe.items():
        detail = f" - {value.detail}" if value.detail else ""
        recipe.add_row(key, _value_text(value.value), printable(value.source + detail))
    console.print(recipe)
    est = item.estimate
    numbers = Table(title="Predicted CUDA memory (steady-state step)", title_justify="left", show_edge=False)
    numbers.add_column("peak_allocated", justify="right")
    numbers.add_column("peak_reserved", justify="right")
    numbers.add_column("device_used", justify="right")
    numbers.add_row(_gib(est.peak_allocated), _gib(est.peak_reserved), _gib(est.device_used))
    console.print(numbers)
    fits = item.fits
    style = "green" if fits else ("red" if fits is False else "yellow")
    console.print(Text("Verdict: " + verdict_line(item), style=f"bold {style}"))
    for note in item.notes:
        console.print(Text(f"note: {printable(note)}", style="dim"))
    if item.advice:
        console.print(_advice_table(item, Table))
        idle = _idle_remedies(item)
        if idle:
            console.print(Text(f"Save no device memory here (not shown): {printable(', '.join(idle))}",
                               style="dim"))


def _helpful_remedies(item) -> list:
    """The advisor's rows that lower device_used (the verdict's measure), in the advisor's order."""
    return [row for row in item.advice if row.saved > 0]


def _idle_remedies(item) -> list[str]:
    return [row.title for row in item.advice if row.saved <= 0]


def _advice_table(item, table_class):
    table = table_class(title="Advisor: remedies, each re-estimated (those that fit first)", title_justify="left",
                        show_edge=False)
    for column, justify in (("#", "right"), ("remedy", "left"), ("device_used", "right"), ("saved", "right"),
                            ("allocated saved", "right"), ("fits", "left"), ("cost", "left")):
        table.add_column(column, justify=justify)
    for rank, row in enumerate(_helpful_remedies(item), start=1):
        fits = "-" if row.fits is None else ("yes" if row.fits else "no")
        table.add_row(str(rank), printable(row.title), _gib(row.device_used), _saved(row.saved),
                      _saved(row.saved_allocated), fits, printable(row.cost))
    return table


def render_estimates_plain(run, stream) -> None:
    """A short plain-text summary per estimate (after the diagnostics in ``concise``)."""
    for item in getattr(run, "estimates", []):
        if item.error:  # already the run's one error line for this script (memlint.integrate.run_estimates)
            continue
        print(f"memory: {printable_name(item.path)}: {verdict_line(item)}", file=stream)
        parts = [f"{key}={_value_text(v.value)} ({printable(v.source)})" for key, v in item.recipe.items()]
        print(f"  recipe: {', '.join(parts)}", file=stream)
        for rank, row in enumerate(_helpful_remedies(item), start=1):
            fits = "" if row.fits is None else (" fits" if row.fits else " does not fit")
            print(f"  remedy {rank}: {printable(row.title)}: {_gib(row.device_used)} (saves {_saved(row.saved)}; "
                  f"peak allocated -{_saved(row.saved_allocated)}){fits}; {printable(row.cost)}", file=stream)
        idle = _idle_remedies(item)
        if idle:
            print(f"  save no device memory here: {printable(', '.join(idle))}", file=stream)
