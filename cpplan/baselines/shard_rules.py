"""CP ownership rules of the baselines, mapped onto cpplan's 128-token chunks.

``even_tokens``: the packed sequence cut into CP contiguous shards of near-equal token counts (Ulysses
and ring attention as verl, axolotl and TRL shard a packed micro-batch).

``zigzag``: Megatron-LM's load-balanced causal split. Each sequence (a packed segment; without prefix
sharing a segment is one whole request) is cut into ``2 * cp`` near-equal pieces and rank ``r`` holds
pieces ``r`` and ``2 * cp - 1 - r``, so every rank gets one early (cheap) and one late (expensive) piece.
Megatron assigns tokens; cpplan's verifier and evaluator own whole 128-token chunks of the packed
sequence. The mapping: every token gets its zigzag rank; each chunk then goes to one of the ranks
zigzag gives tokens in that chunk, the one furthest behind its zigzag token share so far (error
diffusion; ties to the lower rank). A chunk inside one piece goes to that piece's rank, so for pieces
of 128 tokens or more (sequences of at least ``256 * cp`` tokens) only chunks straddling a piece
boundary move; for shorter sequences several pieces share a chunk and the split is coarser than
Megatron's, but every rank stays within about a chunk of its zigzag share. Megatron would also pad
each sequence to a multiple of ``2 * cp``; no padding is added here, so packed token counts stay
comparable.
"""

from __future__ import annotations

import numpy as np

from cpplan.pricing.layout import PackedLayout
from cpplan.pricing.ownership import ChunkStats, contiguous_split


def even_tokens(layout: PackedLayout, stats: ChunkStats, cp: int) -> np.ndarray:
    """Chunk owners: ``cp`` contiguous ranges balanced by token count."""
    return contiguous_split(stats.tokens.astype(np.float64), cp)


def zigzag_token_owner(seg_length: np.ndarray, cp: int) -> np.ndarray:
    """Per packed token, the rank Megatron's zigzag split gives it (segments laid out in order)."""
    num_pieces = 2 * cp
    piece_rank = np.array([j if j < cp else num_pieces - 1 - j for j in range(num_pieces)], dtype=np.int64)
    lengths = np.asarray(seg_length, dtype=np.int64)
    cuts = (lengths[:, None] * np.arange(num_pieces + 1, dtype=np.int64)[None, :]) // num_pieces
    piece_tokens = np.diff(cuts, axis=1)
    return np.repeat(np.tile(piece_rank, lengths.size), piece_tokens.ravel())


def zigzag(layout: PackedLayout, stats: ChunkStats, cp: int) -> np.ndarray:
    """Chunk owners from the zigzag token owners (each chunk to the rank furthest behind its share)."""
    if cp == 1:
        return np.zeros(stats.num_chunks, dtype=np.int64)
    token_owner = zigzag_token_owner(layout.seg_length, cp)
    chunk_of = np.arange(token_owner.size, dtype=np.int64) // stats.chunk_tokens
    votes = np.bincount(chunk_of * cp + token_owner, minlength=stats.num_chunks * cp)
    votes = votes.reshape(stats.num_chunks, cp)
    owner = np.empty(stats.num_chunks, dtype=np.int64)
    behind = np.zeros(cp, dtype=np.int64)
    for c, row in enumerate(votes.tolist()):
        behind += row
        rank = max((r for r in range(cp) if row[r]), key=lambda r: (behind[r], -r))
        owner[c] = rank
        behind[rank] -= int(stats.tokens[c])
    return owner
