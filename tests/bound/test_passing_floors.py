"""The rounds and parallel floor of :mod:`cpplan.bound.passing_floors` against every version of small
waves (each sharing subset as the layout, each chunk-to-rank map as the ownership): never above what a
version whose states cross pays beyond the bound's rank average in either mode, and above the one round
and one state it replaces where a request is longer than the ranks' average share."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cpplan import Item, Request, Topology, Workload
from cpplan.api import build_problem
from cpplan.bench.held_out import grpo_step
from cpplan.bound import passing_floors, plan_bound
from cpplan.bound.handoff_floors import crossing_floor_s
from cpplan.bound.node_floors import per_copy_amounts
from cpplan.bound.passing_floors import (
    imbalance_s,
    passing_floor_s,
    shared_prefix_s,
    sliding_wait_tokens,
    twice_run_tokens,
)
from cpplan.pricing.handoff import PARALLEL, ROUNDS, handoff_modes, layout_pieces
from cpplan.pricing.head_parallel import owned_tokens
from cpplan.pricing.layout import path_counts
from cpplan.spec.quantities import QUANTITY_INDEX
from tests.bound.enumerated import tiny_problem, wave_versions

MODEL = "qwen3.6-35b-a3b"


def _workload(*sequences: list[int]) -> Workload:
    items = (Item(id=f"i{k}", requests=(Request(tokens=s),)) for k, s in enumerate(sequences))
    return Workload(items=tuple(items))


LONG = _workload(list(range(24)), list(range(100, 104)), list(range(200, 204)))
"""A request of 24 tokens beside two of 4: on two ranks, longer than a rank's even share (16)."""
SHARED_LONG = _workload([*range(8), *range(40, 56)], [*range(8), 60, 61, 62, 63])
"""Two requests behind an 8-token prefix, one running 16 tokens beyond it."""


def _roomy(problem):
    """``problem`` with twice its budget: every version of its one wave fits (at ``room=1.0`` the
    budget is the peak of the default version, which crosses no rank where whole requests balance)."""
    settings = dataclasses.replace(problem.settings, memory_bytes=2 * problem.memory_bytes)
    return dataclasses.replace(problem, settings=settings)


def _average(problem) -> np.ndarray:
    """The bound's rank average of the one-wave plan, per barrier."""
    bound = plan_bound(problem)
    assert bound.num_waves == 1
    return np.array([bound.terms_s[name] for name in problem.card.barrier_names])


def _crossing_extras(problem, average: np.ndarray):
    """Per version of the one wave that fits and whose states cross: what it pays beyond ``average`` in
    rounds and in parallel, the smaller."""
    overhead = problem.card.wave_overhead_s
    for wave in wave_versions(problem, tuple(range(problem.num_items))):
        if not wave.fits(problem.memory_bytes):
            continue
        cp, chunk = problem.topology.cp, problem.chunk_tokens
        if layout_pieces(wave.layout.links, wave.owner, chunk).num_crossings == 0:
            continue
        barriers = wave.cost_s - overhead - wave.handoff.seconds
        modes = handoff_modes(wave.layout, wave.owner, chunk, cp, problem.card.handoff)
        yield barriers - float(average.sum()) + min(modes[ROUNDS].seconds, modes[PARALLEL].seconds)


SCALE = 256
LONG_BESIDE_SHORT = _workload(
    list(range(48 * SCALE)), *(list(range(k * 10**5, k * 10**5 + 8 * SCALE)) for k in (1, 2))
)
"""A 12,288-token request beside two of 2,048: on three ranks longer than any rank's tokens."""


def _crossing_versions(problem):
    """Every version of the one wave whose states cross: the wave, its hand-off in every mode and its
    busiest rank's owned tokens."""
    chunk, cp = problem.chunk_tokens, problem.topology.cp
    for wave in wave_versions(problem, tuple(range(problem.num_items))):
        if layout_pieces(wave.layout.links, wave.owner, chunk).num_crossings == 0:
            continue
        modes = handoff_modes(wave.layout, wave.owner, chunk, cp, problem.card.handoff)
        yield wave, modes, float(owned_tokens(wave.owner, chunk, int(wave.layout.packed_tokens), cp).max())


@pytest.mark.parametrize(
    "workload, cp", [(LONG, 2), (SHARED_LONG, 2), (LONG, 3)], ids=["long-cp2", "shared-cp2", "long-cp3"]
)
def test_every_crossing_version_pays_at_least_the_floor(workload, cp):
    """Every version of the wave whose states cross pays, beyond the bound's average, at least the
    passing floor in rounds and in parallel; the floor lies above one round and one state (the longest
    request runs on two ranks in turn, its tail waits) and within 2% of the cheapest such version."""
    problem = _roomy(tiny_problem(workload, cp=cp, chunk_tokens=4, room=1.0, model=MODEL))
    average = _average(problem)
    requests = np.arange(problem.tree.num_requests)
    floor = passing_floor_s(problem, requests, average)
    extras = list(_crossing_extras(problem, average))
    assert extras
    cheapest = min(extras)
    assert cheapest >= floor * (1 - 1e-12)
    assert floor > crossing_floor_s(problem.card.handoff) * (1 + 1e-6)
    assert floor >= 0.98 * cheapest


def test_without_an_average_only_one_round_and_one_state_remain():
    """Runs and waits fall as the busiest rank grows, and only the imbalance grows with it: without the
    rank average (no imbalance counted) a busiest rank holding the longest request whole leaves one
    round and one state, the floor it replaces."""
    problem = tiny_problem(LONG, cp=2, chunk_tokens=4, room=1.0, model=MODEL)
    requests = np.arange(problem.tree.num_requests)
    base = crossing_floor_s(problem.card.handoff)
    assert passing_floor_s(problem, requests, None) == pytest.approx(base, rel=1e-12)
    assert passing_floor_s(problem, requests, _average(problem)) > base * (1 + 1e-6)


def test_twice_run_tokens_are_the_middle_positions():
    """A token runs twice before the parallel exchange when it sits at a position ``p`` with ``M <= p <
    L - M``: for a 24-token request and ``M = 6``, positions 6 to 17 (12 tokens), none at ``M = 12``."""
    problem = tiny_problem(LONG, cp=2, chunk_tokens=4, room=1.0, model=MODEL)
    requests = np.arange(problem.tree.num_requests)
    counts = path_counts(problem.tree, requests)
    twice = twice_run_tokens(problem, requests, counts, np.array([6.0, 12.0]))
    assert twice.tolist() == [12.0, 0.0]


def test_imbalance_is_the_busiest_ranks_tokens_over_the_average():
    """The busiest rank's ``M`` tokens cost at least the least per-token seconds each, per barrier, less
    the remote tokens it does not hold: zero at the average (or below it), growing with ``M``."""
    problem = tiny_problem(LONG, cp=2, chunk_tokens=4, room=1.0, model=MODEL)
    requests = np.arange(problem.tree.num_requests)
    counts = path_counts(problem.tree, requests)
    average = _average(problem)
    found = imbalance_s(problem, counts, 32.0, average, np.array([8.0, 16.0, 24.0, 32.0]))
    assert found[0] == 0.0
    assert (np.diff(found[1:]) > 0).all()
    assert imbalance_s(problem, counts, 32.0, None, np.array([32.0])).tolist() == [0.0]


@st.composite
def _waves(draw):
    """Two or three unrelated or prefix-sharing requests of 4 to 20 tokens, on two ranks."""
    prefix = list(range(draw(st.sampled_from([0, 4, 8]))))
    tails = draw(st.lists(st.integers(1, 4), min_size=2, max_size=3))
    sequences = [prefix + list(range(100 * (k + 1), 100 * (k + 1) + 4 * n)) for k, n in enumerate(tails)]
    return _workload(*sequences)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_waves())
def test_floor_never_above_a_crossing_version(workload):
    """On random small waves on two ranks, no version whose states cross pays less than the floor beyond
    the bound's average."""
    problem = tiny_problem(workload, cp=2, chunk_tokens=4, room=1.0, model=MODEL)
    bound = plan_bound(problem)
    if bound.num_waves != 1:
        return
    average = _average(problem)
    floor = passing_floor_s(problem, np.arange(problem.tree.num_requests), average)
    for extra in _crossing_extras(problem, average):
        assert extra >= floor * (1 - 1e-12)


def test_each_version_pays_the_runs_and_waits_of_its_busiest_rank():
    """The inequalities the floor stands on, version by version of a wave of a 12,288-token request
    beside two of 2,048 on three ranks (2,048-token chunks), with ``M`` the version's busiest rank's
    tokens: rounds at least ``⌈L / M⌉`` and waiting tokens at least ``L - M`` in rounds (both attained by
    some version), and in parallel at least ``(P + 2 N_s(M)) / cp - M``."""
    problem = tiny_problem(LONG_BESIDE_SHORT, cp=3, chunk_tokens=2048, room=1.0, model=MODEL)
    requests = np.arange(problem.tree.num_requests)
    counts = path_counts(problem.tree, requests)
    longest = float(problem.request_tokens.max())
    slack = {"rounds": [], "wait": [], "parallel": []}
    for wave, modes, busiest in _crossing_versions(problem):
        packed = float(wave.layout.packed_tokens)
        twice = float(twice_run_tokens(problem, requests, counts, np.array([busiest]))[0])
        slack["rounds"].append(modes[ROUNDS].rounds - math.ceil(longest / busiest))
        slack["wait"].append(modes[ROUNDS].wait_tokens - (longest - busiest))
        slack["parallel"].append(modes[PARALLEL].wait_tokens - ((packed + 2 * twice) / 3 - busiest))
    assert min(slack["rounds"]) == 0 and min(slack["wait"]) == 0
    assert min(slack["parallel"]) >= -1e-9


PREFIXED = _workload(
    [*range(2048), *range(10**5, 10**5 + 10240)], [*range(2048), *range(2 * 10**5, 2 * 10**5 + 2048)]
)
"""A 2,048-token prefix shared by a 12,288-token request and a 4,096-token one: on three ranks the long
one's tokens past the prefix sit in a child segment unless the prefix is copied."""


def test_a_shared_prefix_makes_its_childrens_low_tokens_run_twice(monkeypatch):
    """Under parallel passing, tokens below position ``M`` under a prefix two requests share run twice
    where the prefix is shared, or the prefix is copied: per interval the cheaper,
    ``min(copy, 2 wait_s low / cp)``, with ``low`` the tokens at ``2048 <= p < min(M, L - M)``. The
    floor with it stays below every crossing version of the wave (both layouts, every ownership) and
    lies above the floor without it."""
    problem = tiny_problem(PREFIXED, cp=3, chunk_tokens=2048, room=1.0, model=MODEL)
    requests = np.arange(problem.tree.num_requests)
    counts = path_counts(problem.tree, requests)
    busiest = np.array([4779.0])
    found = shared_prefix_s(problem, requests, counts, busiest, busiest)
    prefix = int(np.flatnonzero(counts == 2)[-1])
    barriers = np.asarray(problem.card.constants.barrier_coefficients).sum(axis=0)
    amounts = per_copy_amounts(problem)[prefix].copy()
    amounts[QUANTITY_INDEX["remote_tokens"]] = 2 * amounts[QUANTITY_INDEX["tokens"]]
    copy = float(amounts @ barriers) / 3
    twice = 2 * problem.card.handoff.wait_s_per_token * (4779 - 2048) / 3
    assert found.tolist() == pytest.approx([min(copy, twice)], rel=1e-9)
    average = _average(problem)
    floor = passing_floor_s(problem, requests, average)
    assert min(_crossing_extras(problem, average)) >= floor * (1 - 1e-12)
    monkeypatch.setattr(passing_floors, "shared_prefix_s", lambda *args: np.zeros_like(args[3]))
    assert floor > passing_floor_s(problem, requests, average) * (1 + 1e-6)


def _prompt_groups(chunk: int) -> Workload:
    """Two prompt groups behind a common prefix, every node one ``chunk`` of tokens: two requests per
    group, each the prefix, its group's prompt and its own tail."""
    common = list(range(10_000, 10_000 + chunk))
    items = []
    for g in range(2):
        prompt = list(range(20_000 + 20_000 * g, 20_000 + 20_000 * g + chunk))
        tails = [
            list(range(120_000 + 20_000 * g + 5_000 * t, 120_000 + 20_000 * g + 5_000 * t + chunk))
            for t in range(2)
        ]
        items.append(
            Item(id=f"g{g}", requests=tuple(Request(tokens=common + prompt + tail) for tail in tails))
        )
    return Workload(items=tuple(items))


def test_a_common_prefix_makes_every_crossing_pay_its_rounds_or_reruns():
    """Behind a prefix every request passes (2,048-token nodes, two ranks): unshared, the prefix is
    stored per child; shared, the wave has one root segment, so two rounds leave a rank's share
    waiting, more rounds pay two, and parallel passing reruns all but the first piece. Every crossing
    version pays at least the floor, which lifts the one-round-one-state floor by more than a quarter."""
    problem = _roomy(tiny_problem(_prompt_groups(2048), cp=2, chunk_tokens=2048, room=1.0, model=MODEL))
    average = _average(problem)
    requests = np.arange(problem.tree.num_requests)
    floor = passing_floor_s(problem, requests, average)
    assert min(_crossing_extras(problem, average)) >= floor * (1 - 1e-12)
    seconds = problem.card.handoff
    assert floor > 1.25 * (seconds.round_s + seconds.state_s)
    counts = path_counts(problem.tree, requests)
    packed = float(problem.tree.node_length[counts > 0].sum())
    assert passing_floors.common_prefix_floor_s(problem, requests, counts, packed, average) == floor


BRANCHED = _workload([*range(12), 50, 51, 52, 53], [*range(12), 60, 61, 62, 63])
"""A 12-token prefix shared by two requests, each 4 tokens beyond it: on two ranks (an even share of 10
tokens) the prefix ends beyond a rank's share, and 8 tokens hang below it."""


def test_a_node_beyond_a_ranks_share_makes_two_rounds_wait_for_its_subtree(monkeypatch):
    """Every two-round version of the wave that shares the prefix waits at least ``ℓ_v + D_v - M`` tokens
    (the prefix's end and the 8 tokens below it on one rank in round 1, its head on another in round 0;
    ``M`` the version's busiest rank), and some version waits exactly that; every crossing version still
    pays at least the floor, which is above the floor without the term."""
    problem = _roomy(tiny_problem(BRANCHED, cp=2, chunk_tokens=4, room=1.0, model=MODEL))
    requests = np.arange(problem.tree.num_requests)
    slack = []
    for wave in wave_versions(problem, (0, 1)):
        chunk, packed = problem.chunk_tokens, int(wave.layout.packed_tokens)
        if packed != 20 or layout_pieces(wave.layout.links, wave.owner, chunk).num_crossings == 0:
            continue  # the prefix copied, or nothing crosses
        rounds = handoff_modes(wave.layout, wave.owner, chunk, 2, problem.card.handoff)[ROUNDS]
        if rounds.rounds == 2:
            busiest = float(owned_tokens(wave.owner, chunk, packed, 2).max())
            slack.append(rounds.wait_tokens - (12 + 8 - busiest))
    assert slack and min(slack) == 0
    average = _average(problem)
    floor = passing_floor_s(problem, requests, average)
    assert all(extra >= floor * (1 - 1e-12) for extra in _crossing_extras(problem, average))
    monkeypatch.setattr(passing_floors, "branch_waits_s", lambda *args: np.asarray(args[-1], dtype=float))
    assert passing_floor_s(problem, requests, average) < floor * (1 - 1e-6)


@pytest.mark.parametrize("shared", [False, True], ids=["unique", "prefixed"])
def test_parallel_waits_at_least_the_sliding_window(shared):
    """Version by version of a wave holding a request longer than any rank's tokens (three ranks,
    2,048-token chunks), with ``M`` its busiest rank's tokens: the tokens it waits under parallel passing
    are at least :func:`sliding_wait_tokens` at ``M`` (its first piece within the largest run before the
    exchange, its last within the largest rerun, so most of it runs twice before it), which is attained
    by some version (within a chunk) and lies above the means over ``[M, L - M)`` for some ``M`` of at
    least half the request (where that window is empty)."""
    workload = PREFIXED if shared else LONG_BESIDE_SHORT
    problem = tiny_problem(workload, cp=3, chunk_tokens=2048, room=1.0, model=MODEL)
    requests = np.arange(problem.tree.num_requests)
    counts = path_counts(problem.tree, requests)
    longest = float(problem.request_tokens.max())
    slack, lifted = [], []
    for _, modes, most in _crossing_versions(problem):
        wait, busiest = modes[PARALLEL].wait_tokens, np.array([most])
        full = float(problem.tree.node_length[counts > 0].sum())
        sliding = float(sliding_wait_tokens(problem, requests, counts, full, busiest)[0])
        means = (full + 2 * float(twice_run_tokens(problem, requests, counts, busiest)[0])) / 3 - busiest[0]
        slack.append(wait - sliding)
        if 2 * busiest[0] >= longest:
            lifted.append(sliding - max(0.0, means))
    assert min(slack) >= -1e-9
    assert min(slack) <= problem.chunk_tokens
    assert lifted and max(lifted) > 0


def test_on_two_ranks_every_round_holds_one_ranks_tokens():
    """Behind a prefix every request passes, shared (one root segment), on two ranks: a crossing always
    changes rank, so every round holds one rank's tokens and every version whose states cross in rounds
    leaves at least ``P - M`` tokens waiting however many rounds it runs (some with three or more); the
    common-prefix floor counts that, above the two rounds and two states it allowed a wave of three
    rounds or more: on the held-out-style GRPO step (two prompt groups behind a 2,048-token system
    prompt) at CP2 and 20 GiB, more than a fifth above them."""
    problem = _roomy(tiny_problem(_prompt_groups(2048), cp=2, chunk_tokens=2048, room=1.0, model=MODEL))
    slack, many = [], 0
    for wave, modes, busiest in _crossing_versions(problem):
        if wave.layout.links.is_root.sum() == 1:  # the prefix shared
            slack.append(modes[ROUNDS].wait_tokens - (float(wave.layout.packed_tokens) - busiest))
            many += modes[ROUNDS].rounds >= 3
    assert many and min(slack) >= 0
    step = build_problem(grpo_step(), topology=Topology(cp=2), model=MODEL, memory_bytes="20GiB")
    requests = np.arange(step.tree.num_requests)
    counts = path_counts(step.tree, requests)
    packed = float(step.tree.node_length[counts > 0].sum())
    floor = passing_floors.common_prefix_floor_s(step, requests, counts, packed, _average(step))
    seconds = step.card.handoff
    assert floor > 2 * (seconds.round_s + seconds.state_s) * (1 + 0.2)
