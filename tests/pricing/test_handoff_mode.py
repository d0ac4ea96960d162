"""The GDN hand-off mode: parallel state passing priced as execution runs it, and the choice per wave."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cpplan import Plan, PrefixTree, Problem, Topology, load_model
from cpplan.hf.gdn_parallel import ParallelPlan
from cpplan.hf.geometry import WaveGeometry
from cpplan.pricing.evaluator import wave_cost_s
from cpplan.pricing.handoff import chunk_pieces, handoff_modes, parallel_handoff, rounds_handoff
from cpplan.pricing.handoff_mode import HEAD_PARALLEL, PARALLEL, ROUNDS, choose_gdn_handoff
from cpplan.pricing.wave import price_wave
from cpplan.runtime.materialize import materialize_wave
from cpplan.spec.settings import Settings
from cpplan.spec.workload import Item, Request, Workload
from tests.conftest import without_head_parallel
from tests.pricing.test_handoff import UNIT, _owners
from tests.support.prefix_trees import LAYOUTS, build_problem, prefix_workloads


def test_choose_the_cheaper_mode_rounds_on_a_tie():
    """The mode with fewer seconds wins; a tie, or a missing parallel price, keeps the rounds."""
    assert choose_gdn_handoff({ROUNDS: 2.0, PARALLEL: 1.0}) == PARALLEL
    assert choose_gdn_handoff({ROUNDS: 1.0, PARALLEL: 2.0}) == ROUNDS
    assert choose_gdn_handoff({ROUNDS: 1.0, PARALLEL: 1.0}) == ROUNDS
    assert choose_gdn_handoff({ROUNDS: 1.0}) == ROUNDS


def test_one_segment_over_four_ranks_runs_each_continuation_twice():
    """A segment cut into four equal contiguous pieces: one exchange of three maps (two states' bytes
    each); before it the middle two ranks run their 100 tokens from zero and from the identity (200),
    after it the last three rerun theirs (100), against 100 tokens per rank: 200 tokens wait, instead
    of 300 in rounds."""
    pieces = chunk_pieces(np.array([0]), np.array([400]), np.array([-1]), np.repeat(np.arange(4), 10), 10)
    seconds = parallel_handoff(pieces, np.array([0]), np.array([-1]), 4, UNIT).seconds
    assert seconds == 1.0 + 2 * 3 * 1e-3 + 200 * 1e-6
    rounds_s = rounds_handoff(pieces, 4, UNIT).seconds
    assert choose_gdn_handoff({ROUNDS: rounds_s, PARALLEL: seconds}) == PARALLEL


def test_no_crossing_costs_nothing():
    """Pieces that never continue another rank's state add no parallel seconds."""
    seg_offset, seg_length, seg_parent = np.array([0, 10]), np.array([10, 10]), np.array([-1, -1])
    pieces = chunk_pieces(seg_offset, seg_length, seg_parent, np.array([0, 1]), 10)
    assert parallel_handoff(pieces, seg_offset, seg_parent, 2, UNIT).seconds == 0.0


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    prefix_workloads(max_requests=8, max_tail=40),
    st.sampled_from(LAYOUTS),
    st.integers(2, 4),
    st.sampled_from(["random", "zigzag", "contiguous"]),
    st.integers(0, 2**32 - 1),
)
def test_parallel_price_counts_what_execution_runs(workload, spec, cp, kind, seed):
    """On random prefix trees, layouts and ownerships, the parallel price is one exchange, two states
    per map :mod:`cpplan.hf.gdn_parallel` publishes, and the recurrence that waits at the exchange:
    the busiest rank before it (pieces from zero once, pieces with a source and a successor twice) and
    after it (pieces with a source), less the busiest rank's tokens, as the pieces and
    :class:`~cpplan.hf.gdn_parallel.ParallelPlan` of the execution say."""
    problem = build_problem(workload, cp=cp, chunk_tokens=3)
    items = list(range(problem.num_items))
    layout = problem.pack(items, spec)
    owner = _owners(problem, layout.packed_tokens, seed, kind)
    wave = price_wave(problem, items, layout, spec, owner)
    executed = WaveGeometry.build(
        materialize_wave(Plan(strategy="t", waves=(wave,)), workload, wave=0)
    ).pieces
    run = ParallelPlan.of(executed)
    lengths = executed.end - executed.start
    rerun = executed.pred >= 0
    before = lengths * np.where(rerun, 2 * run.has_successor, 1)

    def busiest(weights):
        return np.bincount(executed.owner, weights=weights, minlength=cp).max()

    wait = busiest(before) + busiest(lengths * rerun) - busiest(lengths)
    want = 0.0 if not run.published.size else 1.0 + 2 * run.published.size * 1e-3 + wait * 1e-6
    pieces = chunk_pieces(layout.seg_offset, layout.seg_length, layout.seg_parent, owner, 3)
    assert np.isclose(
        parallel_handoff(pieces, layout.seg_offset, layout.seg_parent, cp, UNIT).seconds, want, rtol=1e-12
    )


def test_planner_chooses_per_wave(qwen36_two_modes):
    """With the card's hand-off terms (head-parallel not offered), one long request spanning four or
    eight ranks passes its states in parallel; at CP 2 (the second rank's rerun waits as long as its
    round) and CP 1 the wave keeps the rounds; the wave's cost counts the chosen mode's hand-off, the
    cheaper of the two."""
    qwen36 = qwen36_two_modes
    long = Workload(items=(Item(id="a", requests=(Request(tokens=np.arange(20_000) % 997),)),))
    for cp, mode in ((1, ROUNDS), (2, ROUNDS), (4, PARALLEL), (8, PARALLEL)):
        problem = Problem.build(
            long, Settings(topology=Topology(cp=cp), model=qwen36, memory_bytes=80 * 2**30)
        )
        wave = price_wave(problem, [0], problem.pack([0], "full"), "full")
        assert wave.gdn_handoff == mode == wave.handoff.mode
        modes = handoff_modes(wave.layout, wave.owner, problem.chunk_tokens, cp, problem.card.handoff)
        assert wave.handoff.seconds == min(h.seconds for h in modes.values())
        if mode == PARALLEL:
            assert modes[PARALLEL].seconds < modes[ROUNDS].seconds
        assert (
            wave.cost_s
            == float(wave.prices.time_s.max()) + problem.card.wave_overhead_s + wave.handoff.seconds
        )


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    prefix_workloads(max_requests=8, max_tail=40),
    st.sampled_from(LAYOUTS),
    st.integers(2, 4),
    st.sampled_from(["random", "zigzag", "contiguous"]),
    st.integers(0, 2**32 - 1),
)
def test_wave_costs_the_cheaper_mode_and_no_crossing_changes_nothing(workload, spec, cp, kind, seed):
    """On random trees and ownerships a wave's hand-off is the cheapest mode's (rounds on a tie; the
    card offering rounds and parallel, and then head-parallel too) and its cost adds exactly that; a
    wave without crossings keeps the rounds and adds nothing, so its cost is what it was before the
    parallel and head-parallel modes were priced."""
    for card in (without_head_parallel(load_model("qwen3.6-35b-a3b")), load_model("qwen3.6-35b-a3b")):
        _cheapest_mode_wins(workload, spec, cp, kind, seed, card)


def _cheapest_mode_wins(workload, spec, cp, kind, seed, card) -> None:
    cp = min(cp, int(PrefixTree([r.tokens for _, _, r in workload.requests()]).node_length.sum()))
    settings_ = Settings(topology=Topology(cp=cp), model=card, memory_bytes=80 * 2**30)
    problem = dataclasses.replace(Problem.build(workload, settings_), chunk_tokens=3)
    items = list(range(problem.num_items))
    layout = problem.pack(items, spec)
    owner = _owners(problem, layout.packed_tokens, seed, kind)
    wave = price_wave(problem, items, layout, spec, owner)
    modes = handoff_modes(layout, owner, 3, cp, problem.card.handoff)
    seconds = {mode: h.seconds for mode, h in modes.items()}
    cheapest = min(seconds.values())
    assert wave.gdn_handoff == next(
        m for m in (ROUNDS, PARALLEL, HEAD_PARALLEL) if seconds.get(m) == cheapest
    )
    assert wave.handoff.seconds == cheapest
    assert wave.cost_s == wave_cost_s(problem.card, wave.prices) + wave.handoff.seconds
    if not modes[ROUNDS].crossings:
        assert wave.gdn_handoff == ROUNDS
        assert wave.handoff.seconds == seconds[ROUNDS] == seconds[PARALLEL] == 0.0
        assert wave.cost_s == wave_cost_s(problem.card, wave.prices)
