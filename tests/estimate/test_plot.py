"""``memlint estimate --plot``: what the figure says is computed from the estimate and its verdict."""

import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest

from memlint.estimate.api import EstimateOptions, estimate, fits
from memlint.estimate.plot import (category_label, format_size, merged_phases, module_label, plot_data, plot_unit,
                                   write_plot)
from memlint.estimate.workload import load_workload

from estimate_helpers import target

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def mlp_cuda():
    return estimate(load_workload(target("mlp.py") + ":build"), EstimateOptions(gpu="T4"))


@pytest.fixture(scope="module")
def mlp_cpu():
    return estimate(load_workload(target("mlp.py") + ":build"), EstimateOptions(device="cpu"))


def svg_text(path) -> str:
    """All text of an SVG written with svg.fonttype 'none' (text kept as <text> elements)."""
    return " ".join(" ".join(node.itertext()) for node in ET.parse(path).getroot().iter()
                    if node.tag.endswith("text"))


def test_phases_are_merged_per_step_and_the_unit_is_readable():
    traced = [(0, "forward", 0), (2, "forward", 0), (21, "backward", 0), (69, "optimizer", 0),
              (120, "forward", 1), (122, "forward", 1)]
    assert merged_phases(traced) == [(0, "forward", 0), (21, "backward", 0), (69, "optimizer", 0), (120, "forward", 1)]
    assert plot_unit(3 * 2**30) == ("GiB", 2**30)
    assert plot_unit(5 * 2**20) == ("MiB", 2**20)
    assert plot_unit(1536) == ("KiB", 1024)
    assert plot_unit(0) == ("bytes", 1)
    assert format_size(3 * 2**29) == "1.50 GiB" and format_size(2**20) == "1.00 MiB (0.001 GiB)"
    assert module_label("1", {"1": "Linear"}) == "1 (Linear)"
    assert module_label("Sequential", {"Sequential": "Sequential"}) == "Sequential (root)"


def test_the_peak_and_the_usable_limit_come_from_the_estimate(mlp_cuda):
    verdict = fits(mlp_cuda, mlp_cuda.device_used - 2**20, reserve=0.0)
    data = plot_data(mlp_cuda, verdict, "custom")
    assert data.peak_bytes == mlp_cuda.peak_allocated
    assert data.peak_label.startswith(f"peak allocated {format_size(mlp_cuda.peak_allocated)}\nat aten.")
    overhead = mlp_cuda.device_used - mlp_cuda.peak_reserved
    assert data.limit.usable == verdict.usable_bytes - overhead and not data.limit.fits
    assert data.limit.first_over and max(data.reserved) * data.scale > data.limit.usable
    assert "DOES NOT FIT" in data.title
    # the steps: warm-up then the measured ones, each one unit of x wide; phases inside their step
    assert [s.name for s in data.steps] == ["warm-up step", "step 1", "step 2"]
    assert all(s.step <= p.start <= p.end <= s.step + 1 for p in data.phases for s in data.steps if s.step == p.step)
    assert data.x == sorted(data.x) and 0 <= data.x[0] and data.x[-1] <= 3
    assert data.x.count(data.peak_x) == 1  # one point per op: the op's highest, so a one-op peak is drawn


def test_png_and_svg_name_capacity_peak_phases_and_categories(mlp_cpu, tmp_path):
    capacity = 2 * mlp_cpu.peak_reserved  # on the scale of the curve: both lines drawn
    verdict = fits(mlp_cpu, capacity, reserve=0.1)
    png, svg = tmp_path / "t.png", tmp_path / "t.svg"
    write_plot(mlp_cpu, str(png), verdict, "custom")
    write_plot(mlp_cpu, str(svg), verdict, "custom")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = svg_text(svg)
    assert f"custom capacity {format_size(capacity)}" in text
    assert f"usable limit {format_size(verdict.usable_bytes)}" in text
    assert f"peak allocated {format_size(mlp_cpu.peak_allocated)}" in text
    categories = [c for c, values in mlp_cpu.timeline.by_category.items() if any(values)]
    assert categories and all(category_label(c) in text for c in categories)
    phases = {phase for _, phase, _ in mlp_cpu.timeline.phases}
    assert phases == {"forward", "backward", "optimizer"} and all(f"{p} phase" in text for p in phases)
    assert "step 2" in text and "fits on custom" in text


def test_limits_far_above_the_curve_get_a_band_of_their_own(mlp_cuda, tmp_path):
    verdict = fits(mlp_cuda, 15 * 2**30, reserve=0.1)
    data = plot_data(mlp_cuda, verdict, "T4")
    assert data.off_scale == [("capacity", 15 * 2**30), ("usable", data.limit.usable)]
    assert data.unit == plot_unit(mlp_cuda.peak_reserved)[0]  # the curve keeps its own scale
    svg = tmp_path / "t.svg"
    write_plot(mlp_cuda, str(svg), verdict, "T4")
    text = svg_text(svg)
    assert f"T4 capacity {format_size(15 * 2**30)}" in text and f"usable limit {format_size(data.limit.usable)}" in text
    assert "y axis broken" in text and "fits on T4" in text
    no_limit = plot_data(replace(mlp_cuda), None)
    assert no_limit.limit is None and no_limit.off_scale == [] and "no --gpu or --capacity" in no_limit.title


def test_a_category_the_plot_does_not_know_is_stacked_under_its_own_name(mlp_cpu):
    timeline = mlp_cpu.timeline
    extra = [1024] * len(timeline.op_index)
    result = replace(mlp_cpu, timeline=replace(timeline, by_category={**timeline.by_category, "new_kind": extra,
                                                                      "communication": extra}))
    data = plot_data(result)
    assert list(data.stacks)[-1] == "new_kind" and data.labels[-1] == "new kind"
    assert "communication buffers (collectives)" in data.labels
