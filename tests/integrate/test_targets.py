"""memlint.integrate.targets: a configured target must be a file of the project."""

from __future__ import annotations

from pathlib import Path

import pytest

from memlint.errors import TargetError
from memlint.integrate.targets import check_target_text, project_root, resolve_target


@pytest.fixture
def root(tmp_path) -> Path:
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "net.py").write_text("def build(): pass\n")
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text("def build(): pass\n")
    return tmp_path.resolve()


def test_project_root_is_the_nearest_marker_or_the_config(root, tmp_path):
    assert project_root(str(root / "scripts" / "train.py"), None) == root
    inner = root / "scripts" / "pyproject.toml"
    inner.write_text("")
    assert project_root(str(root / "scripts" / "train.py"), None) == root / "scripts"
    assert project_root(str(root / "scripts" / "train.py"), root / "pyproject.toml") == root


def test_relative_files_from_the_script_then_the_root(root):
    scripts = root / "scripts"
    assert resolve_target("../models/net.py:build", scripts, root).spec == f"{root / 'models' / 'net.py'}:build"
    assert resolve_target("models/net.py:build", scripts, root).spec == f"{root / 'models' / 'net.py'}:build"


def test_modules_of_the_project(root):
    target = resolve_target("pkg.sub:build", root / "scripts", root)
    assert (target.spec, target.module_file, target.search_dir) == (
        "pkg.sub:build", str(root / "pkg" / "sub" / "__init__.py"), str(root))


@pytest.mark.parametrize(("text", "message"), [
    ("noseparator", "must be path/to/file.py:factory"),
    ("models/net.py:not-a-name", "is not a factory name"),
    ("/etc/passwd.py:f", "an absolute path"),
    ("../../elsewhere.py:f", "outside the project root"),
    ("models/net.txt:f", "is not a Python file"),
    ("models/missing.py:f", "file models/missing.py not found"),
    ("os:abort", "module 'os' is not a file of the project"),
    ("torch.nn:Linear", "module 'torch.nn' is not a file of the project"),
])
def test_refused(root, text, message):
    with pytest.raises(TargetError, match=message.replace("(", r"\(").replace(".", r"\.")):
        resolve_target(text, root / "scripts", root)


def test_links_out_of_the_project_are_refused(root, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside") / "net.py"
    outside.write_text("")
    (root / "models" / "link.py").symlink_to(outside)
    (root / "escape").symlink_to(outside.parent, target_is_directory=True)
    for text in ("models/link.py:f", "escape/net.py:f", "escape.net:f"):
        with pytest.raises(TargetError, match="outside the project root"):
            resolve_target(text, root, root)


def test_trusted_targets_may_leave_the_project(root, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside") / "net.py"
    outside.write_text("")
    text = f"{outside}:build"
    assert resolve_target(text, root, root, trusted=frozenset({text})).spec == text
    assert resolve_target("torch.nn:Linear", root, root, trusted=frozenset({"torch.nn:Linear"})).spec == "torch.nn:Linear"
    with pytest.raises(TargetError, match="is not a Python file"):
        resolve_target("/dev/zero:f", root, root, trusted=frozenset({"/dev/zero:f"}))


@pytest.mark.parametrize(("text", "message"), [
    ("/dev/zero:f", "is not a Python file"),
    ("/dev/zero.py:f", "not found"),
])
def test_command_line_targets_are_checked_without_opening(text, message):
    with pytest.raises(TargetError, match=message):
        check_target_text(text)
    check_target_text("torchvision.models:resnet18")  # a module: nothing to check before the import
