"""Diagnostics, fixes and severities: the linter's output values.

Positions are 1-based lines and 1-based columns (as editors show them); the
end position is exclusive, like ruff's and SARIF's. Lines end at ``\n``,
``\r\n`` or ``\r``, as CPython's tokenizer counts them.
"""

from __future__ import annotations

import enum
import operator
import re
from dataclasses import dataclass, field
from itertools import accumulate, count

#: A line end as Python counts lines: `\n`, `\r\n` or `\r` (not form feeds).
LINE_BREAK = re.compile(r"\r\n|\r|\n")


def line_offsets(text: str) -> list[int]:
    """Offset in ``text`` of the start of each line (index 0 = line 1)."""
    if "\r" in text:
        return [0] + [match.end() for match in LINE_BREAK.finditer(text)]
    # "\n" only: line i starts after the lengths of the lines before it and their i breaks (in C)
    lines = text.split("\n")
    return [0, *map(operator.add, accumulate(map(len, lines[:-1])), count(1))]


class Severity(str, enum.Enum):
    """How bad a finding is (RULES.md): error > warning > info."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Applicability(str, enum.Enum):
    """Whether ``--fix`` applies a fix (safe) or only ``--unsafe-fixes`` does."""

    SAFE = "safe"
    UNSAFE = "unsafe"


@dataclass(frozen=True)
class Edit:
    """Replace the source text between two 1-based (line, column) positions.

    ``end_*`` is exclusive. An insertion has start == end; a deletion has an
    empty ``content``.
    """

    start_line: int
    start_col: int
    end_line: int
    end_col: int
    content: str
    #: in a notebook: the cell (1-based, counting every cell) whose source
    #: the positions are in; None in a Python file
    cell: int | None = None


@dataclass(frozen=True)
class FixPlan:
    """One libcst transform of one node, as data (no libcst needed to make it).

    ``kind`` names a transform of :data:`memlint.fix.transforms.TRANSFORMS`;
    ``start``/``end`` are the node's 1-based (line, column) span as the rule
    saw it in CPython's ``ast`` (end exclusive, columns in characters, no
    parentheses around the node), which libcst's ``PositionProvider``
    reports for the same node; ``params`` are the transform's arguments as
    ``(name, value)`` pairs (values: str, int, bool, None or tuples of them,
    so that the plan pickles and caches as JSON).
    """

    kind: str
    start: tuple[int, int]
    end: tuple[int, int]
    params: tuple[tuple[str, object], ...] = ()
    #: in a notebook: the cell (1-based) the positions are in; None in a Python file
    cell: int | None = None

    def param(self, name: str, default: object = None) -> object:
        """The value of parameter ``name`` (``default`` when absent)."""
        return next((value for key, value in self.params if key == name), default)


@dataclass(frozen=True)
class Fix:
    """What repairs one diagnostic: libcst transforms (``plans``) that the
    fix engine (:mod:`memlint.fix`) turns into ``edits`` -- non-overlapping
    text edits -- only when a fix is applied, shown or offered (libcst is
    not loaded to lint). A fix made of edits alone is applied as it is."""

    title: str
    applicability: Applicability
    edits: tuple[Edit, ...] = ()
    plans: tuple[FixPlan, ...] = ()

    @property
    def resolved(self) -> bool:
        """True when ``edits`` are known (no plan left to turn into edits)."""
        return not self.plans or bool(self.edits)


@dataclass(frozen=True)
class Diagnostic:
    """One finding of one rule in one file."""

    code: str
    name: str
    severity: Severity
    message: str
    path: str
    line: int
    col: int
    end_line: int
    end_col: int
    fix: Fix | None = None
    #: in a notebook: the cell (1-based, counting every cell of the notebook
    #: as stored, markdown included) that ``line``/``col`` are in; None in a
    #: Python file
    cell: int | None = None

    def sort_key(self) -> tuple:
        return (self.path, self.cell or 0, self.line, self.col, self.code)

    @property
    def location(self) -> str:
        """``line:col``, or ``cell N:line:col`` in a notebook (as the text formats print it)."""
        where = f"{self.line}:{self.col}"
        return where if self.cell is None else f"cell {self.cell}:{where}"


@dataclass
class FileResult:
    """What linting one file produced.

    ``error`` is a one-line problem that stopped the file from being linted at
    all (it could not be opened); unparsable content is a MEM001 diagnostic
    instead, so it shows up in every output format.
    """

    path: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    error: str | None = None
    parsed: bool = False
    internal_errors: list[str] = field(default_factory=list)
    #: the tracebacks of ``internal_errors`` (``--debug``)
    internal_details: list[str] = field(default_factory=list)
    digest: str | None = None  # sha256 of the bytes linted (lets --fix detect a later change)
    #: a one-line remark that is not an error (e.g. a file too large to lint)
    note: str | None = None
