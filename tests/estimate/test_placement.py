"""Model parallel by placement (memlint/estimate/placement.py): one ledger per device.

No GPU here, so a split across two devices cannot be run for real; these
tests check each device's persistent memory by arithmetic from the fixture's
shapes (fixtures/models/placement_split.py) and the per-device replays against
the one-ledger replay of the same trace.
"""

import argparse
import io
import json
from collections import Counter

import jsonschema
import pytest
import torch

from memlint.errors import TargetError, UsageError
from memlint.estimate import placement
from memlint.estimate.api import EstimateOptions, _replay, estimate, fits, max_batch_size
from memlint.estimate.cli import add_estimate_arguments, run_estimate
from memlint.estimate.report import render_table
from memlint.estimate.workload import load_workload

from estimate_helpers import ROOT, target

SPLIT = target("placement_split.py")
BATCH = 256
FLOAT32 = 4
#: the fixture's halves: Linear(784, 1024) + Linear(1024, 1024) on cuda:0, Linear(1024, 512) + Linear(512, 10) on cuda:1
FIRST_HALF = (784 * 1024 + 1024) + (1024 * 1024 + 1024)
SECOND_HALF = (1024 * 512 + 512) + (512 * 10 + 10)
SCHEMA = json.loads((ROOT / "docs" / "schemas" / "memlint-estimate-v2.schema.json").read_text())


def run_split(factory: str = "build", **options):
    options.setdefault("gpu", "A100-80GB")
    return estimate(load_workload(f"{SPLIT}:{factory}"), EstimateOptions(batch_size=BATCH, **options))


@pytest.fixture(scope="module")
def split():
    return run_split()


def alive_at_end(result) -> Counter:
    """Bytes per (device, category) of the storages alive when the trace ends (after the last optimizer step)."""
    totals = Counter()
    for record in result.ledger.records.values():
        if record.died is None:
            totals[(record.device, record.category)] += record.nbytes
    return totals


def test_each_half_keeps_its_parameters_gradients_and_adam_state_on_its_device(split):
    alive = alive_at_end(split)
    for device, count in ((0, FIRST_HALF), (1, SECOND_HALF)):
        assert alive[(device, "parameter")] == count * FLOAT32
        assert alive[(device, "gradient")] == count * FLOAT32
        assert alive[(device, "optimizer_state")] == 2 * count * FLOAT32  # Adam: exp_avg and exp_avg_sq
    assert {device for device, _ in alive} == {0, 1}


def test_activations_are_counted_on_the_device_of_their_module(split):
    activations = [r for r in split.ledger.records.values()
                   if r.category == "activation" and r.step == 1 and r.module.startswith(("seq1", "seq2"))]
    assert {r.device for r in activations if r.module.startswith("seq1")} == {0}
    assert {r.device for r in activations if r.module.startswith("seq2")} == {1}
    # the activation that crosses: hidden.to("cuda:1"), a new storage on cuda:1 (saved by seq2.0),
    # and its gradient copied back to cuda:0 in the backward (ToCopyBackward0)
    crossing = BATCH * 1024 * FLOAT32
    forward = [r for r in split.ledger.records.values() if r.op == "clone" and r.step == 1 and r.phase == "forward"]
    backward = [r for r in split.ledger.records.values() if r.op == "clone" and r.step == 1 and r.phase == "backward"]
    assert [(r.device, r.nbytes, r.category) for r in forward] == [(1, crossing, "activation")]
    assert [(r.device, r.nbytes) for r in backward] == [(0, crossing)]


def test_targets_made_with_device_of_the_output_follow_the_output(split):
    targets = [r for r in split.ledger.records.values() if r.nbytes == BATCH * 8 and r.step == 1]  # int64 class ids
    assert targets and {r.device for r in targets} == {1}


def test_per_device_replays_bound_the_one_ledger_replay(split):
    """Exact bytes (the CPU allocator model: no rounding, no cache): no device peaks above the
    one-ledger peak of the same trace, and the one-ledger peak is at most the sum of the device peaks."""
    total = _replay(split.ledger, split.options, cpu=True).allocator.peak_allocated
    per_device = [d.peak_allocated for d in placement.per_device(split.ledger, split.options, 0, cpu=True)]
    assert len(per_device) == 2
    assert max(per_device) < total <= sum(per_device)


def test_each_device_used_pays_its_own_cuda_context(split):
    context = split.overheads["cuda_context"]["bytes"]
    assert context > 0
    for entry in split.devices:
        assert entry["device_used"] == entry["peak_reserved"] + context
    assert [d["device"] for d in split.devices] == ["cuda:0", "cuda:1"]
    # the one-ledger total (every device in one allocator) counts one context; the devices one each
    assert split.device_used == split.peak_reserved + context
    assert sum(d["device_used"] for d in split.devices) == sum(d["peak_reserved"] for d in split.devices) + 2 * context


def test_the_split_holds_what_the_one_device_model_holds(split):
    """Same layers on one device: its parameters, gradients and optimizer state are the two devices' together."""
    one = run_split("build_one_device")
    assert one.devices == []
    alive_one, alive_split = alive_at_end(one), alive_at_end(split)
    for category in ("parameter", "gradient", "optimizer_state"):
        assert alive_one[(0, category)] == alive_split[(0, category)] + alive_split[(1, category)]


def test_device_arguments_place_like_module_moves(split):
    """``device=0`` / ``torch.device("cuda", 1)`` factory arguments and ``Tensor.cuda(i)`` give the same devices."""
    factory = run_split("build_factory_kwargs")
    assert factory.devices == split.devices


def test_a_move_to_the_device_of_another_tensor_places_like_a_named_device(split):
    assert run_split("build_moved_like").devices == split.devices


def test_clip_grad_norm_over_both_devices_traces_and_keeps_each_device_state(split):
    """clip_grad_norm_ moves each device's norm with ``.to(first_device)`` (meta in the trace): a floating scalar."""
    clipped = run_split("build_clipped")
    alive, alive_split = alive_at_end(clipped), alive_at_end(split)
    for key in [(d, c) for d in (0, 1) for c in ("parameter", "gradient", "optimizer_state")]:
        assert alive[key] == alive_split[key]
    assert [d["device"] for d in clipped.devices] == ["cuda:0", "cuda:1"]


def test_an_op_on_two_devices_is_an_error_naming_op_module_and_devices():
    with pytest.raises(TargetError) as caught:
        run_split("build_unmoved")
    message = str(caught.value)
    assert "\n" not in message
    assert "aten.addmm" in message and "'seq2.0'" in message
    assert "cuda:0" in message and "cuda:1" in message


def test_the_verdict_is_decided_by_the_largest_device(split):
    largest = max(d["device_used"] for d in split.devices)
    assert largest < split.device_used  # the one-ledger total would need more
    capacity = largest + 1  # usable = capacity with no reserve
    verdict = fits(split, capacity, reserve=0.0)
    assert verdict.fits and verdict.required_bytes == largest
    assert not fits(split, largest - 1, reserve=0.0).fits


def test_max_batch_size_is_searched_on_the_largest_device():
    workload = load_workload(f"{SPLIT}:build")
    options = EstimateOptions(gpu="A100-80GB", steps=2)
    small = estimate(workload, EstimateOptions(batch_size=1, gpu="A100-80GB", steps=2))
    capacity = max(d["device_used"] for d in small.devices) + 8 * 2**20
    best = max_batch_size(workload, options, capacity, reserve=0.0, limit=1024)
    assert 1 <= best < 1024
    from dataclasses import replace

    at_best = estimate(workload, replace(options, batch_size=best))
    assert fits(at_best, capacity, 0.0).fits
    assert at_best.device_used > capacity  # the one-ledger total (both devices together) would not fit
    assert not fits(estimate(workload, replace(options, batch_size=best + 1)), capacity, 0.0).fits


def test_one_device_output_has_no_devices_entry():
    one = run_split("build_one_device")
    assert "devices" not in one.to_json()
    text = io.StringIO()
    render_table(one, file=text)
    assert "Memory per device" not in text.getvalue()


def test_the_report_shows_each_device_and_the_json_validates(split, capsys):
    text = io.StringIO()
    render_table(split, fits(split, 80 * 2**30), file=text)
    output = text.getvalue()
    assert "Memory per device" in output and "cuda:0 (largest)" in output and "cuda:1" in output
    assert "Predicted CUDA memory (all devices in one ledger)" in output
    assert "on cuda:0, the device that needs the most" in output
    parser = argparse.ArgumentParser()
    add_estimate_arguments(parser)
    assert run_estimate(parser.parse_args([f"{SPLIT}:build", "--gpu", "A100-80GB", "--format", "json"])) == 0
    document = json.loads(capsys.readouterr().out)
    jsonschema.validate(document, SCHEMA)
    assert [d["device"] for d in document["devices"]] == ["cuda:0", "cuda:1"]
    assert document["devices"][1]["by_category"]["parameter"] == SECOND_HALF * FLOAT32


def test_parallel_with_placement_is_a_usage_error():
    with pytest.raises(UsageError, match="placed on several devices"):
        run_split(parallel="ddp", world_size=2)


@pytest.mark.parametrize("value, index", [
    ("cuda", 0), ("cuda:3", 3), (torch.device("cuda", 2), 2), (torch.device("cuda"), 0), (1, 1),
    ("cpu", None), ("meta", None), (True, None), (None, None)])
def test_device_arguments_name_cuda_indices(value, index):
    assert placement.cuda_index(value) == index


def test_a_malformed_cuda_device_is_a_usage_error():
    with pytest.raises(UsageError, match="'cuda:x'"):
        placement.cuda_index("cuda:x")


def test_the_advisor_ranks_by_the_largest_device_and_offers_no_engine(split):
    from memlint.estimate.advisor import advise, not_offered

    rows = advise(load_workload(f"{SPLIT}:build"), split, full=True, run=estimate)
    assert rows and not any(row.key.startswith(("ddp", "fsdp")) for row in rows)
    largest = max(d["device_used"] for d in split.devices)
    sgd = next(row for row in rows if row.key == "sgd")
    assert sgd.saved == largest - max(d["device_used"] for d in estimate(
        load_workload(f"{SPLIT}:build"), sgd.options).devices)
    assert "DDP / FSDP2 sharding" in not_offered(split, rows)


def test_offloaded_activations_come_back_to_the_device_they_left():
    result = run_split(offload_activations=True)
    unpacked = [r for r in result.ledger.records.values() if r.op == "empty_strided" and r.phase == "backward"]
    assert {r.device for r in unpacked} == {0, 1}


def test_every_way_of_naming_a_device_places_the_tensor():
    from torch import nn

    from memlint.estimate.handlers import make_cuda_to_meta_mode

    with torch.device("meta"), make_cuda_to_meta_mode():
        with torch.device("cuda:1"):
            in_context = nn.Linear(4, 4)
        module_to_int = nn.Linear(4, 4).to(1)
        factory_int = torch.zeros(3, device=2)
        module_cuda = nn.Linear(4, 4).cuda(device=3)
        moved = torch.ones(2, device="cuda:1").to(torch.device("cuda", 2))
        same = moved.to("cuda:2")
        default = torch.ones(2, device="cuda")
    devices = [placement.device_of(t) for t in (in_context.weight, module_to_int.weight, factory_int,
                                                module_cuda.bias, moved, default)]
    assert devices == [1, 1, 2, 3, 2, 0]
    assert same is moved  # a move to the device it is on returns the tensor, as Tensor.to does
    assert all(t.device.type == "meta" for t in (in_context.weight, factory_int, moved))


def test_validate_refuses_a_placed_workload_before_measuring():
    from memlint.validate.session import validate

    with pytest.raises(UsageError, match=r"several devices \(cuda:0, cuda:1\)"):
        validate(f"{SPLIT}:build", [], EstimateOptions(batch_size=8), "cpu", 1, 2)


def test_a_bf16_cast_keeps_each_half_on_its_device_also_when_traced_again_in_place():
    workload = load_workload(f"{SPLIT}:build")
    workload.factory = None  # traced in place: the cast is undone on the same module
    for _ in range(2):
        result = estimate(workload, EstimateOptions(batch_size=BATCH, gpu="A100-80GB", precision="bf16"))
        alive = alive_at_end(result)
        assert alive[(0, "parameter")] == FIRST_HALF * 2 and alive[(1, "parameter")] == SECOND_HALF * 2
    assert {placement.device_of(p) for p in workload.module.seq2.parameters()} == {1}


def test_the_snapshot_holds_each_device_segments_and_trace(split, tmp_path):
    import pickle

    from torch.cuda import _memory_viz

    from memlint.estimate.snapshot import write_snapshot

    path = tmp_path / "split.pickle"
    write_snapshot(split, str(path))
    snapshot = pickle.loads(path.read_bytes())
    assert len(snapshot["device_traces"]) == 2 and all(snapshot["device_traces"])
    for entry in split.devices:  # segments are never returned: what is reserved at the end is the peak
        reserved = sum(s["total_size"] for s in snapshot["segments"] if s["device"] == entry["index"])
        assert reserved == entry["peak_reserved"]
    addresses = [s["address"] for s in snapshot["segments"]]
    assert len(addresses) == len(set(addresses))
    _memory_viz.segsum(snapshot)  # PyTorch's reader checks its own accounting of every segment


def test_the_summary_format_prints_one_table_per_device(capsys):
    parser = argparse.ArgumentParser()
    add_estimate_arguments(parser)
    assert run_estimate(parser.parse_args([f"{SPLIT}:build", "--gpu", "A100-80GB", "--format", "summary"])) == 0
    out = capsys.readouterr().out
    assert out.count("PyTorch CUDA memory summary, device ID 0") == 1
    assert out.count("PyTorch CUDA memory summary, device ID 1") == 1


@pytest.mark.parametrize("named", ["cuda:128", "cuda:99999", 128])
def test_a_device_index_torch_cannot_hold_is_a_one_line_error(named):
    from memlint.errors import UsageError
    from memlint.estimate.placement import MAX_DEVICE_INDEX, cuda_index

    assert cuda_index(f"cuda:{MAX_DEVICE_INDEX}") == MAX_DEVICE_INDEX
    with pytest.raises(UsageError, match="a CUDA device index is 0 to 127"):
        cuda_index(named)
