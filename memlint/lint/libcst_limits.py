"""A cheap check that a text is safe to hand to libcst's native parser.

libcst's parser (a Rust PEG parser, libcst 1.x) is not bounded on hostile
input. On Python 3.11.7 with libcst 1.9.0, on this project's 2-core machine
(2026-12-01; the crashes are repeated by tests/security/test_libcst_crash.py):

- 5000 nested ``(`` or ``[`` overflow its native stack: the whole process
  dies with SIGSEGV, which no ``except`` catches; so does a flat chain of
  more than 7053 ``and``/``or`` operands, which CPython itself accepts;
- 200 nested ``[`` take 0.21 s (1000 took 4.6 s and about 980 MB in the
  hostile-input tester's report);
- one logical line ``x = 1 + 1 + ...`` grows about cubically: 1000 terms
  (4 KB) 0.23 s, 2000 terms (8 KB) 1.46 s, 2992 terms (12 KB) 2.46 s
  (10,000 terms, 40 KB, ran 150 s and then SIGSEGV in the tester's report).

:func:`libcst_refusal` scans the text once (linear, no parsing, no libcst)
and names the first limit it is over, so that callers skip libcst for such
a file instead of risking the run. The scan skips comments and string
literals (so brackets inside them do not count); it is approximate for
PEP 701 f-strings (quotes nested inside a replacement field), where it may
only under-count nesting.
"""

from __future__ import annotations

import re

#: Deepest bracket nesting passed to libcst. CPython's own tokenizer refuses
#: deeper nesting ("too many nested parentheses": MAXLEVEL = 200 in
#: Parser/tokenizer.h of CPython 3.11 and 3.12, Parser/lexer/state.h of
#: 3.13), so a deeper file is a syntax error on every Python anyway.
MAX_BRACKET_DEPTH = 200

#: Longest logical line (characters, each comment and string literal
#: counted as one) passed to libcst. CPython 3.11 parses a flat boolean
#: chain of any length (``x = a and a and ...``), but libcst 1.9.0 overflows
#: its native stack past 7053 operands (measured: 7052 ``and`` / 7055 ``or``
#: operands parse in 0.1 s, one more is SIGSEGV). The tightest spelling,
#: ``1or 1or ...``, takes 4 characters an operand, so 20,000 characters stay
#: under 5,000 operands. CPython's own recursion limit bounds the nested
#: shapes: its longest ``+`` chain (2992 terms, 12 KB) takes libcst 2.46 s,
#: its longest ``a[0][0]...`` (2991, 9 KB) 10.2 s. A longer line is
#: generated data, not code to fix.
MAX_LOGICAL_LINE_CHARS = 20_000

_OPEN, _CLOSE = "([{", ")]}"
#: The characters the scan acts on; the others are skipped by the regex engine.
_INTERESTING = re.compile(r"[#'\"()\[\]{}\\\r\n]")
#: Inside a string literal: the characters that may end it (or escape the next).
_STRING_STOPS = {"'": re.compile(r"[\\'\r\n]"), '"': re.compile(r'[\\"\r\n]')}


def libcst_refusal(text: str) -> str | None:
    """Why ``text`` must not be given to libcst (a short phrase naming the
    limit), or None when it is within :data:`MAX_BRACKET_DEPTH` and
    :data:`MAX_LOGICAL_LINE_CHARS` (a logical line's length counts each
    comment and string literal in it as one character: libcst reads those
    as one token). Never raises; linear in ``len(text)``."""
    depth = deepest = 0
    line_start = longest = 0
    index, size = 0, len(text)
    while index < size:
        found = _INTERESTING.search(text, index)
        if found is None:
            break
        index = found.start()
        char = text[index]
        if char in "#'\"":
            end = _line_end(text, index) if char == "#" else _string_end(text, index)
            line_start += end - index - 1  # a comment or a string literal counts as one character
            index = end
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
    stops = _STRING_STOPS[quote]
    while True:
        found = stops.search(text, position)
        if found is None:
            return len(text)
        position = found.start()
        char = text[position]
        if char == "\\":
            position += 2
        elif char in "\r\n":
            if not triple:
                return position
            position += 1
        elif text.startswith(delimiter, position):
            return position + len(delimiter)
        else:
            position += 1
