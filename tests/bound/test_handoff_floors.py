"""The per-wave floors of :mod:`cpplan.bound.handoff_floors` against every version of small waves (each
sharing subset as the layout, each chunk-to-rank map as the ownership, each hand-off mode): never above
what a version pays beyond the bound's rank average, and each floor needed (its removal or a rounding
up makes a test fail)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from cpplan import Item, Request, Workload
from cpplan.bound import plan_bound
from cpplan.bound.handoff_floors import (
    common_nodes_floor,
    copy_seconds,
    head_parallel_floor_s,
    item_level_floor_s,
    level_floor_s,
    one_wave_floor_s,
    rows_floor_s,
    whole_requests_floor_s,
)
from cpplan.bound.node_floors import per_copy_amounts
from cpplan.bound.passing_floors import passing_floor_s
from cpplan.pricing.handoff import HEAD_PARALLEL, PARALLEL, ROUNDS, handoff_modes, layout_pieces
from cpplan.pricing.layout import path_counts
from cpplan.spec.quantities import QUANTITY_INDEX
from tests.bound.enumerated import optimum, tiny_problem, wave_versions

MODEL = "qwen3.6-35b-a3b"


def _workload(*sequences: list[int], item_of: tuple[int, ...] | None = None) -> Workload:
    item_of = item_of or tuple(range(len(sequences)))
    groups: dict[int, list[Request]] = {}
    for k, s in zip(item_of, sequences, strict=True):
        groups.setdefault(k, []).append(Request(tokens=s))
    return Workload(items=tuple(Item(id=f"i{k}", requests=tuple(g)) for k, g in sorted(groups.items())))


PREFIX = list(range(12))
BRANCHY = _workload([*PREFIX, 20, 21, 22, 23], [*PREFIX, 30, 31, 32, 33, 34, 35], [*PREFIX, 40, 41])
"""Three requests behind one 12-token prefix: two levels under full sharing, one with the prefix
copied thrice."""
DEEP = _workload(
    [*PREFIX, 20, 21, 22, 23, 50, 51],
    [*PREFIX, 20, 21, 22, 23, 60, 61, 62],
    [*PREFIX, 40, 41, 42],
)
"""A prefix tree three levels deep."""
APART = _workload(list(range(100, 116)), list(range(200, 214)), list(range(300, 312)))
"""Three unrelated requests: on two ranks without a crossing, one rank holds two of them."""
LOPSIDED = _workload(list(range(100, 116)), *[list(range(200 + 100 * k, 208 + 100 * k)) for k in range(3)])
"""Unrelated requests of 16, 8, 8 and 8 tokens: on two ranks without a crossing, the rank with the
16-token request is the slowest in attention, a rank with two 8-token ones the slowest in per-token
work, or one rank holds 24 tokens."""


def _extras(problem, average_s: float):
    """Per version of the wave of every item that fits: what it pays beyond ``average_s`` in each mode,
    its barriers' seconds, and whether some state crosses ranks."""
    overhead = problem.card.wave_overhead_s
    everything = tuple(range(problem.num_items))
    for wave in wave_versions(problem, everything):
        if not wave.fits(problem.memory_bytes):
            continue
        barriers = wave.cost_s - overhead - wave.handoff.seconds
        modes = handoff_modes(
            wave.layout, wave.owner, problem.chunk_tokens, problem.topology.cp, problem.card.handoff
        )
        crosses = layout_pieces(wave.layout.links, wave.owner, problem.chunk_tokens).num_crossings > 0
        yield {mode: barriers + h.seconds - average_s for mode, h in modes.items()}, barriers, crosses


def _average_s(problem) -> float:
    return math.fsum(_per_barrier(problem).tolist())


def _per_barrier(problem) -> np.ndarray:
    """The bound's rank average of the one-wave plan, per barrier."""
    bound = plan_bound(problem)
    assert bound.num_waves == 1
    return np.array([bound.terms_s[name] for name in problem.card.barrier_names])


@pytest.mark.parametrize(
    "workload", [BRANCHY, DEEP, APART, LOPSIDED], ids=["branchy", "deep", "apart", "lopsided"]
)
def test_each_mode_pays_at_least_its_floor(workload):
    """Over every version of a one-wave plan on two ranks: head-parallel pays at least its floor
    (latency, balanced rows, levels traded against copies) beyond the rank average; a version whose
    states cross pays at least the rounds and parallel floor (the passing floor); one whose states never
    cross has a busiest rank of at least the whole-request floor; every version pays at least the
    one-wave floor."""
    problem = tiny_problem(workload, cp=2, chunk_tokens=4, room=1.0, model=MODEL)
    average = _average_s(problem)
    requests = np.arange(problem.tree.num_requests)
    copy_s = copy_seconds(problem)
    heads = head_parallel_floor_s(problem, requests, copy_s)
    crossing = passing_floor_s(problem, requests, _per_barrier(problem))
    whole = whole_requests_floor_s(problem, requests)
    overall = one_wave_floor_s(problem, _per_barrier(problem))
    for extra, barriers, crosses in _extras(problem, average):
        assert extra[HEAD_PARALLEL] >= heads * (1 - 1e-12)
        if crosses:
            assert min(extra[ROUNDS], extra[PARALLEL]) >= crossing * (1 - 1e-12)
        else:
            assert barriers >= whole * (1 - 1e-12)
        assert min(extra.values()) >= overall * (1 - 1e-12)


@pytest.mark.parametrize("workload, within", [(BRANCHY, 1e-4), (DEEP, 0.2)], ids=["branchy", "deep"])
def test_head_parallel_floor_meets_the_cheapest_head_parallel_version(workload, within):
    """Where sharing leaves levels, the head-parallel floor is at most the cheapest head-parallel
    version's extra and close to it (exact on one branch point, where the copies it trades are what
    that version pays; within 20% on a deeper tree, whose chained copies it counts once): without the
    level term it falls below, rounded up it passes the cheapest."""
    problem = tiny_problem(workload, cp=2, chunk_tokens=4, room=1.0, model=MODEL)
    average = _average_s(problem)
    requests = np.arange(problem.tree.num_requests)
    heads = head_parallel_floor_s(problem, requests, copy_seconds(problem))
    cheapest = min(extra[HEAD_PARALLEL] for extra, _, _ in _extras(problem, average))
    assert heads <= cheapest * (1 + 1e-12)
    assert heads >= (1 - within) * cheapest
    levels = level_floor_s(problem, requests, copy_seconds(problem))
    assert levels > 0 and heads - levels < (1 - within) * cheapest


def test_level_floor_trades_levels_against_copies():
    """With copies free, the fewest levels (one: nothing shared) cost nothing; with copies dearer than a
    level, the floor is the levels of full sharing (two here) less one, times the level cost; in
    between, the cheaper of the two."""
    problem = tiny_problem(BRANCHY, cp=2, chunk_tokens=4, room=1.0, model=MODEL)
    requests = np.arange(problem.tree.num_requests)
    level_s = problem.card.handoff.head_level_s
    free = np.zeros(problem.tree.num_nodes)
    dear = np.full(problem.tree.num_nodes, 10 * level_s)
    assert level_floor_s(problem, requests, free) == 0.0
    assert level_floor_s(problem, requests, dear) == pytest.approx(level_s)
    some = np.full(problem.tree.num_nodes, 0.1 * level_s)  # the prefix copied twice more: 0.2 levels
    assert level_floor_s(problem, requests, some) == pytest.approx(0.2 * level_s)


def test_deep_tree_counts_each_level():
    """A three-level tree with dear copies pays two levels; unsharing only the deeper branch point (the
    cheaper copy) leaves one: the floor is the least over the choices."""
    problem = tiny_problem(DEEP, cp=2, chunk_tokens=4, room=1.0, model=MODEL)
    requests = np.arange(problem.tree.num_requests)
    level_s = problem.card.handoff.head_level_s
    dear = np.full(problem.tree.num_nodes, 10 * level_s)
    assert level_floor_s(problem, requests, dear) == pytest.approx(2 * level_s)
    tree = problem.tree
    branch = int(np.flatnonzero((tree.node_length == 4) & (tree.node_depth == 2))[0])
    cheap_branch = dear.copy()
    cheap_branch[branch] = 0.1 * level_s  # two children: one more copy
    assert level_floor_s(problem, requests, cheap_branch) == pytest.approx(1.1 * level_s)


def _roomy(problem):
    """``problem`` with 80 GiB per rank: memory no longer forbids any layout."""
    settings = dataclasses.replace(problem.settings, memory_bytes=80 * 2**30)
    return dataclasses.replace(problem, settings=settings)


def test_whole_requests_cannot_share_ranks_evenly():
    """Three unrelated requests on two ranks, none crossing: a rank holds two, so the busiest rank's
    floor is the cheapest pair of the three (above the costliest request alone and above the even
    split), what the best version without a crossing pays; where the budget lets no rank hold a pair,
    no version goes without a crossing and the floor is infinite."""
    tight = tiny_problem(APART, cp=2, chunk_tokens=4, room=0.99, model=MODEL)  # every version crosses
    problem = _roomy(tight)
    requests = np.arange(problem.tree.num_requests)
    whole = whole_requests_floor_s(problem, requests)
    average = _average_s(problem)
    lone = [whole_requests_floor_s(problem, np.array([r])) for r in requests.tolist()]
    assert whole > max(lone) and whole > average
    found = [barriers for _, barriers, crosses in _extras(problem, average) if not crosses]
    assert found and min(found) >= whole * (1 - 1e-12)
    assert min(found) <= whole * (1 + 1e-9)
    assert whole_requests_floor_s(tight, requests) == math.inf
    assert not [1 for _, _, crosses in _extras(tight, average) if not crosses]


def test_rows_floor_is_an_even_split():
    """Head-parallel's rows floor is its latency plus ``P (cp - 1) / cp²`` rows, what an even split
    moves (a rounding up by one row would exceed it)."""
    problem = tiny_problem(BRANCHY, cp=2, chunk_tokens=4, room=1.0, model=MODEL)
    seconds = problem.card.handoff
    assert rows_floor_s(seconds, 128.0, 2) == pytest.approx(
        seconds.head_collective_s + 32.0 * seconds.head_s_per_token
    )


@pytest.mark.parametrize(
    "workload, within", [(BRANCHY, 0.035), (DEEP, 0.04), (APART, 0.002)], ids=["branchy", "deep", "apart"]
)
def test_one_wave_bound_within_reach_of_the_optimum(workload, within):
    """On two ranks, the bound over all plans is at most the enumerated optimum and, with the per-wave
    floors, within ``within`` of it: 0.2% where memory forbids whole requests (the rows-only
    head-parallel floor and the fractional no-crossing floor left 3.4%); 3.5-4% behind a shared prefix,
    where the floor admits two requests whole on one rank in a packed order the enumeration (one order)
    does not try."""
    problem = tiny_problem(workload, cp=2, chunk_tokens=4, room=1.0, model=MODEL)
    best, _ = optimum(problem)
    bound = plan_bound(problem)
    assert bound.bound_s <= best
    assert bound.bound_s >= (1 - within) * best


def test_every_crossing_wave_pays_an_items_levels():
    """Where no request fits one rank whole, every wave of a plan crosses; a wave holds a whole item, so
    under head-parallel it pays at least one item's level floor (two requests behind a 300-token
    prompt here): the bound adds, per counted wave, the latency, the shortest request's rows and that
    floor, and stays at most the enumerated optimum (whose two waves run head-parallel, one level
    each)."""
    prompt = list(range(300))
    other = [5000 + t for t in range(300)]
    workload = _workload(
        [*prompt, *range(1000, 1150)],
        [*prompt, *range(2000, 2200)],
        [*other, *range(3000, 3140)],
        [*other, *range(4000, 4170)],
        item_of=(0, 0, 1, 1),
    )
    problem = tiny_problem(workload, cp=2, chunk_tokens=128, room=0.62, model=MODEL)
    bound = plan_bound(problem)
    levels = item_level_floor_s(problem, copy_seconds(problem))
    shortest = float(problem.request_tokens.min())
    each = rows_floor_s(problem.card.handoff, shortest, 2) + levels
    assert levels > 0 and bound.num_waves == 2
    assert bound.terms_s["handoff_or_imbalance"] == pytest.approx(2 * each, rel=1e-6)
    best, waves = optimum(problem)
    assert bound.bound_s <= best
    assert all(w.handoff.seconds >= each for w in waves)


FAN = _workload(*[[0, 1, 50 + k, 60 + k] for k in range(7)])
"""Seven requests behind one short common prefix: without crossings on two ranks, every rank that runs
the wave stores the prefix, and the busiest holds at least half of the tails."""


def test_common_prefix_is_on_every_rank_without_crossings():
    """Every version without a crossing (memory doubled, so copies fit) has a busiest rank of at least
    the whole-request floor, which the common-prefix term sets here: at least the base plus the
    prefix's weight plus half of the rest (:func:`common_nodes_floor`), above what the pair and
    private-tail terms give alone."""
    problem = tiny_problem(FAN, cp=2, chunk_tokens=4, room=1.0, model=MODEL)
    problem = dataclasses.replace(
        problem, settings=dataclasses.replace(problem.settings, memory_bytes=2 * problem.memory_bytes)
    )
    requests = np.arange(problem.tree.num_requests)
    whole = whole_requests_floor_s(problem, requests)
    barriers = np.asarray(problem.card.constants.barrier_coefficients, dtype=np.float64).sum(axis=0)
    remote_s = float(barriers[[QUANTITY_INDEX["remote_tokens"]]].sum())
    counts = path_counts(problem.tree, requests)
    weight = per_copy_amounts(problem) @ barriers - remote_s * problem.tree.node_length
    weight[counts == 0] = 0.0
    base = remote_s * float(problem.tree.node_length[counts > 0].sum())
    prefix = float(weight[1:][counts[1:] == requests.size].sum())
    common = prefix + (float(weight.sum()) - prefix) / 2
    assert prefix > 0 and common_nodes_floor(weight, counts, requests.size, 2) == pytest.approx(common)
    assert whole == pytest.approx(base + common, rel=1e-9)
    longest = max(float(weight[list(problem.tree.path(int(r)))].sum()) for r in requests)
    assert base + common > base + 2 * longest  # above any pair of whole paths
    no_crossing = [b for _, b, crosses in _extras(problem, _average_s(problem)) if not crosses]
    assert no_crossing and min(no_crossing) >= whole * (1 - 1e-12)


def test_whole_requests_floor_takes_each_barrier_slowest_rank():
    """On requests of 16, 8, 8 and 8 tokens on two ranks, the whole-request floor equals the cheapest
    version without a crossing (enumerated): per barrier, the least makespan of the requests' seconds
    packed whole (:func:`~cpplan.bound.handoff_floors.barrier_packing_floor_s`). The floors over the
    ranks' summed seconds (largest request, cheapest pair, mean) stay about a fifth below it."""
    problem = tiny_problem(LOPSIDED, cp=2, chunk_tokens=4, room=1.0, model=MODEL)
    whole = whole_requests_floor_s(problem, np.arange(problem.tree.num_requests))
    no_crossing = [b for _, b, crosses in _extras(problem, _average_s(problem)) if not crosses]
    assert min(no_crossing) >= whole * (1 - 1e-12)
    assert whole == pytest.approx(min(no_crossing), rel=1e-6)
