"""`--fix` writes only inside the linted tree, keeps hard links and modes, and
leaves read-only files alone (item 6 of issue 18)."""

from __future__ import annotations

import os
import stat

import pytest

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
    assert victim.read_text() == BUGGY and named.returncode == 0, named.stderr
    assert b"memlint: link.py: skipped: reached through a symbolic link" in named.stderr
    assert b"outside the project" in named.stderr


def test_a_directory_link_out_of_the_tree_is_not_written_through(tree, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "fixme.py").write_text(BUGGY)
    (outside / "pyproject.toml").write_text("[project]\nname = 'victim'\n")  # its markers do not count
    root = tree({})
    (root / "sub").mkdir()
    (root / "sub" / "od").symlink_to(outside)
    for named in ("sub/od/fixme.py", "sub/od"):
        completed = run_cli(*FIX, named, cwd=root)
        assert (outside / "fixme.py").read_text() == BUGGY, named
        assert f"memlint: {named}: skipped: reached through a symbolic link".encode() in completed.stderr
    walked = run_cli(*FIX, ".", cwd=root)
    assert (outside / "fixme.py").read_text() == BUGGY and walked.returncode == 0, walked.stderr


def test_a_named_link_to_a_secret_is_not_read(tree, tmp_path):
    secret = tmp_path / "home" / "secret"
    secret.parent.mkdir()
    secret.write_text("API_TOKEN = 'hunter2' (\n")  # would be a MEM001 with this line as its snippet
    root = tree({})
    (root / "env.py").symlink_to(secret)
    for fmt in ("full", "concise", "json"):
        completed = run_cli("check", "--no-cache", "--format", fmt, "env.py", cwd=root)
        assert b"hunter2" not in completed.stdout + completed.stderr, fmt
        assert b"memlint: env.py: skipped: reached through a symbolic link" in completed.stderr
        assert b"MEM001" not in completed.stdout


def test_links_that_stay_in_the_project_are_followed(tree):
    root = tree({"pkg/real.py": BUGGY})
    (root / "alias").symlink_to("pkg")
    completed = run_cli(*FIX, "alias/real.py", cwd=root)
    assert completed.returncode == 0, completed.stderr
    assert (root / "pkg" / "real.py").read_text() == FIXED


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


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to give a file away")
def test_a_fix_run_as_root_keeps_the_owner(tree):
    root = tree({})
    os.chown(root / "buggy.py", 12345, 23456)
    os.chmod(root / "buggy.py", 0o640)
    completed = run_cli(*FIX, "buggy.py", cwd=root)
    assert completed.returncode == 0, completed.stderr
    info = os.stat(root / "buggy.py")
    assert (root / "buggy.py").read_text() == FIXED
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (12345, 23456, 0o640)
