"""The GDN hand-off: pieces, rounds and crossings as execution schedules them, and what they cost."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cpplan import Plan, PrefixTree, Problem, Topology, load_model
from cpplan.hf.geometry import WaveGeometry
from cpplan.pricing.handoff import (
    HANDOFF_MODES,
    HEAD_PARALLEL,
    chunk_pieces,
    handoff_modes,
    rounds_handoff,
    wave_handoff,
)
from cpplan.pricing.wave import price_wave
from cpplan.runtime.materialize import materialize_wave
from cpplan.spec.card import HandoffSeconds
from cpplan.spec.settings import Settings
from cpplan.verifier.handoff_recount import handoff_seconds
from cpplan.verifier.owners import OwnerRuns
from cpplan.verifier.rank_prices import pieces_of
from cpplan.verifier.segments import segment_offsets
from tests.support.prefix_trees import LAYOUTS, build_problem, prefix_workloads

UNIT = HandoffSeconds(round_s=1.0, state_s=1e-3, wait_s_per_token=1e-6)


def _owners(problem: Problem, packed: int, seed: int, kind: str) -> np.ndarray:
    """Chunk owners: random, zigzag-like (ranks 0..cp-1 then back) or contiguous."""
    num_chunks = -(-packed // problem.chunk_tokens)
    cp = problem.topology.cp
    if kind == "random":
        return np.random.default_rng(seed).integers(0, cp, num_chunks)
    if kind == "zigzag":
        pattern = np.r_[np.arange(cp), np.arange(cp)[::-1]]
        return np.resize(np.repeat(pattern, max(1, num_chunks // (2 * cp))), num_chunks)
    return np.minimum(np.arange(num_chunks) * cp // num_chunks, cp - 1)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    prefix_workloads(max_requests=8, max_tail=40),
    st.sampled_from(LAYOUTS),
    st.integers(2, 4),
    st.sampled_from(["random", "zigzag", "contiguous"]),
    st.integers(0, 2**32 - 1),
)
def test_rounds_and_crossings_are_the_execution_schedule(workload, spec, cp, kind, seed):
    """On random prefix trees, layouts and ownerships, the priced pieces have exactly the rounds and
    handed-over states of the pieces :mod:`cpplan.hf` runs (its ``Pieces.round`` and ``handoffs``)."""
    problem = build_problem(workload, cp=cp, chunk_tokens=3)
    items = list(range(problem.num_items))
    layout = problem.pack(items, spec)
    owner = _owners(problem, layout.packed_tokens, seed, kind)
    wave = price_wave(problem, items, layout, spec, owner)
    geometry = WaveGeometry.build(materialize_wave(Plan(strategy="t", waves=(wave,)), workload, wave=0))
    executed = geometry.pieces
    pieces = chunk_pieces(layout.seg_offset, layout.seg_length, layout.seg_parent, owner, 3)
    assert np.array_equal(pieces.start, executed.start)
    assert np.array_equal(pieces.round, executed.round)
    handed = sorted(int(i) for h in executed.handoffs for i in h.tolist())
    assert sorted(set(pieces.source[pieces.source >= 0].tolist())) == handed
    handoff = rounds_handoff(pieces, problem.topology.cp, UNIT)
    assert handoff.rounds == (int(executed.round.max()) + 1 if executed.count else 1)
    assert handoff.crossings == len(handed)


def test_one_segment_over_four_ranks_waits_for_each_state():
    """A single segment cut into four equal contiguous pieces runs in four rounds: three hand-offs,
    and every rank but the first waits for the recurrence before it (three quarters of the tokens)."""
    pieces = chunk_pieces(np.array([0]), np.array([400]), np.array([-1]), np.repeat(np.arange(4), 10), 10)
    handoff = rounds_handoff(pieces, 4, UNIT)
    assert pieces.round.tolist() == [0, 1, 2, 3]
    assert (handoff.rounds, handoff.crossings, handoff.wait_tokens) == (4, 3, 300)
    assert handoff.seconds == 3 * 1.0 + 3 * 1e-3 + 300 * 1e-6


def test_branches_on_their_own_ranks_run_in_parallel():
    """Two children of a root segment, each owned whole by its own rank after the root on rank 0, both
    start in round 1 from the same root state (one state sent once): both wait for the root's
    recurrence, not for each other."""
    seg_offset, seg_length, seg_parent = np.array([0, 10, 20]), np.array([10, 10, 10]), np.array([-1, 0, 0])
    pieces = chunk_pieces(seg_offset, seg_length, seg_parent, np.array([0, 1, 2]), 10)
    handoff = rounds_handoff(pieces, 3, UNIT)
    assert pieces.round.tolist() == [0, 1, 1]
    assert (handoff.rounds, handoff.crossings, handoff.wait_tokens) == (2, 1, 10)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    prefix_workloads(max_requests=8, max_tail=40),
    st.sampled_from(LAYOUTS),
    st.integers(1, 4),
    st.sampled_from(["random", "zigzag", "contiguous"]),
    st.integers(0, 2**32 - 1),
)
def test_verifier_prices_the_same_handoff(workload, spec, cp, kind, seed):
    """The verifier's piece-by-piece hand-off seconds equal the evaluator's in every mode the card
    offers, rounds, parallel and head-parallel (GDN card, any ownership)."""
    cp = min(cp, int(PrefixTree([r.tokens for _, _, r in workload.requests()]).node_length.sum()))
    settings_ = Settings(
        topology=Topology(cp=cp), model=load_model("qwen3.6-35b-a3b"), memory_bytes=80 * 2**30
    )
    problem = dataclasses.replace(Problem.build(workload, settings_), chunk_tokens=3)
    items = list(range(problem.num_items))
    layout = problem.pack(items, spec)
    owner = _owners(problem, layout.packed_tokens, seed, kind)
    segments = list(
        zip(layout.seg_parent.tolist(), layout.seg_position.tolist(), layout.seg_length.tolist(), strict=True)
    )
    offsets, packed = segment_offsets(segments)
    token_owner = np.repeat(owner, 3)[:packed]
    cuts = np.concatenate([[0], np.flatnonzero(token_owner[1:] != token_owner[:-1]) + 1])
    runs = OwnerRuns(start=cuts, end=np.append(cuts[1:], packed), owner=token_owner[cuts])
    pieces = pieces_of(segments, offsets, runs)
    modes = handoff_modes(layout, owner, 3, cp, problem.card.handoff)
    # head-parallel is offered where the 32 GDN value heads divide over the ranks
    assert set(modes) == set(HANDOFF_MODES) - ({HEAD_PARALLEL} if 32 % cp else set())
    for mode in modes:
        priced = wave_handoff(layout, owner, 3, cp, problem.card.handoff, mode)
        assert priced.mode == mode
        recounted = handoff_seconds(problem.card, segments, offsets, pieces, mode)
        assert np.isclose(recounted, priced.seconds, rtol=1e-12, atol=0), mode


def test_wave_cost_adds_the_handoff_only_under_cp(qwen36_two_modes):
    """A priced wave's cost is its slowest rank, the card's per-wave seconds and its hand-off; at CP1
    there is no hand-off, at CP4 a single long request pays rounds and waiting (the card offering
    rounds and parallel passing: head-parallel pays no round)."""
    qwen36 = qwen36_two_modes
    from cpplan.spec.workload import Item, Request, Workload

    workload = Workload(items=(Item(id="a", requests=(Request(tokens=np.arange(20_000) % 997),)),))
    for cp in (1, 4):
        problem = Problem.build(
            workload, Settings(topology=Topology(cp=cp), model=qwen36, memory_bytes=80 * 2**30)
        )
        wave = price_wave(problem, [0], problem.pack([0], "full"), "full")
        slowest = float(wave.prices.time_s.max())
        assert wave.cost_s == slowest + problem.card.wave_overhead_s + wave.handoff.seconds
        assert (wave.handoff.seconds > 0) == (cp > 1)
        if cp > 1:
            assert wave.handoff.rounds == cp and wave.handoff.wait_tokens > 0


def test_segment_links_are_their_definitions():
    """SegmentLinks of random segment trees (parents before children): each segment's parent's last
    token, the parents, the tree levels (as head-parallel counts them), and down_sums (by pointer
    doubling) equal to each segment's values summed up its ancestor chain, walked one parent at a
    time."""
    from cpplan.pricing.head_parallel import tree_levels
    from cpplan.pricing.layout import SegmentLinks

    rng = np.random.default_rng(2)
    for _ in range(200):
        num_segments = int(rng.integers(1, 40))
        parent = np.array([-1] + [int(rng.integers(-1, s)) for s in range(1, num_segments)])
        length = rng.integers(1, 50, num_segments)
        offset = np.r_[0, np.cumsum(length)[:-1]]
        values = rng.integers(0, 5, num_segments)
        links = SegmentLinks.of(offset, length, parent)
        chains = []
        for s in range(num_segments):
            chain = [s]
            while parent[chain[-1]] >= 0:
                chain.append(int(parent[chain[-1]]))
            chains.append(chain)
        assert links.down_sums(values).tolist() == [int(values[c].sum()) for c in chains] + [0]
        assert links.levels == tree_levels(parent) == max(len(c) for c in chains)
        assert links.packed_tokens == int(length.sum())
        for s in range(num_segments):
            p = parent[s]
            assert links.parent_last[s] == (offset[p] + length[p] - 1 if p >= 0 else -1)
            assert links.is_parent[s] == (s in parent) and links.is_root[s] == (p < 0)
