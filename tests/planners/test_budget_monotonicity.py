"""A larger memory budget never buys a costlier plan (beyond 1%) on GRPO workloads, for greedy alone and
for the deterministic portfolio: greedy keeps prefix groups whole, repairs waves at the memory edge
by time and balances its last two waves."""

from __future__ import annotations

import dataclasses

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


@st.composite
def grpo_budget_pairs(draw) -> tuple[Problem, Problem]:
    """A GRPO workload (one item per rollout) at 8 layers and two per-rank budgets, the second larger,
    both between what the largest group needs alone and what the whole workload needs."""
    group, groups = draw(st.integers(4, 12)), draw(st.integers(3, 5))
    workload = grpo(
        num_prompts=groups,
        group_size=group,
        system_tokens=draw(st.integers(0, 512)),
        prompt_tokens=(500, 6000),
        completion_tokens=(100, 3000),
        items_per_prompt=False,
        seed=draw(st.integers(0, 10_000)),
    )
    base = Settings(
        topology=cpplan.Topology(cp=draw(st.sampled_from([1, 2, 4]))),
        model=MODEL,
        memory_bytes=2**60,
        num_layers=8,
    )
    probe = Problem.build(workload, base)
    lo = max(
        best_wave(probe, range(g * group, (g + 1) * group), ("full",))[0].peak_bytes for g in range(groups)
    )
    hi = int(best_wave(probe, range(probe.num_items), ("full",))[0].peak_bytes * 1.02)
    small, large = sorted(draw(st.floats(0, 1)) for _ in range(2))
    budgets = [lo + int(f * (hi - lo)) for f in (small, large)]
    return tuple(Problem.build(workload, dataclasses.replace(base, memory_bytes=b)) for b in budgets)


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
