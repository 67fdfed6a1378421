import sys

import pytest

from memlint.errors import TargetError, UsageError
from memlint.estimate.units import parse_bytes, parse_fraction
from memlint.estimate.workload import load_workload, parse_input_spec

from estimate_helpers import target


def test_parse_bytes():
    assert parse_bytes("24GiB") == 24 * 2**30
    assert parse_bytes("40GB") == 40 * 10**9
    assert parse_bytes("512MiB") == 512 * 2**20
    assert parse_bytes("1.5 GiB") == int(1.5 * 2**30)
    with pytest.raises(UsageError, match="cannot parse byte size"):
        parse_bytes("lots")


def test_parse_fraction():
    assert parse_fraction("10%") == pytest.approx(0.1)
    assert parse_fraction("0.2") == pytest.approx(0.2)
    with pytest.raises(UsageError):
        parse_fraction("abc")


def test_input_spec():
    spec = parse_input_spec("int64[B,1024]")
    assert spec.dtype == "int64" and spec.shape == ("B", 1024)
    tensor = spec.make(3)
    assert tuple(tensor.shape) == (3, 1024) and tensor.device.type == "meta"


@pytest.mark.parametrize("text", ["float32(B,3)", "floaty[B,3]", "float32[B,x]", "float32[B,-1]"])
def test_bad_input_spec(text):
    with pytest.raises(UsageError) as info:
        parse_input_spec(text)
    assert text in str(info.value) and "\n" not in str(info.value)


def test_bad_targets(tmp_path):
    with pytest.raises(TargetError, match="must be"):
        load_workload("no_colon")
    with pytest.raises(TargetError, match="not found"):
        load_workload(str(tmp_path / "missing.py") + ":build")
    bad = tmp_path / "bad.py"
    bad.write_text("def raises():\n    raise ValueError('boom')\n\ndef wrong():\n    return 42\n")
    with pytest.raises(TargetError, match="raised ValueError: boom"):
        load_workload(f"{bad}:raises")
    with pytest.raises(TargetError, match="returned int"):
        load_workload(f"{bad}:wrong")
    with pytest.raises(TargetError, match="no callable 'nope'"):
        load_workload(f"{bad}:nope")


def test_module_factories_are_built_on_meta():
    workload = load_workload(target("mlp.py") + ":bare", ["float32[B,784]"], batch_size=4)
    assert all(p.device.type == "meta" for p in workload.module.parameters())
    assert workload.default_batch_size == 4
    (x,) = workload.make_inputs(4)
    assert tuple(x.shape) == (4, 784)
    pair = load_workload(target("mlp.py") + ":with_inputs")
    assert pair.default_batch_size == 8


def test_package_module_targets_resolve_from_the_working_directory(tmp_path, monkeypatch):
    import sys
    from pathlib import Path

    project = tmp_path / "project"
    (project / "mypkg").mkdir(parents=True)
    (project / "mypkg" / "__init__.py").write_text("")
    models = Path(__file__).resolve().parents[2] / "fixtures" / "models" / "mlp.py"
    (project / "mypkg" / "nets.py").write_text(models.read_text())
    monkeypatch.chdir(project)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(project))])
    monkeypatch.delitem(sys.modules, "mypkg", raising=False)
    workload = load_workload("mypkg.nets:build")
    assert next(workload.module.parameters()).device.type == "meta"


def test_file_target_imports_its_sibling_modules(tmp_path, monkeypatch):
    """``path/to/model.py:build`` imports ``from netdef import Net`` beside it, as ``python path/to/model.py`` would."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "netdef_sibling.py").write_text("import torch.nn as nn\nNet = lambda: nn.Linear(8, 2)\n")
    (tmp_path / "model_with_sibling.py").write_text(
        "import torch\nfrom memlint import Workload\nfrom netdef_sibling import Net\n"
        "def build(batch_size=4):\n"
        "    return Workload(module=Net(), make_inputs=lambda b: (torch.randn(b, 8),), default_batch_size=batch_size)\n")
    workload = load_workload(f"{tmp_path / 'model_with_sibling.py'}:build")
    assert type(workload.module).__name__ == "Linear"


def test_misspelt_factory_gets_a_suggestion(tmp_path):
    (tmp_path / "m.py").write_text("def build():\n    pass\n")
    with pytest.raises(TargetError, match=r"no callable 'buld'; did you mean 'build'\?"):
        load_workload(f"{tmp_path / 'm.py'}:buld")
