"""MEM206 deprecated-amp-api: fixes keep arguments and the file's spelling of torch."""

import pytest

from rule_helpers import fix_pairs, fixed, lines


@pytest.mark.parametrize(("source", "target"), fix_pairs("MEM206"), ids=lambda p: p.name)
def test_fix_pairs(source, target):
    assert fixed("MEM206", source, unsafe=False) == target.read_text()


def test_from_import_without_torch_import_has_no_fix(tmp_path):
    path = tmp_path / "a.py"
    path.write_text("from torch.cuda.amp import autocast\nwith autocast():\n    pass\n")
    assert lines("MEM206", path.read_text()) == [2]
    assert fixed("MEM206", path, unsafe=True) == path.read_text()


def test_cpu_alias_gets_cpu_device(tmp_path):
    path = tmp_path / "a.py"
    path.write_text("import torch\nwith torch.cpu.amp.autocast(dtype=torch.bfloat16):\n    pass\n")
    assert fixed("MEM206", path, unsafe=False) == 'import torch\nwith torch.amp.autocast("cpu", dtype=torch.bfloat16):\n    pass\n'


def test_fixed_file_is_clean(tmp_path):
    for source, _ in fix_pairs("MEM206"):
        path = tmp_path / source.name
        path.write_text(fixed("MEM206", source, unsafe=False))
        assert lines("MEM206", path.read_text()) == []
