"""The fix engine: the rules' fixes as libcst transforms.

A rule reports a finding on CPython's ``ast`` tree and describes its fix as
data: one or more :class:`~memlint.lint.diagnostic.FixPlan` (a transform
name, the ``ast`` span of the node to transform, the transform's
arguments). Nothing here is imported to lint: libcst is loaded only when a
fix is applied (``--fix``, ``--unsafe-fixes``), shown (``--diff``, the
``json`` and ``sarif`` formats, which carry each fix's edits) or offered
(a code action of ``memlint server``), and only for a file that has a fix.

For such a file, :func:`resolve` parses the text once with libcst, finds
each plan's node with libcst's ``PositionProvider`` (its span is the one
``ast`` gives, see :mod:`memlint.fix.locate`), applies the fix's transforms
(:mod:`memlint.fix.transforms`) to that tree and renders it; the fix's
edits are the differences between the text and the rendered tree. libcst
keeps every comment, blank line, line end and formatting choice outside
the transformed nodes, so the bytes outside an edit stay as they were. A
plan whose node is not found, or whose transform does not apply to the
node found, makes the whole fix unavailable (its diagnostic keeps no fix).
"""

from __future__ import annotations

from memlint.fix.engine import resolve, resolve_text

__all__ = ["resolve", "resolve_text"]
