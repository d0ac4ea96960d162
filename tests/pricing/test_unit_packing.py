"""Whole units packed onto ranks from two starts (:mod:`cpplan.pricing.unit_packing`): the vector greedy
balances every barrier, the packing kept is aligned, within room and never dearer than the first
start's, and cheaper than it where the second start aligns better."""

from __future__ import annotations

import numpy as np
import pytest

from cpplan.pricing.rank_exchanges import GroupLoads, align_ranks, compute_s, pack_groups
from cpplan.pricing.rank_pairs import repacked_pairs, searched_pairs
from cpplan.pricing.unit_packing import packed_units, vector_greedy
from tests.pricing.test_rank_pairs import CHUNK, _units, _valid


def test_vector_greedy_balances_each_barrier():
    """Two attention-heavy and two token-heavy groups of equal seconds, alternating: placed by their
    total seconds alone, both attention-heavy groups share a rank (compute seconds 4); placed where the
    compute seconds (per barrier the slowest rank, summed) rise least, each rank takes one of each (2)."""
    loads = GroupLoads(
        barrier_s=np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]),
        bytes=np.zeros((4, 1)),
        room_bytes=np.array([1.0]),
    )
    rank_of = vector_greedy(loads, 2)
    assert compute_s(loads, rank_of, 2) == 2.0
    assert sorted(rank_of.tolist()) == [0, 0, 1, 1]


def test_vector_greedy_keeps_every_group_within_its_room():
    """A group too big for any rank's room leaves no packing; otherwise every rank stays within it."""
    loads, _ = _units(0, 40, room=1.2e8)
    rank_of = vector_greedy(loads, 4)
    assert rank_of is not None
    for r in range(4):
        assert (loads.bytes[rank_of == r].sum(axis=0) <= loads.room_bytes).all()
    too_big = GroupLoads(
        barrier_s=np.ones((2, 1)), bytes=np.array([[1.0], [3.0]]), room_bytes=np.array([2.0])
    )
    assert vector_greedy(too_big, 2) is None


@pytest.mark.parametrize("seed", [0, 3, 6])
def test_polished_packing_beats_one_start(seed):
    """Forty units on four ranks: the packing kept is aligned and within room, answers the same twice,
    and costs less than the one start of ``pack_groups`` aligned and polished the same way (both pair
    searches), since the vector greedy's start aligns cheaper here."""
    loads, tokens = _units(seed, 40)
    packed = pack_groups(loads, 4)
    found = packed_units(loads, tokens, packed, 4, CHUNK, polish=True)
    assert _valid(loads, tokens, found, 4)
    assert np.array_equal(found, packed_units(loads, tokens, packed, 4, CHUNK, polish=True))
    one = repacked_pairs(loads, tokens, align_ranks(loads, tokens, packed, 4, CHUNK), 4, CHUNK)
    one = searched_pairs(loads, tokens, one, 4, CHUNK)
    assert compute_s(loads, found, 4) < compute_s(loads, one, 4)


def test_without_polish_the_first_start_is_aligned_alone():
    """Without ``polish`` the answer is ``pack_groups``' packing aligned, nothing more (the fast path of
    every pricing)."""
    loads, tokens = _units(2, 40)
    packed = pack_groups(loads, 4)
    found = packed_units(loads, tokens, packed, 4, CHUNK, polish=False)
    assert np.array_equal(found, align_ranks(loads, tokens, packed, 4, CHUNK))
