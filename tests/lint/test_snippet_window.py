"""``full`` cuts long source lines to a window around the reported column
(issue 18, item E): a 30 KB line with many findings cannot print megabytes."""

from __future__ import annotations

import io
from types import SimpleNamespace

from memlint.lint.engine import LintOptions, lint_source
from memlint.lint.registry import resolve_selection
from memlint.report import full
from memlint.report.full import ELLIPSIS, MAX_SNIPPET


def _render(tmp_path, source: str) -> tuple[str, list]:
    path = tmp_path / "long.py"
    path.write_text(source)
    result = lint_source(str(path), source.encode(), LintOptions(enabled=resolve_selection(None, [], [])))
    run = SimpleNamespace(diagnostics=result.diagnostics, stdin=None, fixed=0, estimates=[])
    stream = io.StringIO()
    full.render(run, SimpleNamespace(unsafe_fixes=False), stream)
    return stream.getvalue(), result.diagnostics


def _pairs(text: str) -> list[tuple[str, str]]:
    lines = text.splitlines()
    return [(lines[i], lines[i + 1]) for i in range(len(lines) - 1) if lines[i].startswith("1 | ")]


def test_a_long_line_is_cut_around_each_finding_with_aligned_carets(tmp_path):
    calls = ["torch.load('c%04d')" % i for i in range(1500)]
    source = "import torch; torch.cuda.init(); " + "; ".join(calls) + "\n"
    assert len(source) > 30_000
    text, diagnostics = _render(tmp_path, source)
    assert len(diagnostics) >= 1000
    pairs = _pairs(text)
    assert len(pairs) == len(diagnostics)
    assert len(text) < 1000 * len(diagnostics)  # was ~30 KB per finding
    for source_line, caret_line in pairs:
        assert len(source_line) <= len("1 | ") + MAX_SNIPPET + 2
        caret = caret_line.index("^")
        assert source_line[caret:].startswith("torch.load('c"), (source_line, caret_line)
    first, last = pairs[0][0], pairs[-1][0]
    assert first.endswith(ELLIPSIS) and last.startswith("1 | " + ELLIPSIS)


def test_a_huge_line_is_not_printed_whole(tmp_path):
    source = "import torch; torch.cuda.init(); x = '" + "a" * 777_000 + "'; torch.load('c')\n"
    text, diagnostics = _render(tmp_path, source)
    [(source_line, caret_line)] = _pairs(text)
    assert len(text) < 2000
    assert source_line[caret_line.index("^"):].startswith("torch.load('c')")


def test_cut_escaped_lines_keep_the_caret_aligned(tmp_path):
    source = "import torch; torch.cuda.init(); x = '" + "\x1b" * 400 + "'; torch.load('c')  # " + "\a" * 400 + "\n"
    text, _ = _render(tmp_path, source)
    [(source_line, caret_line)] = _pairs(text)
    assert "\x1b" not in text and "\a" not in text
    assert len(source_line) <= len("1 | ") + MAX_SNIPPET + 2
    assert source_line[caret_line.index("^"):].startswith("torch.load('c')")


def test_short_lines_are_unchanged(tmp_path):
    text, _ = _render(tmp_path, "import torch; torch.cuda.init()\nstate = torch.load('ckpt.pt')\n")
    assert "2 | state = torch.load('ckpt.pt')" in text and ELLIPSIS not in text
