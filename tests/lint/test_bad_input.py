"""Bad input never produces a traceback: a MEM001 finding or one error line on
stderr, exit 2, and the other files' results are still printed. Each case runs
the real CLI in a subprocess next to a good file with a known finding."""

from __future__ import annotations

import os
import time

import pytest

from .helpers import run_memlint

BUGGY = "import torch; torch.cuda.init()\nstate = torch.load('ckpt.pt')\n"


@pytest.fixture
def tree(tmp_path):
    """A directory holding ``good.py`` (one MEM303 finding at 2:9)."""
    (tmp_path / "good.py").write_text(BUGGY)
    return tmp_path


def _check(tree, *paths: str, expect_code: int = 2):
    proc = run_memlint("check", "--format", "concise", "--no-cache", str(tree / "good.py"), *paths, cwd=tree)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert f"{tree / 'good.py'}:2:9: MEM303" in proc.stdout, "the good file's result must still be printed"
    assert proc.returncode == expect_code, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def _mem001_line(proc, path) -> str:
    lines = [line for line in proc.stdout.splitlines() if line.startswith(f"{path}:") and " MEM001 " in line]
    assert len(lines) == 1, proc.stdout
    return lines[0]


def test_syntax_error(tree):
    bad = tree / "bad.py"
    bad.write_text("import torch; torch.cuda.init()\nfor batch in loader\n    torch.load(batch)\n")
    line = _mem001_line(_check(tree, str(bad)), bad)
    assert line.startswith(f"{bad}:2:") and "syntax error" in line


def test_syntax_error_reported_when_only_mem001_selected(tree):
    bad = tree / "plain.py"
    bad.write_text("x = (1,\n")
    proc = run_memlint("check", "--select", "MEM001", "--format", "concise", str(bad))
    assert proc.returncode == 2 and f"{bad}:1:" in proc.stdout and "MEM001" in proc.stdout


UNREADABLE = {
    "undecodable byte": (b"import torch\nname = 'caf\xe9'\n", "2:12", "cannot decode byte 0xe9"),
    "NUL byte": (b"import torch\nx = 1\x00\n", "2:6", "NUL byte"),
    "cookie naming a non-text codec": (b"# coding: rot13\nx = 1\n", "1:1", "cannot decode as rot13"),
}


@pytest.mark.parametrize("content, position, message", UNREADABLE.values(), ids=UNREADABLE.keys())
def test_bytes_that_do_not_decode_are_one_mem001(tree, content, position, message):
    bad = tree / "bad.py"
    bad.write_bytes(content)
    line = _mem001_line(_check(tree, str(bad)), bad)
    assert line.startswith(f"{bad}:{position}:") and message in line


def test_noqa_after_a_form_feed_stays_on_its_line(tree):
    """str.splitlines() breaks at form feeds; Python's line numbers do not."""
    fed = tree / "fed.py"
    fed.write_text("import torch; torch.cuda.init()\n\x0c\nx = torch.load(p)  # noqa: MEM303\ny = torch.load(q)\n")
    proc = _check(tree, str(fed), expect_code=1)
    assert [line.split(": ")[0] for line in proc.stdout.splitlines() if line.startswith(str(fed))] == [f"{fed}:4:5"]


def test_empty_file_is_fine(tree):
    empty = tree / "empty.py"
    empty.write_bytes(b"")
    proc = _check(tree, str(empty), expect_code=1)
    assert str(empty) not in proc.stdout + proc.stderr


def test_five_megabyte_file_is_skipped_fast_with_a_note(tree):
    big = tree / "big.py"
    chunk = "def step_{i}(model, batch):\n    out = model(batch)\n    return torch.load(out) + {i}\n\n"
    parts, size, i = ["import torch\n"], 0, 0
    while size < 5 * 2**20:
        text = chunk.format(i=i)
        parts.append(text)
        size += len(text)
        i += 1
    big.write_text("".join(parts))
    started = time.monotonic()
    proc = _check(tree, str(big), expect_code=1)
    elapsed = time.monotonic() - started
    assert f"memlint: {big}: skipped: 5.0 MiB is over the 1 MiB limit for linting" in proc.stderr
    assert str(big) not in proc.stdout
    assert elapsed < 30, f"5 MB file took {elapsed:.0f} s"


@pytest.mark.slow
def test_file_just_under_the_size_limit_is_linted(tree):
    from memlint.lint.engine import MAX_SOURCE_BYTES

    near = tree / "near.py"
    line = "x = 1  # " + "padding " * 10 + "\n"
    filler = line * ((MAX_SOURCE_BYTES - 200) // len(line))
    near.write_text("import torch; torch.cuda.init()\n" + filler + "state = torch.load('x.pt')\n")
    assert near.stat().st_size <= MAX_SOURCE_BYTES
    proc = _check(tree, str(near), expect_code=1)
    assert f"{near}:{filler.count(chr(10)) + 2}:9: MEM303" in proc.stdout


@pytest.mark.parametrize("kind", ["parentheses", "unary", "attributes"])
def test_nesting_deep_enough_to_exhaust_recursion(tree, kind):
    body = {
        "parentheses": "(" * 500 + "1" + ")" * 500,
        "unary": "-" * 200_000 + "1",
        "attributes": "torch" + ".a" * 100_000,
    }[kind]
    bad = tree / f"deep_{kind}.py"
    bad.write_text(f"import torch; torch.cuda.init()\nstate = torch.load('x')\nx = {body}\n")
    proc = _check(tree, str(bad))
    line = _mem001_line(proc, bad)
    assert "nested" in line or "syntax error" in line


def test_nesting_just_under_the_limits_is_linted(tree):
    ok = tree / "nested_ok.py"
    ok.write_text("import torch; torch.cuda.init()\nx = " + "[" * 199 + "torch.load('a')" + "]" * 199 + "\n")  # CPython allows 200
    proc = _check(tree, str(ok), expect_code=1)
    assert f"{ok}:2:" in proc.stdout and "MEM303" in proc.stdout


def test_directory_loop_through_symlink(tree):
    pkg = tree / "pkg"
    pkg.mkdir()
    (pkg / "inner.py").write_text(BUGGY)
    (pkg / "loop").symlink_to(pkg, target_is_directory=True)
    proc = run_memlint("check", "--format", "concise", str(tree), timeout=60)
    assert "Traceback" not in proc.stderr
    assert proc.stdout.count("MEM303") == 2 and proc.returncode == 1  # good.py and inner.py, each once


def test_dangling_symlink(tree):
    link = tree / "dangling.py"
    link.symlink_to(tree / "nowhere.py")
    proc = _check(tree, str(link))
    assert proc.stderr.strip().splitlines() == [f"memlint: error: {link}: cannot read file (No such file or directory)"]


def test_fifo_named_like_a_source_file_does_not_hang(tree):
    fifo = tree / "pipe.py"
    os.mkfifo(fifo)
    proc = _check(tree, str(tree))  # found by the directory walk, as pre-commit would list it
    assert f"memlint: error: {fifo}: cannot read file (not a regular file)" in proc.stderr


def test_unreadable_file(tree):
    locked = tree / "locked.py"
    locked.write_text(BUGGY)
    os.chmod(locked, 0)
    try:
        try:
            with open(locked, "rb"):
                pytest.skip("running as root: a mode-000 file is still readable (see the FIFO and dangling-link tests)")
        except PermissionError:
            pass
        proc = _check(tree, str(locked))
        assert f"{locked}: cannot read file (Permission denied)" in proc.stderr
    finally:
        os.chmod(locked, 0o644)


def test_missing_path(tree):
    proc = _check(tree, str(tree / "missing.py"))
    assert proc.stderr.strip().splitlines() == [f"memlint: error: {tree / 'missing.py'}: no such file or directory"]


def test_crashing_rule_is_one_error_line(tree, capsys, register_rule):
    import ast

    from memlint.cli import main
    from memlint.lint.diagnostic import Severity
    from memlint.lint.rule import Rule

    class Crashes(Rule):
        CODE, NAME, MESSAGE, SEVERITY, TRIGGERS = "MEM993", "crashes", "x", Severity.INFO, ("torch",)

        def visit_Call(self, node: ast.Call) -> None:
            raise ValueError("boom")

    register_rule(Crashes)
    code = main(["check", "--select", "MEM993,MEM303", "--format", "concise", str(tree / "good.py")])
    out, err = capsys.readouterr()
    assert code == 2 and "MEM303" in out
    assert "rule MEM993 crashed (ValueError: boom)" in err and "Traceback" not in err
