"""Make untrusted text safe to print: file names, messages, targets, source lines.

A linted tree chooses its file names, and its source text ends up in
messages and snippets; neither may steer the terminal or the log that shows
memlint's report. :func:`printable` turns every character that is not
printable into a visible escape:

- ``\\n``, ``\\r``, ``\\t`` for the usual control characters, so that a newline
  in a file name cannot start a forged ``path:line:col: CODE`` line;
- ``\\xNN`` for the other C0/C1 controls (ESC, which starts terminal escape
  sequences, BEL, DEL, ...) and for bytes of a file name that are not valid
  UTF-8 (Python keeps them as lone surrogates, U+DC80..U+DCFF, see PEP 383);
- ``\\uNNNN`` for the rest of what :meth:`str.isprintable` rejects: format
  characters such as the bidirectional overrides of "Trojan Source"
  (CVE-2021-42574), line and paragraph separators, unassigned code points.

Ordinary text, spaces included, is returned unchanged; the common case is one
:meth:`str.isprintable` call (C speed).
"""

from __future__ import annotations

import os

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: PEP 383: undecodable byte 0xNN of a file name is the code point U+DC00 + 0xNN.
_SURROGATE_ESCAPES = range(0xDC80, 0xDD00)


def printable(text: str) -> str:
    """``text`` with every non-printable character escaped (see the module docstring)."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escape(char) for char in text)


def _escape(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    point = ord(char)
    if point in _SURROGATE_ESCAPES:
        return f"\\x{point - 0xDC00:02x}"
    if point < 0x100:
        return f"\\x{point:02x}"
    if point < 0x10000:
        return f"\\u{point:04x}"
    return f"\\U{point:08x}"


def printable_name(name: str) -> str:
    """A file name for display: :func:`printable`, with the backslash itself
    written ``\\\\`` first (on systems where it is not the path separator),
    so that a name with bytes ``\\xff`` (shown ``\\xff``) and a name that
    literally holds the four characters ``\\xff`` (shown ``\\\\xff``)
    never look alike."""
    return printable(double_backslashes(name))


def valid_name(name: str) -> str:
    """A file name for the display fields of JSON (``path``): valid Unicode
    (:func:`valid_unicode`), the backslash written ``\\\\`` as in
    :func:`printable_name`."""
    return valid_unicode(double_backslashes(name))


def double_backslashes(name: str) -> str:
    if os.sep == "\\" or "\\" not in name:
        return name
    return name.replace("\\", "\\\\")


def valid_unicode(text: str) -> str:
    """``text`` without lone surrogates (a non-UTF-8 file name's bytes become
    ``\\xNN``), so that it encodes as UTF-8: for JSON and SARIF, whose readers
    must get valid Unicode; other characters are left to the JSON escaping."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join(_escape(char) if 0xD800 <= ord(char) < 0xE000 else char for char in text)
    return text


def valid_document(value):
    """A copy of a JSON-ready ``value`` (dicts, lists, strings, numbers) whose
    strings and keys are :func:`valid_unicode`."""
    if isinstance(value, str):
        return valid_unicode(value)
    if isinstance(value, dict):
        return {valid_document(key): valid_document(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [valid_document(item) for item in value]
    return value


def is_terminal(stream) -> bool:
    """True when ``stream`` is an interactive terminal (``isatty``)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except ValueError:  # a closed stream
        return False
