"""CP ownership rules of the baselines, mapped onto cpplan's 128-token chunks.

``even_tokens``: the packed sequence cut into CP contiguous shards of near-equal token counts (Ulysses
and ring attention as verl, axolotl and TRL shard a packed micro-batch).

``zigzag``: Megatron-LM's load-balanced causal split. Each sequence (a packed segment; without prefix
sharing a segment is one whole request) is cut into ``2 * cp`` near-equal pieces and rank ``r`` holds
pieces ``r`` and ``2 * cp - 1 - r``, so every rank gets one early (cheap) and one late (expensive) piece.
Megatron assigns tokens; cpplan's verifier and evaluator own whole 128-token chunks of the packed
sequence. The mapping: every token gets its zigzag rank, then each chunk goes to the rank zigzag gives
most of that chunk's tokens, ties to the rank holding the fewest tokens so far (then the lowest rank).
For pieces of 128 tokens or more (sequences of at least ``256 * cp`` tokens) this moves only the tokens
of chunks straddling a piece boundary; for shorter sequences several pieces share a chunk and the
mapping is coarser than Megatron's (which would also pad each sequence to a multiple of ``2 * cp``;
no padding is added here, so packed token counts stay comparable).
"""

from __future__ import annotations

import numpy as np

from ..layout import PackedLayout
from ..ownership import ChunkStats, contiguous_split


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
    """Chunk owners from the zigzag token owners (majority per chunk, ties to the lighter rank)."""
    if cp == 1:
        return np.zeros(stats.num_chunks, dtype=np.int64)
    token_owner = zigzag_token_owner(layout.seg_length, cp)
    chunk_of = np.arange(token_owner.size, dtype=np.int64) // stats.chunk_tokens
    votes = np.bincount(chunk_of * cp + token_owner, minlength=stats.num_chunks * cp)
    votes = votes.reshape(stats.num_chunks, cp)
    owner = np.empty(stats.num_chunks, dtype=np.int64)
    held = np.zeros(cp, dtype=np.int64)
    for c, row in enumerate(votes.tolist()):
        top = max(row)
        rank = min((r for r in range(cp) if row[r] == top), key=lambda r: (held[r], r))
        owner[c] = rank
        held[rank] += int(stats.tokens[c])
    return owner
