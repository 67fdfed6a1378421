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
    segments: int = 0
    peak_segments: int = 0
    inactive_split: int = 0
    peak_inactive_split: int = 0
    _pools: dict = field(default_factory=lambda: {True: ([], {}), False: ([], {})})

    def memory_stats(self) -> dict[str, int]:
        """The counters under the names ``torch.cuda.memory_stats()`` uses (bytes; segment counts).

        ``inactive_split_bytes``: free blocks inside segments that also hold
        allocated blocks -- the fragmentation the allocator cannot hand out as
        one block; ``reserved_bytes - allocated_bytes`` adds the fully free
        cached segments.
        """
        return {
            "allocated_bytes.all.current": self.allocated, "allocated_bytes.all.peak": self.peak_allocated,
            "active_bytes.all.current": self.allocated, "active_bytes.all.peak": self.peak_allocated,
            "reserved_bytes.all.current": self.reserved, "reserved_bytes.all.peak": self.peak_reserved,
            "inactive_split_bytes.all.current": self.inactive_split,
            "inactive_split_bytes.all.peak": self.peak_inactive_split,
            "segment.all.current": self.segments, "segment.all.peak": self.peak_segments,
            "num_alloc_retries": 0,
        }

    def _note_inactive(self, delta: int) -> None:
        self.inactive_split += delta
        self.peak_inactive_split = max(self.peak_inactive_split, self.inactive_split)

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
        self.segments += 1
        self.peak_segments = max(self.peak_segments, self.segments)
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
                    self.segments -= 1
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
        elif block.prev is not None or block.next is not None:
            self._note_inactive(-block.size)
        if self._should_split(block, size):
            rest = Block(block.segment, block.offset + size, block.size - size, small,
                         prev=block, next=block.next)
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            self._pool_insert(rest)
            self._note_inactive(rest.size)
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
                self._note_inactive(-neighbour.size)
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
        if block.prev is not None or block.next is not None:
            self._note_inactive(block.size)
        self._pool_insert(block)

    def reset_peaks(self) -> None:
        """Like ``torch.cuda.reset_peak_memory_stats()``: peaks restart from the current values."""
        self.peak_allocated = self.allocated
        self.peak_reserved = self.reserved
        self.peak_segments = self.segments
        self.peak_inactive_split = self.inactive_split


@dataclass
class CpuAllocatorModel:
    """PyTorch's CPU allocator (``c10/core/CPUAllocator.cpp``): every request is its own
    ``posix_memalign`` of exactly the bytes asked, freed on release -- no rounding,
    no caching, so reserved equals allocated.  Same interface as
    :class:`CachingAllocatorModel` (bytes)."""

    limit: int | None = None
    allocated: int = 0
    peak_allocated: int = 0
    num_segments: int = 0

    @property
    def reserved(self) -> int:
        return self.allocated

    @property
    def peak_reserved(self) -> int:
        return self.peak_allocated

    def malloc(self, nbytes: int) -> int | None:
        """Allocate ``nbytes``; the handle is the byte count.  Raises AllocatorOOM beyond ``limit``."""
        if nbytes <= 0:
            return None
        if self.limit is not None and self.allocated + nbytes > self.limit:
            raise AllocatorOOM(f"cannot allocate {nbytes} bytes: {self.allocated} of {self.limit} in use")
        self.allocated += nbytes
        self.num_segments += 1
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return nbytes

    def free(self, handle: int | None) -> None:
        if handle:
            self.allocated -= handle

    def reset_peaks(self) -> None:
        self.peak_allocated = self.allocated

    def release_cached_segments(self) -> int:
        """Nothing is cached on the CPU."""
        return 0

    def memory_stats(self) -> dict[str, int]:
        """allocated/reserved under torch.cuda.memory_stats() names (equal on the CPU; no fragmentation)."""
        return {"allocated_bytes.all.current": self.allocated, "allocated_bytes.all.peak": self.peak_allocated,
                "reserved_bytes.all.current": self.allocated, "reserved_bytes.all.peak": self.peak_allocated,
                "inactive_split_bytes.all.current": 0, "inactive_split_bytes.all.peak": 0}
