"""Turn fix plans into text edits by transforming one libcst tree per text.

:func:`resolve` is called with a file's (or a notebook cell's) text and its
diagnostics; libcst is imported here only when one of them has a plan to
resolve. The text is parsed once; each fix is applied to that tree on its
own and rendered, and its edits are the line regions where the rendering
differs from the text (``difflib`` over lines, each region trimmed to the
characters that differ), so two fixes in different places do not overlap
and the round logic of :mod:`memlint.lint.fixes` can combine them.

libcst does not keep a lone ``\\r`` line end (old Mac files): such a text
is parsed with each lone ``\\r`` read as ``\\n`` (same length, so every
position holds), and the edits' new lines are written back as ``\\r``.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import replace
from typing import Callable, Sequence

from memlint.lint.diagnostic import Diagnostic, Edit, Fix, FixPlan, line_offsets

_LONE_CR = re.compile(r"\r(?!\n)")
_LONE_LF = re.compile(r"(?<!\r)\n")
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def resolve(text: str, diagnostics: Sequence[Diagnostic]) -> list[Diagnostic]:
    """``diagnostics`` with each fix's ``edits`` computed from its plans on
    ``text`` (a notebook diagnostic's plans are in its cell's coordinates:
    pass that cell's text). A fix whose plans cannot be applied -- a node
    not found, a transform that does not apply, libcst unable to parse the
    text, or no change at all -- is dropped (``fix=None``). Diagnostics
    whose fixes need no resolving are returned as they are."""
    pending = [d for d in diagnostics if d.fix is not None and not d.fix.resolved]
    if not pending:
        return list(diagnostics)
    tree = None if _refused(text, pending) else ParsedText.of(text)
    out = []
    for diagnostic in diagnostics:
        fix = diagnostic.fix
        if fix is None or fix.resolved:
            out.append(diagnostic)
            continue
        edits = tree.edits_of(fix.plans) if tree is not None else None
        out.append(replace(diagnostic, fix=replace(fix, edits=edits) if edits else None))
    return out


def resolve_text(text: str, fix: Fix) -> str | None:
    """``text`` with ``fix`` alone applied (None when it cannot be)."""
    from memlint.lint.libcst_limits import libcst_refusal

    tree = None if libcst_refusal(text) else ParsedText.of(text)
    edits = None if tree is None else tree.edits_of(fix.plans)
    if edits is None:
        return None
    from memlint.lint.fixes import apply_fixes

    return apply_fixes(text, [replace(fix, edits=edits)])[0]


def _refused(text: str, pending: Sequence[Diagnostic]) -> bool:
    """True when ``text`` is over :mod:`memlint.lint.libcst_limits` (libcst's
    native parser could crash the run on it): its fixes are skipped, with a
    note on standard error naming the file."""
    from memlint.lint.libcst_limits import libcst_refusal

    refusal = libcst_refusal(text)
    if refusal is None:
        return False
    import sys

    print(f"memlint: {pending[0].path}: fixes skipped ({refusal})", file=sys.stderr)
    return True


class ParsedText:
    """One text parsed by libcst, with its nodes indexed by span.

    libcst is given the text *normalised* where it would not keep it byte
    for byte: a lone ``\r`` line end is read as ``\n`` (same length), and
    the form feeds in a line's indentation, which libcst drops and CPython
    ignores, are taken out (a per-line count maps every position between
    the two texts). A text that libcst still does not render back exactly
    is not fixed at all (:class:`NotKept`).
    """

    def __init__(self, text: str) -> None:
        import libcst
        from libcst.metadata import MetadataWrapper, PositionProvider

        from memlint.fix.locate import NodeIndex

        self.text = text
        self.lone_cr = bool(_LONE_CR.search(text))
        prepared = _LONE_CR.sub("\n", text) if self.lone_cr else text
        #: line (1-based) -> original columns (1-based) of the form feeds taken out of it
        self.form_feeds: dict[int, list[int]] = {}
        self.prepared = self._without_form_feeds(prepared)
        # the tree is this object's own: no defensive deep copy (it costs as much as the parse)
        wrapper = MetadataWrapper(libcst.parse_module(self.prepared), unsafe_skip_copy=True)
        if wrapper.module.code != self.prepared:
            raise NotKept("libcst does not render this text back byte for byte")
        self.module = wrapper.module
        self.positions = wrapper.resolve(PositionProvider)
        self.index = NodeIndex(self.positions)

    def _without_form_feeds(self, text: str) -> str:
        if "\x0c" not in text:
            return text
        lines = _LINE.findall(text)
        for number, line in enumerate(lines, 1):
            indent = len(line) - len(line.lstrip(" \t\x0c"))
            columns = [i + 1 for i in range(indent) if line[i] == "\x0c"]
            if columns:
                self.form_feeds[number] = columns
                lines[number - 1] = line[:indent].replace("\x0c", "") + line[indent:]
        return "".join(lines)

    def to_prepared(self, line: int, col: int) -> tuple[int, int]:
        """A position of the text as a position of the normalised text."""
        return line, col - sum(1 for c in self.form_feeds.get(line, ()) if c < col)

    def to_original(self, line: int, col: int, end: bool = False) -> tuple[int, int]:
        """A position of the normalised text as a position of the text: after
        the form feeds that precede it, or, for the ``end`` of an edit, before
        the form feeds right at it, so that an edit never takes in a form
        feed outside the region it changed."""
        shift = 0
        for index, column in enumerate(self.form_feeds.get(line, ())):
            if column - index < col or column - index == col and not end:
                shift += 1
        return line, col + shift

    @classmethod
    def of(cls, text: str) -> "ParsedText | None":
        """The parsed text, or None when libcst cannot parse it (then the
        text has no fix: the file is left as it is)."""
        import libcst

        try:
            return cls(text)
        except (libcst.ParserSyntaxError, RecursionError, ValueError):
            return None
        except NotKept:
            return None
        except Exception:  # noqa: BLE001 - libcst's own failures (issue #1061: `else(lambda: 0)`)
            return None

    def render(self, plans: Sequence[FixPlan]) -> str | None:
        """The normalised text with every plan's transform applied, or None
        when one plan's node is not found or its transform does not apply."""
        from memlint.fix.transforms import TRANSFORMS, Inapplicable

        targets: dict[int, list[FixPlan]] = {}
        spans = []
        for plan in plans:
            transform = TRANSFORMS.get(plan.kind)
            if self.form_feeds:
                plan = replace(plan, start=self.to_prepared(*plan.start), end=self.to_prepared(*plan.end))
            node = None if transform is None else self.index.find(plan.start, plan.end, transform.node_types)
            if node is None:
                return None
            targets.setdefault(id(node), []).append(plan)
            spans.append((plan.start, plan.end))
        try:
            fixed = self.module.visit(Apply(targets, self._holds_a_target(spans, targets))).code
        except Inapplicable:
            return None
        except Exception:  # noqa: BLE001 - a libcst failure on one fix costs that fix, never the run
            return None
        return fixed

    def _holds_a_target(self, spans: list, targets: dict[int, list[FixPlan]]) -> Callable:
        """Whether the traversal must enter a node: only the nodes around a
        plan's node are rebuilt (and re-validated) by libcst; the rest of
        the tree is kept as parsed (and is not re-validated: libcst issue
        #1061 fails on some valid code when it is)."""
        def enter(node) -> bool:
            where = self.positions.get(node)
            if where is None:
                return True  # the module itself
            first, last = (where.start.line, where.start.column + 1), (where.end.line, where.end.column + 1)
            inside = [(start, end) for start, end in spans if first <= start and end <= last]
            own = {(plan.start, plan.end) for plan in targets.get(id(node), ())}
            return any(span not in own for span in inside) or len(inside) > len(own)
        return enter

    def edits_of(self, plans: Sequence[FixPlan]) -> tuple[Edit, ...] | None:
        """The edits that the plans make to the text (None: not applicable or no change)."""
        fixed = self.render(plans)
        if fixed is None or fixed == self.prepared:
            return None
        edits = []
        for edit in text_edits(self.prepared, fixed):
            empty = (edit.start_line, edit.start_col) == (edit.end_line, edit.end_col)
            (line, col), (end_line, end_col) = self.to_original(edit.start_line, edit.start_col), \
                self.to_original(edit.end_line, edit.end_col, end=not empty)
            content = _LONE_LF.sub("\r", edit.content) if self.lone_cr else edit.content
            edits.append(Edit(line, col, end_line, end_col, content))
        return tuple(edits)


class NotKept(Exception):
    """libcst would not keep this text as it is: it is not fixed."""


def text_edits(before: str, after: str) -> tuple[Edit, ...]:
    """Non-overlapping edits that turn ``before`` into ``after``: one per
    region of differing lines, trimmed to the characters that differ."""
    old_lines, new_lines = _LINE.findall(before), _LINE.findall(after)
    offsets = line_offsets(before)
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    edits = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        start = offsets[i1] if i1 < len(offsets) else len(before)
        end = start + sum(map(len, old_lines[i1:i2]))
        old, new = before[start:end], "".join(new_lines[j1:j2])
        prefix = _common_prefix(old, new)
        suffix = _common_prefix(old[prefix:][::-1], new[prefix:][::-1])
        edits.append(_edit(before, offsets, start + prefix, end - suffix, new[prefix:len(new) - suffix]))
    return tuple(edits)


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _edit(text: str, offsets: list[int], start: int, end: int, content: str) -> Edit:
    (line, col), (end_line, end_col) = _position(offsets, start), _position(offsets, end)
    return Edit(line, col, end_line, end_col, content)


def _position(offsets: list[int], offset: int) -> tuple[int, int]:
    """1-based (line, column) of a character offset."""
    import bisect

    line = bisect.bisect_right(offsets, offset)
    return line, offset - offsets[line - 1] + 1


def _apply_class():
    import libcst

    from memlint.fix.transforms import REMOVED, TRANSFORMS

    class _Apply(libcst.CSTTransformer):
        """Apply each target node's plans when the traversal leaves it; a
        block drops the statements removed from it, keeping the comment
        lines above them (they go to the next statement, or become the
        comments above a ``pass`` when the block would be empty)."""

        def __init__(self, targets: dict[int, list[FixPlan]], enter) -> None:
            super().__init__()
            self.targets = targets
            self.enter = enter
            self.removed: dict[int, Sequence] = {}

        def on_visit(self, node) -> bool:
            return self.enter(node)

        def on_leave(self, original, updated):
            updated = super().on_leave(original, updated)
            if isinstance(original, (libcst.IndentedBlock, libcst.Module)) and isinstance(updated, type(original)):
                updated = self._drop_removed(original, updated)
            for plan in self.targets.get(id(original), ()):
                result = TRANSFORMS[plan.kind].apply(updated, plan)
                if result is REMOVED:
                    self.removed[id(original)] = original.leading_lines
                    return libcst.RemovalSentinel.REMOVE
                updated = result
            return updated

        def _drop_removed(self, original, updated):
            removed = [child for child in original.body if id(child) in self.removed]
            if not removed:
                return updated
            body = list(updated.body)
            if len(body) != len(original.body) - len(removed):
                return updated  # another transform reshaped this block: keep it as libcst made it
            carried: list = []
            kept = iter(range(len(body)))
            for child in original.body:
                if id(child) in self.removed:
                    carried.extend(line for line in self.removed[id(child)] if line.comment is not None)
                    continue
                index = next(kept)
                if carried:
                    body[index] = body[index].with_changes(leading_lines=[*carried, *body[index].leading_lines])
                    carried = []
            if not body and isinstance(updated, libcst.IndentedBlock):
                body = [libcst.SimpleStatementLine(body=[libcst.Pass()], leading_lines=carried)]
            elif carried:
                return updated.with_changes(body=body, footer=[*carried, *updated.footer])
            return updated.with_changes(body=body)

    return _Apply


def Apply(targets: dict[int, list[FixPlan]], enter):
    """The libcst transformer that applies ``targets`` (node id -> plans),
    entering only the nodes for which ``enter(node)`` is true."""
    global _APPLY
    if _APPLY is None:
        _APPLY = _apply_class()
    return _APPLY(targets, enter)


_APPLY = None
