"""The plan writer reads every rank's owned ranges in one pass over the chunks' owners: the ranges
:func:`~cpplan.pricing.ownership.owned_ranges` gives rank by rank."""

from __future__ import annotations

import numpy as np

from cpplan.plans.plan_writer import _ranges_by_rank
from cpplan.pricing.ownership import ChunkStats, owned_ranges


def test_every_ranks_ranges_in_one_pass_are_those_owned_ranges_gives():
    """On random chunk owners (runs of one rank, chunks owned by none, a last chunk shorter than the
    rest, ranks that own nothing), each rank's ranges read in one pass equal ``owned_ranges``' for it,
    as lists of Python integers."""
    rng = np.random.default_rng(3)
    for _ in range(300):
        cp, num_chunks, chunk = int(rng.integers(1, 9)), int(rng.integers(0, 40)), 128
        owner = np.repeat(rng.integers(-1, cp, num_chunks), rng.integers(1, 4, num_chunks))[:num_chunks]
        packed = max(0, num_chunks * chunk - int(rng.integers(0, chunk)))
        stats = ChunkStats(
            chunk_tokens=chunk,
            packed_tokens=packed,
            amounts=np.zeros((num_chunks, 1), np.int64),
            amount_prefix=np.zeros((num_chunks + 1, 1), np.int64),
            first_segment=np.zeros(num_chunks, np.int64),
            last_segment=np.zeros(num_chunks, np.int64),
        )
        ranges = _ranges_by_rank(owner, stats, cp)
        assert len(ranges) == cp
        for rank in range(cp):
            assert ranges[rank] == [list(r) for r in owned_ranges(owner, stats, rank)]
            assert all(type(x) is int for r in ranges[rank] for x in r)
