"""Pieces, key paths and state sources: the varlen metadata GPU kernels read, from a wave's layout.

A *piece* is a maximal run of consecutive packed positions of one segment owned by one rank. A token's
*predecessor* is the token before it on its request's path: the previous token of its segment, the
parent segment's last token for a segment's first token, none for a root segment's first token. A
piece's *key path* is every packed position its queries may attend: the segment's strict ancestors in
full, root first, then the segment's own tokens from its start up to the piece's last token. The
piece's queries are the last keys of its path, so a causal mask aligned bottom-right over (piece,
path) is the tree mask, and the keys just before the queries are the conv tail. A piece's *state
source* is the piece holding its first token's predecessor, whose final recurrent state it starts
from.

:func:`wave_pieces` computes the wave's pieces once; :func:`rank_kernel_fields` cuts one rank's
fields from them. Everything is numpy over whole arrays; the only Python loop runs over tree depths.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True, eq=False)
class WavePieces:
    """The wave's pieces in packed order: ``[start, end)`` packed positions, ``owner`` rank,
    ``segment``, ``source`` (the state-source piece, -1 for a zero state) and ``slot`` (the piece's
    index among its owner's pieces, in owned order)."""

    start: np.ndarray
    end: np.ndarray
    owner: np.ndarray
    segment: np.ndarray
    source: np.ndarray
    slot: np.ndarray

    @property
    def num_pieces(self) -> int:
        """Pieces of the wave."""
        return int(self.start.size)


def token_predecessors(
    segment_ids: np.ndarray, seg_parent: np.ndarray, seg_offset: np.ndarray, seg_length: np.ndarray
) -> np.ndarray:
    """Each packed token's predecessor on its path (a packed position), -1 at a root's first token."""
    pred = np.arange(segment_ids.size, dtype=np.int64) - 1
    first = seg_offset[segment_ids] == np.arange(segment_ids.size)
    parent = seg_parent[segment_ids[first]]
    pred[first] = np.where(parent >= 0, seg_offset[parent] + seg_length[parent] - 1, -1)
    return pred


def wave_pieces(
    segment_ids: np.ndarray,
    token_owner: np.ndarray,
    seg_parent: np.ndarray,
    seg_offset: np.ndarray,
    seg_length: np.ndarray,
) -> WavePieces:
    """Split the wave's packed tokens into pieces and name each piece's state source."""
    n = segment_ids.size
    new = np.ones(n, dtype=bool)
    new[1:] = (segment_ids[1:] != segment_ids[:-1]) | (token_owner[1:] != token_owner[:-1])
    start = np.flatnonzero(new).astype(np.int64)
    end = np.r_[start[1:], n].astype(np.int64)
    piece_of = np.cumsum(new) - 1
    first_pred = token_predecessors(segment_ids, seg_parent, seg_offset, seg_length)[start]
    owner = token_owner[start].astype(np.int64)
    by_owner = np.argsort(owner, kind="stable")
    slot = np.empty(start.size, dtype=np.int64)
    slot[by_owner] = np.arange(start.size) - np.searchsorted(owner[by_owner], owner[by_owner])
    return WavePieces(
        start=start,
        end=end,
        owner=owner,
        segment=segment_ids[start].astype(np.int64),
        source=np.where(first_pred >= 0, piece_of[np.maximum(first_pred, 0)], -1).astype(np.int64),
        slot=slot,
    )


def ancestor_table(seg_parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each segment's depth (0 for a root) and ``table[s, d]``, the ancestor of ``s`` at depth ``d``
    (``s`` itself at its own depth, -1 past it)."""
    num_segments = seg_parent.size
    depth = np.zeros(num_segments, dtype=np.int64)
    cursor = seg_parent.astype(np.int64)
    while (cursor >= 0).any():
        alive = cursor >= 0
        depth += alive
        cursor = np.where(alive, seg_parent[np.maximum(cursor, 0)], -1)
    table = np.full((num_segments, int(depth.max(initial=0)) + 1), -1, dtype=np.int64)
    rows, cursor = np.arange(num_segments), np.arange(num_segments)
    while (cursor >= 0).any():
        alive = cursor >= 0
        table[rows[alive], depth[cursor[alive]]] = cursor[alive]
        cursor = np.where(alive, seg_parent[np.maximum(cursor, 0)], -1)
    return depth, table


def key_paths(
    segment: np.ndarray,
    last: np.ndarray,
    seg_offset: np.ndarray,
    seg_length: np.ndarray,
    ancestors: tuple[np.ndarray, np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """The key paths of pieces of ``segment`` ending at packed position ``last`` (inclusive),
    concatenated, and their offsets (``pieces + 1``)."""
    depth, table = ancestors
    path = table[segment]  # (pieces, max depth + 1): ancestors root first, the segment, then -1
    lo = np.where(path >= 0, seg_offset[np.maximum(path, 0)], 0)
    hi = np.where(path >= 0, lo + seg_length[np.maximum(path, 0)], 0)
    own = (np.arange(path.shape[1])[None, :] == depth[segment][:, None]).nonzero()
    hi[own] = last + 1
    lengths = (hi - lo).ravel()
    run_start = np.r_[0, np.cumsum(lengths)[:-1]].astype(np.int64)
    index = np.repeat(lo.ravel() - run_start, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)
    cu = np.r_[0, np.cumsum((hi - lo).sum(axis=1))].astype(np.int64)
    return index, cu


def rank_kernel_fields(
    pieces: WavePieces,
    rank: int,
    seg_offset: np.ndarray,
    seg_length: np.ndarray,
    ancestors: tuple[np.ndarray, np.ndarray],
) -> dict[str, np.ndarray | int]:
    """One rank's kernel fields (see :class:`~cpplan.runtime.materialize.RankBatch`) as numpy arrays
    and ints."""
    mine = np.flatnonzero(pieces.owner == rank)
    lengths = pieces.end[mine] - pieces.start[mine]
    attn_k_index, k_cu = key_paths(
        pieces.segment[mine], pieces.end[mine] - 1, seg_offset, seg_length, ancestors
    )
    source = pieces.source[mine]
    has_source = source >= 0
    return {
        "piece_cu_seqlens": np.r_[0, np.cumsum(lengths)].astype(np.int32),
        "piece_segment": pieces.segment[mine],
        "attn_k_index": attn_k_index,
        "attn_k_cu_seqlens": k_cu.astype(np.int32),
        "max_seqlen_q": int(lengths.max(initial=0)),
        "max_seqlen_k": int(np.diff(k_cu).max(initial=0)),
        "state_source_rank": np.where(has_source, pieces.owner[np.maximum(source, 0)], -1),
        "state_source_piece": np.where(has_source, pieces.slot[np.maximum(source, 0)], -1),
    }


__all__ = [
    "WavePieces",
    "ancestor_table",
    "key_paths",
    "rank_kernel_fields",
    "token_predecessors",
    "wave_pieces",
]
