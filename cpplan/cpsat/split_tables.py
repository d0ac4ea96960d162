"""The constants of one wave's ownership model: per-chunk amounts and per-boundary cut lengths.

A column of the ownership model (:mod:`~cpplan.cpsat.owned_model`) is a wave whose packed layout is
fixed: its chunks, their quantities and the segment tree are constants. Ownership is a contiguous,
rank-ordered split of those chunks (:mod:`~cpplan.cpsat.rank_split`), so every per-rank quantity is a
difference of two sums of per-chunk constants, and every term of the GDN hand-off is a sum of such
constants plus the length of the one segment each rank boundary may cut. This module computes those
constants from the layout, once per column, with numpy; nothing here knows about CP-SAT.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cpplan.pricing.head_parallel import tree_levels
from cpplan.pricing.ownership import ChunkStats
from cpplan.pricing.wave import WavePlan
from cpplan.spec.quantities import QUANTITY_INDEX


@dataclass(frozen=True, kw_only=True, eq=False)
class SplitTables:
    """Per chunk ``c`` (arrays of length ``num_chunks``) and per chunk boundary ``c`` (arrays of length
    ``num_chunks + 1``: boundary ``c`` is the start of chunk ``c``) of one packed wave.

    ``straddle_after[c]``: tokens at or after boundary ``c`` of prefix trees whose root starts before
    it; ``straddle_run[c]``: how many tokens from boundary ``c`` on belong to such trees without a break
    (up to the next root segment's start).

    Token classes per chunk: ``tokens``; ``root_tokens`` (of segments without a parent);
    ``leaf_tokens`` (of segments without children); ``root_leaf_tokens`` (both). ``continues[c]``: the
    segment cut by boundary ``c`` (the one chunk ``c - 1`` ends in and chunk ``c`` starts with), or -1.
    ``cut_after[c]`` / ``cut_before[c]``: that segment's tokens at or after / before boundary ``c``.
    """

    stats: ChunkStats
    tokens: np.ndarray
    root_tokens: np.ndarray
    leaf_tokens: np.ndarray
    root_leaf_tokens: np.ndarray
    continues: np.ndarray
    cut_after: np.ndarray
    cut_before: np.ndarray
    cut_is_root: np.ndarray
    cut_is_leaf: np.ndarray
    seg_first_chunk: np.ndarray
    seg_last_chunk: np.ndarray
    seg_parent: np.ndarray
    request_chains: tuple[np.ndarray, ...]
    longest_path_tokens: int
    straddle_after: np.ndarray
    straddle_run: np.ndarray
    tree_levels: int

    @property
    def num_chunks(self) -> int:
        """Chunks of the packed wave."""
        return self.stats.num_chunks


def split_tables(wave: WavePlan) -> SplitTables:
    """The constants of ``wave``'s layout (see :class:`SplitTables`)."""
    layout, stats = wave.layout, wave.stats
    size = stats.chunk_tokens
    offset, length, parent = layout.seg_offset, layout.seg_length, layout.seg_parent
    is_root = parent < 0
    has_child = np.zeros(layout.num_segments, dtype=bool)
    has_child[parent[parent >= 0]] = True
    is_leaf = ~has_child
    num_chunks = stats.num_chunks
    end = offset + length
    cut_boundary = np.arange(num_chunks + 1, dtype=np.int64) * size
    seg_at = np.searchsorted(offset, cut_boundary, side="right") - 1
    seg_at = np.clip(seg_at, 0, layout.num_segments - 1)
    cut = (cut_boundary > offset[seg_at]) & (cut_boundary < end[seg_at])
    continues = np.where(cut, seg_at, -1)
    safe = np.maximum(continues, 0)
    return SplitTables(
        stats=stats,
        tokens=stats.tokens.astype(np.int64),
        root_tokens=_class_tokens(offset, length, is_root, num_chunks, size),
        leaf_tokens=_class_tokens(offset, length, is_leaf, num_chunks, size),
        root_leaf_tokens=_class_tokens(offset, length, is_root & is_leaf, num_chunks, size),
        continues=continues,
        cut_after=np.where(cut, end[safe] - cut_boundary, 0),
        cut_before=np.where(cut, cut_boundary - offset[safe], 0),
        cut_is_root=cut & is_root[safe],
        cut_is_leaf=cut & is_leaf[safe],
        seg_first_chunk=offset // size,
        seg_last_chunk=(end - 1) // size,
        seg_parent=parent.astype(np.int64),
        request_chains=tuple(layout.chain(k) for k in range(layout.request_ids.size)),
        longest_path_tokens=max(int(length[layout.chain(k)].sum()) for k in range(layout.request_ids.size)),
        tree_levels=tree_levels(parent),
        **_straddles(offset, length, parent, cut_boundary),
    )


def _straddles(offset: np.ndarray, length: np.ndarray, parent: np.ndarray, bounds: np.ndarray) -> dict:
    """Per boundary, the tokens after it of trees rooted before it, and their unbroken run from it."""
    root = np.arange(parent.size)
    while (parent[root] >= 0).any():
        root = np.where(parent[root] >= 0, parent[root], root)
    packed = int(offset[-1] + length[-1])
    root_start = np.sort(np.repeat(offset[root], length))
    rooted_after = root_start.size - np.searchsorted(root_start, bounds, side="left")
    starts = np.sort(offset[parent < 0])
    nxt = np.searchsorted(starts, bounds, side="left")
    next_root = np.where(nxt < starts.size, starts[np.minimum(nxt, starts.size - 1)], packed)
    return {
        "straddle_after": np.maximum(packed - bounds - rooted_after, 0),
        "straddle_run": np.maximum(np.minimum(next_root, packed) - bounds, 0),
    }


def _class_tokens(
    offset: np.ndarray, length: np.ndarray, member: np.ndarray, num_chunks: int, size: int
) -> np.ndarray:
    """Per chunk, the tokens of the member segments (each segment's span cut at chunk boundaries)."""
    marks = np.zeros(num_chunks * size + 1, dtype=np.int64)
    np.add.at(marks, offset[member], 1)
    np.add.at(marks, (offset + length)[member], -1)
    return np.cumsum(marks[:-1]).reshape(num_chunks, size).sum(axis=1)


def chunk_matrix(stats: ChunkStats) -> np.ndarray:
    """Per chunk the additive quantities, with the segment column holding the chunk's pieces when the
    rank owns the chunk before it too (segments touched less the shared edge): shape (chunks, quantities).
    A rank's pieces are the sum over its chunks of this column plus one per shared edge at its start."""
    matrix = stats.amounts.astype(np.float64).copy()
    pieces = stats.last_segment - stats.first_segment + 1 - stats.shared_edges
    matrix[:, QUANTITY_INDEX["segments"]] = pieces
    matrix[:, QUANTITY_INDEX["remote_tokens"]] = 0.0
    return matrix
