"""The greedy exact planner, the full-sharing fallback and the portfolio around them."""

from __future__ import annotations

import pytest

import cpplan
from cpplan import NoFitError, Topology
from cpplan.planners.greedy import full_sharing_plan, greedy_plan
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import best_wave
from cpplan.spec.settings import Settings
from tests.conftest import middle_budget

LAYOUTS = ("full", "none", "min_span:512")


@pytest.fixture(scope="module")
def tight(small_grpo, qwen36):
    """The small GRPO workload at CP2 with a budget that forces several waves."""
    budget = middle_budget(small_grpo, qwen36, 2)
    return Problem.build(small_grpo, Settings(topology=Topology(cp=2), model=qwen36, memory_bytes=budget))


def test_waves_fit_keep_order_and_are_maximal(tight):
    """Every greedy wave fits on every rank, items stay in order and each item is planned once, and no
    wave could have taken the next item under any layout (the width search found the edge)."""
    plan = greedy_plan(tight, LAYOUTS)
    assert plan.num_waves > 1
    order = [i for w in plan.waves for i in w.items]
    assert order == list(range(tight.num_items))
    for wave in plan.waves:
        assert wave.fits(tight.budget_bytes)
        if wave.items[-1] + 1 < tight.num_items:
            bigger, _ = best_wave(tight, [*wave.items, wave.items[-1] + 1], LAYOUTS)
            assert bigger is None


def test_full_sharing_is_memory_minimal(tight):
    """The full-sharing fallback packs only with the full layout, and never more tokens per wave than
    no sharing would."""
    plan = full_sharing_plan(tight)
    for wave in plan.waves:
        assert wave.layout_name == "full"
        assert wave.packed_tokens <= tight.pack(wave.items, "none").packed_tokens


def test_greedy_picks_a_cheaper_layout_when_one_fits(small_grpo, qwen36):
    """With room to spare the greedy planner's wave costs no more than the full-sharing wave of the
    same items (it prices every layout and keeps the cheapest that fits)."""
    problem = Problem.build(
        small_grpo, Settings(topology=Topology(cp=2), model=qwen36, memory_bytes=200 * 2**30)
    )
    greedy = greedy_plan(problem, LAYOUTS)
    full = full_sharing_plan(problem)
    assert greedy.cost_s <= full.cost_s + 1e-12


def test_refusal_names_item_rank_bytes_budget(small_grpo, qwen36):
    """When a single item cannot fit, the refusal names the item, the rank, the bytes and the budget."""
    problem = Problem.build(
        small_grpo, Settings(topology=Topology(cp=2), model=qwen36, memory_bytes=2 * 2**30)
    )
    with pytest.raises(NoFitError) as info:
        greedy_plan(problem, LAYOUTS)
    err = info.value
    assert err.item == "p0" and err.rank in (0, 1) and err.needed_bytes > err.budget_bytes == 2 * 2**30
    assert "'p0'" in str(err) and f"{err.needed_bytes:,}" in str(err) and f"{2 * 2**30:,}" in str(err)


def test_portfolio_lists_every_candidate(small_grpo, qwen36):
    """plan() verifies every strategy's plan, picks the cheapest valid one and lists each candidate
    with its cost, validity and reason."""
    result = cpplan.plan(
        small_grpo,
        topology=Topology(cp=2),
        model=qwen36,
        memory_bytes=middle_budget(small_grpo, qwen36, 2),
        solver="runtime",
    )
    names = [c.strategy for c in result.candidates]
    assert names[:2] == ["greedy", "full_sharing"]
    valid = [c for c in result.candidates if c.valid]
    assert result.cost_s == pytest.approx(min(c.cost_s for c in valid))
    assert all(c.reason for c in result.candidates)
    assert "wave" in result.summary()
