"""``--add-noqa`` and suppression on statements whose first line cannot
take a comment: a backslash continuation, a multi-line string opened after
the finding (hostile-input issue, item 4)."""

from __future__ import annotations

import pytest

from memlint.lint.engine import LintOptions, lint_source
from memlint.lint.registry import rule_index
from memlint.lint.suppression import suppressions

from .helpers import run_memlint

ALL = LintOptions(frozenset(rule_index()))
LOOP = "import torch\nmodel.eval()\nfor batch in loader:\n    model(batch)  # noqa: MEM104\n"
BACKSLASH = LOOP + "    torch.cuda.empty_cache() if x else \\\n        None\n"
STRING = LOOP + '    if total > 0: torch.cuda.empty_cache(); s = """\n    """\n'


@pytest.mark.parametrize("source", [BACKSLASH, STRING], ids=["backslash", "string"])
def test_add_noqa_writes_on_the_last_physical_line_and_it_suppresses(tmp_path, source):
    assert [d.code for d in lint_source("t.py", source.encode(), ALL).diagnostics] == ["MEM401"]
    path = tmp_path / "t.py"
    path.write_text(source)
    first = run_memlint("--no-cache", "--add-noqa", str(path))
    assert first.stderr.strip() == "Added 1 noqa directive to 1 file", first.stderr
    lines = path.read_text().splitlines()
    assert lines[-1].endswith("  # noqa: MEM401") and lines[:-1] == source.splitlines()[:-1]
    again = run_memlint("--no-cache", "--add-noqa", str(path))
    assert again.stderr.strip() == "Added 0 noqa directives to 0 files"
    assert run_memlint("--no-cache", str(path)).returncode == 0  # suppressed


def test_a_noqa_covers_only_the_lines_that_cannot_hold_one():
    source = "a = 1\nb = 2 + \\\n    3 + \\\n    4  # noqa: MEM401\nc = '''\n'''\nd = (1,\n  2)  # noqa\n"
    table = suppressions(source)
    assert table[2] == table[3] == table[4] == frozenset({"MEM401"})
    assert 1 not in table and 5 not in table and 6 not in table
    assert table[8] is None and 7 not in table  # a bracketed line can hold its own comment
