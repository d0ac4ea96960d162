"""The per-problem PricingMemo: fresh per problem and per cold copy, shared between layouts."""

from __future__ import annotations

import dataclasses

import pytest

from cpplan import NoFitError, Settings, Topology
from cpplan.baselines import cold_copy
from cpplan.planners.greedy import cached_greedy_plan
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import best_wave

LAYOUTS = ("full", "none", "min_span:512")


@pytest.fixture(scope="module")
def settings(qwen36) -> Settings:
    """The Qwen3.6 card at CP2, 80 GiB, 8 layers."""
    return Settings(topology=Topology(cp=2), model=qwen36, memory_bytes=80 * 2**30, num_layers=8)


def test_memo_is_per_problem_and_a_cold_copy_starts_empty(small_grpo, settings):
    """Each built problem has its own memo, outside equality and repr; the greedy plan, priced waves and
    share masks land there; a cold copy shares the tree but starts with an empty memo and plans the
    same."""
    problem = Problem.build(small_grpo, settings)
    other = Problem.build(small_grpo, settings)
    assert problem.memo is not other.memo
    memo_field = next(f for f in dataclasses.fields(Problem) if f.name == "memo")
    assert not (memo_field.init or memo_field.repr or memo_field.compare)
    plan = cached_greedy_plan(problem, LAYOUTS)
    assert cached_greedy_plan(problem, LAYOUTS) is plan
    assert problem.memo.planned[("greedy", LAYOUTS, None)] is plan
    assert problem.memo.priced_waves and set(problem.memo.share_masks) == set(LAYOUTS)
    assert not other.memo.planned and not other.memo.priced_waves
    cold = cold_copy(problem)
    assert cold.tree is problem.tree and cold.memo is not problem.memo
    assert not (cold.memo.planned or cold.memo.priced_waves or cold.memo.share_masks)
    again = cached_greedy_plan(cold, LAYOUTS)
    assert again is not plan and [w.items for w in again.waves] == [w.items for w in plan.waves]


def test_memo_keeps_a_refusal(qwen36, small_grpo):
    """A greedy refusal is remembered too: asking again raises the same error without planning again."""
    problem = Problem.build(
        small_grpo, Settings(topology=Topology(cp=2), model=qwen36, memory_bytes=2 * 2**30)
    )
    with pytest.raises(NoFitError) as first:
        cached_greedy_plan(problem, LAYOUTS)
    with pytest.raises(NoFitError) as second:
        cached_greedy_plan(problem, LAYOUTS)
    assert second.value is first.value is problem.memo.planned[("greedy", LAYOUTS, None)]


def test_priced_waves_are_shared_between_layouts_that_pack_alike(small_grpo, settings):
    """Two layouts taking the same sharing decisions on a wave are priced once: the memo holds one
    entry for the items, whichever layout asked first."""
    problem = Problem.build(small_grpo, settings)
    best_wave(problem, [0], ("full", "min_span:1"))
    assert len([key for key in problem.memo.priced_waves if key[0] == (0,)]) == 1
