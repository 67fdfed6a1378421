"""[tool.memlint] configuration and selection errors: one line naming the
culprit, exit 2, never a traceback."""

from __future__ import annotations

import pytest

from .helpers import run_memlint

BUGGY = "import torch\nstate = torch.load('ckpt.pt')\n"


def _project(tmp_path, table: str):
    (tmp_path / "pyproject.toml").write_text(f"[project]\nname = 'x'\n\n[tool.memlint]\n{table}\n")
    (tmp_path / "src").mkdir(exist_ok=True)
    (tmp_path / "src" / "train.py").write_text(BUGGY)
    return tmp_path


def _one_error_line(proc) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("memlint: error: ")
    return lines[0]


def test_unknown_config_key(tmp_path):
    project = _project(tmp_path, "selct = ['MEM3']")
    line = _one_error_line(run_memlint("check", "src", cwd=project))
    assert "pyproject.toml" in line and "unknown key 'tool.memlint.selct'" in line


@pytest.mark.parametrize(
    ("table", "key"),
    [("select = 'MEM3'", "tool.memlint.select"), ("target-gpu = 80", "tool.memlint.target-gpu"),
     ("per-file-ignores = { 'a.py' = 'MEM3' }", "tool.memlint.per-file-ignores")],
)
def test_bad_config_value(tmp_path, table, key):
    line = _one_error_line(run_memlint("check", "src", cwd=_project(tmp_path, table)))
    assert f"'{key}'" in line


def test_unknown_code_in_config_select(tmp_path):
    line = _one_error_line(run_memlint("check", "src", cwd=_project(tmp_path, "select = ['MEM999']")))
    assert "select" in line and "'MEM999'" in line


def test_bad_code_in_select_option(tmp_path):
    (tmp_path / "a.py").write_text(BUGGY)
    line = _one_error_line(run_memlint("check", "--select", "MEM3,XYZ1", "a.py", cwd=tmp_path))
    assert "--select" in line and "'XYZ1'" in line
    line = _one_error_line(run_memlint("check", "--ignore", "NOPE", "a.py", cwd=tmp_path))
    assert "--ignore" in line and "'NOPE'" in line


def test_invalid_toml(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.memlint]\nselect = [\n")
    (tmp_path / "a.py").write_text(BUGGY)
    line = _one_error_line(run_memlint("check", "a.py", cwd=tmp_path))
    assert "pyproject.toml: invalid TOML" in line


def test_unreadable_config_option(tmp_path):
    (tmp_path / "a.py").write_text(BUGGY)
    line = _one_error_line(run_memlint("check", "--config", "missing.toml", "a.py", cwd=tmp_path))
    assert "missing.toml: cannot read configuration" in line
    (tmp_path / "dir.toml").mkdir()
    line = _one_error_line(run_memlint("check", "--config", "dir.toml", "a.py", cwd=tmp_path))
    assert "dir.toml: cannot read configuration" in line


def test_config_selection_and_per_file_ignores_apply(tmp_path):
    project = _project(tmp_path, "ignore = ['MEM303']")
    assert run_memlint("check", "src", cwd=project).returncode == 0
    project = _project(tmp_path, "per-file-ignores = { 'src/*' = ['MEM3'] }")
    assert run_memlint("check", "src", cwd=project).returncode == 0
    project = _project(tmp_path, "exclude = ['src']")
    proc = run_memlint("check", ".", cwd=project)
    assert proc.returncode == 0 and "no Python files" in proc.stderr


def test_explicit_config_file_with_bare_keys(tmp_path):
    (tmp_path / "memlint.toml").write_text("ignore = ['MEM303']\n")
    (tmp_path / "a.py").write_text(BUGGY)
    assert run_memlint("check", "--config", "memlint.toml", "a.py", cwd=tmp_path).returncode == 0
