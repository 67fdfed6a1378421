"""MEM001 syntax-error: the engine reports files it cannot read or parse."""

from memlint.lint.diagnostic import Severity
from memlint.lint.rule import Rule


class SyntaxErrorRule(Rule):
    """## What it does
    Reports a file that memlint cannot read or parse: a syntax error,
    bytes that do not decode in the file's declared encoding (UTF-8 by
    default), a NUL byte, or nesting too deep for the parser or for
    memlint's analysis.

    ## Why is this bad?
    A file that cannot be parsed cannot be checked for memory problems, and
    Python will refuse to run it. The diagnostic points at the offending
    position; the other files are still checked and the run exits with 2.

    ## Example
    ```python
    for batch in loader
        loss = model(batch)
    ```

    ## Use instead
    ```python
    for batch in loader:
        loss = model(batch)
    ```

    ## Known problems
    CPython's own parser checks every file first, and memlint's rules read
    the tree it builds. A file it rejects that is valid newer Python (PEP
    695 type parameters and `type` statements, PEP 701 f-strings, up to
    the Python 3.14 grammar of libcst) is not a MEM001: libcst parses it,
    and the file is linted through a down-levelled copy that keeps every
    line and column (docs/semantic-model.md, "newer syntax"); no fix is
    offered on such a file. A construct the down-levelling does not cover
    (Python 3.14's `except A, B:` and t-strings) is still reported.
    A notebook cell is parsed as IPython runs it: a cell whose first line
    is indented (every line starting with one space, say) loses that
    indentation on each line that starts with it first (IPython's
    `leading_indent` input transform), so it is no syntax error; findings
    and fixes in it keep the cell's own columns.

    ## References
    - [Python `ast` module](https://docs.python.org/3/library/ast.html)
    """

    CODE = "MEM001"
    NAME = "syntax-error"
    MESSAGE = "cannot parse this file"
    SEVERITY = Severity.ERROR
    TRIGGERS = ()  # emitted by the engine itself, before any rule runs
    VALID = (
        "import torch\nx = torch.zeros(2)\n",
        "def f(loader):\n    for b in loader:\n        pass\n",
        "",
    )
    INVALID = (
        "for batch in loader\n    pass\n",
        "def f(:\n    pass\n",
        "x = (1,\n",
    )
