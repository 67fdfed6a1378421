"""One-line error text from exceptions raised by user code (a traceback never reaches the user)."""

from __future__ import annotations

#: Characters kept of an exception's first line: enough for torch's shape messages, short enough for one line.
MAX_MESSAGE_CHARS = 300


def first_line(exc: BaseException, limit: int = MAX_MESSAGE_CHARS) -> str:
    """The first line of ``str(exc)``, at most ``limit`` characters ("" for an empty message)."""
    lines = str(exc).strip().splitlines()
    return lines[0][:limit] if lines else ""


def one_line(exc: BaseException) -> str:
    """``"TypeName: first line"`` of ``exc`` (just the type name when the message is empty)."""
    return f"{type(exc).__name__}: {first_line(exc)}".rstrip(": ")
