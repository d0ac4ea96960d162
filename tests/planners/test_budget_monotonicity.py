"""A larger memory budget never buys a costlier plan (beyond 1%) on GRPO workloads, for greedy alone and
for the deterministic portfolio: greedy keeps prefix groups whole, repairs waves at the memory edge
by time and balances its last two waves. One counterexample a random search found is recorded
(:data:`COUNTEREXAMPLE`: greedy was 2.7% and the portfolio 1.45% costlier at the larger budget, its first
wave widening over the smaller budget's cut, which the last-two-waves balancing then did not try); it
holds since that balancing always tries the cut."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cpplan
from cpplan.bench.synthetic import grpo
from cpplan.planners.greedy import greedy_plan
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import best_wave
from cpplan.spec.settings import Settings

LAYOUTS = ("full", "none", "min_span:512")
TOLERANCE = 0.01
MODEL = cpplan.load_model("qwen3.6-35b-a3b")


def grpo_workload(group: int, groups: int, system_tokens: int, seed: int):
    """The GRPO workload the properties draw: ``groups`` prompts of ``group`` rollouts, one item each."""
    return grpo(
        num_prompts=groups,
        group_size=group,
        system_tokens=system_tokens,
        prompt_tokens=(500, 6000),
        completion_tokens=(100, 3000),
        items_per_prompt=False,
        seed=seed,
    )


def at_budget(workload, cp: int, memory_bytes: int) -> Problem:
    """``workload`` at 8 layers of :data:`MODEL` on CP``cp`` with ``memory_bytes`` per rank."""
    settings = Settings(topology=cpplan.Topology(cp=cp), model=MODEL, memory_bytes=memory_bytes, num_layers=8)
    return Problem.build(workload, settings)


@st.composite
def grpo_budget_pairs(draw) -> tuple[Problem, Problem]:
    """A GRPO workload (one item per rollout) at 8 layers and two per-rank budgets, the second larger,
    both between what the largest group needs alone and what the whole workload needs."""
    group, groups = draw(st.integers(4, 12)), draw(st.integers(3, 5))
    system_tokens = draw(st.integers(0, 512))
    workload = grpo_workload(group, groups, system_tokens, draw(st.integers(0, 10_000)))
    cp = draw(st.sampled_from([1, 2, 4]))
    probe = at_budget(workload, cp, 2**60)
    lo = max(
        best_wave(probe, range(g * group, (g + 1) * group), ("full",))[0].peak_bytes for g in range(groups)
    )
    hi = int(best_wave(probe, range(probe.num_items), ("full",))[0].peak_bytes * 1.02)
    small, large = sorted(draw(st.floats(0, 1)) for _ in range(2))
    return tuple(at_budget(workload, cp, lo + int(f * (hi - lo))) for f in (small, large))


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(grpo_budget_pairs())
def test_greedy_is_budget_monotone(pair):
    """Greedy alone at the larger budget costs at most 1% more than at the smaller one."""
    smaller, larger = (greedy_plan(problem, LAYOUTS).cost_s for problem in pair)
    assert larger <= smaller * (1 + TOLERANCE), (smaller, larger)


@pytest.mark.slow  # the deterministic portfolio (CP-SAT included) twice per example
@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(grpo_budget_pairs())
def test_deterministic_portfolio_is_budget_monotone(pair):
    """The deterministic profile's plan at the larger budget costs at most 1% more than at the smaller
    one."""
    profile = cpplan.load_solver("deterministic")
    smaller, larger = (cpplan.solve(problem, profile).cost_s for problem in pair)
    assert larger <= smaller * (1 + TOLERANCE), (smaller, larger)


# A greedy counterexample from a random (not derandomized) run of grpo_budget_pairs: 5 prompts of 10
# rollouts, 294 system tokens, seed 546, on CP2, at 15.39 GB and 17.16 GB per rank.
COUNTEREXAMPLE = {"group": 10, "groups": 5, "system_tokens": 294, "seed": 546}
COUNTEREXAMPLE_CP = 2
COUNTEREXAMPLE_BUDGETS = (15_390_834_244, 17_157_945_351)


def counterexample_pair() -> tuple[Problem, Problem]:
    """The recorded counterexample at its smaller and its larger budget."""
    workload = grpo_workload(**COUNTEREXAMPLE)
    return tuple(at_budget(workload, COUNTEREXAMPLE_CP, b) for b in COUNTEREXAMPLE_BUDGETS)


def test_greedy_counterexample_is_budget_monotone():
    """Greedy alone on the recorded counterexample costs at most 1% more at the larger budget than at the
    smaller one."""
    smaller, larger = (greedy_plan(problem, LAYOUTS).cost_s for problem in counterexample_pair())
    assert larger <= smaller * (1 + TOLERANCE), (smaller, larger)


def test_deterministic_portfolio_counterexample_is_budget_monotone():
    """The deterministic profile's plan on the recorded counterexample costs at most 1% more at the larger
    budget than at the smaller one."""
    profile = cpplan.load_solver("deterministic")
    smaller, larger = (cpplan.solve(problem, profile).cost_s for problem in counterexample_pair())
    assert larger <= smaller * (1 + TOLERANCE), (smaller, larger)
