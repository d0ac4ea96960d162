"""Bin packing and multiway partitioning on integer sizes, as the trainers' samplers describe them.

All three are deterministic: ties go to the lower index. They return bins as lists of input indices.
An input larger than the capacity gets a bin of its own (the trainers drop or truncate such inputs;
cpplan never drops a request, so the baseline keeps it and the wave is priced as it is).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence


def _decreasing(sizes: Sequence[int]) -> list[int]:
    return sorted(range(len(sizes)), key=lambda i: (-int(sizes[i]), i))


def first_fit_decreasing(sizes: Sequence[int], capacity: int) -> list[list[int]]:
    """Largest first; each input goes into the first open bin with room for it, else a new bin."""
    bins: list[list[int]] = []
    loads: list[int] = []
    for i in _decreasing(sizes):
        size = int(sizes[i])
        for b, load in enumerate(loads):
            if load + size <= capacity:
                bins[b].append(i)
                loads[b] += size
                break
        else:
            bins.append([i])
            loads.append(size)
    return bins


def best_fit_decreasing(sizes: Sequence[int], capacity: int) -> list[list[int]]:
    """Largest first; each input goes into the open bin it leaves with the least room, else a new bin."""
    bins: list[list[int]] = []
    loads: list[int] = []
    for i in _decreasing(sizes):
        size = int(sizes[i])
        best, best_room = -1, None
        for b, load in enumerate(loads):
            room = capacity - load - size
            if room >= 0 and (best_room is None or room < best_room):
                best, best_room = b, room
        if best < 0:
            bins.append([i])
            loads.append(size)
        else:
            bins[best].append(i)
            loads[best] += size
    return bins


def karmarkar_karp(sizes: Sequence[int], num_parts: int) -> list[list[int]]:
    """Multiway largest differencing: split the inputs into ``num_parts`` parts of near-equal sums.

    Every input starts as a partial solution holding it alone in one of ``num_parts`` parts. The two
    partial solutions with the largest spread (largest part sum minus smallest) are merged, the
    heaviest part of one joined with the lightest part of the other, until one solution is left.
    Parts come back heaviest first; a part may be empty when there are fewer inputs than parts.
    """
    assert num_parts >= 1
    heap: list[tuple[int, int, list[tuple[int, list[int]]]]] = []
    for i in _decreasing(sizes):
        parts = [(int(sizes[i]), [i])] + [(0, []) for _ in range(num_parts - 1)]
        heapq.heappush(heap, (-int(sizes[i]), len(heap), parts))
    counter = len(heap)
    while len(heap) > 1:
        _, _, a = heapq.heappop(heap)
        _, _, b = heapq.heappop(heap)
        a_sorted = sorted(a, key=lambda p: -p[0])
        b_sorted = sorted(b, key=lambda p: p[0])
        merged = [(sa + sb, ia + ib) for (sa, ia), (sb, ib) in zip(a_sorted, b_sorted, strict=True)]
        merged.sort(key=lambda p: -p[0])
        spread = merged[0][0] - merged[-1][0]
        heapq.heappush(heap, (-spread, counter, merged))
        counter += 1
    if not heap:
        return [[] for _ in range(num_parts)]
    parts = heap[0][2]
    return [sorted(members) for _, members in sorted(parts, key=lambda p: (-p[0], min(p[1], default=0)))]
