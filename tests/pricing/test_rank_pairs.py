"""Whole units split again two ranks at a time (:mod:`cpplan.pricing.rank_pairs`): every rank's block but
the last stays on a chunk boundary, every rank keeps tokens and fits its room, the compute seconds never
rise, and on two ranks the split found is the best aligned one."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from cpplan.pricing.rank_exchanges import GroupLoads, align_ranks, compute_s, pack_groups
from cpplan.pricing.rank_pairs import MAX_FREE_UNITS, repacked_pairs, searched_pairs

CHUNK = 128


def _units(seed: int, num_units: int, *, room: float = np.inf) -> tuple[GroupLoads, np.ndarray]:
    """``num_units`` units of random tokens with seconds in three barriers (attention growing with the
    square of the tokens) and bytes in two envelopes; every rank's room ``room`` bytes."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(40, 1500, num_units)
    barrier_s = np.stack([tokens * 1e-5, tokens**2 * 2e-9, np.full(num_units, 1e-3)], axis=1)
    barrier_s *= rng.uniform(0.8, 1.2, barrier_s.shape)
    loads = GroupLoads(
        barrier_s=barrier_s,
        bytes=np.stack([tokens * 1e4, tokens * 3e3 + 1e5], axis=1),
        room_bytes=np.full(2, room),
    )
    return loads, tokens


def _valid(loads: GroupLoads, tokens: np.ndarray, rank_of: np.ndarray, num_ranks: int) -> bool:
    """Whether every rank holds tokens and fits its room, and every rank's tokens but the last's are a
    whole number of chunks."""
    held = np.bincount(rank_of, weights=tokens, minlength=num_ranks)
    room = all((loads.bytes[rank_of == r].sum(axis=0) <= loads.room_bytes).all() for r in range(num_ranks))
    return bool((held > 0).all() and room and (held[:-1] % CHUNK == 0).all())


def _aligned_splits(loads: GroupLoads, tokens: np.ndarray) -> list[np.ndarray]:
    """Every valid assignment of the units to two ranks (rank 0 aligned, rank 1 the last)."""
    found = []
    for bits in itertools.product((0, 1), repeat=tokens.size):
        rank_of = np.array(bits, dtype=np.int64)
        if _valid(loads, tokens, rank_of, 2):
            found.append(rank_of)
    return found


@pytest.mark.parametrize("seed", range(6))
def test_two_ranks_reach_the_best_aligned_split(seed):
    """Ten units on two ranks, from the dearest aligned split: the pair is split again in every way, so
    the answer's compute seconds are the least of every aligned split, found by enumeration."""
    loads, tokens = _units(seed, 10)
    splits = _aligned_splits(loads, tokens)
    if len(splits) < 2:
        pytest.skip("fewer than two aligned splits")
    costs = [compute_s(loads, s, 2) for s in splits]
    start = splits[int(np.argmax(costs))]
    found = repacked_pairs(loads, tokens, start, 2, CHUNK)
    assert _valid(loads, tokens, found, 2)
    assert compute_s(loads, found, 2) == pytest.approx(min(costs), rel=1e-12)
    assert min(costs) < max(costs)


@pytest.mark.parametrize("seed, room", [(0, np.inf), (1, np.inf), (2, 1.2e8), (3, 1.2e8)])
def test_packing_stays_aligned_within_room_and_never_dearer(seed, room):
    """Forty units on four ranks (more than a pair splits in every way), from the aligned packing the
    exchanges find: the answer keeps every rank's block but the last on a chunk boundary, every rank
    holding tokens within its room, never costs more compute seconds, and is the same on a second call."""
    loads, tokens = _units(seed, 40, room=room)
    packed = pack_groups(loads, 4)
    assert packed is not None
    start = align_ranks(loads, tokens, packed, 4, CHUNK)
    assert start is not None and _valid(loads, tokens, start, 4)
    found = repacked_pairs(loads, tokens, start, 4, CHUNK)
    assert _valid(loads, tokens, found, 4)
    assert compute_s(loads, found, 4) <= compute_s(loads, start, 4)
    assert np.array_equal(found, repacked_pairs(loads, tokens, start, 4, CHUNK))
    assert MAX_FREE_UNITS < 40 // 2


@pytest.mark.parametrize("seed", [1, 3, 5])
def test_random_draws_split_what_the_lightest_units_cannot(seed):
    """Forty units on four ranks, from ``repacked_pairs``' answer (no split of any pair's lightest units
    lowers it): ``searched_pairs``, freeing units drawn at random, lowers the compute seconds, keeps
    every block but the last aligned and every rank within its room, and answers the same twice."""
    loads, tokens = _units(seed, 40)
    start = align_ranks(loads, tokens, pack_groups(loads, 4), 4, CHUNK)
    stuck = repacked_pairs(loads, tokens, start, 4, CHUNK)
    found = searched_pairs(loads, tokens, stuck, 4, CHUNK)
    assert _valid(loads, tokens, found, 4)
    assert compute_s(loads, found, 4) < compute_s(loads, stuck, 4)
    assert np.array_equal(found, searched_pairs(loads, tokens, stuck, 4, CHUNK))
