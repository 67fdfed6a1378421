"""The memory timeline plot of ``memlint estimate --plot FILE.png|.svg``.

What a reader must see at once: whether the step fits and, if not, where it
goes over. The figure shows

* live memory by category, stacked (parameters at the bottom, then what
  persists across steps, then what one step creates), in GiB, MiB or KiB
  chosen by size; the caching allocator's reserved memory as a dashed line;
* two horizontal lines when a capacity is known (``--gpu``/``--capacity``):
  the device's capacity and the limit PyTorch's allocator may reach --
  capacity x (1 - ``--reserve``) minus the CUDA context and library memory
  (``device_used - peak_reserved``), so that the reserved line crossing the
  limit is exactly the verdict "does not fit" (:func:`memlint.estimate.api.fits`);
  what lies over the limit is filled red and its first crossing is named;
* the allocated peak of the measured steps, marked with its value and the
  aten op and module (FQN and class) that allocated the storage reaching it;
* the phases (forward, backward, optimizer) as shaded spans named in the
  legend, one group of spans per traced step, the warm-up step marked as such;
* an x axis in percent of each step (its share of that step's aten ops),
  phase boundaries drawn as thin lines.

:func:`plot_data` computes all of this without matplotlib (tested on its
own); :func:`write_plot` draws it with matplotlib's Agg backend, imported only
there. Sizes are bytes (GiB = 2**30).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memlint.errors import UsageError

#: Stacking order (bottom to top) and legend label of each ledger category
#: (memlint.estimate.tracer.CATEGORIES): what lives longest at the bottom.
#: A category the table does not know is stacked on top under its own name.
CATEGORY_LABELS = {
    "parameter": "parameters", "buffer": "buffers", "optimizer_state": "optimizer state",
    "gradient": "gradients", "communication": "communication buffers (collectives)", "input": "inputs",
    "activation": "activations (saved for backward)", "temporary": "temporaries",
    "workspace": "workspaces (cuBLAS, kernel scratch)",
}
CATEGORY_COLORS = {
    "parameter": "#4c72b0", "buffer": "#8172b2", "optimizer_state": "#c44e52", "gradient": "#dd8452",
    "communication": "#64b5cd", "input": "#da8bc3", "activation": "#55a868", "temporary": "#937860",
    "workspace": "#9a9a9a",
}
OTHER_COLOR = "#ccb974"
PHASE_COLORS = {"forward": "#dbe8ff", "backward": "#ffe6cc", "optimizer": "#eadcff"}
#: When the usable limit is more than this many times the highest point of
#: the data, the limit is stated in the plot instead of drawn to scale (the
#: curve would be a flat line at the bottom); a presentation choice of ours.
OFF_SCALE_RATIO = 3.0
#: Most points drawn per category; each window keeps its highest point (the
#: peak itself is always kept), so no maximum is lost (a choice of ours:
#: enough for a 12-inch figure at 100 dpi).
MAX_POINTS = 4000


@dataclass
class Span:
    """An x interval [start, end) in plot units (steps; 1.0 = one step) with a name."""

    start: float
    end: float
    name: str
    step: int


@dataclass
class Limit:
    """The capacity lines: device ``capacity`` and the allocator's ``usable`` limit (bytes)."""

    gpu: str
    capacity: int
    usable: int
    reserve: float
    overhead: int
    fits: bool
    headroom: int
    first_over: str = ""


@dataclass
class PlotData:
    """Everything drawn, in plot units: x in steps (step s spans [s, s + 1)), y in ``unit``."""

    x: list[float]
    stacks: dict[str, list[float]]
    reserved: list[float]
    unit: str
    scale: int
    phases: list[Span]
    steps: list[Span]
    peak_x: float
    peak_bytes: int
    peak_label: str
    title: str
    limit: Limit | None = None
    off_scale: list[tuple[str, int]] = field(default_factory=list)
    reserved_label: str = "reserved (caching allocator model)"
    device: str = "GPU"

    @property
    def labels(self) -> list[str]:
        """Legend names of the stacked categories, bottom first."""
        return [category_label(c) for c in self.stacks]


def category_label(category: str) -> str:
    """The legend name of a ledger category (its own name for one :data:`CATEGORY_LABELS` lacks)."""
    return CATEGORY_LABELS.get(category, category.replace("_", " "))


def category_color(category: str) -> str:
    return CATEGORY_COLORS.get(category, OTHER_COLOR)


def plot_unit(largest: int) -> tuple[str, int]:
    """The binary unit (name, bytes) in which ``largest`` bytes is at least 1:
    a tiny model's plot in KiB or MiB rather than 0.00x GiB."""
    for name, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if largest >= size:
            return name, size
    return "bytes", 1


def merged_phases(phases: list[tuple[int, str, int]]) -> list[tuple[int, str, int]]:
    """``(start op, phase, step)`` with consecutive entries of the same phase
    and step joined, so that each forward/backward/optimizer span of a step is
    shaded and labelled once (the tracer can open a phase twice in a row)."""
    merged: list[tuple[int, str, int]] = []
    for entry in phases:
        if merged and merged[-1][1:] == entry[1:]:
            continue
        merged.append(entry)
    return merged


def step_name(step: int) -> str:
    """Step 0 is the warm-up (not counted in the peaks); steps 1.. are the measured ones."""
    return "warm-up step" if step == 0 else f"step {step}"


def module_label(fqn: str, classes: dict[str, str]) -> str:
    """``layers.1 (Linear)``; the root (labelled by its class name) as ``Sequential (root)``."""
    if not fqn:
        return ""
    cls = classes.get(fqn)
    if cls is None:
        return fqn
    return f"{fqn} (root)" if cls == fqn else f"{fqn} ({cls})"


def format_size(nbytes: int, gib: bool = True) -> str:
    """``27.53 MiB (0.027 GiB)``: the readable unit, and (``gib``) GiB when that is not GiB."""
    unit, scale = plot_unit(abs(nbytes))
    text = f"{nbytes / scale:.2f} {unit}" if scale > 1 else f"{nbytes} bytes"
    return text if unit == "GiB" or not gib else f"{text} ({nbytes / 2**30:.3f} GiB)"


def _step_bounds(phases: list[tuple[int, str, int]], last_op: int) -> dict[int, tuple[int, int]]:
    """step -> (first op, op after its last): a step runs from its first phase to the next step's."""
    starts: dict[int, int] = {}
    for op, _, step in phases:
        starts.setdefault(step, op)
    order = sorted(starts)
    return {s: (starts[s], starts[order[i + 1]] if i + 1 < len(order) else last_op + 1)
            for i, s in enumerate(order)}


def _to_x(op: int, bounds: dict[int, tuple[int, int]]) -> float:
    """x of aten op ``op``: its step plus its share of that step's ops (0 before the first step,
    the end of the last step after it)."""
    for step, (first, end) in bounds.items():
        if first <= op < end:
            return step + (op - first) / max(1, end - first)
    return float(max(bounds) + 1) if bounds and op >= bounds[max(bounds)][1] else 0.0


#: Ledger records not made by an aten op (memlint.estimate.step: the storages placed before the step).
PLACED = {"parameter": "placing the parameters", "buffer": "placing the buffers", "input": "placing the inputs"}


def op_text(op: str) -> str:
    """``aten.addmm`` for an aten op's name; words for the storages placed before the step and the
    workspaces (whose ledger names are descriptions such as ``cublas workspace (mm)``)."""
    if op in PLACED:
        return PLACED[op]
    return op if " " in op or op.startswith("aten.") else f"aten.{op}"


def _where(index: int, result) -> str:
    """'aten.addmm in layers.1 (Linear), forward of step 1' for the storage allocated at timeline point ``index``."""
    ledger = result.ledger
    if ledger is None or index >= len(ledger.events):
        return ""
    record = ledger.records[ledger.events[index][1]]
    module = module_label(record.module, ledger.module_classes)
    place = f" in {module}" if module else ""
    when = f"before the {step_name(record.step)}" if record.phase == "setup" else \
        f"{record.phase} of {step_name(record.step)}"
    return f"{op_text(record.op)}{place}, {when}"


def _picks(values: list[int], ops: list[int], keep: int, limit: int) -> list[int]:
    """Indices of the points drawn: per aten op its highest event (several events of one op share
    an x, and only the last would show), then at most ``limit`` of those (each window's highest),
    plus ``keep`` (the peak)."""
    per_op: list[int] = []
    for i, op in enumerate(ops):
        if per_op and ops[per_op[-1]] == op:
            if values[i] > values[per_op[-1]]:
                per_op[-1] = i
        else:
            per_op.append(i)
    n = len(per_op)
    stride = max(1, -(-n // limit))
    picks = {max(per_op[s:s + stride], key=values.__getitem__) for s in range(0, n, stride)}
    picks = {p for p in picks if p == keep or ops[p] != ops[keep]}
    picks.add(keep)
    return sorted(picks)


def plot_data(result, verdict=None, gpu: str | None = None) -> PlotData:
    """What :func:`write_plot` draws for ``result`` (an Estimate) and its ``verdict`` (a Verdict or None).

    gpu: the name of the target for the capacity line (default: ``result.gpu`` or "capacity").
    """
    timeline = result.timeline
    n = len(timeline.op_index)
    phases = merged_phases(timeline.phases)
    last_op = timeline.op_index[-1] if n else 0
    bounds = _step_bounds(phases, last_op)
    steady = next((op for op, _, step in phases if step == 1), 0)
    measured = [i for i in range(n) if timeline.op_index[i] >= steady] or list(range(n))
    peak = max(measured, key=lambda i: (timeline.allocated[i], -i)) if measured else 0
    limit = _limit(result, verdict, gpu, timeline)
    data_top = max(max(timeline.reserved, default=0), 1)
    top = max([data_top] + [v for v in _limit_values(limit) if on_scale(v, data_top)])
    unit, scale = plot_unit(top)
    picks = _picks(timeline.allocated, timeline.op_index, peak, MAX_POINTS) if n else []
    order = list(CATEGORY_LABELS) + [c for c in timeline.by_category if c not in CATEGORY_LABELS]
    cats = [c for c in order if any(timeline.by_category.get(c, ()))]
    peak_bytes = timeline.allocated[peak] if n else 0
    data = PlotData(
        x=[_to_x(timeline.op_index[i], bounds) for i in picks],
        stacks={c: [timeline.by_category[c][i] / scale for i in picks] for c in cats},
        reserved=[timeline.reserved[i] / scale for i in picks],
        unit=unit, scale=scale,
        phases=[_span(k, phases, bounds, last_op) for k in range(len(phases)) if phases[k][1] in PHASE_COLORS],
        steps=[Span(float(s), float(s + 1), step_name(s), s) for s in sorted(bounds)],
        peak_x=_to_x(timeline.op_index[peak], bounds) if n else 0.0,
        peak_bytes=peak_bytes,
        peak_label=_peak_label(peak_bytes, _where(peak, result)) if n else "",
        title=_title(result, verdict, gpu),
        limit=limit,
    )
    if result.options.device == "cpu":
        data.reserved_label, data.device = "CPU allocator (no cache: = allocated)", "CPU"
    data.off_scale = [(name, v) for name, v in zip(("capacity", "usable"), _limit_values(limit))
                      if not on_scale(v, data_top)]
    return data


def _peak_label(nbytes: int, where: str) -> str:
    return f"peak allocated {format_size(nbytes)}" + (f"\nat {where}" if where else "")


def on_scale(nbytes: int, data_top: int) -> bool:
    """Whether a limit of ``nbytes`` is drawn to scale over data reaching ``data_top`` bytes
    (at most :data:`OFF_SCALE_RATIO` times higher)."""
    return nbytes <= OFF_SCALE_RATIO * data_top


def _limit_values(limit) -> list[int]:
    return [] if limit is None else [limit.capacity, limit.usable]


def _span(k: int, phases, bounds, last_op: int) -> Span:
    start, phase, step = phases[k]
    end = phases[k + 1][0] if k + 1 < len(phases) else last_op + 1
    first, stop = bounds[step]
    end = min(end, stop)
    return Span(_to_x(start, bounds), step + (end - first) / max(1, stop - first), phase, step)


def _limit(result, verdict, gpu, timeline) -> Limit | None:
    """The capacity lines, or None without a verdict; ``first_over`` names the first op over the limit."""
    if verdict is None:
        return None
    overhead = max(0, result.device_used - result.peak_reserved)
    usable = max(0, verdict.usable_bytes - overhead)
    limit = Limit(gpu or result.gpu or "capacity", verdict.capacity_bytes, usable, verdict.reserve, overhead,
                  verdict.fits, verdict.headroom_bytes)
    over = next((i for i, r in enumerate(timeline.reserved) if r > usable), None)
    if usable == 0 and overhead:
        limit.first_over = (f"the CUDA context and libraries alone ({format_size(overhead, gib=False)}) take "
                            f"more than the usable {format_size(verdict.usable_bytes, gib=False)}")
    elif over is not None and not verdict.fits:
        limit.first_over = _where(over, result)
    return limit


def _title(result, verdict, gpu) -> str:
    head = (f"memlint estimate: {result.workload}, batch {result.batch_size}, {result.optimizer}, "
            f"{result.options.precision}")
    if verdict is None:
        return f"{head} (no --gpu or --capacity: no limit drawn)"
    where = gpu or result.gpu or "the given capacity"
    if verdict.fits:
        return f"{head}\nfits on {where}: headroom {format_size(verdict.headroom_bytes, gib=False)}"
    return (f"{head}\nDOES NOT FIT on {where}: needs {format_size(verdict.required_bytes, gib=False)} of device "
            f"memory, {format_size(verdict.usable_bytes, gib=False)} usable after the {verdict.reserve:.0%} "
            f"reserve: {format_size(-verdict.headroom_bytes, gib=False)} short")


def write_plot(result, path: str, verdict=None, gpu: str | None = None) -> None:
    """Draw :func:`plot_data` to ``path`` (.png at 110 dpi, or .svg with its text kept as text).

    Raises UsageError when the suffix is not .png/.svg or matplotlib is not installed.
    """
    if not path.lower().endswith((".png", ".svg")):
        raise UsageError(f"--plot {path!r}: the file name must end in .png or .svg")
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        raise UsageError("--plot needs matplotlib (pip install 'memlint[plot]')") from None
    data = plot_data(result, verdict, gpu)
    with plt.rc_context({"svg.fonttype": "none", "font.size": 9}):
        if data.off_scale:  # a broken y axis: the limits in a band of their own above the curve
            fig, (upper, ax) = plt.subplots(2, 1, sharex=True, figsize=(13, 6.5),
                                            gridspec_kw={"height_ratios": [1, 6], "hspace": 0.08})
        else:
            fig, ax = plt.subplots(figsize=(13, 6))
            upper = None
        _draw(ax, data, upper)
        if upper is None:  # with the band, the spacing above is kept; the saved box takes in the legend
            fig.tight_layout()
        fig.savefig(path, dpi=110, bbox_inches="tight")  # the legend beside the axes included
        plt.close(fig)


def _draw(ax, data: PlotData, upper=None) -> None:
    """The figure on the main axes ``ax``, and on ``upper`` (a band above it) the limits that are off its scale."""
    from matplotlib.patches import Patch  # noqa: PLC0415

    handles = []
    for span in data.phases:
        ax.axvspan(span.start, span.end, color=PHASE_COLORS[span.name], alpha=0.45 if span.step else 0.25,
                   zorder=0, lw=0)
        ax.axvline(span.start, color="#808080", lw=0.5, zorder=1)
    handles += [Patch(color=PHASE_COLORS[p], label=f"{p} phase") for p in PHASE_COLORS
                if any(s.name == p for s in data.phases)]
    if data.x:
        ax.stackplot(data.x, list(data.stacks.values()), labels=data.labels,
                     colors=[category_color(c) for c in data.stacks], step="post", zorder=2, lw=0)
        handles = [Patch(color=category_color(c), label=category_label(c)) for c in data.stacks] + handles
        # the stack's outline: a spike one op wide (often the peak) is thinner than a pixel as an area
        total = [sum(values) for values in zip(*data.stacks.values())]
        handles.append(ax.step(data.x, total, where="post", color="#303030", lw=0.7, zorder=3,
                               label="allocated (top of the stack)")[0])
        handles.append(ax.step(data.x, data.reserved, where="post", color="black", lw=1.2, ls="--", zorder=4,
                               label=data.reserved_label)[0])
    top = max(data.reserved, default=0) or 1
    if data.limit is not None:
        handles += _draw_limit(ax, data, top)
    if upper is not None:
        handles += _draw_upper(upper, ax, data)
    head = upper if upper is not None else ax
    _draw_steps(ax, data, labels=upper is None)
    if upper is not None:
        _draw_steps(upper, data)
    _draw_peak(ax, data)
    ax.set_xlim(0, max((s.end for s in data.steps), default=1))
    ax.set_ylim(0, ax.get_ylim()[1] * 1.12)
    ax.set_xticks(_ticks(data.steps))
    ax.set_xticklabels([f"{round(100 * (t % 1)):d}%" if t % 1 else "0%" for t in _ticks(data.steps)])
    ax.set_xlabel("progress through each training step (% of its aten ops); phase boundaries as thin lines")
    ax.set_ylabel(f"{data.device} memory ({data.unit})")
    head.set_title(data.title, color="#b00000" if data.limit is not None and not data.limit.fits else "black",
                   fontweight="bold", pad=22)
    head.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)


def _limit_line(ax, name: str, limit: Limit, scale: int):
    """The capacity (red) or usable (orange) line at its height in units of ``scale`` bytes."""
    if name == "capacity":
        return ax.axhline(limit.capacity / scale, color="#b00000", lw=1.8, zorder=5,
                          label=f"{limit.gpu} capacity {format_size(limit.capacity)}")
    return ax.axhline(limit.usable / scale, color="#e07000", lw=1.5, ls="-.", zorder=5, label=_usable_label(limit))


def _draw_upper(upper, ax, data: PlotData) -> list:
    """The off-scale limits in their own band, in their own unit, with the break marked on both axes."""
    unit, scale = plot_unit(max(v for _, v in data.off_scale))
    handles = [_limit_line(upper, name, data.limit, scale) for name, _ in data.off_scale]
    values = [v / scale for _, v in data.off_scale]
    pad = max((max(values) - min(values)) * 0.5, max(values) * 0.03)
    upper.set_ylim(min(values) - pad, max(values) + pad)
    upper.set_ylabel(unit)
    upper.text(0.5, 0.5, "y axis broken: the limits are far above the step's memory", transform=upper.transAxes,
               ha="center", va="center", fontsize=8, color="#505050", zorder=6,
               bbox={"boxstyle": "round", "fc": "white", "ec": "#a0a0a0"})
    upper.spines["bottom"].set_visible(False)
    ax.spines["top"].set_visible(False)
    upper.tick_params(bottom=False)
    for axes, y in ((upper, 0.0), (ax, 1.0)):  # the break: two short slanted strokes on each side
        for x in (0.0, 1.0):
            axes.plot([x - 0.005, x + 0.005], [y - 0.02, y + 0.02], transform=axes.transAxes, color="black",
                      lw=1, clip_on=False, zorder=8)
    return handles


def _draw_limit(ax, data: PlotData, top: float) -> list:
    """The capacity and usable lines where to scale, and the reserved memory over the limit hatched red."""
    from matplotlib.patches import Patch  # noqa: PLC0415

    limit = data.limit
    data_top = top * data.scale
    usable = limit.usable / data.scale
    handles = []
    for name, nbytes in (("capacity", limit.capacity), ("usable", limit.usable)):
        if on_scale(nbytes, data_top):
            handles.append(_limit_line(ax, name, limit, data.scale))
    if data.x and any(r > usable for r in data.reserved):
        over = [r > usable for r in data.reserved]
        ax.fill_between(data.x, usable, data.reserved, where=over, step="post", facecolor="none", hatch="///",
                        edgecolor="#d00000", lw=0, zorder=3)
        handles.append(Patch(facecolor="none", hatch="///", edgecolor="#d00000", label="over the usable limit"))
    if limit.first_over:
        text = limit.first_over if limit.usable == 0 else f"first over the limit: {limit.first_over}"
        ax.text(0.01, 0.97, text, transform=ax.transAxes, va="top",
                fontsize=8, color="#b00000", bbox={"boxstyle": "round", "fc": "white", "ec": "#b00000"}, zorder=6)
    return handles


def _usable_label(limit: Limit) -> str:
    text = f"usable limit {format_size(limit.usable)}\n= capacity - {limit.reserve:.0%} reserve"
    if limit.overhead:
        text += f"\n- CUDA context & libraries\n  {format_size(limit.overhead)}"
    return text


def _draw_steps(ax, data: PlotData, labels: bool = True) -> None:
    for span in data.steps:
        ax.axvline(span.start, color="black", lw=1.2, zorder=5)
        if labels:
            ax.text((span.start + span.end) / 2, 1.005, span.name + (" (not in the peak)" if span.step == 0 else ""),
                    transform=ax.get_xaxis_transform(), ha="center", va="bottom", fontsize=8, fontweight="bold")


def _draw_peak(ax, data: PlotData) -> None:
    if not data.peak_label:
        return
    y = data.peak_bytes / data.scale
    ax.plot([data.peak_x], [y], marker="v", color="#b00000", markersize=9, zorder=7)
    right = data.peak_x < (max((s.end for s in data.steps), default=1) * 0.6)
    ax.annotate(data.peak_label, (data.peak_x, y), xytext=(12 if right else -12, 14), textcoords="offset points",
                ha="left" if right else "right", va="bottom", fontsize=8, zorder=7,
                bbox={"boxstyle": "round", "fc": "white", "ec": "#b00000"},
                arrowprops={"arrowstyle": "-", "color": "#b00000"})


def _ticks(steps: list[Span]) -> list[float]:
    """Ticks at 0, 25, 50 and 75% of each step, and 100% of the last."""
    ticks = [s.start + q for s in steps for q in (0.0, 0.25, 0.5, 0.75)]
    return ticks + ([steps[-1].end - 1e-9] if steps else [])
