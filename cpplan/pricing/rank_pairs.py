"""Whole units split again between two ranks at a time: the polish of a whole-request packing.

A packing of whole units onto ranks, laid out rank after rank, must end every rank's block but the last
on a chunk boundary. Exchanging one or two units at a time (:mod:`cpplan.pricing.rank_exchanges`) often
stops where no single exchange keeps the blocks aligned and lowers the wave's compute seconds, though
several together would. Here every pair of ranks, one of them the slowest at some barrier, has its
units split again between the two in every way: the :data:`MAX_FREE_UNITS` lightest units of the pair
(by predicted seconds; the others stay where they are), each split kept only where both ranks own
tokens, fit their memory room and, but for the last rank, end on a chunk boundary. The split of least
compute seconds (per barrier the slowest rank, summed) replaces the pair's where it is lower. Sweeps
over the pairs repeat while one improves, at most :data:`MAX_SWEEPS`. :func:`searched_pairs` then
frees units drawn at random instead of the lightest. Every step is deterministic.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import combinations

import numpy as np

from cpplan.pricing.rank_exchanges import GroupLoads

MAX_FREE_UNITS = 12
"""The most units of a pair split again in every way (``2**12`` splits). On the bench suite's 48
ShareGPT conversations at CP8, 10 units leave the wave 1.0% dearer than 12 do, 14 take twice as long
for the same seconds."""

MAX_SWEEPS = 8
"""The most sweeps over the pairs of ranks."""

SEARCH_ROUNDS = 4
"""Sweeps over the pairs of ranks :func:`searched_pairs` makes."""

SEARCH_SEED = 0
"""The seed of :func:`searched_pairs`' draws of free units."""

IMPROVEMENT = 1e-12
"""Seconds by which a split must lower the compute seconds to replace the pair's."""


def repacked_pairs(
    loads: GroupLoads, tokens: np.ndarray, rank_of: np.ndarray, num_ranks: int, chunk_tokens: int
) -> np.ndarray:
    """A copy of ``rank_of`` (each unit's rank, every rank but the last ending on a chunk boundary:
    ``tokens`` per unit) with units split again two ranks at a time (the module docstring), never of
    higher compute seconds and with every rank's block but the last still aligned."""
    rank_of = np.array(rank_of, dtype=np.int64)
    seconds = loads.barrier_s.sum(axis=1)
    for _ in range(MAX_SWEEPS):
        improved = False
        for a, b in combinations(range(num_ranks), 2):
            improved |= _split_again(loads, tokens, seconds, rank_of, (a, b), None, num_ranks, chunk_tokens)
        if not improved:
            break
    return rank_of


def searched_pairs(
    loads: GroupLoads,
    tokens: np.ndarray,
    rank_of: np.ndarray,
    num_ranks: int,
    chunk_tokens: int,
    *,
    num_rounds: int = SEARCH_ROUNDS,
    seed: int = SEARCH_SEED,
) -> np.ndarray:
    """A copy of ``rank_of`` improved as :func:`repacked_pairs` does, but with each pair's free units
    drawn at random (:data:`MAX_FREE_UNITS` of them, from a generator seeded ``seed``, so the result is
    deterministic) rather than its lightest: ``num_rounds`` sweeps over every pair of ranks. Where
    :func:`repacked_pairs` stops, no split of its lightest units helps; another draw often moves a
    heavier unit that does."""
    rank_of = np.array(rank_of, dtype=np.int64)
    seconds = loads.barrier_s.sum(axis=1)
    draws = np.random.default_rng(seed)
    for _ in range(num_rounds):
        for a, b in combinations(range(num_ranks), 2):
            units = np.flatnonzero((rank_of == a) | (rank_of == b))
            if units.size > MAX_FREE_UNITS:
                free = np.sort(draws.choice(units, MAX_FREE_UNITS, replace=False))
            else:
                free = units
            _split_again(loads, tokens, seconds, rank_of, (a, b), free, num_ranks, chunk_tokens)
    return rank_of


def _lightest(seconds: np.ndarray, rank_of: np.ndarray, pair: tuple[int, int]) -> np.ndarray:
    """The :data:`MAX_FREE_UNITS` units of ``pair`` of least predicted seconds."""
    units = np.flatnonzero((rank_of == pair[0]) | (rank_of == pair[1]))
    return units[np.argsort(seconds[units], kind="stable")[:MAX_FREE_UNITS]]


def _split_again(
    loads: GroupLoads,
    tokens: np.ndarray,
    seconds: np.ndarray,
    rank_of: np.ndarray,
    pair: tuple[int, int],
    free: np.ndarray | None,
    num_ranks: int,
    chunk_tokens: int,
) -> bool:
    """Split the ``free`` units of ``pair`` (``None``: its lightest) again, in place in ``rank_of``,
    where some split lowers the compute seconds; whether one did. A pair neither of which is the
    slowest at some barrier cannot lower it."""
    a, b = pair
    barrier_s = loads.barrier_s
    rank_s = np.zeros((num_ranks, barrier_s.shape[1]))
    np.add.at(rank_s, rank_of, barrier_s)
    slowest = set(np.argmax(rank_s, axis=0).tolist())
    units = np.flatnonzero((rank_of == a) | (rank_of == b))
    if not slowest & {a, b} or units.size < 2:
        return False
    free = _lightest(seconds, rank_of, pair) if free is None else free
    kept_a = units[(rank_of[units] == a) & ~np.isin(units, free)]
    on_a = _subsets(free.size)  # split k puts free unit j on rank a where on_a[k, j]
    others = np.delete(rank_s, [a, b], axis=0).max(axis=0, initial=0.0)
    load_a = on_a @ barrier_s[free] + barrier_s[kept_a].sum(axis=0)
    load_b = barrier_s[units].sum(axis=0) - load_a
    tokens_a = on_a @ tokens[free] + tokens[kept_a].sum()
    tokens_b = tokens[units].sum() - tokens_a
    bytes_a = on_a @ loads.bytes[free] + loads.bytes[kept_a].sum(axis=0)
    bytes_b = loads.bytes[units].sum(axis=0) - bytes_a
    allowed = (tokens_a > 0) & (tokens_b > 0)
    allowed &= (bytes_a <= loads.room_bytes).all(axis=1) & (bytes_b <= loads.room_bytes).all(axis=1)
    for rank, held in ((a, tokens_a), (b, tokens_b)):
        if rank != num_ranks - 1:
            allowed &= held % chunk_tokens == 0
    compute_s = np.where(allowed, np.maximum(np.maximum(load_a, load_b), others).sum(axis=1), np.inf)
    best = int(np.argmin(compute_s))
    now_s = float(np.maximum(np.maximum(rank_s[a], rank_s[b]), others).sum())
    if not compute_s[best] < now_s - IMPROVEMENT:
        return False
    rank_of[free] = np.where(on_a[best], a, b)
    return True


@lru_cache(maxsize=4)
def _subsets(size: int) -> np.ndarray:
    """Every subset of ``size`` units as a row of booleans, shape ``(2**size, size)``."""
    rows = ((np.arange(1 << size)[:, None] >> np.arange(size)[None, :]) & 1).astype(bool)
    rows.flags.writeable = False
    return rows
