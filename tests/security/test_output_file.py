"""``-o/--output-file`` never replaces what is not a regular report file:
devices, FIFOs and links are written into (or through), an input file is
refused (hostile-input issue, item 2)."""

from __future__ import annotations

import os
import stat
import threading

from .conftest import BUGGY, error_lines, run_cli

FINDING = b"buggy.py:2:9: MEM303"
CONCISE = ("check", "--no-cache", "--format", "concise")


def test_a_character_device_stays_a_device(tree):
    root = tree({})
    done = run_cli(*CONCISE, "-o", "/dev/null", "buggy.py", cwd=root)
    assert done.returncode == 1, done.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert not done.stdout


def test_a_fifo_is_written_into(tree):
    root = tree({})
    fifo = root / "report.fifo"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    done = run_cli(*CONCISE, "-o", str(fifo), "buggy.py", cwd=root)
    reader.join(timeout=30)
    assert done.returncode == 1, done.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert received and FINDING in received[0]


def test_a_link_to_a_regular_file_replaces_its_target_and_stays_a_link(tree):
    root = tree({})
    (root / "real.txt").write_text("old\n")
    (root / "report.txt").symlink_to("real.txt")
    done = run_cli(*CONCISE, "-o", "report.txt", "buggy.py", cwd=root)
    assert done.returncode == 1, done.stderr
    assert (root / "report.txt").is_symlink()
    assert FINDING in (root / "real.txt").read_bytes()


def test_a_link_to_stdout_writes_to_stdout(tree):
    root = tree({})
    done = run_cli(*CONCISE, "-o", "/dev/stdout", "buggy.py", cwd=root)
    assert done.returncode == 1, done.stderr
    assert FINDING in done.stdout
    assert os.path.islink("/dev/stdout")


def test_an_input_file_is_refused_under_any_name(tree):
    root = tree({})
    (root / "alias.py").symlink_to("buggy.py")
    os.link(root / "buggy.py", root / "hard.txt")
    for output, args in (("buggy.py", ("buggy.py",)), ("alias.py", (".",)), ("hard.txt", (".",)),
                         ("buggy.py", ("--format", "json", "buggy.py"))):
        done = run_cli("check", "--no-cache", "-o", output, *args, cwd=root)
        assert done.returncode == 2, (output, done.stderr)
        assert (root / "buggy.py").read_text() == BUGGY
        [line] = error_lines(done)
        assert line.startswith(f"memlint: error: --output-file {output}: is the input file"), line
