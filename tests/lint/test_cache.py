"""The results cache (memlint/lint/cache.py): hits, keys, layout, robustness."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memlint.config import Config, parse_table
from memlint.lint import cache
from memlint.lint.registry import resolve_selection
from memlint.lint.runner import Job, lint_jobs, options_for

REPO = Path(__file__).resolve().parents[2]

SOURCES = {
    "load.py": "import torch; torch.cuda.init()\nstate = torch.load('ckpt.pt')\nother = torch.load('b.pt', map_location='cpu')\n",
    "quiet.py": "import os\nprint(os.getcwd())\n",
    "broken.py": "import torch; torch.cuda.init()\nx = torch.load(\n",
    "suppressed.py": "import torch; torch.cuda.init()\nstate = torch.load('a.pt')  # noqa: MEM303\n",
}


def make_tree(root: Path) -> list[str]:
    paths = []
    for name, text in SOURCES.items():
        (root / name).write_text(text, encoding="utf-8")
        paths.append(str(root / name))
    return paths


def jobs_for(paths: list[str], config: Config | None = None) -> list[Job]:
    config = config or Config()
    enabled = resolve_selection(config.select, config.ignore, config.extend_select)
    return [Job(path, options_for(path, enabled, config)) for path in paths]


def cache_args(directory: Path, jobs: int | None = 1) -> argparse.Namespace:
    return argparse.Namespace(cache_dir=str(directory), jobs=jobs)


def summary(results) -> list[tuple]:
    return [(r.path, r.diagnostics, r.error, r.parsed, r.internal_errors) for r in results]


class CountingLinter:
    """Wraps runner.lint_jobs to record how many files each call linted."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, jobs, jobs_limit=None):
        self.calls.append(len(jobs))
        return lint_jobs(jobs, jobs_limit)


@pytest.fixture
def counting(monkeypatch) -> CountingLinter:
    linter = CountingLinter()
    monkeypatch.setattr(cache, "lint_jobs", linter)
    return linter


def entries(directory: Path) -> list[Path]:
    return sorted(directory.glob(f"{cache.FORMAT_VERSION}/*/*.json"))


def entry_payload(entry: Path):
    """The JSON body of an entry file (after its signature line)."""
    return json.loads(entry.read_bytes().partition(b"\n")[2])


def signed_store(directory: Path) -> cache.Store:
    return cache.Store.open(directory, cache.settings_fingerprint(Config()))


def test_second_run_is_served_from_the_cache_with_identical_results(tmp_path, counting):
    paths = make_tree(tmp_path)
    jobs = jobs_for(paths)
    uncached = lint_jobs(jobs, 1)
    first = cache.lint_jobs_cached(jobs, cache_args(tmp_path / "c"), Config())
    second = cache.lint_jobs_cached(jobs, cache_args(tmp_path / "c"), Config())
    assert summary(first) == summary(uncached) == summary(second)
    assert counting.calls == [len(paths), 0]
    assert any(r.diagnostics for r in second)  # the comparison covered real findings


def test_cache_directory_is_tagged_and_git_ignored(tmp_path):
    cache.lint_jobs_cached(jobs_for(make_tree(tmp_path)), cache_args(tmp_path / "c"), Config())
    tag = (tmp_path / "c" / "CACHEDIR.TAG").read_text()
    assert tag.startswith("Signature: 8a477f597d28d172789f06886806bc55")
    assert (tmp_path / "c" / ".gitignore").read_text().splitlines()[-1] == "*"
    assert len(entries(tmp_path / "c")) == len(SOURCES)


def test_an_edited_file_is_the_only_miss(tmp_path, counting):
    paths = make_tree(tmp_path)
    args = cache_args(tmp_path / "c")
    cache.lint_jobs_cached(jobs_for(paths), args, Config())
    Path(paths[1]).write_text("import torch; torch.cuda.init()\ntorch.load('x')\n", encoding="utf-8")
    results = cache.lint_jobs_cached(jobs_for(paths), args, Config())
    assert counting.calls == [len(paths), 1]
    assert [d.code for d in results[1].diagnostics] == ["MEM303"]


def test_a_copied_file_hits_and_reports_its_own_path(tmp_path, counting):
    paths = make_tree(tmp_path)
    args = cache_args(tmp_path / "c")
    cache.lint_jobs_cached(jobs_for(paths), args, Config())
    copy = tmp_path / "copy_of_load.py"
    copy.write_bytes(Path(paths[0]).read_bytes())
    (result,) = cache.lint_jobs_cached(jobs_for([str(copy)]), args, Config())
    assert counting.calls == [len(paths), 0]
    assert result.diagnostics and {d.path for d in result.diagnostics} == {str(copy)}


@pytest.mark.parametrize(
    "table",
    [
        {"ignore": ["MEM303"]},
        {"per-file-ignores": {"load.py": ["MEM303"]}},
        {"target-gpu": "A100-80GB"},
    ],
)
def test_configuration_changes_miss(tmp_path, counting, table):
    paths = make_tree(tmp_path)
    args = cache_args(tmp_path / "c")
    cache.lint_jobs_cached(jobs_for(paths), args, Config())
    changed = parse_table(table, tmp_path / "pyproject.toml")
    results = cache.lint_jobs_cached(jobs_for(paths, changed), args, changed)
    assert counting.calls == [len(paths), len(paths)]
    assert summary(results) == summary(lint_jobs(jobs_for(paths, changed), 1))


def test_settings_fingerprint_covers_version_and_rule_sources(monkeypatch):
    base = cache.settings_fingerprint(Config())
    monkeypatch.setattr(cache, "__version__", "999.0")
    bumped = cache.settings_fingerprint(Config())
    monkeypatch.setattr(cache, "_code_fingerprint", lambda: "edited rule")
    assert len({base, bumped, cache.settings_fingerprint(Config())}) == 3


GARBAGE = [b"", b"{", b"\xff\xfe\x00binary", b"[]", b'{"parsed": true}', b'{"parsed": 1, "diagnostics": []}',
           b'{"parsed": true, "diagnostics": [["MEM303", "n", "nonsense", "m", 1, 1, 1, 2, null]]}',
           b'{"parsed": true, "diagnostics": [["MEM303", "n", "warning", "m", "1", 1, 1, 2, null]]}',
           b'{"parsed": true, "diagnostics": [[1, 2, 3]]}']
#: Well-formed entries that do not describe the file: a line past its end, a
#: column past its line, a code not run on it, an edit outside it.
OUT_OF_BOUNDS = [
    '{"parsed": true, "diagnostics": [["MEM303", "n", "warning", "m", 99, 1, 99, 2, null]]}',
    '{"parsed": true, "diagnostics": [["MEM303", "n", "warning", "m", 2, 400, 2, 401, null]]}',
    '{"parsed": true, "diagnostics": [["MEM999", "n", "warning", "m", 1, 1, 1, 2, null]]}',
    '{"parsed": true, "diagnostics": [["MEM303", "n", "warning", "m", 2, 9, 2, 5, null]]}',
    '{"parsed": true, "diagnostics": [["MEM303", "n", "warning", "m", 1, 1, 1, 2, '
    '["t", "safe", [[50, 1, 50, 1, "x"]]]]]}',
]


def _rewrite_and_check(tmp_path, counting, write) -> None:
    paths = make_tree(tmp_path)
    args = cache_args(tmp_path / "c")
    expected = summary(cache.lint_jobs_cached(jobs_for(paths), args, Config()))
    for entry in entries(tmp_path / "c"):
        write(entry)
    assert summary(cache.lint_jobs_cached(jobs_for(paths), args, Config())) == expected
    assert counting.calls == [len(paths), len(paths)]
    for entry in entries(tmp_path / "c"):
        entry_payload(entry)  # rewritten whole
    assert summary(cache.lint_jobs_cached(jobs_for(paths), args, Config())) == expected
    assert counting.calls[-1] == 0


@pytest.mark.parametrize("garbage", GARBAGE)
def test_corrupt_entries_are_ignored_and_rebuilt(tmp_path, counting, garbage):
    _rewrite_and_check(tmp_path, counting, lambda entry: entry.write_bytes(garbage))


@pytest.mark.parametrize("payload", [g.decode("latin-1") for g in GARBAGE[3:]] + OUT_OF_BOUNDS)
def test_signed_but_malformed_or_out_of_bounds_entries_are_ignored(tmp_path, counting, payload):
    """Entries that pass the signature check are still checked against the file."""
    store = signed_store(tmp_path / "c")
    _rewrite_and_check(tmp_path, counting, lambda entry: store.save_payload(entry.stem, json.loads(payload)))


def test_unreadable_entry_is_a_miss(tmp_path, counting):
    paths = make_tree(tmp_path)
    args = cache_args(tmp_path / "c")
    expected = summary(cache.lint_jobs_cached(jobs_for(paths), args, Config()))
    for entry in entries(tmp_path / "c"):
        entry.unlink()
        entry.mkdir()  # open() fails with IsADirectoryError
    assert summary(cache.lint_jobs_cached(jobs_for(paths), args, Config())) == expected


def test_unusable_cache_directory_is_not_fatal(tmp_path):
    paths = make_tree(tmp_path)
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where the cache directory should be")
    results = cache.lint_jobs_cached(jobs_for(paths), cache_args(blocker), Config())
    assert summary(results) == summary(lint_jobs(jobs_for(paths), 1))


def test_unreadable_files_and_crashes_are_not_cached(tmp_path, counting):
    paths = make_tree(tmp_path) + [str(tmp_path / "missing.py")]
    args = cache_args(tmp_path / "c")
    first = cache.lint_jobs_cached(jobs_for(paths), args, Config())
    assert first[-1].error and "cannot read" in first[-1].error
    assert len(entries(tmp_path / "c")) == len(SOURCES)


def test_default_directory_is_the_project_root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    no_option = argparse.Namespace(cache_dir=None)
    assert cache.cache_dir(no_option, Config()) == tmp_path / ".memlint_cache"
    project = tmp_path / "project"
    configured = parse_table({}, project / "pyproject.toml")
    assert cache.cache_dir(no_option, configured) == project / ".memlint_cache"
    relative = parse_table({"cache-dir": "build/lint-cache"}, project / "pyproject.toml")
    assert cache.cache_dir(no_option, relative) == project / "build" / "lint-cache"
    explicit = argparse.Namespace(cache_dir=str(tmp_path / "elsewhere"))
    assert cache.cache_dir(explicit, relative) == tmp_path / "elsewhere"


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


#: Runs the CLI, then prints (to stderr) the rule modules and libcst modules
#: it imported. ``-X importtime`` cannot tell: it does not see modules loaded
#: through ``importlib.import_module``, which is how the registry loads rules.
_REPORT_IMPORTS = (
    "import sys\n"
    "from memlint.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "print(sorted(m for m in sys.modules if m.startswith(('libcst', 'memlint.rules.mem'))), file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def test_cli_never_imports_libcst_and_a_warm_run_not_the_rules(tmp_path):
    paths = make_tree(tmp_path)
    command = ["-c", _REPORT_IMPORTS, "check", "--format", "concise", "--cache-dir", "c", *paths]
    cold = _run(command, tmp_path)
    warm = _run(command, tmp_path)
    cold_imports = cold.stderr.splitlines()[-1]
    assert "memlint.rules.mem303_load_without_map_location" in cold_imports and "libcst" not in cold_imports
    assert warm.stderr.splitlines()[-1] == "[]"
    assert (warm.returncode, warm.stdout) == (cold.returncode, cold.stdout)
    assert "MEM303" in warm.stdout


def test_cli_no_cache_writes_nothing_and_cache_dir_option_is_used(tmp_path):
    paths = make_tree(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.memlint]\n")
    _run(["-m", "memlint", "check", "--no-cache", *paths], tmp_path)
    assert not (tmp_path / ".memlint_cache").exists()
    _run(["-m", "memlint", "check", *paths], tmp_path)
    assert entries(tmp_path / ".memlint_cache")
    _run(["-m", "memlint", "check", "--cache-dir", str(tmp_path / "other"), *paths], tmp_path)
    assert entries(tmp_path / "other")


def test_concurrent_runs_leave_only_whole_entries(tmp_path):
    paths = make_tree(tmp_path)
    for index in range(30):  # more distinct files, so the runs overlap in time
        (tmp_path / f"extra_{index}.py").write_text(f"import torch; torch.cuda.init()\nx{index} = torch.load('{index}.pt')\n")
    command = [sys.executable, "-m", "memlint", "check", "--format", "json", "--cache-dir", "c", "."]
    processes = [subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(3)]
    outputs = [process.communicate(timeout=120)[0] for process in processes]
    assert len({output for output in outputs}) == 1 and outputs[0]
    assert not [p for p in (tmp_path / "c").rglob("*.tmp")]
    for entry in entries(tmp_path / "c"):
        cache.decode_result(entry_payload(entry), "x.py")
    again = subprocess.run(command, cwd=tmp_path, capture_output=True, timeout=120)
    assert again.stdout == outputs[0]


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0, reason="root can write anywhere")
def test_read_only_cache_directory_is_not_fatal(tmp_path):
    paths = make_tree(tmp_path)
    directory = tmp_path / "c"
    cache.lint_jobs_cached(jobs_for(paths[:1]), cache_args(directory), Config())
    for folder in (directory, *directory.rglob("*")):
        if folder.is_dir():
            folder.chmod(0o555)
    try:
        results = cache.lint_jobs_cached(jobs_for(paths), cache_args(directory), Config())
    finally:
        for folder in (directory, *directory.rglob("*")):
            if folder.is_dir():
                folder.chmod(0o755)
    assert summary(results) == summary(lint_jobs(jobs_for(paths), 1))


def test_static_rule_index_matches_the_imported_rules():
    # The warm path and the pre-filter use the index instead of importing
    # the rules: it must say exactly what the classes say.
    from memlint.lint.registry import all_rules, rule_index
    from memlint.lint.rule import Rule

    index = rule_index()
    assert sorted(index) == [rule.CODE for rule in all_rules()]
    for rule in all_rules():
        info = index[rule.CODE]
        assert info.module == rule.__module__
        assert info.default_enabled == rule.DEFAULT_ENABLED
        overridden = rule.is_triggered_by.__func__ is not Rule.is_triggered_by.__func__
        assert info.triggers == (None if overridden else tuple(rule.TRIGGERS))


def test_static_index_falls_back_to_import_for_computed_metadata(tmp_path):
    from memlint.lint import registry

    source = (
        "from memlint.lint.rule import Rule\nNAMES = ('a', 'b')\n\n"
        "class Computed(Rule):\n    CODE = 'MEM999'\n    TRIGGERS = tuple(NAMES)\n"
    )
    path = tmp_path / "mem999_computed.py"
    path.write_text(source)
    assert registry._static_infos(str(path), "memlint.rules.mem999_computed") is None
    path.write_text(source.replace("tuple(NAMES)", "('a', 'b')"))
    (info,) = registry._static_infos(str(path), "memlint.rules.mem999_computed")
    assert (info.code, info.triggers, info.default_enabled) == ("MEM999", ("a", "b"), True)


def test_static_index_reads_metadata_placed_after_a_method(tmp_path):
    from memlint.lint import registry

    path = tmp_path / "mem998_late.py"
    path.write_text(
        "from memlint.lint.rule import Rule\n\nclass Late(Rule):\n    CODE = 'MEM998'\n\n"
        "    def visit_Call(self, node):\n        pass\n\n    TRIGGERS = ('late',)\n    DEFAULT_ENABLED = False\n"
    )
    (info,) = registry._static_infos(str(path), "memlint.rules.mem998_late")
    assert (info.triggers, info.default_enabled) == (("late",), False)
