"""Recall on fixtures/recall: reproducers of publicly reported memory bugs
(``bug_NN.py``, each line that must be reported marked ``# expect: CODE``)
and look-alike correct code (``ok_NN.py``, no warning or error allowed).
The set, its sources and its anchoring conventions are in
fixtures/recall/INDEX.md; it was written for memlint by a reviewer who did
not write the rules.

Scoring conventions, from how the rules report:
- MEM501 is reported once per file (at the training call), so any MEM501 in
  the file satisfies its mark on the ``import tensorflow`` line;
- MEM104 is reported once per function (its first forward pass without
  ``no_grad``), so any MEM104 in the same function satisfies a mark;
- a home-made logger that keeps what it is given is a container: MEM102 on
  a line marked MEM107 counts.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from memlint.lint.registry import resolve_selection, rule_index

from .expectations import lint_text, parse_expectations

RECALL = Path(__file__).resolve().parents[2] / "fixtures" / "recall"
FILE_LEVEL = frozenset({"MEM501"})
PER_FUNCTION = frozenset({"MEM104"})
SAME_DEFECT = {"MEM107": frozenset({"MEM102"})}


@dataclass
class Score:
    """Marks found and missed (``file:line CODE``), per code, and findings in ok files."""

    found: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)
    per_code: dict[str, list[int]] = field(default_factory=dict)
    false_alarms: list[str] = field(default_factory=list)

    @property
    def recall(self) -> float:
        total = len(self.found) + len(self.missed)
        return len(self.found) / total if total else 0.0


def _function_of(tree: ast.Module):
    spans = [(n.lineno, n.end_lineno) for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]

    def innermost(line: int) -> int:
        around = [start for start, end in spans if start <= line <= end]
        return max(around, default=0)

    return innermost


def score(directory: Path = RECALL) -> Score:
    """Lint every file of ``directory`` with the default rules (plus the codes it marks) and score it."""
    registered = frozenset(rule_index())
    result = Score()
    for path in sorted(directory.glob("*.py")):
        source = path.read_text(encoding="utf-8")
        marks = parse_expectations(source)
        diagnostics = lint_text(path, source, resolve_selection(None, [], []) | (marks.codes() & registered))
        reported = {(d.line, d.code) for d in diagnostics}
        function_of = _function_of(ast.parse(source))
        for line, code in marks.pairs():
            hit = ((line, code) in reported
                   or any((line, other) in reported for other in SAME_DEFECT.get(code, ()))
                   or code in FILE_LEVEL and any(c == code for _, c in reported)
                   or code in PER_FUNCTION and any(c == code and function_of(l) == function_of(line) for l, c in reported))
            counts = result.per_code.setdefault(code, [0, 0])
            counts[0 if hit else 1] += 1
            (result.found if hit else result.missed).append(f"{path.name}:{line} {code}")
        if path.name.startswith("ok_"):
            result.false_alarms.extend(f"{path.name}:{d.line} {d.code}" for d in diagnostics
                                       if d.severity.name.lower() in ("warning", "error"))
    return result
