"""Inline suppression comments, and the real comments that carry directives.

- ``# noqa: MEM101, MEM102`` or ``# memlint: ignore[MEM101]`` on the reported
  line suppresses those codes there; a code prefix (``MEM1``) works too;
- bare ``# noqa`` (or ``# memlint: ignore``) suppresses everything on the line;
- ``# memlint: skip-file`` anywhere in the file skips the file.

``memlint check --add-noqa`` writes the ``# noqa:`` comments
(:func:`add_noqa_comments`; the files are handled by
:mod:`memlint.lint.add_noqa`).

A diagnostic is suppressed when the comment is on its first or its last line,
so a multi-line call can be silenced at either end. A line that cannot hold
a comment -- it ends with a backslash continuation, or inside a multi-line
string -- is covered by the directive on the next line that can (the last
physical line of that stretch of the logical line), as ruff reads them.

Directives are read from real comments only: ``"# noqa"`` inside a string or
a docstring is text, not a directive (:func:`directive_comments`). Finding
the comments needs :mod:`tokenize`, which costs about twice a parse on
CPython 3.11, so it runs only when the raw text has a candidate (the
directive's pattern), and only up to the last candidate line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memlint.lint.diagnostic import LINE_BREAK, Diagnostic

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)
_IGNORE = re.compile(r"#\s*memlint:\s*ignore(?:\[(?P<codes>[^\]]*)\])?", re.IGNORECASE)
_SKIP_FILE = re.compile(r"#\s*memlint:\s*skip-file\b", re.IGNORECASE)
#: A line that may carry a suppression: the raw-text test before tokenizing.
_SUPPRESSION = re.compile(r"#\s*(?:noqa|memlint:\s*ignore)", re.IGNORECASE)

ALL = None  # marker: every code is suppressed on the line


@dataclass(frozen=True)
class Comment:
    """A real comment: its 1-based line, its text from ``#`` to the end of
    the line, and whether it is the only thing on its line."""

    line: int
    text: str
    whole_line: bool


def directive_comments(source: str, pattern: re.Pattern, line_ends: set[int] | None = None) -> list[Comment]:
    """The real comments of ``source`` that ``pattern`` matches, in line order.

    Lines are found by ``pattern`` in the raw text first; :mod:`tokenize`
    then tells which of those matches lie in a comment, not in a string. If
    the text stops tokenizing (a file that does not parse), the candidates
    after that point are taken as comments, as plain text matching did.
    ``line_ends``, when given, receives the lines tokenized that can take a
    comment (see :func:`commentable_lines`), up to the last candidate.
    """
    lines = LINE_BREAK.split(source)
    candidates = {number: line for number, line in enumerate(lines, start=1) if "#" in line and pattern.search(line)}
    if not candidates:
        return []
    found, reached = _comments_until(source, max(candidates), line_ends)
    comments = [comment for comment in found if comment.line in candidates and pattern.search(comment.text)]
    seen = {comment.line for comment in comments}
    for number in sorted(n for n in candidates if n > reached and n not in seen):
        line = candidates[number]
        start = pattern.search(line).start()
        comments.append(Comment(number, line[start:], not line[:start].strip()))
    return comments


def _comments_until(source: str, last_line: int, line_ends: set[int] | None = None) -> tuple[list[Comment], int]:
    """The comments up to ``last_line``, and the last line tokenized
    completely: ``last_line``, or the line before the one a tokenize error
    stopped in). The lines of NEWLINE and NL tokens go to ``line_ends``."""
    import io
    import tokenize

    comments: list[Comment] = []
    reached = 0
    # newline=None: "\r" and "\r\n" end lines, as they do for the parser.
    tokens = tokenize.generate_tokens(io.StringIO(source, newline=None).readline)
    try:
        for token in tokens:
            row, col = token.start
            if row > last_line:
                return comments, last_line
            reached = row
            if token.type == tokenize.COMMENT:
                comments.append(Comment(row, token.string, not token.line[:col].strip()))
            elif line_ends is not None and token.type in (tokenize.NEWLINE, tokenize.NL):
                line_ends.add(row)
    except (tokenize.TokenError, SyntaxError):
        return comments, max(0, reached - 1)
    return comments, last_line


def skips_file(source: str) -> bool:
    """True when a real comment of the file is ``# memlint: skip-file``."""
    return "skip-file" in source and bool(directive_comments(source, _SKIP_FILE))


def suppressions(source: str) -> dict[int, frozenset[str] | None]:
    """Map 1-based line -> suppressed code prefixes (None = all codes)."""
    result: dict[int, frozenset[str] | None] = {}
    if "noqa" not in source and "memlint" not in source:
        return result
    line_ends: set[int] = set()
    for comment in directive_comments(source, _SUPPRESSION, line_ends):
        # the lines before it that cannot take a comment (a backslash, a multi-line string) are its too
        covered = [comment.line]
        if comment.line in line_ends:
            above = comment.line - 1
            while above >= 1 and above not in line_ends:
                covered.append(above)
                above -= 1
        for pattern in (_NOQA, _IGNORE):
            match = pattern.search(comment.text)
            if match is None:
                continue
            codes = match.group("codes")
            for line in covered:
                _suppress(result, line, codes)
    return result


def _suppress(table: dict[int, frozenset[str] | None], line: int, codes: str | None) -> None:
    if codes is None or not codes.strip():
        table[line] = ALL
    elif table.get(line, frozenset()) is not ALL:
        parsed = frozenset(c.upper() for c in re.split(r"[\s,]+", codes.strip()) if c)
        table[line] = (table.get(line) or frozenset()) | parsed


def is_suppressed(diagnostic: Diagnostic, table: dict[int, frozenset[str] | None]) -> bool:
    """True when a suppression of ``table`` covers ``diagnostic`` (its first or last line)."""
    for line in {diagnostic.line, diagnostic.end_line}:
        if line not in table:
            continue
        codes = table[line]
        if codes is ALL or any(diagnostic.code.startswith(code) for code in codes):
            return True
    return False


# ---------------------------------------------------------------------------------
# --add-noqa
# ---------------------------------------------------------------------------------
def commentable_lines(source: str) -> set[int]:
    """The 1-based lines at whose end a comment can be added: lines that end
    a statement, a bracketed line or a blank/comment line (tokenize's
    NEWLINE and NL tokens). Not a line that ends inside a multi-line string
    or with a backslash continuation. Empty when ``source`` does not tokenize."""
    import io
    import tokenize

    lines: set[int] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(source, newline=None).readline):
            if token.type in (tokenize.NEWLINE, tokenize.NL):
                lines.add(token.start[0])
    except (tokenize.TokenError, SyntaxError):
        return set()
    return lines


def add_noqa_comments(source: str, codes_by_line: dict[int, set[str]],
                      commentable: set[int] | None = None) -> tuple[str, set[int]]:
    """``source`` with ``# noqa: CODE[, CODE]`` at the end of each line of
    ``codes_by_line`` (1-based line -> codes), and the lines whose codes are
    now suppressed (changed, or already covered by their ``# noqa``).

    A line that already has a real ``# noqa: A`` comment gets the missing
    codes merged into it (``# noqa: A, MEM101``); one with a bare ``# noqa``
    is left alone (it suppresses everything already). Other comments stay
    and the directive follows them. Line ends (``\\n``, ``\\r\\n``, ``\\r``) are
    kept. A line that cannot take a comment (``commentable``, by default
    :func:`commentable_lines` of ``source``) is left out of the result.
    Adding the same codes again changes nothing.
    """
    if commentable is None:
        commentable = commentable_lines(source)
    existing = {comment.line: comment for comment in directive_comments(source, _NOQA)}
    pieces = LINE_BREAK.split(source)
    breaks = [match.group() for match in LINE_BREAK.finditer(source)]
    handled: set[int] = set()
    for line, codes in codes_by_line.items():
        if line not in commentable or not 1 <= line <= len(pieces):
            continue
        text = pieces[line - 1]
        updated = _with_noqa(text, sorted({code.upper() for code in codes}), existing.get(line))
        if updated is not None:
            pieces[line - 1] = updated
            handled.add(line)
        elif existing.get(line) is not None:
            handled.add(line)  # already covered by the comment: nothing to add
    out = []
    for index, text in enumerate(pieces):
        out.append(text)
        if index < len(breaks):
            out.append(breaks[index])
    return "".join(out), handled


def _with_noqa(text: str, codes: list[str], comment: Comment | None) -> str | None:
    """The line ``text`` with ``codes`` in a ``# noqa:`` directive, or None
    when it already suppresses them."""
    if comment is not None:
        match = _NOQA.search(comment.text)
        present = match.group("codes")
        if present is None:
            return None  # bare `# noqa`: everything is suppressed already
        have = {code.upper() for code in re.split(r"[\s,]+", present.strip()) if code}
        missing = [code for code in codes if not any(code.startswith(prefix) for prefix in have)]
        if not missing:
            return None
        start = len(text) - len(comment.text) if text.endswith(comment.text) else text.rfind(comment.text)
        insert_at = start + match.end("codes")
        return text[:insert_at] + ", " + ", ".join(missing) + text[insert_at:]
    return text.rstrip(" \t") + "  # noqa: " + ", ".join(codes)
