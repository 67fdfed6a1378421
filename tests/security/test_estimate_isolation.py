"""`memlint --estimate`: a factory that raises, fails in backward, exits,
crashes, hangs or takes all memory costs its own estimate only -- one line
naming the script and what happened, exit 2, the other files' findings in
every format, no process left behind (run_cli checks). Item 2 of issue 18."""

from __future__ import annotations

import json
import time

import pytest

from .conftest import FORMATS, SMALL_MEMORY, error_lines, run_cli, script_with_target

FACTORIES = '''\
import ctypes
import os
import subprocess
import sys
import time

import torch
from torch import nn


class FailInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("backward failed on purpose")


class Model(nn.Module):
    def __init__(self, fail=False):
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.fail = fail

    def forward(self, x):
        y = self.linear(x)
        return FailInBackward.apply(y) if self.fail else y


def raises():
    raise ValueError("boom in the factory")


def fails_in_backward():
    return Model(fail=True), torch.zeros(2, 4)


def calls_sys_exit():
    sys.exit(3)


def calls_os_exit():
    os._exit(0)


def segfaults():
    ctypes.string_at(0)


def aborts():
    os.abort()


def hangs():
    time.sleep(10_000)


def eats_memory():
    hoard = []
    while True:
        hoard.append(b"x" * 2**26)


def forks_and_eats():
    for _ in range(3):
        if os.fork() == 0:
            hoard = b"x" * (400 * 2**20)
            time.sleep(10_000)
    time.sleep(10_000)


def chatters():
    # writes progress messages into memlint's own pipe (its number is the worker's last argument), forever
    while True:
        os.write(int(sys.argv[-1]), b'{"progress": "still busy"}\\n')
        time.sleep(0.01)


def writes_garbage():
    os.write(int(sys.argv[-1]), b"not json\\n")
    time.sleep(10_000)


def leaves_a_sleeper():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(10_000)"])
    return Model(), torch.zeros(2, 4)
'''

#: factory -> what its one error line says
FAILURES = {
    "raises": "raised ValueError: boom in the factory",
    "fails_in_backward": "backward failed on purpose",
    "calls_sys_exit": "called sys.exit(3)",
    "calls_os_exit": "exited with status 0 without a result",
    "segfaults": "crashed (SIGSEGV",
    "aborts": "crashed (SIGABRT",
    "hangs": "did not finish within 4 s (--estimate-timeout)",
    "eats_memory": "MemoryError (memory limit 1.0 GiB, --estimate-memory)",
    "forks_and_eats": "over its memory limit of 1,024 MiB (--estimate-memory)",
    "writes_garbage": "sent a message that is not JSON; stopped",
}


def _buggy_is_reported(fmt: str, stdout: bytes) -> bool:
    text = stdout.decode("utf-8", "replace")
    if fmt == "json":
        return [(d["path"], d["start_line"]) for d in json.loads(text)["diagnostics"]] == [("./buggy.py", 2)]
    if fmt == "sarif":
        [run] = json.loads(text)["runs"]
        located = [r["locations"][0]["physicalLocation"] for r in run["results"]]
        return ([(p["artifactLocation"]["uri"], p["region"]["startLine"]) for p in located] == [("buggy.py", 2)]
                and run["invocations"][0]["executionSuccessful"] is False)
    if fmt == "github":
        return "file=./buggy.py,line=2,col=9" in text
    return "./buggy.py:2:9:" in text


def _run_one(tree, factory: str, fmt: str, timeout: str = "120"):
    root = tree({"factories.py": FACTORIES, "train.py": script_with_target(f"factories.py:{factory}")})
    completed = run_cli("--estimate", "--estimate-timeout", timeout, "--estimate-memory", SMALL_MEMORY,
                        "--format", fmt, ".", cwd=root, timeout=180)
    assert completed.returncode == 2, completed.stderr
    [line] = error_lines(completed)
    assert line.startswith(f"memlint: error: ./train.py: estimate (target factories.py:{factory}) failed: "), line
    assert FAILURES[factory] in line, line
    assert b"Traceback" not in completed.stderr
    assert _buggy_is_reported(fmt, completed.stdout), completed.stdout


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_reports_the_other_files_beside_a_failed_estimate(tree, fmt):
    _run_one(tree, "raises", fmt)


def test_a_hanging_factory_is_stopped_at_the_timeout(tree):
    started = time.monotonic()
    _run_one(tree, "hangs", "concise", timeout="4")
    assert time.monotonic() - started < 30


def test_a_stream_of_messages_cannot_hold_off_the_timeout(tree):
    FAILURES["chatters"] = FAILURES["hangs"]
    try:
        started = time.monotonic()
        _run_one(tree, "chatters", "json", timeout="4")
        assert time.monotonic() - started < 30
    finally:
        del FAILURES["chatters"]


def test_all_failures_at_once_one_line_each_and_the_good_estimate_kept(tree):
    failing = [name for name in FAILURES if name != "hangs"]  # the hang has its own test
    scripts = {f"train_{name}.py": script_with_target(f"factories.py:{name}") for name in (*failing, "leaves_a_sleeper")}
    root = tree({"factories.py": FACTORIES, **scripts})
    completed = run_cli("--estimate", "--estimate-memory", SMALL_MEMORY, "--format", "json", ".", cwd=root, timeout=600)
    assert completed.returncode == 2
    document = json.loads(completed.stdout)
    lines = error_lines(completed)
    assert len(lines) == len(failing) == len(document["errors"])
    for name in failing:
        [line] = [line for line in lines if f"train_{name}.py:" in line]
        assert FAILURES[name] in line, line
    [good] = [e for e in document["estimates"] if e["path"].endswith("train_leaves_a_sleeper.py")]
    assert good["error"] is None and good["estimate"]["device_used"] > 0
    assert [d["path"] for d in document["diagnostics"]] == ["./buggy.py"]


def test_memlint_estimate_stops_a_target_that_swallows_its_timeout(tmp_path):
    """`memlint estimate` runs its target in-process (the user named it); a
    factory that catches everything, the timeout's exception included, is
    ended HARD_STOP_GRACE_SECONDS after --timeout with one line and exit 2."""
    from memlint.estimate.cli import HARD_STOP_GRACE_SECONDS

    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'scratch'\n")
    (tmp_path / "stubborn.py").write_text(
        "import time\n"
        "def build(batch_size=8):\n"
        "    while True:\n"
        "        try:\n"
        "            time.sleep(0.2)\n"
        "        except:  # noqa: E722 -- swallows the timeout on purpose\n"
        "            continue\n")
    started = time.monotonic()
    completed = run_cli("estimate", "stubborn.py:build", "--timeout", "2", cwd=tmp_path, timeout=60)
    elapsed = time.monotonic() - started
    assert completed.returncode == 2
    assert any("stubborn.py:build: stopped after 2 s" in line for line in error_lines(completed))
    assert elapsed < 2 + HARD_STOP_GRACE_SECONDS + 20


@pytest.mark.parametrize("command", [["estimate"], ["validate", "--device", "cpu"]])
def test_memlint_estimate_and_validate_contain_a_target_that_kills_or_forks(tree, command):
    """From the command line, `memlint estimate` and `memlint validate` run their target in an
    isolated child (memlint.integrate.isolated_command): a factory that SIGKILLs its process gives
    one error line and exit 2, and a process the target started does not outlive the command
    (run_cli fails on orphans)."""
    root = tree({"factories.py": FACTORIES + "\n\ndef kills_itself():\n    os.kill(os.getpid(), 9)\n"})
    completed = run_cli(command[0], "factories.py:kills_itself", *command[1:], cwd=root, timeout=120)
    assert completed.returncode == 2
    [line] = error_lines(completed)
    assert line.startswith(f"memlint: error: {command[0]} factories.py:kills_itself: the process running the target "
                           "was killed (SIGKILL"), line
    completed = run_cli(command[0], "factories.py:leaves_a_sleeper", *command[1:], cwd=root, timeout=180)
    assert completed.returncode in (0, 1), completed.stderr
