"""Byte-size and percentage parsing/formatting (no torch import).

Units: ``KiB/MiB/GiB/TiB`` are powers of two (GiB = 2**30 bytes); ``KB/MB/GB/TB``
are powers of ten (GB = 10**9 bytes); ``B`` or a bare number is bytes.
"""

from __future__ import annotations

import re

from memlint.errors import UsageError

KiB = 2**10
MiB = 2**20
GiB = 2**30


def round_up(value: int, multiple: int) -> int:
    """``value`` rounded up to a multiple of ``multiple`` (both ints, ``multiple`` > 0)."""
    return -(-value // multiple) * multiple

_UNITS = {
    "": 1, "b": 1,
    "kib": KiB, "mib": MiB, "gib": GiB, "tib": 2**40,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "k": KiB, "m": MiB, "g": GiB, "t": 2**40,
}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")


def parse_bytes(text: str | int | float) -> int:
    """Parse ``"24GiB"``, ``"40GB"``, ``"512MiB"``, ``"1.5 GiB"`` or ``1024`` into bytes (int).

    Raises UsageError (one line, naming the text) when it does not parse.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return int(text)
    match = _SIZE_RE.match(str(text))
    if not match or match.group(2).lower() not in _UNITS:
        raise UsageError(f"cannot parse byte size {text!r} (expected e.g. 24GiB, 40GB, 512MiB)")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def parse_fraction(text: str | float) -> float:
    """Parse ``"10%"`` or ``"0.1"`` into a fraction in [0, 1); raises UsageError otherwise."""
    try:
        if isinstance(text, str) and text.strip().endswith("%"):
            value = float(text.strip()[:-1]) / 100.0
        else:
            value = float(text)
            if value >= 1.0:  # "10" means 10 %
                value /= 100.0
    except ValueError:
        raise UsageError(f"cannot parse reserve {text!r} (expected e.g. 10% or 0.1)") from None
    if not 0.0 <= value < 1.0:
        raise UsageError(f"reserve {text!r} must be between 0% and 100%")
    return value


def format_bytes(n: int | float) -> str:
    """Human-readable binary size: ``format_bytes(3 * 2**30) == '3.00 GiB'``."""
    n = float(n)
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            return f"{sign}{n / size:.2f} {unit}"
    return f"{sign}{int(n)} B"
