"""MEM001 syntax-error: the engine reports files it cannot read or parse."""

from memlint.lint.diagnostic import Severity
from memlint.lint.rule import Rule


class SyntaxErrorRule(Rule):
    """## What it does
    Reports a file that memlint cannot read or parse: a syntax error,
    bytes that do not decode in the file's declared encoding (UTF-8 by
    default), a NUL byte, nesting too deep for the parser, or an
    `and`/`or` chain of more than 4000 operands (libcst's parser crashes on
    such chains; the file is not linted).

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
    The syntax accepted is that of the Python running memlint: CPython's own
    parser checks every file. libcst, which memlint's rules read, parses only
    the files some rule can report on; code that CPython accepts and libcst
    does not (rare: syntax newer than the installed libcst) is reported only
    in those files.

    ## References
    - [libcst parser](https://libcst.readthedocs.io/en/latest/parser.html)
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
