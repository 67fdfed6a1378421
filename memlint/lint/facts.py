"""The pre-parse gate: what CPython's ``ast`` of a file says about which
rules could possibly report on it.

The text pre-filter (each rule's ``TRIGGERS`` substrings) is cheap but
coarse: a word in a docstring or a comment passes it, and some triggers
(``+``, ``for``) are in nearly every file. libcst's parse is memlint's
largest single cost (about 45 ms per file, 12x CPython's parser, measured on
the benchmark corpus), so before paying for it the engine asks each
triggered rule's declared requirements (``Rule.NEEDS_NAMES``,
``Rule.NEEDS_GRAPH_SOURCE``) against :class:`CodeFacts`, built from the
``ast`` tree that the syntax guard parses anyway. A file no rule can report
on is never parsed by libcst.

The requirements are necessary conditions, never heuristics: a rule that
declares ``NEEDS_NAMES = ("zero_grad",)`` cannot report on a file whose code
never names ``zero_grad``. tests/lint/test_gates.py checks that linting with
and without the gate gives identical diagnostics.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from memlint.lint.vocabulary import FORWARD_METHODS, GRAPH_SOURCE_NAMES, MODEL_NAME

_MODEL_NAME_LINE = re.compile(MODEL_NAME.pattern, MODEL_NAME.flags | re.MULTILINE)
_FORWARD_METHOD_LINE = re.compile(FORWARD_METHODS.pattern, FORWARD_METHODS.flags | re.MULTILINE)
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass(frozen=True)
class CodeFacts:
    """The identifiers a module's code uses (not its comments or strings).

    ``identifiers`` holds every name read or bound, attribute name, keyword
    argument name, parameter name, function and class name, and each dotted
    part of imported module names and their aliases.
    """

    identifiers: frozenset[str]
    #: The most operands of one ``and``/``or`` chain (flat in CPython's ast,
    #: nested one level per operand in libcst's tree).
    longest_boolean_chain: int = 0

    @classmethod
    def of(cls, tree: ast.AST) -> "CodeFacts":
        """Facts of a CPython ``ast`` tree (one walk, ~3 ms for a 15 KB module)."""
        found: set[str] = set()
        add = found.add
        longest = 0
        for node in ast.walk(tree):
            kind = node.__class__
            if kind is ast.BoolOp:
                longest = max(longest, len(node.values))
            elif kind is ast.Name:
                add(node.id)
            elif kind is ast.Attribute:
                add(node.attr)
            elif kind is ast.keyword or kind is ast.arg:
                if node.arg:
                    add(node.arg)
            elif kind is ast.alias:
                found.update(node.name.split("."))
                if node.asname:
                    add(node.asname)
            elif kind is ast.ImportFrom:
                if node.module:
                    found.update(node.module.split("."))
            elif kind in _DEFINITIONS:
                add(node.name)
        return cls(frozenset(found), longest)

    def uses_any(self, names: tuple[str, ...]) -> bool:
        """True when the code uses one of ``names`` (exact identifiers)."""
        return any(name in self.identifiers for name in names)

    @property
    def has_graph_source(self) -> bool:
        """True when something in the code could start an autograd graph for
        :mod:`memlint.lint.dataflow`: a model-like or forward-method name, or
        one of :data:`memlint.lint.vocabulary.GRAPH_SOURCE_NAMES`."""
        if not GRAPH_SOURCE_NAMES.isdisjoint(self.identifiers):
            return True
        joined = "\n".join(self.identifiers)
        return bool(_MODEL_NAME_LINE.search(joined) or _FORWARD_METHOD_LINE.search(joined))
