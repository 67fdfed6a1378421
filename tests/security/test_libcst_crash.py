"""libcst's native parser cannot crash or hang a run (issue: hostile input,
item 1): deep nesting made it SIGSEGV (rc=139, every file's results lost)."""

from __future__ import annotations

import time

from memlint.lint import newer_syntax
from memlint.lint.libcst_limits import MAX_BRACKET_DEPTH, MAX_LOGICAL_LINE_CHARS, libcst_refusal

from .conftest import BUGGY, run_cli

#: Valid Python 3.12 (a PEP 695 def) that CPython 3.11 rejects, nested deep
#: enough to overflow libcst's native stack (SIGSEGV with libcst 1.9.0).
DEEP_PARENS = "def f[T](): pass\nx = " + "(" * 5000 + "1" + ")" * 5000 + "\n"
DEEP_BRACKETS = "def f[T](): pass\nx = " + "[" * 5000 + "]" * 5000 + "\n"
#: Valid on 3.11, with a fixable finding: 8000 ``and`` operands overflow
#: libcst's native stack (SIGSEGV in the fix engine's in-process parse).
LONG_LINE = BUGGY + "x = " + " and ".join(["a"] * 8000) + "\n"
FIXED = BUGGY.replace("torch.load('ckpt.pt')", "torch.load('ckpt.pt', map_location=\"cpu\")")


def test_the_pre_check_refuses_deep_nesting_and_long_lines():
    assert "nested" in libcst_refusal(DEEP_PARENS)
    assert "nested" in libcst_refusal(DEEP_BRACKETS)
    assert "logical line" in libcst_refusal(LONG_LINE)
    ok = "x = " + "(" * MAX_BRACKET_DEPTH + "1" + ")" * MAX_BRACKET_DEPTH + "\n"
    assert libcst_refusal(ok) is None
    assert libcst_refusal("s = '" + "(" * 500 + "'  # " + "[" * 500 + "\n") is None  # strings, comments
    assert libcst_refusal("x = [\n" + "1,\n" * (MAX_LOGICAL_LINE_CHARS // 3 + 10) + "]\n") is not None
    assert libcst_refusal("x = 1 + \\\n" * (MAX_LOGICAL_LINE_CHARS // 8) + "1\n") is not None  # continuations join
    big_string = 'doc = """' + "text line\n" * MAX_LOGICAL_LINE_CHARS + '"""  # ' + "c" * MAX_LOGICAL_LINE_CHARS + "\n"
    assert libcst_refusal(big_string) is None  # a string literal or a comment is one token for libcst


def test_a_crashing_libcst_child_costs_only_the_fallback():
    started = time.monotonic()
    assert newer_syntax._run_child(DEEP_PARENS) == "the libcst process ended with signal 11"
    assert newer_syntax.parse_newer("def f[T](): pass\n").tree is not None  # a fresh child for the next file
    assert time.monotonic() - started < 5


def test_a_slow_libcst_child_is_stopped(monkeypatch):
    slow = "def f[T](): pass\nx = " + " + ".join(["1"] * 2000) + "\n"  # libcst 1.9.0: 1.46 s
    assert libcst_refusal(slow) is None
    newer_syntax.parse_newer("def f[T](): pass\n")  # the child is started and warm
    monkeypatch.setattr(newer_syntax, "CHILD_TIMEOUT_SECONDS", 0.2)
    started = time.monotonic()
    parsed = newer_syntax.parse_newer(slow)
    assert parsed.tree is None and "took over 0.2 s" in parsed.note
    assert time.monotonic() - started < 1
    monkeypatch.undo()  # the next request starts a child: give it the usual time
    assert newer_syntax.parse_newer("def f[T](): pass\n").tree is not None  # a fresh child answers


def test_plain_check_survives_deep_nesting_in_newer_syntax(tree):
    root = tree({"evil.py": DEEP_PARENS, "evil2.py": DEEP_BRACKETS})
    done = run_cli("check", "--no-cache", "--format", "concise", ".", cwd=root, timeout=60)
    out = done.stdout.decode()
    assert done.returncode in (1, 2), (done.returncode, done.stderr)  # findings; not 139 (SIGSEGV)
    assert "buggy.py:2:" in out  # the other file's results are kept
    assert "evil.py:2:" in out and "MEM001" in out and "evil2.py:2:" in out
    assert b"evil.py: not checked for newer Python syntax (brackets nested more than 200 deep)" in done.stderr


def test_fix_skips_a_file_over_the_limits_and_fixes_the_others(tree):
    root = tree({"evil.py": DEEP_PARENS, "long.py": LONG_LINE})
    done = run_cli("check", "--no-cache", "--fix", "--unsafe-fixes", "--format", "concise", ".", cwd=root,
                   timeout=60)
    assert done.returncode in (1, 2), (done.returncode, done.stderr)  # not 139
    assert (root / "buggy.py").read_text() == FIXED
    assert (root / "long.py").read_text() == LONG_LINE
    assert (root / "evil.py").read_text() == DEEP_PARENS
    assert b"long.py: fixes skipped (a logical line longer than 20000 characters)" in done.stderr
