"""A cheap check that a text is safe to hand to libcst's native parser.

libcst's parser (a Rust PEG parser, libcst 1.x) is not bounded on hostile
input: on Python 3.11, measured with libcst 1.9.0 on this project's CI
machine (tests/security/test_libcst_limits.py records the repros),

- 5000 nested ``(`` or ``[`` overflow its native stack: the whole process
  dies with SIGSEGV, which no ``except`` catches;
- 1000 nested ``[`` take 4.6 s and about 980 MB; 200 take 0.21 s;
- one logical line ``x = 1 + 1 + ...`` grows about cubically: 1000 terms
  (4 KB) 0.23 s, 2000 terms (8 KB) 1.46 s, 2992 terms (12 KB) 2.46 s,
  10,000 terms (40 KB) 150 s and then SIGSEGV.

:func:`libcst_refusal` scans the text once (linear, no parsing, no libcst)
and names the first limit it is over, so that callers skip libcst for such
a file instead of risking the run. The scan skips comments and string
literals (so brackets inside them do not count); it is approximate for
PEP 701 f-strings (quotes nested inside a replacement field), where it may
only under-count nesting.
"""

from __future__ import annotations

#: Deepest bracket nesting passed to libcst. CPython's own tokenizer refuses
#: deeper nesting ("too many nested parentheses": MAXLEVEL = 200 in
#: Parser/tokenizer.h of CPython 3.11 and 3.12, Parser/lexer/state.h of
#: 3.13), so a deeper file is a syntax error on every Python anyway.
MAX_BRACKET_DEPTH = 200

#: Longest logical line (characters) passed to libcst. The longest ``+``
#: chain CPython 3.11 itself parses (2992 terms, 12 KB; deeper is a
#: RecursionError) takes libcst 2.46 s (measured as above), so a file that
#: CPython parsed (the fix engine's input) costs at most a few such seconds
#: per chain; past this a line is generated data, not code to fix. A longer
#: chain that CPython refuses (the newer-syntax path) is bounded by the
#: child process's time limit (memlint/lint/newer_syntax.py).
MAX_LOGICAL_LINE_CHARS = 50_000

_OPEN, _CLOSE = "([{", ")]}"


def libcst_refusal(text: str) -> str | None:
    """Why ``text`` must not be given to libcst (a short phrase naming the
    limit), or None when it is within :data:`MAX_BRACKET_DEPTH` and
    :data:`MAX_LOGICAL_LINE_CHARS`. Never raises; linear in ``len(text)``."""
    depth = deepest = 0
    line_start = longest = 0
    index, size = 0, len(text)
    while index < size:
        char = text[index]
        if char == "#":
            end = _line_end(text, index)
            index = end
            continue
        if char in "'\"":
            index = _string_end(text, index)
            continue
        if char in _OPEN:
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_BRACKET_DEPTH:
                    return f"brackets nested more than {MAX_BRACKET_DEPTH} deep"
        elif char in _CLOSE:
            depth = max(depth - 1, 0)
        elif char == "\\" and text.startswith(("\n", "\r"), index + 1):
            index += 2  # a continuation: the logical line goes on
            continue
        elif char in "\r\n" and depth == 0:
            longest = max(longest, index - line_start)
            line_start = index + 1
        index += 1
    longest = max(longest, size - line_start)
    if longest > MAX_LOGICAL_LINE_CHARS:
        return f"a logical line longer than {MAX_LOGICAL_LINE_CHARS} characters"
    return None


def _line_end(text: str, index: int) -> int:
    ends = [end for end in (text.find("\n", index), text.find("\r", index)) if end >= 0]
    return min(ends) if ends else len(text)


def _string_end(text: str, index: int) -> int:
    """The offset after the string literal whose quote is at ``index`` (the
    end of the text for an unterminated one; a single-quoted string ends at
    its line's end)."""
    quote = text[index]
    triple = text.startswith(quote * 3, index)
    delimiter = quote * 3 if triple else quote
    position = index + len(delimiter)
    size = len(text)
    while position < size:
        char = text[position]
        if char == "\\":
            position += 2
            continue
        if not triple and char in "\r\n":
            return position
        if text.startswith(delimiter, position):
            return position + len(delimiter)
        position += 1
    return size
