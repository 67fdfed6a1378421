"""A call's source text split into its parts, for fixes that edit its arguments.

Not a rule module. ``ast`` spans leave out the parentheses around an
argument and do not cover commas or comments, so the call's text is
tokenized instead: each argument keeps its exact spelling (``name = (x)``),
and the text between arguments (commas, line breaks, comments) is kept
apart, owned by the argument before it (removing an argument removes its comma).
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass
from itertools import accumulate

#: Tokens that only lay out the text.
_LAYOUT = frozenset({tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER})
_OPENING = frozenset({"(", "[", "{"})
_LONE_CR = re.compile(r"\r(?!\n)")
_CLOSING = frozenset({")", "]", "}"})


@dataclass(frozen=True)
class CallText:
    """``callee + opening + argument[0] + separator[0] + ... + ")"``."""

    #: The called expression (``torch.cuda.amp.autocast``), with its own parentheses.
    callee: str
    #: From the callee to the first argument (or to the ``)`` of a call without arguments): ``(`` and whitespace.
    opening: str
    #: Each argument as written: ``x``, ``*xs``, ``**kw``, ``name = (x)``.
    arguments: tuple[str, ...]
    #: The text after each argument, up to the next one or to the ``)``: ``, ``, ``,  # note\n    ``.
    separators: tuple[str, ...]
    #: Whether the last separator holds a comma (``f(a, b,)``).
    trailing_comma: bool

    @classmethod
    def of(cls, code: str) -> CallText:
        """Split ``code``, the source of a call expression."""
        # tokenize and StringIO end lines at "\n" only; a lone "\r" (old Mac
        # line ends) becomes "\n", same length, so offsets still fit ``code``.
        lines = _LONE_CR.sub("\n", code)
        line_starts = list(accumulate(map(len, io.StringIO(lines).readlines()), initial=0))
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(lines).readline) if t.type not in _LAYOUT]

        def offset(point: tuple[int, int]) -> int:
            return line_starts[point[0] - 1] + point[1]

        opening = _argument_list_start(tokens)
        arguments, trailing_comma = _arguments(tokens[opening + 1:-1])
        starts = [offset(argument[0].start) for argument in arguments]
        ends = [offset(argument[-1].end) for argument in arguments]
        callee_end, close = offset(tokens[opening - 1].end), offset(tokens[-1].start)
        return cls(
            callee=code[:callee_end],
            opening=code[callee_end:starts[0] if starts else close],
            arguments=tuple(code[start:end] for start, end in zip(starts, ends)),
            separators=tuple(code[end:following] for end, following in zip(ends, [*starts[1:], close])),
            trailing_comma=trailing_comma,
        )

    def without(self, index: int) -> str:
        """The call without its argument ``index``; the argument that becomes
        the last one loses its comma (and the whitespace after the comma)."""
        kept = [i for i in range(len(self.arguments)) if i != index]
        parts = [self.arguments[i] + self.separators[i] for i in kept]
        if kept and (kept[-1] != len(self.arguments) - 1 or self.trailing_comma):
            parts[-1] = self.arguments[kept[-1]]
        return self.callee + self.opening + "".join(parts) + ")"


def _is_operator(token: tokenize.TokenInfo, text: str) -> bool:
    return token.type == tokenize.OP and token.string == text


def _nesting(token: tokenize.TokenInfo) -> int:
    """+1 for an opening bracket, -1 for a closing one, else 0."""
    if token.type != tokenize.OP:
        return 0
    return (token.string in _OPENING) - (token.string in _CLOSING)


def _argument_list_start(tokens: list[tokenize.TokenInfo]) -> int:
    """Index of the ``(`` that opens the arguments: the last one outside brackets
    (``f(a)(b)`` and ``(f)(b)`` call with ``(b)``)."""
    depth, start = 0, -1
    for index, token in enumerate(tokens):
        if depth == 0 and _is_operator(token, "("):
            start = index
        depth += _nesting(token)
    return start


def _arguments(tokens: list[tokenize.TokenInfo]) -> tuple[list[list[tokenize.TokenInfo]], bool]:
    """The tokens of each argument, from the tokens between the call's
    parentheses, and whether a comma follows the last argument."""
    arguments: list[list[tokenize.TokenInfo]] = []
    depth, after_comma = 0, True
    for token in tokens:
        if depth == 0 and _is_operator(token, ","):
            after_comma = True
            continue
        if after_comma:
            arguments.append([])
            after_comma = False
        arguments[-1].append(token)
        depth += _nesting(token)
    return arguments, after_comma and bool(arguments)
