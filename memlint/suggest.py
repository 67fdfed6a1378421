"""Suggestions ("did you mean ...?") for names the user mistyped: sub-commands,
GPU names, rule codes (Python's :mod:`difflib`, as argparse 3.12+ and ruff do)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

#: difflib's own default similarity cutoff (difflib.get_close_matches, Python 3.11).
CUTOFF = 0.6


def close_matches(word: str, candidates: Iterable[str], limit: int = 3) -> list[str]:
    """Up to ``limit`` of ``candidates`` most like ``word`` (case-insensitive),
    best first, in their own spelling."""
    by_key: dict[str, str] = {}
    for candidate in candidates:
        by_key.setdefault(candidate.lower(), candidate)
    found = difflib.get_close_matches(word.lower(), list(by_key), n=limit, cutoff=CUTOFF)
    return [by_key[key] for key in found]


def did_you_mean(names: list[str]) -> str:
    """``"did you mean 'a'?"`` / ``"did you mean 'a' or 'b'?"`` for the
    suggestions ``names``; empty when there are none."""
    if not names:
        return ""
    quoted = [f"'{name}'" for name in names]
    listed = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
    return f"did you mean {listed}?"
