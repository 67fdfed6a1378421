"""Inline suppression comments.

- ``# noqa: MEM101, MEM102`` or ``# memlint: ignore[MEM101]`` on the reported
  line suppresses those codes there; a code prefix (``MEM1``) works too;
- bare ``# noqa`` (or ``# memlint: ignore``) suppresses everything on the line;
- ``# memlint: skip-file`` anywhere in the file skips the file.

A diagnostic is suppressed when the comment is on its first or its last line,
so a multi-line call can be silenced at either end.
"""

from __future__ import annotations

import re

from memlint.lint.diagnostic import LINE_BREAK, Diagnostic

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)
_IGNORE = re.compile(r"#\s*memlint:\s*ignore(?:\[(?P<codes>[^\]]*)\])?", re.IGNORECASE)
_SKIP_FILE = re.compile(r"#\s*memlint:\s*skip-file\b", re.IGNORECASE)

ALL = None  # marker: every code is suppressed on the line


def skips_file(source: str) -> bool:
    """True when the file carries ``# memlint: skip-file``."""
    return "skip-file" in source and _SKIP_FILE.search(source) is not None


def suppressions(source: str) -> dict[int, frozenset[str] | None]:
    """Map 1-based line -> suppressed code prefixes (None = all codes)."""
    result: dict[int, frozenset[str] | None] = {}
    if "noqa" not in source and "memlint" not in source:
        return result
    # Lines as Python counts them: str.splitlines() would also break at form
    # feeds and other separators, and shift every later line's number.
    for number, line in enumerate(LINE_BREAK.split(source), start=1):
        if "#" not in line:
            continue
        for pattern in (_NOQA, _IGNORE):
            match = pattern.search(line)
            if match is None:
                continue
            codes = match.group("codes")
            if codes is None or not codes.strip():
                result[number] = ALL
            elif result.get(number, frozenset()) is not ALL:
                parsed = frozenset(c.upper() for c in re.split(r"[\s,]+", codes.strip()) if c)
                result[number] = (result.get(number) or frozenset()) | parsed
    return result


def is_suppressed(diagnostic: Diagnostic, table: dict[int, frozenset[str] | None]) -> bool:
    for line in {diagnostic.line, diagnostic.end_line}:
        if line not in table:
            continue
        codes = table[line]
        if codes is ALL or any(diagnostic.code.startswith(code) for code in codes):
            return True
    return False
