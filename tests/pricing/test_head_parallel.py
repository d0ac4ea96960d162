"""Head-parallel GDN priced as :mod:`cpplan.hf.gdn_heads` runs it, chosen per wave, written in the plan
and recounted by the verifier."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import cpplan
from cpplan import Topology
from cpplan.plans.plan import Plan
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.pricing.handoff import HEAD_PARALLEL, handoff_modes, head_parallel_handoff
from cpplan.pricing.head_parallel import moved_rows, owned_tokens, tree_levels
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import price_wave
from cpplan.spec.card import HandoffSeconds
from cpplan.spec.settings import Settings
from cpplan.verifier import verify_plan
from tests.conftest import without_head_parallel

HEADS = HandoffSeconds(round_s=1.0, head_s_per_token=1e-3, head_collective_s=0.5, head_level_s=2.0)


class _Layout:
    """The fields of a packed layout head-parallel reads."""

    def __init__(self, seg_parent, packed_tokens):
        self.seg_parent = np.asarray(seg_parent)
        self.packed_tokens = packed_tokens


def test_rows_levels_and_seconds():
    """Three chunks of 10 (the last of 5) on ranks 0, 1, 1: the ranks own 10 and 15 tokens; rank 1
    sends 7.5 rows, rank 0 receives 7.5: 7.5 rows per all-to-all; a three-level tree pays two extra
    levels; no head-parallel where the card offers none, or at one rank."""
    tokens = owned_tokens(np.array([0, 1, 1]), 10, 25, 2)
    assert tokens.tolist() == [10, 15]
    assert moved_rows(tokens) == 7.5
    assert moved_rows(np.array([0, 25])) == 12.5  # rank 0 receives everything of its heads
    assert tree_levels(np.array([-1, 0, 1, 0])) == 3
    layout = _Layout([-1, 0, 1], 25)
    priced = head_parallel_handoff(layout, np.array([0, 1, 1]), 10, 2, HEADS)
    assert priced.mode == HEAD_PARALLEL and priced.levels == 3 and priced.moved_rows == 7.5
    assert priced.seconds == pytest.approx(0.5 + 7.5e-3 + 2 * 2.0)
    assert head_parallel_handoff(layout, np.array([0, 1, 1]), 10, 2, HandoffSeconds(round_s=1.0)) is None
    assert head_parallel_handoff(layout, np.array([0, 0, 0]), 10, 1, HEADS) is None


def test_the_card_offers_it_where_the_value_heads_divide(qwen36):
    """Qwen3.6's 32 GDN value heads: head-parallel at CP 2, 4, 8, not at CP 3 (nor at CP 1)."""
    for cp, offered in ((1, False), (2, True), (3, False), (4, True), (8, True)):
        assert qwen36.resolve(Topology(cp=cp)).handoff.head_parallel_priced == offered


@pytest.fixture(scope="module")
def long_plan(qwen36):
    """One 20K-token request at CP 4: its wave runs head-parallel."""
    workload = cpplan.Workload(
        items=(cpplan.Item(id="a", requests=(cpplan.Request(tokens=np.arange(20_000) % 997),)),)
    )
    problem = Problem.build(
        workload, Settings(topology=Topology(cp=4), model=qwen36, memory_bytes=80 * 2**30)
    )
    wave = price_wave(problem, [0], problem.pack([0], "full"), "full")
    return problem, wave


def test_a_long_request_runs_head_parallel_and_costs_less(long_plan):
    """The wave chooses head-parallel, its cost counts that price, below both other modes."""
    problem, wave = long_plan
    modes = handoff_modes(wave.layout, wave.owner, problem.chunk_tokens, 4, problem.card.handoff)
    assert wave.gdn_handoff == HEAD_PARALLEL == wave.handoff.mode
    assert (
        wave.handoff.seconds
        == modes[HEAD_PARALLEL].seconds
        < min(modes["rounds"].seconds, modes["parallel"].seconds)
    )


def test_the_plan_names_it_and_the_verifier_recounts_it(long_plan, qwen36):
    """The plan JSON says ``"head_parallel"`` and verifies; the same claim checked under a card that does
    not offer head-parallel is refused, naming the mode; claimed as rounds its cost is refused."""
    problem, wave = long_plan
    data = plan_to_dict(problem, Plan(strategy="greedy", waves=(wave,)))
    assert data["waves"][0]["gdn_handoff"] == HEAD_PARALLEL
    verdict = verify_plan(data, problem.workload, problem.card, problem.memory_bytes)
    assert verdict.valid, verdict.violations
    assert verdict.cost_s == pytest.approx(data["waves"][0]["cost_s"], rel=1e-12)
    two = Problem.build(
        problem.workload,
        Settings(topology=Topology(cp=4), model=without_head_parallel(qwen36), memory_bytes=80 * 2**30),
    )
    refused = verify_plan(data, two.workload, two.card, two.memory_bytes)
    assert not refused.valid
    assert any("'head_parallel'" in v and "does not offer" in v for v in refused.violations)
    wrong = copy.deepcopy(data)
    wrong["waves"][0]["gdn_handoff"] = "rounds"
    assert not verify_plan(wrong, problem.workload, problem.card, problem.memory_bytes).valid
