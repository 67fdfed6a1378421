"""The fast position paths (a node's simple statement alone; its function
alone, for big files) equal libcst's whole-module positions, node for node."""

import libcst as cst
import pytest

from memlint.lint.context import SMALL_FILE_CHARS, FileContext
from memlint.lint.walk import walk

SOURCE = '''
import torch


class Trainer:
    """Docstring.

    Spanning lines.
    """

    @staticmethod
    @torch.no_grad()
    def evaluate(model, loader):
        """A docstring
        over lines."""
        out = []
        for x in loader:
            out.append(model(x.cuda()))  # comment
        return out

    def fit(self, loader, opt):
        def closure():
            loss = self.model(
                next(loader),
            ).loss
            return loss

        for _ in range(3):
            opt.step(closure)


async def fetch(a, b):
    return await a(b)
'''


def _compare(source: str, every: int = 1, fast_path: str = "_span_in_function") -> int:
    """Compare a fast path's span with libcst's whole-module position for
    every ``every``-th node it can place; the number compared."""
    module = cst.parse_module(source)
    ctx = FileContext("x.py", source, module)
    checked = 0
    for node in list(walk(module))[::every]:
        fast = getattr(ctx, fast_path)(node)
        if fast is None:
            continue
        whole = ctx._positions[node]
        assert fast == ((whole.start.line, whole.start.column + 1), (whole.end.line, whole.end.column + 1)), ctx.code(node)
        checked += 1
    return checked


def test_function_positions_match_whole_module_positions():
    assert _compare(SOURCE) > 50


def test_function_positions_on_a_real_large_file():
    torch = pytest.importorskip("torch")
    path = torch.__file__.replace("__init__.py", "_tensor.py")
    source = open(path, encoding="utf-8").read()
    assert len(source) > SMALL_FILE_CHARS
    assert _compare(source, every=15) > 200


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
)


@pytest.mark.parametrize("source", [SOURCE, UNUSUAL], ids=["classes", "unusual"])
def test_statement_positions_match_whole_module_positions(source):
    assert _compare(source, fast_path="_span_in_statement") > 40


def test_statement_positions_on_a_real_large_file():
    torch = pytest.importorskip("torch")
    path = torch.__file__.replace("__init__.py", "_tensor.py")
    source = open(path, encoding="utf-8").read()
    assert _compare(source, every=15, fast_path="_span_in_statement") > 200


def test_statement_positions_give_way_when_the_parsers_disagree():
    source = "x = 1\ny = 2\n"
    ctx = FileContext("x.py", source, cst.parse_module(source), tree=__import__("ast").parse("x = 1\n"))
    assert ctx._statement_starts is None
    assert ctx.span(ctx.module.body[1].body[0]) == ((2, 1), (2, 6))
