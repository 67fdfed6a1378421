"""The libcst fix engine: loaded only to fix, exact bytes outside the edits,
line ends and encodings kept, block transforms re-indent and keep comments."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from memlint.cli import main
from memlint.fix import resolve_text
from memlint.fix.engine import ParsedText, text_edits
from memlint.lint.diagnostic import FixPlan
from memlint.lint.engine import LintOptions, lint_source

ROOT = Path(__file__).resolve().parents[2]

#: imports libcst? -- a plain lint, then the same run with a fix to show (the control)
_PROBE = """
import sys
from memlint.cli import main
code = main(["check", "--no-cache", *sys.argv[1:]])
print("libcst" in sys.modules, any(name.startswith("memlint.fix") for name in sys.modules))
"""


def _probe(*args: str) -> str:
    done = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("fmt", ["concise", "full", "github"])
def test_a_plain_lint_never_imports_libcst(fmt):
    """The fixtures/fixes tree has a fix for every fixable rule; linting it
    (any text format, --statistics) loads neither libcst nor the engine."""
    assert _probe("--format", fmt, "fixtures/fixes") == "False False"


def test_statistics_never_imports_libcst():
    assert _probe("--statistics", "fixtures/fixes") == "False False"


def test_diff_loads_libcst_only_then():
    """The control: the same probe sees libcst once a fix is shown."""
    assert _probe("--diff", "fixtures/fixes/MEM101") == "True True"


def _plan(kind: str, source: str, line: int, col: int, end_line: int, end_col: int, **params) -> FixPlan:
    return FixPlan(kind, (line, col), (end_line, end_col), tuple(sorted(params.items())))


# -- line ends and encodings ----------------------------------------------------------
BUGGY = ("import torch\n"
         "# cafe\u0301 -- a comment that stays\n"
         "def train(net, loader, opt):\n"
         "    for x in loader:  # every batch\n"
         "        loss = net(x).sum()\n"
         "        loss.backward()\n"
         "        opt.step()\n"
         "    return opt\n")


@pytest.mark.parametrize(("newline", "encoding", "header"), [
    ("\r\n", "utf-8", b""),
    ("\n", "utf-8-sig", b""),
    ("\r", "utf-8", b""),
    ("\n", "latin-1", b"# -*- coding: latin-1 -*-\n"),
], ids=["crlf", "bom", "lone-cr", "latin-1"])
def test_block_fix_keeps_line_ends_encoding_and_every_other_byte(tmp_path, newline, encoding, header):
    """MEM201's fix (a statement inserted at the top of a loop body) in
    files with CRLF, a UTF-8 BOM, lone CRs and a latin-1 cookie: the bytes
    before and after the inserted line are the original bytes."""
    text = BUGGY.replace("\u0301", "") if encoding == "latin-1" else BUGGY
    text = text.replace("cafe", "caf\u00e9") if encoding == "latin-1" else text
    body = text.replace("\n", newline)
    data = header.replace(b"\n", newline.encode()) + body.encode(encoding)
    path = tmp_path / "train.py"
    path.write_bytes(data)
    assert main(["check", "--no-cache", "--fix", "--unsafe-fixes", "--select", "MEM201", str(path)]) == 0
    fixed = path.read_bytes()
    plain = "utf-8" if encoding == "utf-8-sig" else encoding  # no second BOM inside the text
    inserted = f"        opt.zero_grad(){newline}".encode(plain)
    anchor = f"    for x in loader:  # every batch{newline}".encode(plain)
    cut = data.index(anchor) + len(anchor)
    assert fixed == data[:cut] + inserted + data[cut:]
    assert main(["check", "--no-cache", "--fix", "--unsafe-fixes", "--select", "MEM201", str(path)]) == 0
    assert path.read_bytes() == fixed  # idempotent


def test_form_feeds_stay_where_they_are():
    """libcst drops a form feed in a line's indentation: the engine takes
    them out before parsing and maps the positions back, so they stay."""
    source = "import torch\n\x0cx = torch.load(p)\n\x0c\n"
    fixed = resolve_text(source, _fix(_plan("add_keyword", source, 2, 6, 2, 19, keyword="map_location", code='"cpu"')))
    assert fixed == 'import torch\n\x0cx = torch.load(p, map_location="cpu")\n\x0c\n'


def test_a_removed_statement_keeps_the_form_feed_of_the_next_line():
    """The removal's edit ends where the next line's form feed was taken
    out: mapped back, it ends before the form feed, which stays."""
    source = "for b in loader:\n    f(b)\n    torch.cuda.empty_cache()\n\x0c# c\nprint(1)\n"
    fixed = resolve_text(source, _fix(_plan("remove_statement", source, 3, 5, 3, 29)))
    assert fixed == "for b in loader:\n    f(b)\n\x0c# c\nprint(1)\n"


def test_an_insertion_where_a_form_feed_was_keeps_it_before_the_insertion():
    prepared = ParsedText("\x0cx = 1\n")
    assert prepared.to_original(1, 1) == (1, 2)
    assert prepared.to_original(1, 1, end=True) == (1, 1)
    assert prepared.to_original(1, 3, end=True) == (1, 4)


def _fix(*plans):
    from memlint.lint.diagnostic import Applicability, Fix

    return Fix("t", Applicability.SAFE, plans=plans)


# -- transforms -------------------------------------------------------------------------
def test_wrap_in_with_reindents_the_loop_and_keeps_its_comments():
    source = ("def f(model, val):\n"
              "    # evaluation\n"
              "    for x in val:  # header comment\n"
              "        # inside\n"
              "        y = model(x)\n"
              "        s = '''a\n"
              "b'''\n"
              "    return y\n")
    fixed = resolve_text(source, _fix(_plan("wrap_in_with", source, 3, 5, 7, 5, code="torch.no_grad()")))
    assert fixed == ("def f(model, val):\n"
                     "    # evaluation\n"
                     "    with torch.no_grad():\n"
                     "        for x in val:  # header comment\n"
                     "            # inside\n"
                     "            y = model(x)\n"
                     "            s = '''a\n"
                     "b'''\n"  # the string's own text is not re-indented
                     "    return y\n")


def test_removed_statement_leaves_its_comment_and_a_pass_when_alone():
    source = "for b in x:\n    # flush\n    torch.cuda.empty_cache()\nfor c in y:\n    torch.cuda.empty_cache()  # x\n"
    first = resolve_text(source, _fix(_plan("remove_statement", source, 3, 5, 3, 29)))
    assert first == "for b in x:\n    # flush\n    pass\nfor c in y:\n    torch.cuda.empty_cache()  # x\n"
    second = resolve_text(source, _fix(_plan("remove_statement", source, 5, 5, 5, 29)))
    assert second == "for b in x:\n    # flush\n    torch.cuda.empty_cache()\nfor c in y:\n    pass\n"


def test_method_call_parenthesises_an_operation_once():
    source = "t += (a + b)\nu += a * 2\nv += -a\n"
    assert resolve_text(source, _fix(_plan("call_method", source, 1, 7, 1, 12, method="detach"))) \
        == "t += (a + b).detach()\nu += a * 2\nv += -a\n"
    assert resolve_text(source, _fix(_plan("call_method", source, 2, 6, 2, 11, method="detach"))) \
        == "t += (a + b)\nu += (a * 2).detach()\nv += -a\n"
    assert resolve_text(source, _fix(_plan("call_method", source, 3, 6, 3, 8, method="cpu"))) \
        == "t += (a + b)\nu += a * 2\nv += (-a).cpu()\n"


@pytest.mark.parametrize(("before", "after"), [
    ("opt.zero_grad(set_to_none=False)\n", "opt.zero_grad()\n"),
    ("opt.zero_grad(False)\n", "opt.zero_grad()\n"),
    ("f(a, set_to_none=False)\n", "f(a)\n"),
    ("f(set_to_none=False, a=1)\n", "f(a=1)\n"),
    ("f(\n    a,\n    set_to_none=False,\n)\n", "f(\n    a,\n)\n"),
])
def test_remove_argument_keeps_the_call_well_formed(before, after):
    import ast

    call = ast.parse(before).body[0].value
    index = next(i for i, k in enumerate([*call.args, *call.keywords])
                 if getattr(k, "arg", None) == "set_to_none" or (isinstance(k, ast.Constant) and k.value is False))
    plan = _plan("remove_argument", before, call.lineno, call.col_offset + 1, call.end_lineno,
                 call.end_col_offset + 1, index=index)
    assert resolve_text(before, _fix(plan)) == after


def test_a_plan_whose_node_is_not_there_gives_no_fix():
    source = "x = f(a)\n"
    assert resolve_text(source, _fix(_plan("remove_argument", source, 1, 1, 1, 9, index=0))) is None  # not a Call span
    assert resolve_text(source, _fix(_plan("remove_argument", source, 1, 5, 1, 9, index=3))) is None  # no argument 3
    assert resolve_text(source, _fix(_plan("no_such_kind", source, 1, 5, 1, 9))) is None


def test_text_edits_are_minimal_and_separate():
    before = "a = 1\nb = 2\nc = 3\nd = 4\n"
    after = "a = 1\nb = 2.0\nc = 3\nd = 4\ne = 5\n"
    edits = text_edits(before, after)
    assert [(e.start_line, e.start_col, e.end_line, e.end_col, e.content) for e in edits] == [
        (2, 6, 2, 6, ".0"), (5, 1, 5, 1, "e = 5\n")]


def test_mem206_rewrites_every_use_and_drops_the_import_once():
    source = ("import torch\nfrom torch.cuda.amp import autocast, GradScaler\n\n"
              "scaler = GradScaler()\nwith autocast():\n    pass\nwith autocast(True):\n    pass\n")
    options = LintOptions(frozenset({"MEM206"}))
    from memlint.lint.fixes import fix_text

    found = lint_source("t.py", source.encode(), options).diagnostics
    outcome = fix_text("t.py", source, options, False, found)
    assert outcome.fixed == ('import torch\n\nscaler = torch.amp.GradScaler("cuda")\n'
                             'with torch.amp.autocast("cuda"):\n    pass\nwith torch.amp.autocast("cuda", enabled=True):\n'
                             "    pass\n")
    assert outcome.remaining == []


def test_mem206_keeps_an_import_still_used_elsewhere():
    source = "import torch\nfrom torch.cuda.amp import autocast\nctx = autocast\nwith autocast():\n    pass\n"
    options = LintOptions(frozenset({"MEM206"}))
    from memlint.lint.fixes import fix_text

    found = lint_source("t.py", source.encode(), options).diagnostics
    fixed = fix_text("t.py", source, options, False, found).fixed
    assert fixed == ('import torch\nfrom torch.cuda.amp import autocast\nctx = autocast\n'
                     'with torch.amp.autocast("cuda"):\n    pass\n')


def test_parsed_text_refuses_what_libcst_cannot_keep():
    assert ParsedText.of("x = (a if b else(lambda: 0))\n") is None  # libcst issue #1061


def test_diff_says_how_many_fixes_hide_behind_unsafe_fixes(tmp_path, capsys):
    path = tmp_path / "a.py"
    path.write_text("import torch\ndef step(opt):\n    opt.zero_grad(set_to_none=False)\n"
                    "def total(model, loader):\n    t = 0\n    for x in loader:\n        loss = model(x).sum()\n"
                    "        loss.backward()\n        t += loss\n    return t\n")
    main(["check", "--no-cache", "--diff", "--select", "MEM101,MEM203", str(path)])
    captured = capsys.readouterr()
    assert "+        t += loss.detach()" in captured.out and "zero_grad()" not in captured.out
    assert "1 hidden fix can be enabled with the `--unsafe-fixes` option." in captured.err
    main(["check", "--no-cache", "--diff", "--unsafe-fixes", "--select", "MEM101,MEM203", str(path)])
    captured = capsys.readouterr()
    assert "+    opt.zero_grad()" in captured.out and "hidden fix" not in captured.err


def test_fix_plans_survive_the_cache():
    """A cached result keeps its fixes' plans (tuples included), so a warm
    run fixes what a cold one does."""
    from memlint.lint.cache import decode_result, encode_result
    from memlint.lint.diagnostic import FileResult

    source = ("import torch\nfrom torch.cuda.amp import autocast\nwith autocast(True):\n    pass\n"
              "def f(loader, opt, crit, h, c):\n    lstm = torch.nn.LSTM(3, 4)\n    for x, y in loader:\n        out, (h, c) = lstm(x, (h, c))\n"
              "        crit(out, y).backward()\n        opt.step()\n")
    found = lint_source("t.py", source.encode(), LintOptions(frozenset({"MEM206", "MEM105"}))).diagnostics
    assert {d.code for d in found if d.fix is not None and d.fix.plans} == {"MEM206", "MEM105"}
    import json

    payload = json.loads(json.dumps(encode_result(FileResult("t.py", found, parsed=True))))
    assert decode_result(payload, "t.py").diagnostics == found


def test_no_with_around_a_loop_that_yields():
    """`with torch.no_grad():` suspended at a `yield` would leave autograd off
    in the caller: MEM104 offers no fix there (it still reports)."""
    source = ("import torch\n\ndef train(model, loader, opt, val):\n    for x, y in loader:\n"
              "        model(x).sum().backward()\n        opt.step()\n    model.eval()\n"
              "    for x, y in val:\n        yield model(x)\n")
    found = lint_source("t.py", source.encode(), LintOptions(frozenset({"MEM104"}))).diagnostics
    assert [d.code for d in found] == ["MEM104"] and found[0].fix is None
