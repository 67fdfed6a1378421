"""The hostile pull request: scratch trees whose files try to make memlint run them.

Every tree is a project of its own (a ``pyproject.toml`` at its root) under
``tmp_path``. Code planted in a tree announces that it ran by creating a
*marker file* (:func:`marker_code`); the tests assert that the markers of
plain ``memlint check`` never appear. memlint runs in a subprocess whose
environment carries a token unique to the test: :func:`run_cli` fails the
test when a process with that token outlives the run (an orphan of an
estimate).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FORMATS = ("full", "concise", "json", "github", "sarif")
#: A file every scratch tree carries: one MEM303 finding at 2:9, the proof
#: that the other files' findings are still reported.
BUGGY_NAME = "buggy.py"
BUGGY = "import torch; torch.cuda.init()\nstate = torch.load('ckpt.pt').cuda()\n"
#: Enough for python + torch in the estimate child, small for the machine.
SMALL_MEMORY = "1GiB"


def marker_code(marker: Path) -> str:
    """Python that creates ``marker`` when it runs."""
    return f"open({str(marker)!r}, 'w').close()\n"


def make_tree(root: Path, files: dict[str, str], pyproject: str = "[project]\nname = 'scratch'\n") -> Path:
    """A project at ``root`` with ``files`` (name -> text) and BUGGY_NAME."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    for name, text in {BUGGY_NAME: BUGGY, **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def script_with_target(target: str, extra: str = "") -> str:
    """A training script whose estimate comment names ``target``."""
    return (f"# memlint: estimate target={target} capacity=40GiB {extra}\n"
            "import torch\nBATCH_SIZE = 4\nloader = torch.utils.data.DataLoader(range(8), batch_size=BATCH_SIZE)\n")


def orphans(token: str) -> list[int]:
    """IDs of live processes whose environment carries ``token`` (Linux /proc)."""
    found = []
    needle = f"MEMLINT_TEST_TOKEN={token}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def run_cli(*args: str, cwd: Path, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m memlint ARGS`` in ``cwd``; bytes output; fails on orphans."""
    token = uuid.uuid4().hex
    environment = {**os.environ, "NO_COLOR": "1", "MEMLINT_TEST_TOKEN": token, **(env or {})}
    completed = subprocess.run([sys.executable, "-m", "memlint", *args], cwd=cwd, capture_output=True,
                               timeout=timeout, env=environment, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 5
    while orphans(token) and time.monotonic() < deadline:
        time.sleep(0.1)  # a SIGKILLed process takes a moment to disappear
    left = orphans(token)
    for pid in left:  # do not leave them to the next test
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    assert not left, f"processes outlived memlint: {left}"
    return completed


def error_lines(completed: subprocess.CompletedProcess) -> list[str]:
    return [line for line in completed.stderr.decode("utf-8", "replace").splitlines()
            if line.startswith("memlint: error:")]


@pytest.fixture
def tree(tmp_path):
    """``tree(files, pyproject=...)``: make a scratch project under tmp_path/'tree'."""
    def make(files: dict[str, str], **kwargs) -> Path:
        return make_tree(tmp_path / "tree", files, **kwargs)

    return make
