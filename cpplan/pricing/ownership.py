"""CP ownership: chunks of the packed sequence, their statistics, and their assignment to CP ranks."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from cpplan.pricing.layout import PackedLayout
from cpplan.spec.quantities import NUM_QUANTITIES, QUANTITY_INDEX

CHUNK_TOKENS = 128


@dataclass(frozen=True, kw_only=True, eq=False)
class ChunkStats:
    """Per-chunk sums over a packed layout; chunk c is tokens ``[c * chunk_tokens, ...)``.

    Computed in closed form per segment (no per-token arrays): the attention pairs of ``k`` tokens from
    position ``p`` are ``k * p + k * (k + 1) / 2``.
    """

    chunk_tokens: int
    packed_tokens: int
    tokens: np.ndarray
    grad_tokens: np.ndarray
    loss_tokens: np.ndarray
    attn_pairs: np.ndarray
    grad_attn_pairs: np.ndarray
    first_segment: np.ndarray
    last_segment: np.ndarray

    @property
    def num_chunks(self) -> int:
        """Number of chunks (the last may be shorter than ``chunk_tokens``)."""
        return int(self.tokens.size)

    def quantity_matrix(self) -> np.ndarray:
        """Per chunk, the additive quantities (segments counted as segments starting in the chunk)."""
        q = np.zeros((self.num_chunks, NUM_QUANTITIES))
        q[:, QUANTITY_INDEX["tokens"]] = self.tokens
        q[:, QUANTITY_INDEX["grad_tokens"]] = self.grad_tokens
        q[:, QUANTITY_INDEX["loss_tokens"]] = self.loss_tokens
        q[:, QUANTITY_INDEX["attn_pairs"]] = self.attn_pairs
        q[:, QUANTITY_INDEX["grad_attn_pairs"]] = self.grad_attn_pairs
        q[:, QUANTITY_INDEX["segments"]] = self.last_segment - self.first_segment + 1
        return q


def chunk_stats(layout: PackedLayout, chunk_tokens: int = CHUNK_TOKENS) -> ChunkStats:
    """Statistics of every chunk of ``layout``'s packed sequence."""
    total = layout.packed_tokens
    bounds = np.minimum(np.arange(0, total + chunk_tokens, chunk_tokens, dtype=np.int64), total)
    bounds = bounds[: int(np.searchsorted(bounds, total)) + 1]
    offsets = layout.seg_offset
    lengths = layout.seg_length
    pos = layout.seg_position
    pairs = lengths * pos + lengths * (lengths + 1) // 2
    grad = layout.seg_grad.astype(np.int64)
    loss = layout.seg_loss.astype(np.int64)

    def cumulative(per_segment: np.ndarray, per_token_partial) -> np.ndarray:
        before = np.concatenate([[0], np.cumsum(per_segment)])
        seg = np.clip(np.searchsorted(offsets, bounds, side="right") - 1, 0, lengths.size - 1)
        k = bounds - offsets[seg]
        return before[seg] + per_token_partial(seg, k)

    def pair_partial(seg, k):
        return k * pos[seg] + k * (k + 1) // 2

    cum_grad = cumulative(lengths * grad, lambda s, k: k * grad[s])
    cum_loss = cumulative(lengths * loss, lambda s, k: k * loss[s])
    cum_pairs = cumulative(pairs, pair_partial)
    cum_gpairs = cumulative(pairs * grad, lambda s, k: pair_partial(s, k) * grad[s])
    starts, ends = bounds[:-1], bounds[1:]
    first = np.searchsorted(offsets, starts, side="right") - 1
    last = np.searchsorted(offsets, ends - 1, side="right") - 1
    return ChunkStats(
        chunk_tokens=chunk_tokens,
        packed_tokens=total,
        tokens=np.diff(bounds),
        grad_tokens=np.diff(cum_grad),
        loss_tokens=np.diff(cum_loss),
        attn_pairs=np.diff(cum_pairs),
        grad_attn_pairs=np.diff(cum_gpairs),
        first_segment=first,
        last_segment=last,
    )


def rank_quantities(stats: ChunkStats, owner: np.ndarray, num_ranks: int) -> np.ndarray:
    """Local quantities per rank (shape ``(num_ranks, NUM_QUANTITIES)``) for a chunk-to-rank map."""
    owner = np.asarray(owner, dtype=np.int64)
    q = np.zeros((num_ranks, NUM_QUANTITIES))
    for name in ("tokens", "grad_tokens", "loss_tokens", "attn_pairs", "grad_attn_pairs"):
        q[:, QUANTITY_INDEX[name]] = np.bincount(owner, weights=getattr(stats, name), minlength=num_ranks)
    order = np.argsort(owner, kind="stable")
    sorted_owner = owner[order]
    first, last = stats.first_segment[order], stats.last_segment[order]
    spans = last - first + 1
    shared_edge = np.zeros(order.size, dtype=np.int64)
    if order.size > 1:
        same_rank = sorted_owner[1:] == sorted_owner[:-1]
        shared_edge[1:] = same_rank & (first[1:] == last[:-1])
    q[:, QUANTITY_INDEX["segments"]] = np.bincount(
        sorted_owner, weights=spans - shared_edge, minlength=num_ranks
    )
    q[:, QUANTITY_INDEX["remote_tokens"]] = stats.packed_tokens - q[:, QUANTITY_INDEX["tokens"]]
    return q


def contiguous_split(
    weights: np.ndarray,
    num_ranks: int,
    *,
    max_chunks: int | None = None,
    cap_weights: np.ndarray | None = None,
    cap: float | None = None,
) -> np.ndarray:
    """Chunk owners: ``num_ranks`` contiguous ranges minimizing the largest range of ``weights``.

    Optional limits on every range: at most ``max_chunks`` chunks, and a total of ``cap_weights`` at
    most ``cap``. Binary search on the bottleneck with a greedy feasibility check (each range grows as
    far as the bound and the limits allow), then the same greedy fills ranks in order. The limits must
    admit a cover of every chunk.
    """
    weights = np.asarray(weights, dtype=np.float64)
    num_chunks = weights.size
    if num_ranks == 1 or num_chunks == 0:
        return np.zeros(num_chunks, dtype=np.int64)
    prefix = np.concatenate([[0.0], np.cumsum(weights)]).tolist()  # bisect on lists: little call overhead
    capped = None
    if cap_weights is not None:
        assert cap is not None
        capped = np.concatenate([[0.0], np.cumsum(np.asarray(cap_weights, dtype=np.float64))]).tolist()
    longest = num_chunks if max_chunks is None else max_chunks

    def cuts(bound: float) -> list[int] | None:
        result, start = [], 0
        for _ in range(num_ranks):
            end = bisect.bisect_right(prefix, prefix[start] + bound * (1 + 1e-12)) - 1
            end = max(end, start + 1) if start < num_chunks else start
            end = min(end, start + longest, num_chunks)
            if capped is not None:
                end = min(end, bisect.bisect_right(capped, capped[start] + cap) - 1)
            result.append(end)
            start = end
        return result if start >= num_chunks else None

    lo, hi = float(weights.max()), float(prefix[-1])
    assert cuts(hi) is not None, "the range limits do not cover every chunk"
    for _ in range(60):
        if hi - lo <= 1e-9 * max(hi, 1.0):
            break
        mid = (lo + hi) / 2
        if cuts(mid) is None:
            lo = mid
        else:
            hi = mid
    ends = cuts(hi)
    assert ends is not None
    owner = np.empty(num_chunks, dtype=np.int64)
    start = 0
    for rank, end in enumerate(ends):
        owner[start:end] = rank
        start = end
    return owner


def owned_ranges(owner: np.ndarray, stats: ChunkStats, rank: int) -> list[tuple[int, int]]:
    """The packed-token ranges ``[start, end)`` a rank owns, merged where adjacent."""
    chunks = np.flatnonzero(np.asarray(owner) == rank)
    ranges: list[tuple[int, int]] = []
    for c in chunks.tolist():
        start = c * stats.chunk_tokens
        end = min(start + stats.chunk_tokens, stats.packed_tokens)
        if ranges and ranges[-1][1] == start:
            ranges[-1] = (ranges[-1][0], end)
        else:
            ranges.append((start, end))
    return ranges
