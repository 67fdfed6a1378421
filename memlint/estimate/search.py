"""The one largest-batch search (estimator, GPU campaign and configured estimates all use it).

:func:`largest_fitting` finds the largest ``n`` in ``[1, limit]`` for which a
probe says "fits", assuming that fitting is monotone in ``n`` (memory grows
with the batch).  Every answer is a real probe -- nothing is extrapolated:
when probes also report bytes (:class:`Probe`), two points give an affine
guess of the boundary that is probed first, then galloping and bisection over
the remaining bracket settle it exactly (allocator rounding makes memory only
close to affine); bool probes use doubling and bisection alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Probe:
    """A probe's answer: whether ``n`` fits, and optionally the bytes it needs and the usable bytes."""

    fits: bool
    required_bytes: int | None = None
    usable_bytes: int | None = None

    @property
    def has_bytes(self) -> bool:
        """Whether the probe gave both byte counts (then the search can interpolate)."""
        return self.required_bytes is not None and self.usable_bytes is not None


def _as_probe(answer) -> Probe:
    return answer if isinstance(answer, Probe) else Probe(bool(answer))


class _Known:
    """The probes made so far (each ``n`` probed at most once)."""

    def __init__(self, probe: Callable[[int], Probe | bool], known: dict[int, Probe] | None):
        self.probe = probe
        self.answers: dict[int, Probe] = dict(known or {})

    def fits(self, n: int) -> bool:
        """Whether ``n`` fits, probing it on first use."""
        if n not in self.answers:
            self.answers[n] = _as_probe(self.probe(n))
        return self.answers[n].fits

    def bracket(self, limit: int) -> tuple[int, int]:
        """(largest known fit or 0, smallest known miss above it or limit + 1)."""
        low = max((n for n, a in self.answers.items() if a.fits), default=0)
        high = min((n for n, a in self.answers.items() if not a.fits and n > low), default=limit + 1)
        return low, high


def _affine_guess(known: _Known, start: int, limit: int) -> int | None:
    """The n where required bytes reach the usable bytes, from ``start`` and a second probe; None without bytes."""
    first = known.answers[start]
    if not first.has_bytes:
        return None
    other = start // 2 if start >= 16 else start * 4  # far enough apart that rounding does not hide the slope
    if not 1 <= other <= limit:
        return None
    known.fits(other)
    (b1, p1), (b2, p2) = sorted(((start, first), (other, known.answers[other])))
    if not p2.has_bytes or p2.required_bytes <= p1.required_bytes:
        return None
    slope = (p2.required_bytes - p1.required_bytes) / (b2 - b1)
    return min(limit, max(1, b1 + int((p1.usable_bytes - p1.required_bytes) // slope)))


def largest_fitting(probe: Callable[[int], Probe | bool], limit: int, start: int = 1,
                    known: dict[int, Probe] | None = None) -> int:
    """Largest n in [1, limit] with ``probe(n)`` fitting; 0 when even 1 does not fit.

    probe: ``n -> Probe`` (or a bool); start: the first n probed (e.g. the
    configured batch); known: probes already made ({n: Probe}), not repeated.
    Raises ValueError when limit < 1.  Probes: about 2 log2(limit) for bool
    probes, usually 3-6 with bytes.
    """
    if limit < 1:
        raise ValueError(f"limit must be >= 1 (got {limit})")
    state = _Known(probe, known)
    start = min(max(1, start), limit)
    state.fits(start)
    last = start
    guess = _affine_guess(state, start, limit)
    if guess is not None:
        last = guess
        neighbour = guess + 1 if state.fits(guess) else guess - 1
        if 1 <= neighbour <= limit:
            state.fits(neighbour)
            last = neighbour
    low, high = state.bracket(limit)
    step = 1  # gallop from the side of the last answer: distances 1, 2, 4, ... then bisect
    if state.answers[last].fits:
        while (candidate := min(low + step, high - 1)) > low:
            if not state.fits(candidate):
                high = candidate
                break
            low, step = candidate, step * 2
    else:
        while (candidate := max(high - step, low + 1)) < high:
            if state.fits(candidate):
                low = candidate
                break
            high, step = candidate, step * 2
    while high - low > 1:
        mid = (low + high) // 2
        if state.fits(mid):
            low = mid
        else:
            high = mid
    return low
