"""The pre-parse gate: what a file's syntax tree says about which rules
could possibly report on it.

The text pre-filter (each rule's ``TRIGGERS`` substrings) is cheap but
coarse: a word in a docstring or a comment passes it, and some triggers
(``+``, ``for``) are in nearly every file. So before the rules run (and
before the semantic model that most of them share), the engine asks each
triggered rule's declared requirements (``Rule.NEEDS_NAMES``,
``Rule.NEEDS_GRAPH_SOURCE``) against :class:`CodeFacts`, read from the node
index that the rules would use anyway. A file no rule can report on costs
its parse and one walk.

The requirements are necessary conditions, never heuristics: a rule that
declares ``NEEDS_NAMES = ("zero_grad",)`` cannot report on a file whose code
never names ``zero_grad``. tests/lint/test_gates.py checks that linting with
and without the gate gives identical diagnostics.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from operator import attrgetter

from memlint.lint.semantic.frameworks import TF_PACKAGES, TORCH_PACKAGES
from memlint.lint.vocabulary import FOREIGN_PACKAGES, GRAPH_SOURCE_NAMES

_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_ID, _ATTR = attrgetter("id"), attrgetter("attr")


@dataclass(frozen=True)
class CodeFacts:
    """The identifiers a module's code uses (not its comments or strings).

    ``identifiers`` holds every name read or bound, attribute name, keyword
    argument name, parameter name, function and class name, and each dotted
    part of imported module names and their aliases.
    """

    identifiers: frozenset[str]
    #: top-level packages the module imports (``torch`` for ``import torch.nn as nn``)
    packages: frozenset[str] = frozenset()

    @classmethod
    def of(cls, index) -> "CodeFacts":
        """Facts of a module from its :class:`~memlint.lint.walk.NodeIndex`
        (the nodes grouped by class: no further walk)."""
        found: set[str] = set()
        packages: set[str] = set()
        found.update(map(_ID, index.of_type(ast.Name)))
        found.update(map(_ATTR, index.of_type(ast.Attribute)))
        for kind in (ast.keyword, ast.arg):
            found.update([node.arg for node in index.of_type(kind) if node.arg])
        for alias in index.of_type(ast.alias):
            found.update(alias.name.split("."))
            if alias.asname:
                found.add(alias.asname)
        for statement in index.of_type(ast.Import):
            packages.update(alias.name.split(".")[0] for alias in statement.names)
        for statement in index.of_type(ast.ImportFrom):
            if statement.module:
                found.update(statement.module.split("."))
                if not statement.level:
                    packages.add(statement.module.split(".")[0])
        for kind in _DEFINITIONS:
            found.update([node.name for node in index.of_type(kind)])
        return cls(frozenset(found), frozenset(packages))

    def uses_any(self, names: tuple[str, ...]) -> bool:
        """True when the code uses one of ``names`` (exact identifiers)."""
        return any(name in self.identifiers for name in names)

    @property
    def has_graph_source(self) -> bool:
        """True when something in the code could start an autograd graph for
        the semantic model: one of :data:`memlint.lint.vocabulary.GRAPH_SOURCE_NAMES`."""
        return not GRAPH_SOURCE_NAMES.isdisjoint(self.identifiers)

    def is_framework_code(self, framework: str) -> bool:
        """Whether a rule for ``framework`` ("torch" or "tensorflow") reads this module.

        PyTorch rules read every module but one that imports another array
        framework (TensorFlow, JAX...) and nothing of PyTorch's ecosystem; a
        module with no framework import (a helper, a snippet) is read.
        TensorFlow rules read only modules that import TensorFlow or Keras.
        """
        if framework == "tensorflow":
            return not self.packages.isdisjoint(TF_PACKAGES)
        if framework == "torch":
            return not self.packages.isdisjoint(TORCH_PACKAGES) or self.packages.isdisjoint(FOREIGN_PACKAGES)
        return True
