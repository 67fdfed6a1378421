"""Files of newer syntax than the running Python (PEP 695, PEP 701) are linted,
with the positions of their own text; a real syntax error is still MEM001."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from memlint.lint import downlevel, newer_syntax
from memlint.lint.engine import LintOptions, lint_source
from memlint.lint.registry import rule_index

from .helpers import run_memlint

ALL = LintOptions(frozenset(rule_index()))

NEWER = '''\
import torch
torch.cuda.init()

class Trainer[T: int, *Ts, **P]:
    def run[B](self, loader: B) -> None:
        total = 0
        for batch in loader:
            loss = model(batch)
            loss.backward()
            print(f"{stats["loss"]:.3f} {'\\n'.join(names)}")
            total += loss

def g[
    T,

    U = int,
](x: T) -> U:
    return x

type Pair[K] = tuple[K, K]
s = "prefix " f"{d["k"]!r:>{width}}"
v = f"""{
    d["k"]  # a comment inside the field
}"""
state = torch.load("ckpt.pt")
café = [Ä := 1]; n = f"{d["é"]}"; late = torch.load("é")
'''


def _position(source: str, needle: str, occurrence: int = 1) -> tuple[int, int]:
    """1-based (line, character column) of the ``occurrence``-th ``needle``."""
    index = -1
    for _ in range(occurrence):
        index = source.index(needle, index + 1)
    before = source[:index].split("\n")
    return len(before), len(before[-1]) + 1


def test_cpython_rejects_the_fixture():
    if sys.version_info >= (3, 14):
        pytest.skip("this interpreter parses the fixture itself")
    with pytest.raises(SyntaxError):
        ast.parse(NEWER)


def test_newer_syntax_is_linted_at_its_own_positions():
    result = lint_source("new.py", NEWER.encode(), ALL)
    found = {(d.code, d.line, d.col) for d in result.diagnostics}
    assert "MEM001" not in {d.code for d in result.diagnostics}
    assert ("MEM101", *_position(NEWER, "total += loss")) in found
    assert ("MEM303", *_position(NEWER, 'torch.load("ckpt.pt")')) in found
    # after blanked non-ASCII text on the same line, the column is still the character's
    assert ("MEM303", *_position(NEWER, 'torch.load("é")')) in found
    # no fix is offered: the fix engine re-checks fixed text with CPython's parser
    assert all(d.fix is None for d in result.diagnostics)


def test_fstring_inside_a_blanked_type_parameter_default():
    source = 'import torch; torch.cuda.init()\ndef f[T = f"{d["k"]}"](x): return torch.load(x)\n'
    result = lint_source("d.py", source.encode(), ALL)
    assert [(d.code, d.line, d.col) for d in result.diagnostics] == [("MEM303", 2, source.split("\n")[1].index("torch.load") + 1)]


def test_real_syntax_errors_stay_mem001():
    for broken in ("def f[T(x):\n    pass\n", "x = f\"{d[\"k\"]\n", "type = = 1\n", "class C[T]\n    pass\n"):
        result = lint_source("bad.py", broken.encode(), ALL)
        assert [d.code for d in result.diagnostics] == ["MEM001"], broken


def test_suppression_comment_in_newer_file():
    source = NEWER.replace('torch.load("ckpt.pt")', 'torch.load("ckpt.pt")  # noqa: MEM303')
    result = lint_source("new.py", source.encode(), ALL)
    line = _position(source, 'torch.load("ckpt.pt")')[0]
    assert not [d for d in result.diagnostics if d.code == "MEM303" and d.line == line]


def test_downlevelled_text_keeps_lines_and_byte_columns():
    down = downlevel.downlevel(NEWER)
    assert down is not None
    original, rewritten = NEWER.splitlines(), down.source.splitlines()
    assert len(original) == len(rewritten)
    ast.parse(down.source)
    for before, after in zip(original, rewritten):
        if "\\" not in after or before.strip():  # the blank line inside `g[...]` got a lone backslash
            assert len(before.encode()) == len(after.encode()), (before, after)


#: f-strings that Python 3.11 parses itself: forced through the rewrite, the
#: tree must be the one CPython builds (positions included).
SAME_AS_CPYTHON = [
    's = f"a{x!r:>{w}}b"\n',
    's = f"{x}{y}" f"{z=}"\n',
    's = "q" f"{x=}" "tail"\n',
    's = f"{ (a, b) } and {call(k=1)!s}"\n',
    'print(f"""{\n  loss.item()\n}""")\n',
    's = f"{x:{w}.{p}}"\n',
]


@pytest.mark.parametrize("source", SAME_AS_CPYTHON)
def test_rewritten_fstrings_give_cpythons_tree(source, monkeypatch):
    monkeypatch.setattr(downlevel, "_parses", lambda text: False)
    tree = newer_syntax.tree_of(downlevel.downlevel(source))  # in process: _parses is patched
    assert ast.dump(tree, include_attributes=True) == ast.dump(ast.parse(source), include_attributes=True)


def test_field_that_is_a_bare_tuple_stays_one_field(monkeypatch):
    monkeypatch.setattr(downlevel, "_parses", lambda text: False)
    tree = newer_syntax.tree_of(downlevel.downlevel('s = f"{a, b}!"\n'))
    joined = tree.body[0].value
    assert isinstance(joined, ast.JoinedStr)
    assert [type(v).__name__ for v in joined.values] == ["FormattedValue", "Constant"]


def _libcst_imported(*paths) -> tuple[str, str]:
    probe = ("import sys\nfrom memlint.cli import main\nrc = main(['--no-cache', *sys.argv[1:]])\n"
             "print(rc, 'libcst' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", probe, *map(str, paths)], capture_output=True, text=True, timeout=60)
    return tuple(out.stdout.split()[-2:])


def test_plain_lint_does_not_import_libcst(tmp_path):
    (tmp_path / "a.py").write_text("import torch; torch.cuda.init()\nstate = torch.load('x')\n")
    assert _libcst_imported(tmp_path / "a.py") == ("1", "False")
    # a syntax error without any construct libcst could help with: CPython's verdict at once
    (tmp_path / "py2.py").write_text("print 'hello'\n")
    assert _libcst_imported(tmp_path / "py2.py") == ("2", "False")
    (tmp_path / "new.py").write_text("if True: type X = int\n")
    assert _libcst_imported(tmp_path / "new.py") == ("0", "False")  # parsed by libcst in its child process


def test_newer_file_through_the_cli(tmp_path):
    (tmp_path / "new.py").write_text(NEWER, encoding="utf-8")
    proc = run_memlint("--no-cache", "--format", "concise", str(tmp_path / "new.py"))
    assert proc.returncode == 1 and "MEM001" not in proc.stdout
    line, col = _position(NEWER, 'torch.load("ckpt.pt")')
    assert f"new.py:{line}:{col}: MEM303 " in proc.stdout


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_line_ends_tabs_and_wide_characters_keep_columns(newline):
    lines = ["import torch; torch.cuda.init()", "def f[T](x):", '\tname = "café"; s = f"{d["k"]}"; return torch.load(x)']
    source = newline.join(lines) + newline
    result = lint_source("w.py", source.encode(), ALL)
    assert [(d.code, d.line, d.col) for d in result.diagnostics] == [("MEM303", 3, lines[2].index("torch.load") + 1)]


def test_a_real_error_after_newer_syntax_is_reported_where_libcst_finds_it():
    result = lint_source("bad.py", b"def f[T](): pass\nprint(1 +)\n", ALL)
    [error] = result.diagnostics
    assert (error.code, error.line, error.col) == ("MEM001", 2, 10), error


def test_an_error_cpython_finds_away_from_newer_syntax_keeps_cpythons_message():
    """An f-string earlier in the file sends it through libcst, but CPython's error is on a plain line."""
    source = b'x = f"{1}"\ncall(\n    a="pt"\n    b=True,\n)\n'
    [error] = lint_source("bad.py", source, ALL).diagnostics
    assert (error.code, error.line) == ("MEM001", 3) and "forgot a comma" in error.message, error


def test_a_named_escape_in_a_format_spec_is_valid_newer_syntax():
    """libcst 1.9.0 reads ``\\N{...}`` in a format spec as a nested field."""
    source = 'def f[T](): pass\nx = f"{1:\\N{LATIN SMALL LETTER A}}"\ny = f"{d["k"]:\\N{BULLET}>3}" "\\N{BULLET}"\n'
    assert lint_source("new.py", source.encode(), ALL).diagnostics == []
    parsed = newer_syntax.parse_newer(source)
    spec = parsed.tree.body[2].value.values[0].format_spec
    assert [v.value for v in spec.values] == ["\\N{BULLET}>3"]  # literal text as spelled, no field `BULLET`
    assert parsed.tree.body[2].value.values[-1].value == "\u2022"  # the plain string, evaluated
