from memlint.estimate.allocator import (
    K_LARGE_BUFFER,
    K_ROUND_LARGE,
    K_SMALL_BUFFER,
    CachingAllocatorModel,
    round_size,
)

MiB = 2**20


def test_round_size_512():
    assert round_size(1) == 512
    assert round_size(512) == 512
    assert round_size(513) == 1024


def test_one_byte_reserves_small_segment():
    a = CachingAllocatorModel()
    a.malloc(1)
    assert a.reserved == K_SMALL_BUFFER == 2 * MiB
    assert a.allocated == 512


def test_five_mib_reserves_large_buffer():
    a = CachingAllocatorModel()
    a.malloc(5 * MiB)
    assert a.reserved == K_LARGE_BUFFER == 20 * MiB
    assert a.allocated == 5 * MiB


def test_fifteen_mib_rounds_to_sixteen():
    a = CachingAllocatorModel()
    block = a.malloc(15 * MiB)
    assert a.reserved == 16 * MiB
    # remainder of 1 MiB is not > kSmallSize: the whole block is handed out
    assert block.size == 16 * MiB and a.allocated == 16 * MiB
    assert 16 * MiB % K_ROUND_LARGE == 0


def test_free_and_reuse_same_size():
    a = CachingAllocatorModel()
    block = a.malloc(12 * MiB)
    a.free(block)
    assert a.allocated == 0
    a.malloc(12 * MiB)
    assert a.reserved == 12 * MiB and a.num_segments == 1


def test_splitting_packs_small_requests_in_one_segment():
    a = CachingAllocatorModel()
    blocks = [a.malloc(100 * 1024) for _ in range(10)]
    assert a.num_segments == 1 and a.reserved == 2 * MiB
    assert a.allocated == sum(b.size for b in blocks)


def test_large_split_and_coalesce():
    a = CachingAllocatorModel()
    first = a.malloc(4 * MiB)
    second = a.malloc(4 * MiB)
    assert a.num_segments == 1  # both from the same 20 MiB segment
    a.free(first)
    a.free(second)
    # coalesced back into one 20 MiB free block: a 19 MiB request reuses it
    a.malloc(19 * MiB)
    assert a.num_segments == 1 and a.reserved == 20 * MiB


def test_peak_reset():
    a = CachingAllocatorModel()
    block = a.malloc(30 * MiB)
    a.free(block)
    a.reset_peaks()
    assert a.peak_allocated == 0 and a.peak_reserved == 30 * MiB


def _random_mallocs_and_frees(seed, steps, free_probability, size_ranges):
    """Yield (allocator, live blocks, requested size or None) after each random malloc or free."""
    import random

    rng = random.Random(seed)
    a = CachingAllocatorModel()
    live = []
    for _ in range(steps):
        if live and rng.random() < free_probability:
            a.free(live.pop(rng.randrange(len(live))))
            yield a, live, None
        else:
            size = rng.randint(*rng.choice(size_ranges))
            live.append(a.malloc(size))
            yield a, live, size


def test_random_sequences_keep_invariants():
    ranges = [(1, 4096), (4096, 2 * MiB), (2 * MiB, 40 * MiB)]
    for a, live, size in _random_mallocs_and_frees(0, 2000, 0.45, ranges):
        if size is not None:
            assert live[-1].size >= round_size(size)
        assert 0 <= a.allocated <= a.reserved
        assert a.allocated == sum(b.size for b in live)
        assert a.peak_allocated >= a.allocated and a.peak_reserved == a.reserved
    for block in live:
        a.free(block)
    assert a.allocated == 0
    # everything coalesced: each segment is one free block again
    keys_small, _ = a._pools[True]
    keys_large, _ = a._pools[False]
    assert len(keys_small) + len(keys_large) == a.num_segments


def test_limit_releases_cached_segments_then_raises():
    import pytest

    from memlint.estimate.allocator import AllocatorOOM

    a = CachingAllocatorModel(limit=50 * MiB)
    first = a.malloc(30 * MiB)
    a.free(first)
    a.malloc(40 * MiB)  # 30 MiB cached segment is released to make room
    assert a.reserved == 40 * MiB
    with pytest.raises(AllocatorOOM):
        a.malloc(20 * MiB)


def test_inactive_split_bytes_track_free_pieces_of_split_segments():
    """memory_stats()['inactive_split_bytes']: a free block that shares its segment with an allocated one."""
    a = CachingAllocatorModel()
    first = a.malloc(4 * MiB)   # 20 MiB segment: 4 MiB allocated, 16 MiB free remainder (split)
    assert a.inactive_split == 16 * MiB
    second = a.malloc(4 * MiB)  # taken from the remainder: 12 MiB left
    assert a.inactive_split == 12 * MiB
    a.free(first)               # a free hole before an allocated block: 4 + 12 MiB inactive
    assert a.inactive_split == 16 * MiB
    a.free(second)              # everything coalesces into one whole free segment: no fragmentation
    assert a.inactive_split == 0 and a.peak_inactive_split == 16 * MiB
    stats = a.memory_stats()
    assert stats["inactive_split_bytes.all.peak"] == 16 * MiB
    assert stats["reserved_bytes.all.current"] == 20 * MiB and stats["segment.all.current"] == 1


def test_random_sequences_keep_inactive_split_consistent():
    for a, _, _ in _random_mallocs_and_frees(1, 1500, 0.5, [(1, 4096), (2 * MiB, 9 * MiB)]):
        free_split = sum(block.size for pool in (True, False) for block in a._pools[pool][1].values()
                         if block.prev is not None or block.next is not None)
        assert a.inactive_split == free_split


def test_cpu_allocator_counts_exact_bytes():
    from memlint.estimate.allocator import AllocatorOOM, CpuAllocatorModel

    cpu = CpuAllocatorModel()
    one = cpu.malloc(1)
    cpu.malloc(1000)
    assert cpu.allocated == cpu.reserved == 1001
    cpu.free(one)
    assert cpu.allocated == 1000 and cpu.peak_allocated == cpu.peak_reserved == 1001
    limited = CpuAllocatorModel(limit=10)
    import pytest

    with pytest.raises(AllocatorOOM):
        limited.malloc(11)
