"""ruff's command-line habits: the summary line, --output-format, --output-file,
--quiet, --show-fixes, --add-noqa, "did you mean", one error prefix."""

from __future__ import annotations

import io
import json
import os
import stat

import pytest

from memlint.check import CheckRun
from memlint.errors import UsageError
from memlint.lint.engine import LintOptions, lint_source
from memlint.lint.registry import rule_index
from memlint.report import concise, full, statistics

from .helpers import run_memlint

BUGGY = "import torch; torch.cuda.init()\nstate = torch.load('ckpt.pt').cuda()\n"
CLEAN = "import torch\nstate = torch.load('a', map_location='cpu')\n"
MESSAGE = "`torch.load` without `map_location` restores tensors onto the GPU they were saved from"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _run(path, text: str) -> CheckRun:
    result = lint_source(str(path), text.encode(), LintOptions(frozenset(rule_index())))
    return CheckRun(results=[result])


def _args(**values):
    import argparse

    return argparse.Namespace(**{"format": None, "unsafe_fixes": False, "quiet": False, **values})


# --- the summary line -----------------------------------------------------------


def test_concise_on_a_terminal_ends_with_the_summary(tmp_path):
    run = _run(tmp_path / "t.py", BUGGY)
    out = Terminal()
    concise.render(run, _args(), out)
    lines = out.getvalue().splitlines()
    assert lines == [f"{tmp_path / 't.py'}:2:9: MEM303 {MESSAGE}",
                     "Found 1 finding (0 fixable with --fix, 1 more with --unsafe-fixes)"]
    out = Terminal()
    concise.render(run, _args(unsafe_fixes=True), out)
    assert out.getvalue().splitlines()[-1] == "Found 1 finding (1 fixable with --fix)"
    out = Terminal()
    concise.render(_run(tmp_path / "c.py", CLEAN), _args(), out)
    assert out.getvalue() == "All checks passed!\n"


def test_piped_concise_stays_one_finding_per_line(tmp_path):
    path = tmp_path / "t.py"
    path.write_text(BUGGY)
    proc = run_memlint("--no-cache", str(path))
    assert proc.stdout == f"{path}:2:9: MEM303 {MESSAGE}\n"
    assert run_memlint("--no-cache", "--format", "full", str(path)).stdout.rstrip().endswith(
        "Found 1 finding (0 fixable with --fix, 1 more with --unsafe-fixes)")


def test_quiet_drops_summary_and_notes_not_findings_or_errors(tmp_path):
    run = _run(tmp_path / "t.py", BUGGY)
    for module in (full, concise):
        out = Terminal()
        module.render(run, _args(quiet=True), out)
        assert "Found" not in out.getvalue() and "MEM303" in out.getvalue()
    out = Terminal()
    statistics.render(run, _args(quiet=True), out)
    assert out.getvalue().split() == ["1", "MEM303", "load-without-map-location"]
    (tmp_path / "t.py").write_text(BUGGY)
    proc = run_memlint("--no-cache", "-q", "--format", "full", str(tmp_path / "t.py"), str(tmp_path / "missing.py"))
    assert proc.returncode == 2 and "Found" not in proc.stdout and "MEM303" in proc.stdout
    assert "missing.py" in proc.stderr  # errors are still reported
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_memlint("--no-cache", "--quiet", str(empty)).stderr == ""  # the note is not


def test_statistics_summary_on_a_terminal(tmp_path):
    run = _run(tmp_path / "t.py", BUGGY)
    out = Terminal()
    statistics.render(run, _args(), out)
    assert out.getvalue().splitlines()[-1] == "Found 1 finding (0 fixable with --fix, 1 more with --unsafe-fixes)"


def test_summary_after_fixes_counts_fixed_and_remaining():
    assert full.summary([], unsafe=False, fixed=2) == "Found 2 findings (2 fixed, 0 remaining)"
    assert full.summary([], unsafe=False) == "All checks passed!"


# --- --output-format, --output-file ---------------------------------------------------


def test_output_format_is_an_alias_of_format(tmp_path):
    path = tmp_path / "t.py"
    path.write_text(BUGGY)
    for fmt in ("json", "full", "github"):
        a = run_memlint("--no-cache", "--format", fmt, str(path))
        b = run_memlint("--no-cache", f"--output-format={fmt}", str(path))
        if fmt == "json":
            a.stdout, b.stdout = (json.dumps({**json.loads(x.stdout), "elapsed": 0}) for x in (a, b))
        assert (a.returncode, a.stdout) == (b.returncode, b.stdout)


def test_output_file_gets_the_report_atomically(tmp_path):
    path = tmp_path / "t.py"
    path.write_text(BUGGY)
    report = tmp_path / "out" / "report.json"
    report.parent.mkdir()
    report.write_text("old")
    proc = run_memlint("--no-cache", "--format", "json", "--output-file", str(report), str(path))
    assert proc.returncode == 1 and proc.stdout == ""
    assert [d["code"] for d in json.loads(report.read_text())["diagnostics"]] == ["MEM303"]
    assert sorted(p.name for p in report.parent.iterdir()) == ["report.json"]  # no temporary file left
    proc = run_memlint("--no-cache", "-o", str(tmp_path / "r.txt"), str(path))
    assert (tmp_path / "r.txt").read_text() == f"{path}:2:9: MEM303 {MESSAGE}\n"


def test_output_file_not_writable_is_one_error_line(tmp_path):
    path = tmp_path / "t.py"
    path.write_text(BUGGY)
    for target in (tmp_path / "no" / "such" / "dir.txt", tmp_path):
        proc = run_memlint("--no-cache", "--output-file", str(target), str(path))
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert lines[0].startswith(f"memlint: error: --output-file {target}: cannot write (")


def test_output_file_holds_the_sarif_document_of_a_usage_error(tmp_path):
    report = tmp_path / "r.sarif"
    proc = run_memlint("--format", "sarif", "--output-file", str(report), "--bogus", str(tmp_path))
    assert proc.returncode == 2 and proc.stdout == ""
    document = json.loads(report.read_text())
    assert document["runs"][0]["invocations"][0]["executionSuccessful"] is False


def test_diff_goes_to_the_output_file_and_quiet_hides_the_fix_count(tmp_path):
    path = tmp_path / "t.py"
    path.write_text(BUGGY)
    out = tmp_path / "fix.diff"
    proc = run_memlint("--no-cache", "--diff", "--unsafe-fixes", "-o", str(out), str(path))
    assert proc.returncode == 1 and proc.stdout == "" and "Would fix 1 problem" in proc.stderr
    assert "+state = torch.load('ckpt.pt', map_location=\"cpu\")" in out.read_text()
    quiet = run_memlint("--no-cache", "--diff", "--unsafe-fixes", "-q", str(path))
    assert quiet.stderr == "" and quiet.stdout.startswith("--- ")
    assert path.read_text() == BUGGY


# --- --show-fixes -------------------------------------------------------------------------


def test_show_fixes_lists_applied_and_available_fixes(tmp_path):
    path = tmp_path / "t.py"
    path.write_text(BUGGY + "again = torch.load('b').cuda()\n")
    available = run_memlint("--no-cache", "--show-fixes", "--unsafe-fixes", str(path))
    assert available.stdout.splitlines()[-3:] == [
        "2 findings fixable with --fix --unsafe-fixes:", f"- {path}:", "    2 x MEM303 (load-without-map-location)"]
    assert path.read_text().count("map_location") == 0
    fixed = run_memlint("--no-cache", "--fix", "--unsafe-fixes", "--show-fixes", "--format", "full", str(path))
    assert fixed.returncode == 0, fixed.stderr
    out = fixed.stdout.splitlines()
    assert out[:3] == ["Fixed 2 findings:", f"- {path}:", "    2 x MEM303 (load-without-map-location)"]
    assert out[-1] == "Found 2 findings (2 fixed, 0 remaining)"
    assert path.read_text().count("map_location") == 2
    nothing = run_memlint("--no-cache", "--show-fixes", str(path))
    assert "fixable with --fix" not in nothing.stdout


def test_show_fixes_warns_where_it_does_nothing(tmp_path):
    (tmp_path / "t.py").write_text(BUGGY)
    proc = run_memlint("--no-cache", "--show-fixes", "--format", "json", str(tmp_path / "t.py"))
    assert "memlint: warning: --show-fixes has no effect with --format json" in proc.stderr
    json.loads(proc.stdout)


# --- --add-noqa ------------------------------------------------------------------------------


def test_add_noqa_suppresses_every_finding_idempotently(tmp_path):
    source = ("# -*- coding: latin-1 -*-\r\nimport torch; torch.cuda.init()\r\n"
              "name = 'caf\xe9'; state = torch.load('a')  # keep: noqa: F401 stays\r\n"
              "other = torch.load('b')  # noqa: F401\r\n"
              "x = torch.load('''c\r\nd''')\r\n"
              "y = torch.load(\r\n    'e')\r\n")
    path = tmp_path / "t.py"
    path.write_bytes(source.encode("latin-1"))
    os.chmod(path, 0o640)
    proc = run_memlint("--no-cache", "--add-noqa", str(path))
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr
    assert proc.stderr.strip() == "Added 4 noqa directives to 1 file"
    text = path.read_bytes().decode("latin-1")
    assert text.split("\r\n") == [
        "# -*- coding: latin-1 -*-", "import torch; torch.cuda.init()",
        "name = 'caf\xe9'; state = torch.load('a')  # keep: noqa: F401 stays  # noqa: MEM303",
        "other = torch.load('b')  # noqa: F401, MEM303",
        "x = torch.load('''c", "d''')  # noqa: MEM303",  # the first line ends inside the string
        "y = torch.load(  # noqa: MEM303", "    'e')", ""]
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert run_memlint("--no-cache", str(path)).returncode == 0  # all suppressed
    again = run_memlint("--no-cache", "--add-noqa", str(path))
    assert again.stderr.strip() == "Added 0 noqa directives to 0 files"
    assert path.read_bytes().decode("latin-1") == text


def test_add_noqa_in_notebook_cells(tmp_path):
    from memlint.lint.notebook import notebook_from_cells

    path = tmp_path / "nb.ipynb"
    path.write_text(notebook_from_cells(["%matplotlib inline\nimport torch\ntorch.cuda.init()",
                                         "state = torch.load('a')\nprint(state)"]), encoding="utf-8")
    proc = run_memlint("--no-cache", "--add-noqa", str(path))
    assert proc.returncode == 0, proc.stderr
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    assert "".join(cells[2]["source"]) == "state = torch.load('a')  # noqa: MEM303\nprint(state)"
    assert "".join(cells[1]["source"]).startswith("%matplotlib inline\n")
    assert run_memlint("--no-cache", str(path)).returncode == 0


@pytest.mark.parametrize("extra", [["--fix"], ["--diff"], ["-"]])
def test_add_noqa_refuses_fixes_and_stdin(tmp_path, extra):
    (tmp_path / "t.py").write_text(BUGGY)
    paths = [] if extra == ["-"] else [str(tmp_path / "t.py")]
    proc = run_memlint("--add-noqa", *extra, *paths, stdin=BUGGY.encode())
    assert proc.returncode == 2 and proc.stderr.startswith("memlint: error: --add-noqa ")
    assert (tmp_path / "t.py").read_text() == BUGGY


# --- did you mean -----------------------------------------------------------------------------


def test_mistyped_subcommand_gets_a_suggestion(tmp_path):
    proc = run_memlint("chek", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("memlint: error: unknown command 'chek' (and no file or directory of that name); "
                                  "did you mean 'check'?")
    assert "did you mean 'estimate'?" in run_memlint("estimat", "m.py:f", cwd=tmp_path).stderr
    # a path of that name is a path: `memlint PATH` is `memlint check PATH`
    (tmp_path / "chek").mkdir()
    (tmp_path / "chek" / "t.py").write_text(BUGGY)
    proc = run_memlint("chek", "--no-cache", cwd=tmp_path)
    assert proc.returncode == 1 and "MEM303" in proc.stdout
    # a missing file is not taken for a command
    proc = run_memlint("rules.py", cwd=tmp_path)
    assert proc.returncode == 2 and "did you mean" not in proc.stderr and "rules.py" in proc.stderr


def test_unknown_rule_codes_get_suggestions(tmp_path):
    (tmp_path / "t.py").write_text(BUGGY)
    proc = run_memlint("--select", "MEM3030", str(tmp_path / "t.py"))
    assert proc.returncode == 2
    assert proc.stderr.startswith("memlint: error: --select: unknown rule selector 'MEM3030'; did you mean 'MEM303'")
    assert "did you mean 'MEM303'?" in run_memlint("--ignore", "load-without-map-locaton", str(tmp_path)).stderr
    (tmp_path / "pyproject.toml").write_text('[tool.memlint]\nselect = ["MEM3O3"]\n')
    proc = run_memlint(str(tmp_path / "t.py"))
    assert proc.returncode == 2 and "unknown rule selector 'MEM3O3'; did you mean 'MEM303'" in proc.stderr
    (tmp_path / "pyproject.toml").write_text('[tool.memlint.per-file-ignores]\n"t.py" = ["MEM3033"]\n')
    proc = run_memlint(str(tmp_path / "t.py"))
    assert proc.returncode == 2 and "'MEM3033'; did you mean 'MEM303'" in proc.stderr


def test_unknown_gpu_gets_close_catalog_names(tmp_path):
    from memlint.estimate.gpus import lookup_gpu

    with pytest.raises(UsageError, match=r"unknown GPU 'A100'; did you mean 'A100-40GB', 'A100-80GB' or 'A10G'\?"):
        lookup_gpu("A100")
    with pytest.raises(UsageError, match=r"did you mean 'RTX-4090'"):
        lookup_gpu("rtx4090")
    with pytest.raises(UsageError, match=r"did you mean 'A100-80GB-MIG-1g\.10gb'"):
        lookup_gpu("A100-80GB-MIG-1g")
    (tmp_path / "pyproject.toml").write_text('[tool.memlint]\ntarget-gpu = "H100"\n')
    (tmp_path / "t.py").write_text(CLEAN)
    proc = run_memlint(str(tmp_path / "t.py"))
    assert proc.returncode == 2 and "unknown GPU 'H100'; did you mean 'H100-80GB'?" in proc.stderr


# --- one error prefix ------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["--bogus"], ["check", "--format", "nope"], ["rules", "--format", "x"], ["rule"], ["chek"],
    ["--select", "MEM9999", "."], ["--jobs", "0", "."], ["no-such-file.py"],
])
def test_errors_have_exactly_one_prefix(tmp_path, argv):
    proc = run_memlint(*argv, cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memlint: error: "), proc.stderr
    assert lines[0].count("memlint:") == 1 and "error: memlint" not in lines[0]
