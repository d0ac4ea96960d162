"""The two-round tops (:mod:`cpplan.bound.round_tops`) and the shared segments' twice-run tokens
(:func:`cpplan.bound.passing_floors.segment_twice_s`) against every version of small waves: each mode's
floor never above what a crossing version pays in that mode beyond the bound's rank average, and above
the floor without the term."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cpplan import Item, Request, Workload
from cpplan.bound import passing_floors, plan_bound
from cpplan.bound.passing_floors import mode_floors_s, unshared_copies_s
from cpplan.bound.round_tops import least_tops
from cpplan.pricing.handoff import PARALLEL, ROUNDS, handoff_modes, layout_pieces
from cpplan.pricing.layout import path_counts
from tests.bound.enumerated import tiny_problem, wave_versions

MODEL = "qwen3.6-35b-a3b"
CHUNK = 2048


def _node(k: int, tokens: int = CHUNK) -> list[int]:
    """``tokens`` tokens no other node holds."""
    return list(range(20_000 * (k + 1), 20_000 * (k + 1) + tokens))


def _workload(*paths: list[int]) -> Workload:
    items = (Item(id=f"i{k}", requests=(Request(tokens=s),)) for k, s in enumerate(paths))
    return Workload(items=tuple(items))


TWO_TREES = _workload(_node(0) + _node(1), _node(0) + _node(2), _node(3) + _node(4), _node(3) + _node(5))
"""Two trees, each a 2,048-token root with two 2,048-token branches: fewer trees than three ranks, each
larger than a rank's share."""
DEEP = _workload(_node(0) + _node(1) + _node(2), _node(0) + _node(1) + _node(3), _node(0) + _node(4))
"""A root, below it a node two requests share with two leaves under it, and a third request's leaf."""


def _average(problem) -> np.ndarray:
    bound = plan_bound(problem)
    assert bound.num_waves == 1
    return np.array([bound.terms_s[name] for name in problem.card.barrier_names])


def _cheapest_crossing(problem, average: np.ndarray) -> dict[str, float]:
    """Per mode, the least any version of the one wave whose states cross pays beyond ``average``."""
    cp, chunk = problem.topology.cp, problem.chunk_tokens
    cheapest = {ROUNDS: math.inf, PARALLEL: math.inf}
    for wave in wave_versions(problem, tuple(range(problem.num_items))):
        if layout_pieces(wave.layout.links, wave.owner, chunk).num_crossings == 0:
            continue
        barriers = wave.cost_s - problem.card.wave_overhead_s - wave.handoff.seconds - float(average.sum())
        modes = handoff_modes(wave.layout, wave.owner, chunk, cp, problem.card.handoff)
        for mode in cheapest:
            cheapest[mode] = min(cheapest[mode], barriers + modes[mode].seconds)
    return cheapest


def test_least_tops_cut_inside_a_node_or_keep_it_whole():
    """A 4-token root with leaves of 6 and 3 tokens (13 in all): with hanging parts of at most ``B``
    tokens the top keeps 9 (``B = 2``: the root, 4 of the 6, 1 of the 3), 4 (``B = 6``: the root whole),
    3 (``B = 10``: cut inside the root) or none (``B = 13``); below 13 the root, the only node two
    requests pass, is the one to leave unshared."""
    workload = _workload(_node(0, 4) + _node(1, 6), _node(0, 4) + _node(2, 3))
    problem = tiny_problem(workload, cp=2, chunk_tokens=4, room=1.0, model=MODEL)
    requests = np.arange(problem.tree.num_requests)
    counts = path_counts(problem.tree, requests)
    copies = unshared_copies_s(problem, requests, counts)
    tops, unshared = least_tops(problem, counts, copies, np.array([2.0, 6.0, 10.0, 13.0]))
    assert tops.tolist() == [[9.0, 4.0, 3.0, 0.0]]
    root = int(np.flatnonzero(counts == 2)[-1])
    assert unshared[0, :3].tolist() == [copies[root]] * 3 and math.isinf(unshared[0, 3])


@pytest.mark.parametrize("workload", [TWO_TREES, DEEP], ids=["two-trees", "deep"])
def test_each_modes_floor_holds_against_every_crossing_version(workload):
    """On three ranks, every version of the wave whose states cross (each layout, each chunk owner)
    pays in rounds at least the rounds floor and in parallel at least the parallel floor, beyond the
    bound's rank average."""
    problem = tiny_problem(workload, cp=3, chunk_tokens=CHUNK, room=1.0, model=MODEL)
    average = _average(problem)
    rounds_s, parallel_s = mode_floors_s(problem, np.arange(problem.tree.num_requests), average)
    cheapest = _cheapest_crossing(problem, average)
    assert cheapest[ROUNDS] >= rounds_s * (1 - 1e-12)
    assert cheapest[PARALLEL] >= parallel_s * (1 - 1e-12)


def test_fewer_trees_than_ranks_lift_the_rounds_floor(monkeypatch):
    """Two trees larger than a rank's share on three ranks: one rank holds no root segment, so it waits
    for a tree's top (or a root is copied); the rounds floor with the tops lies above the floor
    without them."""
    problem = tiny_problem(TWO_TREES, cp=3, chunk_tokens=CHUNK, room=1.0, model=MODEL)
    average = _average(problem)
    requests = np.arange(problem.tree.num_requests)
    with_tops, _ = mode_floors_s(problem, requests, average)
    monkeypatch.setattr(
        passing_floors, "two_round_extra_s", lambda *args: np.full(np.shape(args[-1]), -math.inf)
    )
    without, _ = mode_floors_s(problem, requests, average)
    assert with_tops > without * (1 + 1e-6)


def test_a_shared_inner_node_runs_twice_in_parallel(monkeypatch):
    """A node two requests share with leaves below it is its own segment, every piece of it followed by
    another: shared, all its tokens run twice before the exchange (or it is copied), which lifts the
    parallel floor above the floor without the term."""
    problem = tiny_problem(DEEP, cp=3, chunk_tokens=CHUNK, room=1.0, model=MODEL)
    average = _average(problem)
    requests = np.arange(problem.tree.num_requests)
    _, with_segments = mode_floors_s(problem, requests, average)
    monkeypatch.setattr(passing_floors, "segment_twice_s", lambda *args: np.zeros(np.shape(args[-1])))
    _, without = mode_floors_s(problem, requests, average)
    assert with_segments > without * (1 + 1e-6)
