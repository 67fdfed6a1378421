"""The estimate cache: an unchanged `memlint --estimate` does not trace again;
an edit to the script, the target or a project file it imports does."""

from __future__ import annotations

import json

import pytest

from memlint.cli import main
from memlint.integrate import isolation

from .conftest import PROJECT_MLP, make_project

SCRIPT = (f"# memlint: estimate target={PROJECT_MLP} capacity=600MiB reserve=0% advise=false\n"
          "import torch\nBATCH_SIZE = 8\nloader = torch.utils.data.DataLoader(range(8), batch_size=BATCH_SIZE)\n")


@pytest.fixture
def workers(monkeypatch):
    """Counts the estimate child processes started."""
    calls = []
    real = isolation.run_worker

    def counting(*args, **kwargs):
        calls.append(args[0]["path"])
        return real(*args, **kwargs)

    monkeypatch.setattr(isolation, "run_worker", counting)
    return calls


def _estimates(root, capsys, *extra) -> list[dict]:
    assert main(["--estimate", "--format", "json", "--jobs", "1", *extra, str(root / "train.py")]) in (0, 1)
    return json.loads(capsys.readouterr().out)["estimates"]


def test_hits_and_misses(tmp_path, capsys, workers):
    root = make_project(tmp_path)
    (root / "models" / "helper.py").write_text("WIDTH = 256\n")
    mlp = root / "models" / "mlp.py"
    mlp.write_text("from helper import WIDTH  # noqa: F401\n" + mlp.read_text())
    (root / "train.py").write_text(SCRIPT)
    first = _estimates(root, capsys)
    assert workers == [str(root / "train.py")] and first[0]["error"] is None
    second = _estimates(root, capsys)
    assert len(workers) == 1 and second == first  # served from the cache
    (root / "models" / "helper.py").write_text("WIDTH = 256  # edited\n")
    _estimates(root, capsys)
    assert len(workers) == 2  # an imported project file changed
    (root / "train.py").write_text(SCRIPT.replace("BATCH_SIZE = 8", "BATCH_SIZE = 16"))
    assert _estimates(root, capsys)[0]["recipe"]["batch-size"]["value"] == 16
    assert len(workers) == 3
    _estimates(root, capsys, "--advise")
    assert len(workers) == 4  # other options


def test_failures_are_not_cached(tmp_path, capsys, workers):
    root = make_project(tmp_path)
    (root / "train.py").write_text(SCRIPT.replace("mlp.py:build", "mlp.py:no_such_factory"))
    for _ in range(2):
        assert main(["--estimate", "--format", "json", str(root / "train.py")]) == 2
        capsys.readouterr()
    assert len(workers) == 2
