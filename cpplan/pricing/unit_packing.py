"""Whole units packed onto CP ranks with every rank's block but the last ending on a chunk boundary:
from one starting packing (every pricing) or two (``polish``: the ``[moves]`` repacking, which also
polishes each), aligned, the one of least compute seconds kept.

The seconds of a wave are per barrier the slowest rank, summed: a vector objective, while the
alignment (a rank's tokens a whole number of chunks) is a residue constraint. A packing balanced on
one start often aligns only at a high price, and which start aligns cheaply differs from wave to
wave. The starts, each aligned by :func:`~cpplan.pricing.rank_exchanges.align_ranks`: longest first to
the least-loaded rank (:func:`~cpplan.pricing.rank_exchanges.pack_groups`), and, with ``polish``,
longest first to the rank that raises the compute seconds least (:func:`vector_greedy`), balanced
further with no alignment by splitting pairs of ranks again. With ``polish`` each aligned packing is
then split again two ranks at a time, first over the lightest units of each pair, then over units
drawn at random (:mod:`cpplan.pricing.rank_pairs`). Every step is deterministic.
"""

from __future__ import annotations

import numpy as np

from cpplan.pricing.rank_exchanges import GroupLoads, align_ranks, compute_s, improved_packing
from cpplan.pricing.rank_pairs import repacked_pairs, searched_pairs


def packed_units(
    loads: GroupLoads,
    tokens: np.ndarray,
    packed: np.ndarray,
    num_ranks: int,
    chunk_tokens: int,
    *,
    polish: bool,
) -> np.ndarray | None:
    """Each unit's rank (``tokens`` per unit), every rank but the last holding a whole number of chunks,
    at the least compute seconds found (the module docstring) from ``packed`` (:func:`pack_groups`'
    packing) and, with ``polish``, the other start; ``None`` where no start aligns."""
    best, best_s = None, np.inf
    for start in _starts(loads, tokens, packed, num_ranks, polish=polish):
        rank_of = align_ranks(loads, tokens, start, num_ranks, chunk_tokens)
        if rank_of is None:
            continue
        if polish:
            rank_of = repacked_pairs(loads, tokens, rank_of, num_ranks, chunk_tokens)
            rank_of = searched_pairs(loads, tokens, rank_of, num_ranks, chunk_tokens)
        seconds = compute_s(loads, rank_of, num_ranks)
        if seconds < best_s:
            best, best_s = rank_of, seconds
    return best


def _starts(
    loads: GroupLoads, tokens: np.ndarray, packed: np.ndarray, num_ranks: int, *, polish: bool
) -> list[np.ndarray]:
    """The unaligned packings to align: ``packed``, and with ``polish`` :func:`vector_greedy`'s improved
    and split again pair by pair with no alignment."""
    starts = [packed]
    greedy = vector_greedy(loads, num_ranks) if polish else None
    if greedy is not None:
        greedy = improved_packing(loads, greedy, num_ranks)
        starts.append(repacked_pairs(loads, tokens, greedy, num_ranks, 1))
    return starts


def vector_greedy(loads: GroupLoads, num_ranks: int) -> np.ndarray | None:
    """Each group's rank: longest first (predicted seconds; the lower index on ties) to the rank within
    its room that leaves the compute seconds (per barrier the slowest rank, summed) least, then the
    rank of least seconds, then the lower rank; ``None`` when some group fits no rank."""
    seconds = loads.barrier_s.sum(axis=1)
    rank_of = np.full(loads.num_groups, -1, dtype=np.int64)
    rank_s = np.zeros((num_ranks, loads.barrier_s.shape[1]))
    rank_bytes = np.zeros((num_ranks, loads.bytes.shape[1]))
    ranks = np.arange(num_ranks)
    for g in np.argsort(-seconds, kind="stable").tolist():
        fits = ((rank_bytes + loads.bytes[g]) <= loads.room_bytes).all(axis=1)
        if not fits.any():
            return None
        after = np.maximum(rank_s + loads.barrier_s[g], _slowest_other(rank_s)).sum(axis=1)
        rank = int(np.lexsort((ranks, rank_s.sum(axis=1), np.where(fits, after, np.inf)))[0])
        rank_of[g] = rank
        rank_s[rank] += loads.barrier_s[g]
        rank_bytes[rank] += loads.bytes[g]
    return rank_of


def _slowest_other(rank_s: np.ndarray) -> np.ndarray:
    """Per rank and barrier, the most seconds of any other rank (zero at one rank)."""
    if rank_s.shape[0] == 1:
        return np.zeros_like(rank_s)
    order = np.argsort(-rank_s, axis=0, kind="stable")
    columns = np.arange(rank_s.shape[1])
    first, second = rank_s[order[0], columns], rank_s[order[1], columns]
    return np.where(np.arange(rank_s.shape[0])[:, None] == order[0][None, :], second, first)
