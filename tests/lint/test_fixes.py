"""--fix, --unsafe-fixes and --diff: edits, rounds, re-parse guard, safe writes."""

from __future__ import annotations

import argparse
import ast
import os
import stat

import pytest

from memlint.check import CheckRun
from memlint.cli import main
from memlint.lint import fixes
from memlint.lint.diagnostic import Applicability, Edit, Fix, Severity
from memlint.lint.engine import LintOptions, lint_source
from memlint.lint.rule import Rule
from memlint.fix import resolve, resolve_text

from .helpers import run_memlint

BUGGY = "import torch; torch.cuda.init()\n\ndef resume(path):\n    state = torch.load(path)\n    return state.cuda()\n"
FIXED = 'import torch; torch.cuda.init()\n\ndef resume(path):\n    state = torch.load(path, map_location="cpu")\n    return state.cuda()\n'


class RenameCall(Rule):
    """Test rule: every call of ``old_api(...)`` becomes ``new_api(...)`` (safe fix)."""

    CODE = "MEM991"
    NAME = "old-api-call"
    MESSAGE = "old_api is deprecated"
    SEVERITY = Severity.INFO
    FIX_TITLE = "Call new_api"
    TRIGGERS = ("old_api",)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id == "old_api":
            self.report(node, fix=self.replacement(node.func, "new_api"))


class BreakSyntax(Rule):
    """Test rule whose fix produces a syntax error (a raw text edit: the
    libcst engine cannot build one, so the re-parse guard is tested with it)."""

    CODE = "MEM992"
    NAME = "breaks-syntax"
    MESSAGE = "bad"
    SEVERITY = Severity.WARNING
    FIX_TITLE = "Break it"
    TRIGGERS = ("breakme",)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id == "breakme":
            self.report(node, fix=Fix(self.FIX_TITLE, Applicability.SAFE, (self.ctx.edit_replacing(node, "breakme("),)))


def _fix(title="t", *edits, safe=True) -> Fix:
    return Fix(title, Applicability.SAFE if safe else Applicability.UNSAFE, tuple(Edit(*e) for e in edits))


# --- text edits ---------------------------------------------------------------


def test_apply_fixes_applies_non_overlapping_and_skips_overlapping():
    text = "abc = 1\nxyz = 2\n"
    first = _fix("a", (1, 1, 1, 4, "ABC"))
    overlapping = _fix("b", (1, 2, 1, 3, "B"))
    second_line = _fix("c", (2, 1, 2, 4, "XYZ"), (2, 7, 2, 8, "3"))
    new, applied = fixes.apply_fixes(text, [first, overlapping, second_line])
    assert (new, applied) == ("ABC = 1\nXYZ = 3\n", 2)


def test_apply_fixes_insertions_at_one_point_are_not_both_applied():
    new, applied = fixes.apply_fixes("f(x)\n", [_fix("a", (1, 4, 1, 4, ", 1")), _fix("b", (1, 4, 1, 4, ", 2"))])
    assert (new, applied) == ("f(x, 1)\n", 1)


def test_edit_offsets_follow_crlf_and_cr_line_breaks():
    text = "a = 1\r\nb = 2\rc = 3\n"
    assert fixes.line_offsets(text) == [0, 7, 13, 19]
    new, _ = fixes.apply_fixes(text, [_fix("x", (3, 1, 3, 2, "C")), _fix("y", (2, 5, 2, 6, "9"))])
    assert new == "a = 1\r\nb = 9\rC = 3\n"


def test_multiline_edit_and_end_of_text():
    text = "x = (\n  1,\n)\n"
    new, applied = fixes.apply_fixes(text, [_fix("m", (1, 5, 3, 2, "(1,)"))])
    assert (new, applied) == ("x = (1,)\n", 1)
    new, _ = fixes.apply_fixes("x\n", [_fix("end", (2, 1, 2, 1, "y\n"))])
    assert new == "x\ny\n"


# --- rounds with a registered fake rule -----------------------------------------


def test_nested_fixes_overlap_then_converge_in_later_rounds(register_rule):
    register_rule(RenameCall)
    source = "old_api(old_api(old_api(1)))\n"
    options = LintOptions(enabled=frozenset({"MEM991"}))
    diagnostics = lint_source("n.py", source.encode(), options).diagnostics
    assert len(diagnostics) == 3
    outcome = fixes.fix_text("n.py", source, options, unsafe=False, diagnostics=diagnostics)
    assert outcome.fixed == "new_api(new_api(new_api(1)))\n"
    assert outcome.fixed_count == 3
    assert outcome.remaining == []


def _fix_with_rules(register_rule, capsys, path, text: str, *rules: type):
    """``memlint check --fix`` of ``path`` (holding ``text``) with only the test ``rules``: (code, out, err)."""
    for rule in rules:
        register_rule(rule)
    path.write_text(text, encoding="utf-8")
    code = main(["check", "--select", ",".join(rule.CODE for rule in rules), "--format", "concise", "--fix", str(path)])
    return (code, *capsys.readouterr())


def test_cli_fix_with_fake_rule_reports_remaining_only(register_rule, tmp_path, capsys):
    path = tmp_path / "a.py"
    code, out, err = _fix_with_rules(register_rule, capsys, path, "old_api(1)\nx = old_api\n", RenameCall)
    assert path.read_text() == "new_api(1)\nx = old_api\n"
    assert "Fixed 1 problem" in err
    assert out == "" and code == 0


def test_fix_that_breaks_syntax_is_not_written(register_rule, tmp_path, capsys):
    path = tmp_path / "b.py"
    code, out, err = _fix_with_rules(register_rule, capsys, path, "breakme = 1\n", BreakSyntax)
    assert path.read_text() == "breakme = 1\n"
    assert f"{path}:1:1: MEM992 fix 'Break it' would break the file" in err and "skipped" in err
    assert "MEM992" in out and code == 2


def test_a_fix_that_breaks_the_file_is_skipped_and_the_others_applied(register_rule, tmp_path, capsys):
    path = tmp_path / "mixed.py"
    code, out, err = _fix_with_rules(register_rule, capsys, path, "old_api(1)\nbreakme = 1\nold_api(2)\n",
                                     RenameCall, BreakSyntax)
    assert path.read_text() == "new_api(1)\nbreakme = 1\nnew_api(2)\n"
    [error] = [line for line in err.splitlines() if line.startswith("memlint: error:")]
    assert f"{path}:2:1: MEM992" in error and "skipped" in error
    assert "Fixed 2 problems" in err
    assert [line.split(": ")[1].split()[0] for line in out.splitlines()] == ["MEM992"] and code == 2


def test_file_changed_on_disk_is_not_overwritten(register_rule, tmp_path, monkeypatch):
    register_rule(RenameCall)
    path = tmp_path / "c.py"
    path.write_text("old_api(1)\n", encoding="utf-8")
    options = LintOptions(enabled=frozenset({"MEM991"}))
    result = lint_source(str(path), path.read_bytes(), options)
    run = CheckRun(results=[result], options={str(path): options})
    real_fix_text = fixes.fix_text

    def edit_meanwhile(*args, **kwargs):
        outcome = real_fix_text(*args, **kwargs)
        path.write_text("old_api(2)  # edited by someone else\n", encoding="utf-8")
        return outcome

    monkeypatch.setattr(fixes, "fix_text", edit_meanwhile)
    fixes.apply_fixes_to_run(run, argparse.Namespace(unsafe_fixes=False, diff=False, fix=True))
    assert path.read_text() == "old_api(2)  # edited by someone else\n"
    assert any("skipped: changed on disk" in note for note in run.notes)
    assert run.fixed == 0 and run.diagnostics == result.diagnostics


# --- MEM303's unsafe fix through the real CLI -----------------------------------


def test_fix_without_unsafe_leaves_unsafe_fix(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(BUGGY)
    proc = run_memlint("check", "--fix", "--format", "concise", str(path))
    assert path.read_text() == BUGGY
    assert proc.returncode == 1 and "MEM303" in proc.stdout
    assert "Fixed" not in proc.stderr


def test_unsafe_fix_applied_atomically_keeping_mode(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(BUGGY)
    os.chmod(path, 0o640)
    inode = path.stat().st_ino
    proc = run_memlint("check", "--fix", "--unsafe-fixes", "--format", "concise", str(path))
    assert proc.returncode == 0, proc.stderr
    assert path.read_text() == FIXED
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert path.stat().st_ino != inode  # replaced by a new file (rename), not rewritten in place
    assert "Fixed 1 problem" in proc.stderr and proc.stdout == ""
    assert [p.name for p in tmp_path.iterdir()] == ["train.py"]  # no temporary file left


def test_diff_prints_unified_diff_and_writes_nothing(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(BUGGY)
    proc = run_memlint("check", "--diff", "--unsafe-fixes", "train.py", cwd=tmp_path)
    assert path.read_text() == BUGGY
    assert proc.returncode == 1
    assert proc.stdout.startswith("--- a/train.py\n+++ b/train.py\n")
    absolute = run_memlint("check", "--diff", "--unsafe-fixes", str(path))
    assert absolute.stdout.startswith(f"--- {path}\n+++ {path}\n")
    assert '-    state = torch.load(path)\n+    state = torch.load(path, map_location="cpu")\n' in proc.stdout
    assert "Would fix 1 problem" in proc.stderr
    path.write_text(FIXED)
    assert run_memlint("check", "--diff", "--unsafe-fixes", str(path)).returncode == 0


def test_stdin_fix_writes_fixed_source_to_stdout(tmp_path):
    proc = run_memlint("check", "-", "--stdin-filename", "train.py", "--fix", "--unsafe-fixes", stdin=BUGGY.encode())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == FIXED
    untouched = run_memlint("check", "-", "--fix", stdin=BUGGY.encode())
    assert untouched.stdout == BUGGY  # only an unsafe fix: source echoed unchanged
    assert "MEM303" in untouched.stderr and untouched.returncode == 1


def test_fix_keeps_encoding_crlf_and_follows_symlink(tmp_path):
    real = tmp_path / "real.py"
    source = "# -*- coding: latin-1 -*-\r\nimport torch; torch.cuda.init()\r\nname = 'café'\r\nstate = torch.load(name).cuda()\r\n"
    real.write_bytes(source.encode("latin-1"))
    link = tmp_path / "link.py"
    link.symlink_to(real)
    proc = run_memlint("check", "--fix", "--unsafe-fixes", str(link))
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink()
    expected = source.replace("torch.load(name)", 'torch.load(name, map_location="cpu")').encode("latin-1")
    assert real.read_bytes() == expected


def test_fix_round_trip_on_many_mem303_calls(tmp_path):
    path = tmp_path / "many.py"
    body = "import torch; torch.cuda.init()\n" + "".join(f"s{i} = torch.load('f{i}').cuda(); t{i} = torch.load('g{i}').to('cuda')\n" for i in range(5))
    path.write_text(body)
    proc = run_memlint("check", "--fix", "--unsafe-fixes", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fixed = path.read_text()
    assert fixed.count('map_location="cpu"') == 10
    ast.parse(fixed)
    assert "Fixed 10 problems" in proc.stderr
    assert run_memlint("check", "--fix", "--unsafe-fixes", str(path)).returncode == 0
    assert path.read_text() == fixed


def test_is_applicable():
    assert not fixes.is_applicable(None, True)
    assert fixes.is_applicable(_fix("s"), False)
    assert not fixes.is_applicable(_fix("u", safe=False), False)
    assert fixes.is_applicable(_fix("u", safe=False), True)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write into a read-only directory")
def test_unwritable_directory_is_one_error_line(tmp_path):
    path = tmp_path / "ro" / "train.py"
    path.parent.mkdir()
    path.write_text(BUGGY)
    os.chmod(path.parent, 0o555)
    try:
        proc = run_memlint("check", "--fix", "--unsafe-fixes", str(path))
    finally:
        os.chmod(path.parent, 0o755)
    assert proc.returncode == 2 and "cannot write fixes" in proc.stderr and "Traceback" not in proc.stderr


def test_fix_relints_a_file_that_changed_after_it_was_linted(tmp_path):
    """A file edited between linting and fixing: the stale positions must not
    be applied to the new text (that once replaced a line of code)."""
    from memlint.check import CheckRun
    from memlint.lint.engine import LintOptions
    from memlint.lint.fixes import _fix_result
    from memlint.lint.runner import Job, lint_jobs

    path = tmp_path / "race.py"
    original = (
        "import torch\n\n\ndef train(model, loader, opt, criterion):\n"
        "    for x, label in loader:\n"
        "        outputs = model(x)\n"
        "        loss = criterion(outputs, label)\n"
        "        opt.zero_grad(set_to_none=False)\n"
        "        loss.backward()\n"
        "        opt.step()\n"
    )
    path.write_text(original)
    options = LintOptions(enabled=frozenset({"MEM203"}))
    [result] = lint_jobs([Job(str(path), options)], with_digests=True)
    assert [d.code for d in result.diagnostics] == ["MEM203"]
    path.write_text("import os\n" + original)  # an editor saves while memlint runs
    run = CheckRun(options={str(path): options})
    outcome = _fix_result(run, result, unsafe=True)
    fixed = outcome.fixed
    assert "loss = criterion(outputs, label)" in fixed
    assert fixed.count("opt.zero_grad()") == 1 and "set_to_none=False" not in fixed
    assert fixed.startswith("import os\n")


def test_a_file_libcst_cannot_parse_is_left_as_it_is(tmp_path, capsys):
    """`a if b else(lambda: 0)`, which libcst 1.9 fails to parse (libcst
    issue #1061, a TypeError inside its validation): that file gets no fix
    and is not touched, the other files are fixed, no traceback."""
    odd = tmp_path / "odd.py"
    odd.write_text("import torch; torch.cuda.init()\nz = torch.load(a if b else(lambda:0))\n", encoding="utf-8")
    good = tmp_path / "good.py"
    good.write_text("import torch; torch.cuda.init()\nstate = torch.load('x').cuda()\n", encoding="utf-8")
    code = main(["check", "--select", "MEM303", "--fix", "--unsafe-fixes", str(odd), str(good)])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert odd.read_text() == "import torch; torch.cuda.init()\nz = torch.load(a if b else(lambda:0))\n"
    assert good.read_text() == "import torch; torch.cuda.init()\nstate = torch.load('x', map_location=\"cpu\").cuda()\n"


def test_no_method_fix_on_a_value_that_may_be_no_tensor():
    """`(loss if flag else 0).detach()` fails when `flag` is false: the
    findings stay, without a fix; a plain or arithmetic value keeps its fix."""
    source = (
        "def train(model, loader, crit, opt, flag):\n"
        "    total, kept, outs = 0.0, 0.0, []\n"
        "    for x, y in loader:\n"
        "        out = model(x)\n"
        "        loss = crit(out, y)\n"
        "        loss.backward()\n"
        "        total += loss if flag else 0\n"
        "        kept += loss or 0\n"
        "        outs.append(out if flag else None)\n"
        "        total += loss * 2\n"
    )
    found = lint_source("t.py", source.encode(), LintOptions(frozenset({"MEM101", "MEM102"}))).diagnostics
    fixes = {(d.code, d.line): d.fix for d in found}
    assert set(fixes) == {("MEM101", 7), ("MEM101", 8), ("MEM102", 9), ("MEM101", 10)}
    assert fixes[("MEM101", 7)] is None and fixes[("MEM101", 8)] is None and fixes[("MEM102", 9)] is None
    assert [p.kind for p in fixes[("MEM101", 10)].plans] == ["call_method"]
    assert fixes[("MEM101", 10)].edits == ()  # resolved by libcst only when fixing
    (resolved,) = resolve(source, [d for d in found if d.line == 10])
    assert [e.content for e in resolved.fix.edits] == ["(loss * 2).detach()"]
    assert "        total += (loss * 2).detach()\n" in resolve_text(source, resolved.fix)
