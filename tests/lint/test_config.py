"""[tool.memlint] configuration and selection errors: one line naming the
culprit, exit 2, never a traceback."""

from __future__ import annotations

import os
import sys

import pytest

from .helpers import run_memlint

BUGGY = "import torch; torch.cuda.init()\nstate = torch.load('ckpt.pt')\n"


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


# --- the TOML is parsed for real, after a bounded read (issue 18, item 7) -----

@pytest.mark.parametrize("text", [
    '[tool."memlint"]\nignore = ["MEM303"]\n',
    "[tool]\nmemlint = { ignore = ['MEM303'] }\n",
    "tool = { memlint = { ignore = ['MEM303'] } }\n",
    '[tool]\n"mem\\u006cint" = { ignore = ["MEM303"] }\n',
])
def test_any_toml_spelling_of_the_table_is_found(tmp_path, text):
    (tmp_path / "pyproject.toml").write_text(text)
    (tmp_path / "a.py").write_text(BUGGY)
    proc = run_memlint("check", "a.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(("text", "message"), [
    ("tool = 3\n", "pyproject.toml: 'tool' must be a table, not an integer"),
    ("tool = ['memlint']\n", "pyproject.toml: 'tool' must be a table, not an array"),
    ("[tool]\nmemlint = 'on'\n", "pyproject.toml: 'tool.memlint' must be a table, not a string"),
])
def test_tool_or_memlint_that_is_not_a_table(tmp_path, text, message):
    (tmp_path / "pyproject.toml").write_text(text)
    (tmp_path / "a.py").write_text(BUGGY)
    assert message in _one_error_line(run_memlint("check", "a.py", cwd=tmp_path))


def test_non_utf8_pyproject(tmp_path):
    data = b"[tool.memlint]\nselect = ['MEM3']  # caf\xe9\n"
    (tmp_path / "pyproject.toml").write_bytes(data)
    (tmp_path / "a.py").write_text(BUGGY)
    line = _one_error_line(run_memlint("check", "a.py", cwd=tmp_path))
    assert f"pyproject.toml: configuration is not UTF-8 (byte 0xe9 at offset {data.index(0xe9)})" in line


def test_devices_fifos_and_huge_files_fail_fast(tmp_path):
    import os
    import time

    from memlint.config import MAX_CONFIG_BYTES

    (tmp_path / "a.py").write_text(BUGGY)
    os.mkfifo(tmp_path / "fifo.toml")
    (tmp_path / "huge.toml").write_bytes(b"# " + b"x" * MAX_CONFIG_BYTES + b"\n")
    for config, message in (("/dev/zero", "/dev/zero: cannot read configuration (not a regular file)"),
                            ("fifo.toml", "fifo.toml: cannot read configuration (not a regular file)"),
                            ("huge.toml", f"huge.toml: configuration is {MAX_CONFIG_BYTES + 3} bytes, over the limit of {MAX_CONFIG_BYTES} bytes")):
        started = time.monotonic()
        line = _one_error_line(run_memlint("check", "--config", config, "a.py", cwd=tmp_path, timeout=30))
        assert message in line and time.monotonic() - started < 10


def test_deeply_nested_toml_is_one_line(tmp_path):
    (tmp_path / "pyproject.toml").write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    (tmp_path / "a.py").write_text(BUGGY)
    assert "pyproject.toml: invalid TOML" in _one_error_line(run_memlint("check", "a.py", cwd=tmp_path))


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0, reason="root reads any file")
def test_unreadable_pyproject(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.memlint]\n")
    (tmp_path / "pyproject.toml").chmod(0)
    (tmp_path / "a.py").write_text(BUGGY)
    line = _one_error_line(run_memlint("check", "a.py", cwd=tmp_path))
    assert "pyproject.toml: cannot read configuration (Permission denied)" in line
