"""GDN states per owned piece: a rank holding two separate ranges of one segment
needs two incoming states, in the evaluator, the verifier and the plans they admit."""

from __future__ import annotations

import numpy as np
import pytest

import cpplan
from cpplan.baselines.shard_rules import zigzag
from cpplan.plans.plan import Plan
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.pricing.evaluator import price
from cpplan.pricing.ownership import chunk_stats, rank_quantities
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import price_wave
from cpplan.spec.quantities import QUANTITY_INDEX
from cpplan.spec.settings import Settings
from cpplan.spec.workload import Item, Request, Workload
from cpplan.verifier import verify_plan

BUDGET = 29_002_245_592
STATE_BYTES = 30 * (32 * 128 * 128 * 4 + (2 * 16 + 32) * 128 * 3 * 2) + 3 * 32 * 128 * 128 * 4


@pytest.fixture(scope="module")
def one_long_request(qwen36) -> Problem:
    """One 262,144-token request at CP8 with the budget of the reported case."""
    tokens = np.random.default_rng(0).integers(0, 1000, 262_144)
    workload = Workload(items=(Item(id="big", requests=(Request(tokens=tokens),)),))
    settings = Settings(topology=cpplan.Topology(cp=8), model=qwen36, memory_bytes=BUDGET)
    return Problem.build(workload, settings)


def test_zigzag_ranks_hold_two_pieces(one_long_request):
    """Under zigzag ownership every rank but the middle one (whose two ranges touch) owns two separate
    ranges of the one segment: two pieces (one under a contiguous split), counted alike by the
    evaluator and the verifier."""
    problem = one_long_request
    layout = problem.pack([0], "full")
    stats = chunk_stats(layout, problem.chunk_tokens)
    owner = zigzag(layout, stats, 8)
    assert rank_quantities(stats, owner, 8)[:, QUANTITY_INDEX["segments"]].tolist() == [2] * 7 + [1]
    contiguous = np.repeat(np.arange(8), stats.num_chunks // 8)
    assert rank_quantities(stats, contiguous, 8)[:, QUANTITY_INDEX["segments"]].tolist() == [1] * 8
    wave = price_wave(problem, [0], layout, "full", owner)
    data = plan_to_dict(problem, Plan(strategy="zigzag", waves=(wave,)))
    assert [r["segments"] for r in data["waves"][0]["ranks"]] == [2] * 7 + [1]
    verdict = verify_plan(data, problem.workload, problem.card, problem.memory_bytes)
    assert not any("segments" in v or "peak_bytes" in v for v in verdict.violations)


def test_a_plan_that_fits_only_when_pieces_are_undercounted_is_refused(one_long_request, qwen36):
    """At a budget between the zigzag wave's peak with one state per segment (the old count) and with
    one state per owned piece, the zigzag wave is over budget (by less than one more piece's states per
    rank) and the chosen plan fits and verifies: the reported case, at a budget derived from the card
    as it prices today."""
    problem = one_long_request
    layout = problem.pack([0], "full")
    stats = chunk_stats(layout, 128)
    owner = zigzag(layout, stats, 8)
    quantities = rank_quantities(stats, owner, 8)
    pieces = int(price(problem.card, quantities).peak_bytes.max())
    quantities[:, QUANTITY_INDEX["segments"]] = 1
    one_each = int(price(problem.card, quantities).peak_bytes.max())
    assert 0 < pieces - one_each < 1.1 * STATE_BYTES
    budget = (pieces + one_each) // 2
    settings = Settings(topology=cpplan.Topology(cp=8), model=qwen36, memory_bytes=budget)
    tight = Problem.build(problem.workload, settings)
    zig = price_wave(tight, [0], layout, "full", owner)
    assert not zig.fits(budget)
    result = cpplan.solve(tight, cpplan.load_solver("deterministic"))
    assert all(w.fits(budget) for w in result.plan.waves)
    data = plan_to_dict(tight, result.plan)
    assert verify_plan(data, tight.workload, tight.card, budget).valid
