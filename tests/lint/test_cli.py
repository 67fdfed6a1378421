"""The command line: rule/rules commands, no files, stdin, exit codes, formats,
and that linting never imports torch."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from memlint.lint.registry import all_rules

from .helpers import REPO, cases_dir, run_memlint

BUGGY = "import torch; torch.cuda.init()\nstate = torch.load('ckpt.pt').cuda()\n"


def test_rule_page_piped_is_the_markdown_page():
    proc = run_memlint("rule", "MEM303")
    assert proc.returncode == 0
    page = (REPO / "docs" / "rules" / "MEM303.md").read_text(encoding="utf-8")
    assert proc.stdout.strip() == "\n".join(line for line in page.splitlines() if not line.startswith("<!--")).strip()
    assert run_memlint("rule", "mem303").stdout == proc.stdout


def test_rule_page_in_terminal_is_rendered():
    from memlint.report.rule_docs import print_rule

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Terminal()
    assert print_rule("MEM303", out) == 0
    text = out.getvalue()
    assert "load-without-map-location" in text and "What it does" in text and "Fix safety" in text
    assert "##" not in text  # rendered, not raw Markdown


def test_unknown_rule_is_one_line_exit_2():
    proc = run_memlint("rule", "MEM999")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "memlint: error: unknown rule 'MEM999' (see `memlint rules`)"
    assert proc.stdout == ""


def test_rules_table_and_json():
    rules = all_rules()
    table = run_memlint("rules")
    assert table.returncode == 0
    for rule in rules:
        row = next(line for line in table.stdout.splitlines() if rule.CODE in line)
        assert rule.NAME in row and rule.SEVERITY.value in row
        assert ("on" if rule.DEFAULT_ENABLED else "off") in row.split()
    cells = [[cell.strip() for cell in line.split("│")] for line in table.stdout.splitlines() if line.strip().startswith("MEM")]
    fix_column = {row[0]: row[-1] for row in cells}
    assert (fix_column["MEM101"], fix_column["MEM303"], fix_column["MEM104"], fix_column["MEM106"]) == (
        "safe", "unsafe", "unsafe", "none")
    records = json.loads(run_memlint("rules", "--format", "json").stdout)
    assert [r["code"] for r in records] == [rule.CODE for rule in rules]
    for record, rule in zip(records, rules):
        assert record["fixable"] == (rule.FIX_TITLE is not None)
        assert record["fix_applicability"] == (rule.FIX_APPLICABILITY.value if rule.FIX_TITLE else None)
        assert record["default_enabled"] == rule.DEFAULT_ENABLED


def test_no_path_checks_the_current_directory(tmp_path):
    proc = run_memlint(cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == ""
    assert proc.stderr.strip() == "memlint: no Python files or notebooks to check"
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "train.py").write_text(BUGGY)
    explicit = run_memlint("--no-cache", ".", cwd=tmp_path)
    assert explicit.stdout.startswith("./sub/train.py:2:9: MEM303 ")
    for argv in ([], ["check"]):
        proc = run_memlint(*argv, "--no-cache", cwd=tmp_path)
        assert (proc.returncode, proc.stdout) == (1, explicit.stdout)


def test_stdin_with_stdin_filename():
    proc = run_memlint("check", "-", "--stdin-filename", "pkg/train.py", stdin=BUGGY.encode())
    assert proc.returncode == 1
    assert proc.stdout.startswith("pkg/train.py:2:9: MEM303 ")
    plain = run_memlint("-", stdin=BUGGY.encode())
    assert plain.stdout.startswith("-:2:9: MEM303 ")


def test_stdin_filename_applies_per_file_ignores(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.memlint]\nper-file-ignores = { "scripts/*" = ["MEM303"] }\n')
    ignored = run_memlint("check", "-", "--stdin-filename", "scripts/a.py", "--config", str(tmp_path / "pyproject.toml"),
                          stdin=BUGGY.encode(), cwd=tmp_path)
    assert ignored.returncode == 0 and ignored.stdout == ""


def test_exit_codes(tmp_path):
    clean = tmp_path / "clean.py"
    clean.write_text("import torch\nstate = torch.load('a', map_location='cpu')\n")
    buggy = tmp_path / "buggy.py"
    buggy.write_text(BUGGY)
    assert run_memlint(str(clean)).returncode == 0
    assert run_memlint(str(buggy)).returncode == 1
    assert run_memlint("--exit-zero", str(buggy)).returncode == 0
    assert run_memlint(str(buggy), "--format", "nope").returncode == 2


def test_default_format_is_concise_when_piped(tmp_path):
    buggy = tmp_path / "buggy.py"
    buggy.write_text(BUGGY)
    proc = run_memlint(str(buggy))
    assert proc.stdout.strip() == f"{buggy}:2:9: MEM303 `torch.load` without `map_location` restores tensors onto the GPU they were saved from"


def test_full_format_through_cli(tmp_path):
    buggy = tmp_path / "buggy.py"
    buggy.write_text(BUGGY)
    proc = run_memlint("--format", "full", str(buggy))
    assert "2 | state = torch.load('ckpt.pt')" in proc.stdout
    assert proc.stdout.rstrip().endswith("Found 1 finding (0 fixable with --fix, 1 more with --unsafe-fixes)")


def test_statistics(tmp_path):
    """MEM303's fix is unsafe: marked fixable only with --unsafe-fixes."""
    buggy = tmp_path / "buggy.py"
    buggy.write_text(BUGGY + "again = torch.load('b').cuda()\n")
    proc = run_memlint("--statistics", str(buggy))
    assert proc.stdout.splitlines() == ["     2\tMEM303\t    load-without-map-location",
                                        "2 hidden fixes can be enabled with the `--unsafe-fixes` option."]
    proc = run_memlint("--statistics", "--unsafe-fixes", str(buggy))
    assert proc.stdout.split() == ["2", "MEM303", "[*]", "load-without-map-location"]
    proc = run_memlint("--statistics", "--format", "json", str(buggy))
    assert json.loads(proc.stdout) == [{"code": "MEM303", "name": "load-without-map-location", "count": 2, "fixable": 0}]


def _lint_targets() -> list[str]:
    """Every .py file of fixtures/ and the cases, except scripts that opt in to
    an estimate (``# memlint: estimate``): the estimate builds the model with torch."""
    roots = [REPO / "fixtures"]
    cases = cases_dir()
    if cases is not None:
        roots.append(cases)
    shared = REPO.parent / "shared" / "cases"
    if shared.is_dir():
        roots.append(shared)
    files = set()
    for root in roots:
        for path in root.rglob("*.py"):
            if "memlint: estimate" not in path.read_text(encoding="utf-8", errors="replace"):
                files.add(str(path.resolve()))
    return sorted(files)


def test_lint_run_never_imports_torch():
    targets = _lint_targets()
    code = (
        "import sys\n"
        "from memlint.cli import main\n"
        "rc = main(['check', '--no-cache', '--select', 'ALL', '--format', 'json', *sys.argv[1:]])\n"
        "assert rc in (0, 1, 2), rc\n"
        "leaked = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
        "print('LEAKED', leaked[:5], file=sys.stderr)\n"
        "sys.exit(3 if leaked else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, *targets], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["summary"]["files"] == len(targets) > 10


@pytest.mark.parametrize(("argv", "message"), [
    (["--advise"], "--advise needs --estimate"),
    (["--estimate-timeout", "5"], "--estimate-timeout needs --estimate"),
    (["--estimate-memory", "1GiB"], "--estimate-memory needs --estimate"),
    (["--estimate-target", "m.py:f"], "--estimate-target needs --estimate"),
    (["--estimate", "--estimate-timeout", "0"], "--estimate-timeout 0.0: must be a positive number of seconds"),
    (["--estimate", "--estimate-timeout", "inf"], "--estimate-timeout inf: must be a positive number of seconds"),
    (["--estimate", "--estimate-memory", "lots"], "--estimate-memory 'lots': cannot parse byte size"),
    (["--estimate", "--estimate-memory", "10MiB"], "--estimate-memory '10MiB': at least 256MiB"),
])
def test_estimate_options_are_checked_first(tmp_path, argv, message):
    (tmp_path / "a.py").write_text(BUGGY)
    proc = run_memlint("check", *argv, "a.py", cwd=tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and proc.stdout == "" and len(lines) == 1
    assert lines[0].startswith("memlint: error: ") and message in lines[0]


def test_check_does_not_import_the_cli_module():
    """The estimate step and check no longer reach back into cli.py (the import cycle is gone)."""
    probe = "import sys, memlint.check, memlint.integrate; print('memlint.cli' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "False"


def test_deselected_syntax_check_reports_no_mem001_whatever_the_text(tmp_path):
    """With MEM001 deselected, a file that does not parse gives a note, not
    a MEM001 (before, it depended on whether a rule's trigger token was in
    the text); with it selected, both files are reported."""
    (tmp_path / "a.py").write_text("import torch\nx = (\n")
    (tmp_path / "b.py").write_text("y = 1 +\n")
    deselected = run_memlint("check", "--no-cache", "--ignore", "MEM001", str(tmp_path / "a.py"), str(tmp_path / "b.py"))
    assert "MEM001" not in deselected.stdout and deselected.returncode == 0
    assert "a.py: not linted: its code does not parse (MEM001 is not selected)" in deselected.stderr
    selected = run_memlint("check", "--no-cache", str(tmp_path / "a.py"), str(tmp_path / "b.py"))
    assert selected.stdout.count("MEM001") == 2 and selected.returncode == 2
