"""`--fix` writes only inside the linted tree, keeps hard links and modes, and
leaves read-only files alone (item 6 of issue 18)."""

from __future__ import annotations

import os
import stat

from .conftest import BUGGY, error_lines, run_cli

FIXED = BUGGY.replace("torch.load('ckpt.pt')", "torch.load('ckpt.pt', map_location=\"cpu\")")
FIX = ("check", "--no-cache", "--fix", "--unsafe-fixes", "--format", "concise")


def test_a_link_out_of_the_tree_is_neither_walked_nor_written(tree, tmp_path):
    victim = tmp_path / "outside" / "victim.py"
    victim.parent.mkdir()
    victim.write_text(BUGGY)
    root = tree({})
    (root / "link.py").symlink_to(victim)
    walked = run_cli(*FIX, ".", cwd=root)
    assert victim.read_text() == BUGGY
    assert b"./link.py: skipped: a symbolic link to a file outside ." in walked.stderr
    assert (root / "buggy.py").read_text() == FIXED  # the tree's own file is fixed
    named = run_cli(*FIX, "link.py", cwd=root)
    assert victim.read_text() == BUGGY and named.returncode == 2
    [line] = error_lines(named)
    assert line.startswith("memlint: error: link.py: not fixed: it is a symbolic link to ") and "outside the linted tree" in line


def test_a_link_inside_the_tree_is_fixed_through(tree):
    root = tree({"real.py": BUGGY})
    (root / "alias.py").symlink_to("real.py")
    completed = run_cli(*FIX, "alias.py", cwd=root)
    assert completed.returncode == 0, completed.stderr
    assert (root / "alias.py").is_symlink() and (root / "real.py").read_text() == FIXED


def test_hard_links_and_the_mode_are_kept(tree):
    root = tree({})
    os.link(root / "buggy.py", root / "twin.py")
    os.chmod(root / "buggy.py", 0o751)
    completed = run_cli(*FIX, "buggy.py", cwd=root)
    assert completed.returncode == 0, completed.stderr
    info = os.stat(root / "buggy.py")
    assert (root / "twin.py").read_text() == FIXED and info.st_nlink == 2
    assert os.path.samefile(root / "buggy.py", root / "twin.py")
    assert stat.S_IMODE(info.st_mode) == 0o751


def test_a_file_without_write_permission_is_not_replaced(tree):
    root = tree({})
    os.chmod(root / "buggy.py", 0o444)
    completed = run_cli(*FIX, "buggy.py", cwd=root)
    assert (root / "buggy.py").read_text() == BUGGY and completed.returncode == 2
    assert error_lines(completed) == ["memlint: error: buggy.py: not fixed: the file is not writable"]
    assert stat.S_IMODE(os.stat(root / "buggy.py").st_mode) == 0o444
