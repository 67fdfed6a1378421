"""Directives are read from real comments only (issue 18, sibling item):
``# noqa``, ``# memlint: ignore[...]``, ``# memlint: skip-file`` and
``# memlint: estimate`` inside a string or docstring are text."""

from __future__ import annotations

import tokenize

import pytest

from memlint.integrate.settings import parse_comment_block
from memlint.lint.engine import LintOptions, lint_source
from memlint.lint.suppression import ALL, directive_comments, skips_file, suppressions

#: A load in a file that uses CUDA (MEM303 needs the file to show an accelerator).
LOAD = "state = torch.load('ckpt.pt'); torch.cuda.init()"


def mem303_lines(source: str) -> list[int]:
    result = lint_source("t.py", source.encode(), LintOptions(enabled=frozenset({"MEM303"})))
    return [d.line for d in result.diagnostics]


@pytest.mark.parametrize("source", [
    f"import torch\n{LOAD}  # noqa\n",
    f"import torch\n{LOAD}  # noqa: MEM303\n",
    f"import torch\n{LOAD}  # memlint: ignore[MEM3]\n",
    f"# memlint: skip-file\nimport torch\n{LOAD}\n",
])
def test_real_comments_are_directives(source):
    assert mem303_lines(source) == []


@pytest.mark.parametrize("source", [
    f"import torch; torch.cuda.init()\nstate = torch.load('ckpt.pt' + '# noqa')\n",
    f"import torch; torch.cuda.init()\nstate = torch.load('''\n# noqa''')\n",
    f'"""Docs.\n# memlint: skip-file\n"""\nimport torch\n{LOAD}\n',
    f"import torch\nNOTE = '# memlint: skip-file'\n{LOAD}\n",
    f"import torch; torch.cuda.init()\nstate = torch.load(f'{{x}}# memlint: ignore')\n",
])
def test_text_in_strings_is_not_a_directive(source):
    assert mem303_lines(source), source


def test_only_whole_line_estimate_comments_configure():
    source = ('"""Usage:\n# memlint: estimate target=in_docstring.py:f\n"""\n'
              "x = 1  # memlint: estimate target=trailing.py:f\n"
              "# memlint: estimate target=real.py:f gpu=T4\n")
    values, line = parse_comment_block("t.py", source)
    assert values == {"target": "real.py:f", "gpu": "T4"} and line == 5


def test_line_numbers_follow_cr_and_crlf_line_ends():
    source = "import torch\r\nx = 1\r" + LOAD + "  # noqa\r\n"
    assert suppressions(source) == {3: ALL}


def test_a_file_that_stops_tokenizing_keeps_the_later_candidates():
    # An unterminated triple quote: tokenize fails at the end; the comment
    # before it is found by tokenize, the text after it is taken as before.
    source = "x = 1  # noqa: MEM101\ny = '''\nz = 2  # noqa: MEM102\n"
    assert suppressions(source) == {1: frozenset({"MEM101"}), 3: frozenset({"MEM102"})}
    assert skips_file("x = (\n# memlint: skip-file\n")


def test_tokenize_runs_only_when_the_text_has_a_candidate(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("tokenize was called")

    monkeypatch.setattr(tokenize, "generate_tokens", refuse)
    assert suppressions("import torch\n# memlint is fine\nx = 'noqa'\n") == {}
    assert not skips_file("# skip-file is just a word here\n")
    assert directive_comments("# nothing\n", __import__("re").compile("noqa")) == []


def test_tokenize_stops_after_the_last_candidate(monkeypatch):
    seen = []
    real = tokenize.generate_tokens

    def counting(readline):
        for token in real(readline):
            seen.append(token.start[0])
            yield token

    monkeypatch.setattr(tokenize, "generate_tokens", counting)
    source = "x = 1  # noqa\n" + "y = 2\n" * 1000
    assert suppressions(source) == {1: ALL}
    assert max(seen) <= 2
