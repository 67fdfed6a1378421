"""The base class every lint rule in ``rules/`` derives from.

A rule is a class with metadata (``CODE``, ``NAME``, ``MESSAGE``,
``SEVERITY``, optional ``FIX_TITLE``), its documentation as the class
docstring (sections of RULES.md), ``VALID``/``INVALID`` examples that become
tests, ``TRIGGERS``: substrings a file must contain for the rule to run,
and the optional pre-parse requirements ``NEEDS_NAMES`` and
``NEEDS_GRAPH_SOURCE`` and ``FRAMEWORK`` (see :mod:`memlint.lint.facts`):
necessary conditions checked on the code's identifiers and imports before
the rules run.

Hooks are methods named for CPython ``ast`` node classes:
``visit_Call(self, node)`` / ``leave_For(self, node)`` (a ``FunctionDef``,
``For`` or ``With`` hook also receives the ``async`` variant). One instance
is made per file; all enabled rules share one traversal (see
:mod:`memlint.lint.engine`), during which ``self.ctx.stack`` holds the
ancestors of the visited node (outermost first).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, ClassVar

from memlint.lint.diagnostic import Applicability, Diagnostic, Edit, Fix, FixPlan, Severity

if TYPE_CHECKING:
    from memlint.lint.context import FileContext

#: Documentation sections every rule docstring has, in this order (RULES.md).
REQUIRED_SECTIONS = ("What it does", "Why is this bad?", "Example", "Use instead", "Known problems", "References")


class Rule:
    """Base class of lint rules; subclasses set the ClassVars and define hooks."""

    CODE: ClassVar[str] = ""
    NAME: ClassVar[str] = ""
    MESSAGE: ClassVar[str] = ""
    SEVERITY: ClassVar[Severity] = Severity.WARNING
    FIX_TITLE: ClassVar[str | None] = None
    #: Whether ``--fix`` applies the rule's fix (SAFE) or only ``--unsafe-fixes`` does.
    FIX_APPLICABILITY: ClassVar[Applicability] = Applicability.SAFE
    DEFAULT_ENABLED: ClassVar[bool] = True
    TRIGGERS: ClassVar[tuple[str, ...]] = ()
    #: The rule can only report on code that uses one of these identifiers
    #: (names, attributes, keywords, parameters, imports); () = no such need.
    NEEDS_NAMES: ClassVar[tuple[str, ...]] = ()
    #: The rule only reports graph-attached values, so it needs something the
    #: semantic model treats as a graph source (a module, a backward pass...).
    NEEDS_GRAPH_SOURCE: ClassVar[bool] = False
    #: "torch": the rule reads PyTorch code (not a module that imports only
    #: TensorFlow, JAX...); "tensorflow": only modules importing TensorFlow
    #: or Keras; None: any module.
    FRAMEWORK: ClassVar[str | None] = None
    #: The rule reads what only a Jupyter notebook has (cells, the output
    #: cache, a kernel's lifetime): it runs on ``.ipynb`` files only, where
    #: ``ctx.notebook`` holds the cells; its examples are cells separated
    #: by ``# %%`` lines.
    NOTEBOOK_ONLY: ClassVar[bool] = False
    VALID: ClassVar[tuple[str, ...]] = ()
    INVALID: ClassVar[tuple[str, ...]] = ()

    def __init__(self, ctx: "FileContext") -> None:
        self.ctx = ctx

    @classmethod
    def is_triggered_by(cls, source: str) -> bool:
        """True when ``source`` contains one of the rule's trigger tokens."""
        return any(token in source for token in cls.TRIGGERS)

    @classmethod
    def doc(cls) -> str:
        """The rule's Markdown documentation (its dedented docstring)."""
        import inspect

        return inspect.cleandoc(cls.__doc__ or "")

    def report(
        self,
        node: ast.AST,
        message: str | None = None,
        fix: Fix | None = None,
        severity: Severity | None = None,
    ) -> None:
        """Record a diagnostic spanning ``node`` (message defaults to MESSAGE, severity to SEVERITY:
        a rule lowers it for a finding whose cost is real but smaller than the rule's main one)."""
        start, end = self.ctx.span(node)
        self.ctx.diagnostics.append(
            Diagnostic(
                code=self.CODE,
                name=self.NAME,
                severity=severity or self.SEVERITY,
                message=message or self.MESSAGE,
                path=self.ctx.path,
                line=start[0],
                col=start[1],
                end_line=end[0],
                end_col=end[1],
                fix=fix,
            )
        )

    def plan(self, kind: str, node: ast.AST, **params: object) -> FixPlan:
        """A libcst transform ``kind`` (:data:`memlint.fix.transforms.TRANSFORMS`)
        of ``node`` with the given parameters (str, int, bool, None or tuples)."""
        start, end = self.ctx.span(node)
        return FixPlan(kind, start, end, tuple(sorted(params.items())))

    def fix(self, *plans: FixPlan, title: str | None = None, applicability: Applicability | None = None) -> Fix:
        """The fix made of ``plans``, titled and as safe as the rule says
        (``FIX_TITLE``, ``FIX_APPLICABILITY``) unless given."""
        return Fix(title=title or self.FIX_TITLE or "Apply fix",
                   applicability=applicability or self.FIX_APPLICABILITY, plans=plans)

    def replacement(self, node: ast.AST, new: str, title: str | None = None) -> Fix:
        """A fix replacing the expression ``node`` by the expression ``new``
        (code, parsed by libcst when the fix is applied)."""
        return self.fix(self.plan("replace_expression", node, code=new), title=title)


def sections_of(doc: str) -> list[str]:
    """The ``## `` section titles of a rule docstring, in order."""
    return [line[3:].strip() for line in doc.splitlines() if line.startswith("## ")]


def edit(start: tuple[int, int], end: tuple[int, int], content: str) -> Edit:
    """Build an :class:`Edit` from 1-based (line, col) start/end tuples."""
    return Edit(start[0], start[1], end[0], end[1], content)
