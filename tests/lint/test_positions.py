"""Diagnostic positions: ``FileContext.span``/``code`` turn CPython's ``ast``
positions (UTF-8 byte columns) into character columns; the text they cut
equals the standard library's ``ast.get_source_segment``, node for node."""

import ast

import pytest

from memlint.lint.context import FileContext

UNUSUAL = (
    "import torch\n"
    "s = 'é€'; t = torch.load(s)\n"
    "if True:\n"
    "\tfor x in range(3):\n"
    "\t\tv = torch.zeros(\n"
    "\t\t\t3,  # é\n"
    "\t\t) + '''a\n"
    "b''' ; w = x\n"
    "class A:\n"
    "    @staticmethod\n"
    "    def f(self):\n"
    "        try:\n"
    "            pass\n"
    "        except (ValueError,\n"
    "                KeyError) as e:\n"
    "            raise RuntimeError(\n"
    "                'x') from e\n"
    "        else:\n"
    "            return [y for y in\n"
    "                    range(2)]\n"
    "\x0cz = (1 +\\\n"
    "     2)\n"
    "async def g(a):\n"
    "    async with a as b:\n"
    "        return await b(f'{a!r:>{3}}')\n"
)
LINE_ENDS = {"unix": "\n", "windows": "\r\n", "old mac": "\r"}


def _compare(source: str, every: int = 1) -> int:
    """Check every ``every``-th positioned node's text against
    ``ast.get_source_segment`` (which splits the whole source per call);
    the number of nodes checked."""
    tree = ast.parse(source)
    ctx = FileContext("x.py", source, tree)
    checked = 0
    for node in list(ast.walk(tree))[::every]:
        if getattr(node, "end_col_offset", None) is None:
            continue
        assert ctx.code(node) == ast.get_source_segment(source, node), ast.dump(node)[:80]
        checked += 1
    return checked


@pytest.mark.parametrize("line_end", LINE_ENDS.values(), ids=LINE_ENDS.keys())
def test_node_text_equals_the_standard_librarys_segment(line_end):
    assert _compare(UNUSUAL.replace("\n", line_end)) > 60


def test_node_text_on_a_real_large_file():
    torch = pytest.importorskip("torch")
    source = open(torch.__file__.replace("__init__.py", "_tensor.py"), encoding="utf-8").read()
    assert _compare(source, every=15) > 200


def test_columns_count_characters_not_bytes():
    source = "s = 'é€'; t = torch.load(s)\n"
    tree = ast.parse(source)
    call = next(node for node in ast.walk(tree) if isinstance(node, ast.Call))
    assert call.col_offset == 17  # bytes: é and € take 2 and 3
    assert FileContext("x.py", source, tree).span(call) == ((1, 15), (1, 28))


def test_a_node_without_a_position_spans_its_children():
    source = "with open(p) as f, lock:\n    pass\n"
    tree = ast.parse(source)
    ctx = FileContext("x.py", source, tree)
    item = tree.body[0].items[0]
    assert ctx.span(item) == ((1, 6), (1, 18))
    assert ctx.code(item) == "open(p) as f"


def test_edits_replace_and_insert_at_character_positions():
    source = "é = f(x)\n"
    tree = ast.parse(source)
    ctx = FileContext("x.py", source, tree)
    call = tree.body[0].value
    edit = ctx.edit_replacing(call.args[0], "y")
    assert (edit.start_line, edit.start_col, edit.end_line, edit.end_col, edit.content) == (1, 7, 1, 8, "y")
    insert = ctx.edit_inserting(1, 8, ", z")
    assert (insert.start_col, insert.end_col) == (8, 8)
