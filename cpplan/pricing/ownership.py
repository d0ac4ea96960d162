"""CP ownership: chunks of the packed sequence, their statistics, and their assignment to CP ranks."""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, partial

import numpy as np

from cpplan.pricing.amounts import span_amounts
from cpplan.pricing.layout import PackedLayout
from cpplan.pricing.loss_positions import set_loss_prefix
from cpplan.spec.quantities import (
    COUNTS,
    NUM_QUANTITIES,
    QUANTITIES,
    QUANTITY_INDEX,
    SEGMENT_COLUMNS,
    check_rules,
)

CHUNK_TOKENS = 128


@dataclass(frozen=True, kw_only=True, eq=False)
class ChunkStats:
    """Per-chunk sums over a packed layout; chunk c is tokens ``[c * chunk_tokens, ...)``.

    ``amounts[c]`` holds every additive quantity summed over chunk c's tokens (other columns zero),
    computed in closed form per segment (:func:`~cpplan.pricing.amounts.span_amounts`), with no
    per-token arrays (with loss masks, the loss columns come from the layout's ``loss_spans``).
    ``first_segment`` / ``last_segment`` are the segments of each chunk's first and last token.
    ``amount_prefix``: cumulative :attr:`amounts` (int64, a zero row first), so a contiguous range's
    sums are exact differences.
    """

    chunk_tokens: int
    packed_tokens: int
    amounts: np.ndarray
    amount_prefix: np.ndarray
    first_segment: np.ndarray
    last_segment: np.ndarray

    @property
    def num_chunks(self) -> int:
        """Number of chunks (the last may be shorter than ``chunk_tokens``)."""
        return int(self.amounts.shape[0])

    @property
    def tokens(self) -> np.ndarray:
        """Tokens per chunk."""
        return self.amounts[:, QUANTITY_INDEX["tokens"]]

    @cached_property
    def shared_edges(self) -> np.ndarray:
        """Per chunk, 1 where its first segment is the one the chunk before it ends in (0 for chunk 0)."""
        shared = np.zeros(self.num_chunks, dtype=np.int64)
        shared[1:] = self.first_segment[1:] == self.last_segment[:-1]
        return shared

    @cached_property
    def piece_prefix(self) -> np.ndarray:
        """Cumulative pieces per chunk (segments it touches less a shared edge), a zero first."""
        pieces = self.last_segment - self.first_segment + 1 - self.shared_edges
        return np.concatenate([[0], np.cumsum(pieces)]).astype(np.int64)

    def quantity_matrix(self) -> np.ndarray:
        """Per chunk, the additive quantities plus, in each segment-count column, the segments the chunk
        touches (a rank's segments are at most the sum over its chunks)."""
        q = self.amounts.astype(np.float64)
        for quantity in QUANTITIES:
            if quantity.count == "segment":
                q[:, QUANTITY_INDEX[quantity.name]] = self.last_segment - self.first_segment + 1
        return q


def chunk_stats(layout: PackedLayout, chunk_tokens: int = CHUNK_TOKENS) -> ChunkStats:
    """Statistics of every chunk of ``layout``'s packed sequence: the amounts of whole segments before
    each chunk boundary plus those of the first ``k`` tokens of the segment the boundary cuts."""
    assert layout.num_segments > 0, "a packed wave holds at least one segment"
    total = layout.packed_tokens
    bounds = np.minimum(np.arange(0, total + chunk_tokens, chunk_tokens, dtype=np.int64), total)
    bounds = bounds[: int(np.searchsorted(bounds, total)) + 1]
    offsets, lengths, positions = layout.seg_offset, layout.seg_length, layout.seg_position
    flags = {"grad": layout.seg_grad, "loss": layout.seg_loss}
    whole = span_amounts(lengths, positions, flags)
    before = np.concatenate([np.zeros((1, NUM_QUANTITIES), np.int64), np.cumsum(whole, axis=0)])
    seg = np.searchsorted(offsets, bounds, side="right") - 1
    cut = {name: flag[seg] for name, flag in flags.items()}
    cumulative = before[seg] + span_amounts(bounds - offsets[seg], positions[seg], cut)
    if layout.loss_spans is not None:
        set_loss_prefix(cumulative, bounds, layout)
    return ChunkStats(
        chunk_tokens=chunk_tokens,
        packed_tokens=total,
        amounts=np.diff(cumulative, axis=0),
        amount_prefix=cumulative,  # row 0: the tokens before position 0, none
        first_segment=seg[:-1],
        last_segment=np.searchsorted(offsets, bounds[1:] - 1, side="right") - 1,
    )


def _summed(stats: ChunkStats, owner: np.ndarray, num_ranks: int, name: str) -> np.ndarray:
    return np.bincount(owner, weights=stats.amounts[:, QUANTITY_INDEX[name]], minlength=num_ranks)


def _segments_touched(stats: ChunkStats, owner: np.ndarray, num_ranks: int, name: str) -> np.ndarray:
    """Pieces each rank owns: maximal runs of one segment's tokens on the rank (each needs its own
    incoming GDN state, see :mod:`cpplan.pricing.handoff`). A rank's chunks in order, each chunk's
    segment span less the one it continues from the chunk just before it when the rank owns that one
    too; a rank owning two separate ranges of one segment (zigzag) holds two pieces of it."""
    order = np.argsort(owner, kind="stable")
    sorted_owner = owner[order]
    first, last = stats.first_segment[order], stats.last_segment[order]
    shared_edge = np.zeros(order.size, dtype=np.int64)
    if order.size > 1:
        adjacent = (sorted_owner[1:] == sorted_owner[:-1]) & (order[1:] == order[:-1] + 1)
        shared_edge[1:] = adjacent & (first[1:] == last[:-1])
    return np.bincount(sorted_owner, weights=last - first + 1 - shared_edge, minlength=num_ranks)


_RANK_RULES = {"token": _summed, "pair": _summed, "segment": _segments_touched}
check_rules("pricing.ownership.rank_quantities", (*_RANK_RULES, "remote"), COUNTS)


def rank_quantities(stats: ChunkStats, owner: np.ndarray, num_ranks: int) -> np.ndarray:
    """Local quantities per rank (shape ``(num_ranks, NUM_QUANTITIES)``) for a chunk-to-rank map; a
    ``remote`` count is the wave's packed tokens less the rank's own. A contiguous map in rank order
    (every planner's split) is summed from prefix sums, the same integers as the general rules."""
    owner = np.asarray(owner, dtype=np.int64)
    if owner.size and owner[0] >= 0 and owner[-1] < num_ranks and bool((np.diff(owner) >= 0).all()):
        return _contiguous_quantities(stats, owner, num_ranks)
    return general_quantities(stats, owner, num_ranks)


def general_quantities(stats: ChunkStats, owner: np.ndarray, num_ranks: int) -> np.ndarray:
    """:func:`rank_quantities` of any chunk-to-rank map, by the per-count rules (zigzag included)."""
    q = np.zeros((num_ranks, NUM_QUANTITIES))
    for quantity in QUANTITIES:
        if quantity.count != "remote":
            q[:, QUANTITY_INDEX[quantity.name]] = _RANK_RULES[quantity.count](
                stats, owner, num_ranks, quantity.name
            )
    for quantity in QUANTITIES:
        if quantity.count == "remote":
            q[:, QUANTITY_INDEX[quantity.name]] = stats.packed_tokens - q[:, QUANTITY_INDEX["tokens"]]
    return q


_ADDITIVE_COLUMNS = np.array([QUANTITY_INDEX[q.name] for q in QUANTITIES if q.count in ("token", "pair")])
_SEGMENT_COLUMNS = np.array(SEGMENT_COLUMNS)
_REMOTE_COLUMNS = np.array([QUANTITY_INDEX[q.name] for q in QUANTITIES if q.count == "remote"])
_TOKENS = QUANTITY_INDEX["tokens"]


def _contiguous_quantities(stats: ChunkStats, owner: np.ndarray, num_ranks: int) -> np.ndarray:
    """:func:`rank_quantities` of a non-decreasing chunk-to-rank map: :func:`range_quantities` of the
    one range each rank owns."""
    ends = np.searchsorted(owner, np.arange(1, num_ranks + 1))
    return range_quantities(stats, ends[None, :])[0]


def range_quantities(stats: ChunkStats, ends) -> np.ndarray:
    """Local quantities per rank of contiguous splits given by their ranges' ends: ``ends`` of shape
    ``(splits, ranks)`` (rank ``r`` owns chunks ``[ends[r - 1], ends[r])``, rank 0 from chunk 0, the last
    end the number of chunks) gives shape ``(splits, ranks, NUM_QUANTITIES)``. A range's sums are
    differences of prefix sums, its pieces its chunks' less the shared edges inside it (integers, so
    equal to the general rules' sums); every split at once."""
    ends = np.asarray(ends, dtype=np.int64)
    starts = np.zeros_like(ends)
    starts[:, 1:] = ends[:, :-1]
    prefix = stats.amount_prefix
    sums = prefix[ends] - prefix[starts]
    q = np.zeros(sums.shape)
    q[..., _ADDITIVE_COLUMNS] = sums[..., _ADDITIVE_COLUMNS]
    first_edge = np.where(ends > starts, stats.shared_edges[np.minimum(starts, stats.num_chunks - 1)], 0)
    pieces = stats.piece_prefix[ends] - stats.piece_prefix[starts] + first_edge
    q[..., _SEGMENT_COLUMNS] = pieces[..., None]
    q[..., _REMOTE_COLUMNS] = (stats.packed_tokens - q[..., _TOKENS])[..., None]
    return q


def contiguous_split(
    weights: np.ndarray,
    num_ranks: int,
    *,
    max_chunks: int | None = None,
    cap_weights: np.ndarray | None = None,
    cap: float | None = None,
) -> np.ndarray:
    """Chunk owners: ``num_ranks`` contiguous ranges minimizing the largest range of ``weights``
    (non-negative).

    Optional limits on every range: at most ``max_chunks`` chunks, and a total of ``cap_weights`` at
    most ``cap``. The least feasible bottleneck is found first (:func:`least_bottleneck`), then a greedy
    fills ranks in order, each range as far as the bottleneck and the limits allow. The limits must
    admit a cover of every chunk.
    """
    ends = range_ends(weights, num_ranks, max_chunks=max_chunks, cap_weights=cap_weights, cap=cap)
    return owner_of_ranges(ends)


def range_ends(
    weights: np.ndarray,
    num_ranks: int,
    *,
    max_chunks: int | None = None,
    cap_weights: np.ndarray | None = None,
    cap: float | None = None,
) -> list[int]:
    """Each rank's range end (exclusive, in chunks) of :func:`contiguous_split`'s split."""
    weights = np.asarray(weights, dtype=np.float64)
    num_chunks = weights.size
    if num_ranks == 1 or num_chunks == 0:
        return [num_chunks] * num_ranks
    prefix = np.zeros(num_chunks + 1)  # non-decreasing: searched by value
    np.cumsum(weights, out=prefix[1:])
    limits = _RangeLimits.of(num_chunks, max_chunks, cap_weights, cap)
    if limits.unlimited:
        bound, ends = _bid(prefix, float(weights.max()), num_ranks)
        if ends is not None:
            return ends
    else:
        bound = _bisected_bottleneck(prefix, float(weights.max()), num_ranks, limits)
    ends = _greedy_ends(prefix, bound, num_ranks, limits)
    assert ends is not None, "the range limits do not cover every chunk"
    return ends


def owner_of_ranges(ends: list[int]) -> np.ndarray:
    """The chunk owners of a contiguous split given by each rank's range end."""
    return np.repeat(np.arange(len(ends), dtype=np.int64), np.diff([0, *ends]))


@dataclass(frozen=True)
class _RangeLimits:
    """Limits on every range of a contiguous split: chunk count, and a cap on another weight's sum."""

    longest: int
    """The most chunks a range may hold."""
    capped: list[float] | None
    """Prefix sums of the capped weight (``None``: no cap)."""
    cap: float
    """The most a range's capped weight may sum to."""
    unlimited: bool
    """Whether neither limit can bind."""

    @classmethod
    def of(cls, num_chunks: int, max_chunks: int | None, cap_weights, cap: float | None) -> _RangeLimits:
        """The limits of a split of ``num_chunks`` chunks (``None``: no such limit)."""
        capped = None
        if cap_weights is not None:
            assert cap is not None
            capped = np.concatenate([[0.0], np.cumsum(np.asarray(cap_weights, dtype=np.float64))]).tolist()
        longest = num_chunks if max_chunks is None else max_chunks
        return cls(longest, capped, 0.0 if cap is None else cap, capped is None and longest >= num_chunks)


def _greedy_ends(prefix: np.ndarray, bound: float, num_ranks: int, limits: _RangeLimits) -> list[int] | None:
    """Each rank's range end when ranks fill in order (:func:`_fill`); ``None`` when they do not cover
    every chunk."""
    ends = _fill(prefix, bound, num_ranks, limits)
    return ends if ends[-1] >= prefix.size - 1 else None


def _fill(prefix: np.ndarray, bound: float, num_ranks: int, limits: _RangeLimits) -> list[int]:
    """Each rank's range end when ranks fill in order, each as far as ``bound`` and the limits allow
    (at least one chunk while any is left). ``prefix``: the weights' prefix sums (non-decreasing), a
    zero first."""
    num_chunks = prefix.size - 1
    reach = bound * (1 + 1e-12)
    result, start = [], 0
    for _ in range(num_ranks):
        end = int(prefix.searchsorted(prefix[start] + reach, side="right")) - 1
        end = max(end, start + 1) if start < num_chunks else start
        end = min(end, start + limits.longest, num_chunks)
        if limits.capped is not None:
            end = min(end, bisect.bisect_right(limits.capped, limits.capped[start] + limits.cap) - 1)
        result.append(end)
        start = end
    return result


MAX_BIDS = 64
"""Bidding steps of :func:`least_bottleneck` before it bisects the rest."""

LIST_SEARCH_CHUNKS = 100
"""Up to this many chunks per rank, :func:`least_bottleneck` searches the prefix sums as a list (a
bisection of Python floats), beyond as an array (``searchsorted``, cheaper than making the list when
each fill searches a small share of it); both give the same ends."""


def least_bottleneck(prefix: np.ndarray, heaviest: float, num_ranks: int) -> float:
    """The least bottleneck of a contiguous split without limits, exactly (a bidding search);
    ``prefix``: the weights' prefix sums, a zero first.

    Start from a lower bound, ``max(heaviest, total / ranks)`` (a range holds the heaviest chunk; some
    range holds at least the average). While the fill at bound ``B`` leaves chunks uncovered, no bound
    below ``B' = min over ranks of (its range plus the next chunk)`` fills differently (every range
    stops where it stopped), so the least feasible bound is at least ``B'``: move there. Each step
    lengthens a range; from a tight lower bound few remain, and past :data:`MAX_BIDS` the rest is
    bisected (exact to a relative 1e-9).
    """
    return _bid(prefix, heaviest, num_ranks)[0]


def _bid(prefix: np.ndarray, heaviest: float, num_ranks: int) -> tuple[float, list[int] | None]:
    """:func:`least_bottleneck`, with the ranges' ends its fill found (``None`` when it bisected): each
    step fills the ranks as :func:`_fill` does without limits, and bids on the way."""
    num_chunks = prefix.size - 1
    at, after = _searcher(prefix, num_ranks)
    bound = max(heaviest, at(num_chunks) / num_ranks)
    for _ in range(MAX_BIDS):
        reach = bound * (1 + 1e-12)
        ends, start, bid = [], 0, math.inf
        for _ in range(num_ranks):
            if start < num_chunks:
                base = at(start)
                end = int(after(base + reach)) - 1
                if end <= start:
                    end = start + 1
                if end < num_chunks:
                    step = at(end + 1) - base
                    if step < bid:
                        bid = step
                else:
                    end = num_chunks
                start = end
            ends.append(start)
        if start >= num_chunks:
            return bound, ends
        bound = bid
    limits = _RangeLimits(num_chunks, None, 0.0, True)
    return _bisected_bottleneck(prefix, bound, num_ranks, limits), None


def _searcher(
    prefix: np.ndarray, num_ranks: int
) -> tuple[Callable[[int], float], Callable[[float], int | np.intp]]:
    """Reading the non-decreasing ``prefix`` as Python floats, and the position after the last one at
    most a value: from a list (a bisection) for few chunks per rank, else from the array (making the
    list would cost more than the fills' searches save); the same numbers either way."""
    if prefix.size <= LIST_SEARCH_CHUNKS * num_ranks:
        values = prefix.tolist()
        return values.__getitem__, partial(bisect.bisect_right, values)
    return prefix.item, partial(np.ndarray.searchsorted, prefix, side="right")


def _bisected_bottleneck(prefix: np.ndarray, lower: float, num_ranks: int, limits: _RangeLimits) -> float:
    """The least feasible bottleneck at or above ``lower`` under range limits, by bisection to a
    relative 1e-9."""
    lo, hi = lower, prefix[-1]
    assert _greedy_ends(prefix, hi, num_ranks, limits) is not None, (
        "the range limits do not cover every chunk"
    )
    for _ in range(60):
        if hi - lo <= 1e-9 * max(hi, 1.0):
            break
        mid = (lo + hi) / 2
        if _greedy_ends(prefix, mid, num_ranks, limits) is None:
            lo = mid
        else:
            hi = mid
    return hi


def balanced_owner(
    weights: np.ndarray,
    num_ranks: int,
    *,
    room: MemoryRoom | None = None,
) -> np.ndarray | None:
    """Chunk owners balancing ``weights`` (non-negative) over ``num_ranks`` ranks with no range
    constraint: chunks heaviest first (the lower index on ties), each to the least-loaded rank (the
    lower rank on ties), so a rank's chunks need not be contiguous. With ``room``, each chunk goes to
    the least-loaded rank it leaves within the room; ``None`` when some chunk fits no rank."""
    weights = np.asarray(weights, dtype=np.float64)
    order = np.argsort(-weights, kind="stable").tolist()
    if room is not None:
        return _balanced_within_room(weights, order, num_ranks, room)
    owner = [0] * weights.size
    values = weights.tolist()
    heap = [(0.0, r) for r in range(num_ranks)]
    for chunk in order:
        load, rank = heap[0]
        owner[chunk] = rank
        heapq.heapreplace(heap, (load + values[chunk], rank))
    return np.array(owner, dtype=np.int64)


@dataclass(frozen=True, kw_only=True, eq=False)
class MemoryRoom:
    """What chunks add to a rank's memory envelopes and what the envelopes may hold: ``chunk_bytes``
    (per chunk and envelope, its segments counted as pieces of their own), ``joined_bytes`` (per chunk,
    what a rank saves when it also owns the chunk before it: the piece the two share), and
    ``room_bytes`` (per envelope)."""

    chunk_bytes: np.ndarray
    joined_bytes: np.ndarray
    room_bytes: np.ndarray


def _balanced_within_room(
    weights: np.ndarray, order: list[int], num_ranks: int, room: MemoryRoom
) -> np.ndarray | None:
    """:func:`balanced_owner` within ``room``: each chunk, in ``order``, to the least-loaded rank it
    leaves within the room, its bytes on each rank exact (less a shared piece where the rank owns a
    neighbouring chunk); ``None`` when it fits none."""
    num_chunks = weights.size
    owner = np.full(num_chunks, -1, dtype=np.int64)
    loads = np.zeros(num_ranks)
    sums = np.zeros((num_ranks, room.chunk_bytes.shape[1]))
    for chunk in order:
        added = np.repeat(room.chunk_bytes[chunk][None, :], num_ranks, axis=0)
        if chunk > 0 and owner[chunk - 1] >= 0:
            added[owner[chunk - 1]] -= room.joined_bytes[chunk]
        if chunk + 1 < num_chunks and owner[chunk + 1] >= 0:
            added[owner[chunk + 1]] -= room.joined_bytes[chunk + 1]
        fits = ((sums + added) <= room.room_bytes).all(axis=1)
        if not fits.any():
            return None
        rank = int(np.argmin(np.where(fits, loads, np.inf)))
        owner[chunk] = rank
        loads[rank] += weights[chunk]
        sums[rank] += added[rank]
    return owner


def owned_ranges(owner: np.ndarray, stats: ChunkStats, rank: int) -> list[tuple[int, int]]:
    """The packed-token ranges ``[start, end)`` a rank owns, merged where adjacent."""
    chunks = np.flatnonzero(np.asarray(owner) == rank)
    if chunks.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(chunks) != 1) + 1
    first = chunks[np.concatenate([[0], breaks])]
    last = chunks[np.concatenate([breaks - 1, [chunks.size - 1]])]
    starts = first * stats.chunk_tokens
    ends = np.minimum((last + 1) * stats.chunk_tokens, stats.packed_tokens)
    return list(zip(starts.tolist(), ends.tolist(), strict=True))
