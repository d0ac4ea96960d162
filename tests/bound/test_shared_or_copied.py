"""The no-crossing floor of shared prefixes (:func:`~cpplan.bound.handoff_floors.shared_or_copied_floor_s`):
without a crossing every segment sits on its parent's rank, so a shared prefix holds all its requests
on one rank and an unshared one is stored once per child. Checked against every version of small waves
that crosses no rank (each tree of segments on one rank, under every sharing subset)."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from cpplan import Item, Request, Workload
from cpplan.bound.handoff_floors import shared_or_copied_floor_s, whole_requests_floor_s
from cpplan.bound.node_floors import per_copy_amounts, unsplit_rank_floor_s
from cpplan.pricing.handoff import layout_pieces
from cpplan.pricing.ownership import chunk_stats
from cpplan.pricing.wave import price_wave
from tests.bound.enumerated import tiny_problem, wave_layouts
from tests.bound.test_handoff_floors import _average_s

MODEL = "qwen3.6-35b-a3b"


def _groups(num_groups: int, common_tokens: int = 0) -> Workload:
    """``num_groups`` items of two requests each behind the item's own 4-token prompt (4-token tails),
    all behind ``common_tokens`` tokens every request shares."""
    common = list(range(900, 900 + common_tokens))
    items = []
    for g in range(num_groups):
        prompt = list(range(100 * g, 100 * g + 4))
        tails = [list(range(100 * g + 50 + 10 * t, 100 * g + 54 + 10 * t)) for t in range(2)]
        items.append(Item(id=f"g{g}", requests=tuple(Request(tokens=common + prompt + t) for t in tails)))
    return Workload(items=tuple(items))


def _roomy_problem(workload: Workload):
    """``workload`` on two ranks, 4-token chunks, four times the memory of its full-sharing wave (so every
    layout fits)."""
    problem = tiny_problem(workload, cp=2, chunk_tokens=4, room=1.0, model=MODEL)
    settings = dataclasses.replace(problem.settings, memory_bytes=4 * problem.memory_bytes)
    return dataclasses.replace(problem, settings=settings)


def no_crossing_versions(problem, items: tuple[int, ...]):
    """Every version of the wave of ``items`` whose states cross no rank: each subset of its sharing
    decisions as the layout, each tree of segments (every node one chunk here) on one rank."""
    for layout in wave_layouts(problem, items):
        parent = np.asarray(layout.seg_parent)
        root = np.arange(layout.num_segments)
        for s in range(layout.num_segments):
            while parent[root[s]] >= 0:
                root[s] = parent[root[s]]
        starts = np.arange(chunk_stats(layout, problem.chunk_tokens).num_chunks) * problem.chunk_tokens
        segment = np.searchsorted(np.asarray(layout.seg_offset), starts, side="right") - 1
        roots = np.unique(root).tolist()
        for ranks in itertools.product(range(problem.topology.cp), repeat=len(roots)):
            rank_of = dict(zip(roots, ranks, strict=True))
            owner = np.array([rank_of[int(root[s])] for s in segment], dtype=np.int64)
            yield price_wave(problem, items, layout, "enumerated", owner=owner)


def _floors(problem) -> tuple[float, float, list[float]]:
    """The new floor, the larger of the earlier whole-request floors, and every no-crossing version's
    busiest-rank seconds (its barriers' seconds)."""
    requests = np.arange(problem.tree.num_requests)
    barriers = np.asarray(problem.card.constants.barrier_coefficients, dtype=np.float64).sum(axis=0)
    new = shared_or_copied_floor_s(problem, requests, _average_s(problem))
    old = max(
        whole_requests_floor_s(problem, requests),
        unsplit_rank_floor_s(problem, per_copy_amounts(problem) @ barriers),
    )
    found = []
    for wave in no_crossing_versions(problem, tuple(range(problem.num_items))):
        assert layout_pieces(wave.layout.links, wave.owner, problem.chunk_tokens).num_crossings == 0
        found.append(wave.cost_s - problem.card.wave_overhead_s - wave.handoff.seconds)
    return new, old, found


def test_groups_sit_whole_on_ranks_without_crossings():
    """Three prompt groups on two ranks: without a crossing each shared prompt holds its group on one
    rank (unshared, it is copied per request), so a rank holds two groups; the floor is exactly the
    cheapest version without a crossing, above the request-level floors (which let the six requests
    spread evenly)."""
    new, old, found = _floors(_roomy_problem(_groups(3)))
    assert min(found) >= new * (1 - 1e-12)
    assert min(found) <= new * (1 + 1e-6)
    assert new > old * (1 + 0.05)


def test_a_common_prefix_is_shared_on_one_rank_or_copied():
    """Behind a prefix every request shares: shared, it holds the whole wave on one rank; unshared, it is
    stored per child and the groups below sit whole on ranks. Every version without a crossing costs
    at least the floor, which is above the request-level floors."""
    new, old, found = _floors(_roomy_problem(_groups(3, common_tokens=4)))
    assert min(found) >= new * (1 - 1e-12)
    assert new > old * (1 + 0.05)


def test_a_long_common_prefix_keeps_the_wave_on_one_rank():
    """Behind a 40-token prefix every request shares, copying it per group costs more than running the
    whole wave on one rank with the prefix shared: the floor is that version's price exactly (it fails
    when the shared case is left out: the floor then exceeds the cheapest version)."""
    new, old, found = _floors(_roomy_problem(_groups(3, common_tokens=40)))
    assert min(found) >= new * (1 - 1e-12)
    assert min(found) <= new * (1 + 1e-6)
    assert new > old * (1 + 0.05)


HEAVY, LIGHT = list(range(10, 22)), list(range(40, 44))
UNEVEN = Workload(
    items=tuple(
        Item(id=f"i{k}", requests=(Request(tokens=[0, 1, 2, 3, *prompt, *range(50 + 10 * k, 54 + 10 * k)]),))
        for k, prompt in enumerate([HEAVY, HEAVY, LIGHT, LIGHT])
    )
)
"""Two groups behind a common 4-token prefix, a heavy one (a 12-token prompt) and a light one (a
4-token prompt), each of two requests with 4-token tails: as many groups as ranks, every node a
chunk."""


def test_as_many_groups_as_ranks_still_sit_whole_per_barrier():
    """Two uneven groups on two ranks: without a crossing, each group whole on a rank (or a prefix
    copied, or the wave on one rank), so per barrier the slowest rank holds at least the heavier group.
    Every version without a crossing costs at least the floor, which is well above the rank average
    (what the floor was with no more groups than ranks)."""
    problem = _roomy_problem(UNEVEN)
    new, _, found = _floors(problem)
    assert min(found) >= new * (1 - 1e-12)
    assert new > _average_s(problem) * (1 + 0.2)


def _odd_groups(num_groups: int, prompt_tokens: int) -> Workload:
    """``num_groups`` items of two requests behind the item's own ``prompt_tokens``-token prompt (3-token
    tails), all behind a 4-token common prefix: on 4-token chunks no group's tree ends on a chunk
    boundary."""
    common = list(range(900, 904))
    items = []
    for g in range(num_groups):
        prompt = list(range(100 * g, 100 * g + prompt_tokens))
        tails = [list(range(100 * g + 50 + 10 * t, 100 * g + 53 + 10 * t)) for t in range(2)]
        items.append(Item(id=f"g{g}", requests=tuple(Request(tokens=common + prompt + t) for t in tails)))
    return Workload(items=tuple(items))


@pytest.mark.parametrize("num_groups, prompt_tokens", [(2, 5), (4, 3)])
def test_groups_whole_on_ranks_keep_their_chunks_aligned(num_groups, prompt_tokens, monkeypatch):
    """Prompt groups whose trees end off chunk boundaries, behind a common prefix, on two ranks: every
    version without a crossing costs at least the floor, and the floor lies above the same floor
    without the chunk alignment of whole groups (a rank holding whole groups but not a whole number of
    chunks needs a crossing), which the packings of groups alone would allow."""
    from cpplan.bound import handoff_floors

    problem = _roomy_problem(_odd_groups(num_groups, prompt_tokens))
    requests = np.arange(problem.tree.num_requests)
    new = shared_or_copied_floor_s(problem, requests, _average_s(problem))
    found = [
        wave.cost_s - problem.card.wave_overhead_s - wave.handoff.seconds
        for wave in no_crossing_versions(problem, tuple(range(problem.num_items)))
        if layout_pieces(wave.layout.links, wave.owner, problem.chunk_tokens).num_crossings == 0
    ]
    assert min(found) >= new * (1 - 1e-12)
    monkeypatch.setattr(handoff_floors, "_aligned_units_s", lambda *args: 0.0)
    assert new > shared_or_copied_floor_s(problem, requests, _average_s(problem)) * (1 + 0.02)


def test_aligned_units_floor_is_the_least_aligned_assignment():
    """Six units on three ranks: the least compute seconds over the set partitions equals the least
    over every assignment of units to ranks (3^6) that leaves at most one rank off a chunk boundary, and
    is above the least over all assignments (alignment binds)."""
    from cpplan.bound.aligned_units import aligned_units_floor_s

    rng = np.random.default_rng(4)
    unit_s = rng.uniform(0.1, 1.0, (6, 3))
    tokens = rng.integers(100, 900, 6)
    common_s, base_s = np.array([0.05, 0.02, 0.01]), np.array([0.01, 0.01, 0.0])
    best_aligned = best = np.inf
    for ranks in itertools.product(range(3), repeat=6):
        ranks = np.array(ranks)
        held = np.bincount(ranks, minlength=3)
        load = np.stack([base_s + (unit_s[ranks == r] + common_s).sum(axis=0) for r in range(3)])
        seconds = float(load.max(axis=0).sum())
        rank_tokens = np.bincount(ranks, weights=tokens + 7, minlength=3)
        best = min(best, seconds)
        if ((rank_tokens % 64 != 0) & (held > 0)).sum() <= 1:
            best_aligned = min(best_aligned, seconds)
    found = aligned_units_floor_s(unit_s, tokens, common_s, 7, base_s, 3, 64)
    assert found == pytest.approx(best_aligned, rel=1e-12)
    assert best_aligned > best
