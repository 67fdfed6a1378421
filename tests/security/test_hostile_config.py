"""A hostile pyproject.toml and hostile options: one error line naming the
key or option, exit 2, never a traceback; nothing written outside the project."""

from __future__ import annotations

import json
import time

import pytest

from memlint.config import MAX_GLOBS, parse_table
from memlint.errors import ConfigError

from .conftest import error_lines, run_cli


def _pyproject(body: str) -> str:
    return f"[project]\nname = 'scratch'\n[tool.memlint]\n{body}\n"


@pytest.mark.parametrize("value", ["/tmp/memlint-victim", "../victim", ".", "sub/../../victim"])
def test_a_configured_cache_dir_stays_in_the_project(tree, tmp_path, value):
    root = tree({}, pyproject=_pyproject(f"cache-dir = {value!r}"))
    completed = run_cli("check", "buggy.py", cwd=root)
    assert completed.returncode == 2, completed.stderr
    [line] = error_lines(completed)
    assert "'tool.memlint.cache-dir'" in line and "inside the project root" in line
    assert not (tmp_path / "victim").exists() and not (root / ".gitignore").exists()
    assert b"Traceback" not in completed.stderr


def test_a_configured_cache_dir_cannot_leave_through_a_link(tree, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tree({}, pyproject=_pyproject("cache-dir = 'out/cache'"))
    (root / "out").symlink_to(outside)
    completed = run_cli("check", "buggy.py", cwd=root)
    assert completed.returncode == 2 and list(outside.iterdir()) == []


def test_the_command_line_cache_dir_may_point_anywhere(tree, tmp_path):
    root = tree({}, pyproject=_pyproject("cache-dir = 'build/cache'"))
    assert run_cli("check", "buggy.py", cwd=root).returncode == 1
    assert (root / "build" / "cache" / "CACHEDIR.TAG").is_file()
    elsewhere = tmp_path / "chosen"
    assert run_cli("check", "--cache-dir", str(elsewhere), "buggy.py", cwd=root).returncode == 1
    assert (elsewhere / "CACHEDIR.TAG").is_file()


def test_an_unknown_key_is_escaped(tree):
    root = tree({}, pyproject=_pyproject('"\\u001b[31m\\u0007" = 1'))
    completed = run_cli("check", "buggy.py", cwd=root)
    assert completed.returncode == 2
    assert b"\x1b" not in completed.stderr and b"\x07" not in completed.stderr
    [line] = error_lines(completed)
    assert line.endswith("unknown key 'tool.memlint.\\x1b[31m\\x07'")


def test_unknown_per_file_ignores_codes_are_errors_even_when_no_file_matches(tree):
    root = tree({}, pyproject=_pyproject('[tool.memlint.per-file-ignores]\n"nothing/*.py" = ["MEM101", "BAD"]'))
    completed = run_cli("check", "buggy.py", cwd=root)
    assert completed.returncode == 2
    [line] = error_lines(completed)
    assert "per-file-ignores" in line and "'nothing/*.py'" in line and "'BAD'" in line


def test_a_bom_is_accepted(tree):
    root = tree({})
    (root / "pyproject.toml").write_bytes(b"\xef\xbb\xbf" + _pyproject('ignore = ["MEM303"]').encode())
    completed = run_cli("check", "--no-cache", "buggy.py", cwd=root)
    assert completed.returncode == 0, completed.stderr


@pytest.mark.parametrize("fmt", ["json", "sarif"])
def test_a_configuration_error_still_writes_a_valid_document(tree, fmt):
    root = tree({}, pyproject=_pyproject("bogus = 1"))
    completed = run_cli("check", "--format", fmt, "buggy.py", cwd=root)
    assert completed.returncode == 2
    [line] = error_lines(completed)
    assert "unknown key 'tool.memlint.bogus'" in line
    document = json.loads(completed.stdout)
    if fmt == "json":
        assert document["diagnostics"] == [] and len(document["errors"]) == 1
        assert "tool.memlint.bogus" in document["errors"][0]
    else:
        [run] = document["runs"]
        [invocation] = run["invocations"]
        assert invocation["executionSuccessful"] is False and run["results"] == []
        [note] = invocation["toolExecutionNotifications"]
        assert note["level"] == "error" and "tool.memlint.bogus" in note["message"]["text"]


@pytest.mark.parametrize("options, message", [
    (("--jobs", "0"), "--jobs 0: must be at least 1"),
    (("--jobs", "-1"), "--jobs -1: must be at least 1"),
    (("--estimate-timeout", "0"), "--estimate-timeout 0.0: must be a positive number"),
    (("--diff", "--fix"), "--diff and --fix are mutually exclusive"),
])
def test_bad_option_values_are_errors(tree, options, message):
    root = tree({})
    completed = run_cli("check", *options, "buggy.py", cwd=root)
    assert completed.returncode == 2
    [line] = error_lines(completed)
    assert message in line


@pytest.mark.parametrize("options, warning", [
    (("--unsafe-fixes",), "--unsafe-fixes has no effect without --fix or --diff"),
    (("--stdin-filename", "x.py"), "--stdin-filename has no effect"),
])
def test_options_without_effect_get_a_warning(tree, options, warning):
    root = tree({})
    completed = run_cli("check", "--no-cache", *options, "buggy.py", cwd=root)
    assert completed.returncode == 1
    assert f"memlint: warning: {warning}".encode() in completed.stderr


def test_too_many_globs_are_one_error():
    with pytest.raises(ConfigError, match=f"over the limit of {MAX_GLOBS}"):
        parse_table({"exclude": [f"g{i}/*.py" for i in range(MAX_GLOBS + 1)]}, None)
    with pytest.raises(ConfigError, match=f"over the limit of {MAX_GLOBS}"):
        parse_table({"per-file-ignores": {f"g{i}/*.py": ["MEM101"] for i in range(MAX_GLOBS + 1)}}, None)


def test_many_globs_match_in_bounded_time(tmp_path):
    """At the limit, matching 200 paths against every list takes well under a
    second (it took minutes when each glob was compiled per path)."""
    config = parse_table({
        "exclude": [f"gen{i}/*.py" for i in range(MAX_GLOBS)],
        "per-file-ignores": {f"gen{i}/*.py": ["MEM101"] if i % 2 else ["MEM303"] for i in range(MAX_GLOBS - 1)}
        | {"src/hit*.py": ["MEM104"]},
    }, tmp_path / "pyproject.toml")
    start = time.perf_counter()
    excluded = [config.is_excluded(str(tmp_path / "src" / f"m{i}.py")) for i in range(200)]
    ignored = [config.ignored_codes_for(str(tmp_path / "src" / f"m{i}.py")) for i in range(200)]
    elapsed = time.perf_counter() - start
    assert not any(excluded) and not any(ignored)
    assert config.is_excluded(str(tmp_path / "gen7" / "x.py"))
    assert config.ignored_codes_for(str(tmp_path / "gen7" / "x.py")) == ["MEM101"]
    assert config.ignored_codes_for(str(tmp_path / "src" / "hit1.py")) == ["MEM104"]
    assert elapsed < 5, elapsed


def test_glob_semantics_are_kept(tmp_path):
    config = parse_table({"exclude": ["build_*", "docs/", "pkg/gen/*.py"]}, tmp_path / "pyproject.toml")
    for excluded in ("build_x/a.py", "src/build_y/b.py", "docs/a.py", "docs", "pkg/gen/a.py", "pkg/gen/sub/a.py"):
        assert config.is_excluded(str(tmp_path / excluded)), excluded
    for kept in ("src/a.py", "x/docs.py/../a.py", "pkg/a.py", "other/pkg/gen/a.py"):
        assert not config.is_excluded(str(tmp_path / kept)), kept


@pytest.mark.parametrize("options", [("--format", "sarif", "--jobs", "abc"), ("--format=json", "--bogus"),
                                     ("--format", "sarif", "--jobs", "0")])
def test_an_option_error_still_writes_a_valid_document(tree, options):
    root = tree({})
    completed = run_cli("check", *options, "buggy.py", cwd=root)
    assert completed.returncode == 2
    assert len(error_lines(completed)) == 1
    document = json.loads(completed.stdout)
    errors = document["errors"] if "errors" in document else [
        n["message"]["text"] for n in document["runs"][0]["invocations"][0]["toolExecutionNotifications"]]
    assert len(errors) == 1 and errors[0] in error_lines(completed)[0]
