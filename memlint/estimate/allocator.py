"""A model of PyTorch's CUDA caching allocator (no torch import).

Replays a sequence of ``malloc(nbytes)`` / ``free(handle)`` events and reports
what ``torch.cuda.memory_allocated()`` / ``memory_reserved()`` and their peaks
would be.  Written from the behaviour described in PyTorch's sources (not a
copy of them); modelled version: torch 2.13 (the constants are unchanged since
torch 1.x).

Constants (bytes) -- ``c10/core/AllocatorConfig.h`` (``namespace
c10::CachingAllocator``) and ``c10/cuda/CUDACachingAllocator.cpp`` of
pytorch/pytorch:

* ``kMinBlockSize = 512``      every request is rounded up to a multiple of 512
* ``kSmallSize = 1 MiB``       requests <= 1 MiB use the *small* pool
* ``kSmallBuffer = 2 MiB``     small-pool segments are 2 MiB
* ``kMinLargeAlloc = 10 MiB``  large requests below 10 MiB get a 20 MiB segment
* ``kLargeBuffer = 20 MiB``    ... of this size
* ``kRoundLarge = 2 MiB``      requests >= 10 MiB get a segment rounded up to 2 MiB

Behaviour modelled: best-fit search (smallest free block of the right pool
that is large enough, ties broken by address), block splitting (small-pool
blocks split when the remainder is >= 512 B, large-pool blocks only when the
remainder is > 1 MiB -- otherwise the whole block is handed out and counted as
allocated), coalescing of free neighbours inside a segment, reuse of cached
blocks, and segments never being returned (no ``empty_cache``, no OOM retry).
With a ``limit`` (bytes the allocator may reserve), a request that would
need a new segment beyond the limit first releases every fully free cached
segment (as ``release_cached_blocks`` does before the allocator reports out of
memory) and raises :class:`AllocatorOOM` if it still does not fit.
Not modelled: multiple streams, ``expandable_segments``, ``max_split_size_mb``
and ``roundup_power2_divisions`` (all off by default), CUDA graphs pools.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

K_MIN_BLOCK_SIZE = 512
K_SMALL_SIZE = 1 << 20
K_SMALL_BUFFER = 2 << 20
K_MIN_LARGE_ALLOC = 10 << 20
K_LARGE_BUFFER = 20 << 20
K_ROUND_LARGE = 2 << 20


def round_size(nbytes: int) -> int:
    """Request size after the allocator's rounding to 512-byte blocks (``round_size``)."""
    if nbytes < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    return K_MIN_BLOCK_SIZE * ((nbytes + K_MIN_BLOCK_SIZE - 1) // K_MIN_BLOCK_SIZE)


def segment_size(rounded: int) -> int:
    """Size of the new segment (``cudaMalloc``) made for a rounded request (``get_allocation_size``)."""
    if rounded <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if rounded < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * ((rounded + K_ROUND_LARGE - 1) // K_ROUND_LARGE)


class AllocatorOOM(Exception):
    """The modelled allocator could not reserve a segment within its limit."""


@dataclass(eq=False)
class Block:
    """A contiguous piece of a segment; ``offset`` and ``size`` in bytes."""

    segment: int
    offset: int
    size: int
    small: bool
    free: bool = True
    prev: "Block | None" = None
    next: "Block | None" = None

    def key(self) -> tuple[int, int, int]:
        return (self.size, self.segment, self.offset)


@dataclass
class CachingAllocatorModel:
    """Replay ``malloc``/``free`` and track allocated/reserved bytes and their peaks.

    ``malloc(nbytes)`` returns an opaque handle (a Block) or None for 0 bytes
    (CUDA returns a null pointer and allocates nothing); ``free(handle)`` gives
    it back.  All counters are bytes.
    """

    limit: int | None = None
    allocated: int = 0
    reserved: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    num_segments: int = 0
    _pools: dict = field(default_factory=lambda: {True: ([], {}), False: ([], {})})

    def _pool_insert(self, block: Block) -> None:
        keys, blocks = self._pools[block.small]
        key = block.key()
        bisect.insort(keys, key)
        blocks[key] = block

    def _pool_remove(self, block: Block) -> None:
        keys, blocks = self._pools[block.small]
        key = block.key()
        index = bisect.bisect_left(keys, key)
        del keys[index]
        del blocks[key]

    def _best_fit(self, small: bool, size: int) -> Block | None:
        keys, blocks = self._pools[small]
        index = bisect.bisect_left(keys, (size, -1, -1))
        if index == len(keys):
            return None
        block = blocks[keys[index]]
        self._pool_remove(block)
        return block

    def _new_segment(self, small: bool, size: int) -> Block:
        self.num_segments += 1
        if self.limit is not None and self.reserved + size > self.limit:
            self.release_cached_segments()
            if self.reserved + size > self.limit:
                raise AllocatorOOM(f"cannot reserve {size} bytes: {self.reserved} of {self.limit} reserved")
        self.reserved += size
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        return Block(segment=self.num_segments, offset=0, size=size, small=small)

    def release_cached_segments(self) -> int:
        """Give back every segment that is entirely free (``empty_cache``); returns the bytes released."""
        released = 0
        for small in (True, False):
            keys, blocks = self._pools[small]
            for key in list(keys):
                block = blocks[key]
                if block.prev is None and block.next is None:
                    self._pool_remove(block)
                    self.reserved -= block.size
                    released += block.size
        return released

    @staticmethod
    def _should_split(block: Block, size: int) -> bool:
        remaining = block.size - size
        if block.small:
            return remaining >= K_MIN_BLOCK_SIZE
        return remaining > K_SMALL_SIZE

    def malloc(self, nbytes: int) -> Block | None:
        """Allocate ``nbytes``; returns the block handed out (its ``size`` counts as allocated)."""
        if nbytes <= 0:
            return None
        size = round_size(nbytes)
        small = size <= K_SMALL_SIZE
        block = self._best_fit(small, size)
        if block is None:
            block = self._new_segment(small, segment_size(size))
        if self._should_split(block, size):
            rest = Block(block.segment, block.offset + size, block.size - size, small,
                         prev=block, next=block.next)
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            self._pool_insert(rest)
        block.free = False
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return block

    def free(self, block: Block | None) -> None:
        """Return a block to its pool, merging it with free neighbours of the same segment."""
        if block is None:
            return
        self.allocated -= block.size
        block.free = True
        for neighbour in (block.prev, block.next):
            if neighbour is not None and neighbour.free:
                self._pool_remove(neighbour)
                if neighbour is block.prev:
                    neighbour.size += block.size
                    neighbour.next = block.next
                    if block.next is not None:
                        block.next.prev = neighbour
                    block = neighbour
                else:
                    block.size += neighbour.size
                    block.next = neighbour.next
                    if neighbour.next is not None:
                        neighbour.next.prev = block
        self._pool_insert(block)

    def reset_peaks(self) -> None:
        """Like ``torch.cuda.reset_peak_memory_stats()``: peaks restart from the current values."""
        self.peak_allocated = self.allocated
        self.peak_reserved = self.reserved
