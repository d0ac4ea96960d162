"""The ownership model decides on a pool too: at dp > 1 the ``cpsat`` candidate's waves take the
ownership model's decision (one group size at a time) before the schedule places them, and the plan is
never costlier than the schedule model's own."""

from __future__ import annotations

import pytest

import cpplan
from cpplan.bench.suites import suite
from cpplan.planners import PLANNERS
from cpplan.planners.portfolio import solve
from cpplan.pricing.problem import Problem
from cpplan.spec.profile import load_solver
from cpplan.spec.settings import Settings


@pytest.fixture(scope="module")
def pool_problem(qwen36) -> Problem:
    """The quick suite's GRPO step (16 completions a prompt) on two CP4 groups with 40 GiB a rank: a
    step whose scheduled waves the proposers' own splits leave imbalanced."""
    case = next(c for c in suite(quick=True) if c.name == "grpo_g8_16to1")
    settings = Settings.from_user(topology=cpplan.Topology(dp=2, cp=4), model=qwen36, memory_bytes="40GiB")
    return Problem.build(case.build(), settings)


def _schedule_only(problem, profile, deadline):
    """The registered ``cpsat`` strategy under another identity: it stands for every CP-SAT stage, so
    the loop runs no ownership model after it."""
    return PLANNERS["cpsat"](problem, profile, deadline)


def test_pool_plan_is_decided_by_the_ownership_model(pool_problem):
    """At dp = 2 the ownership model runs on the pool's ``cpsat`` plan (its outcome before the schedule
    model's, so ``solver.status`` stays the schedule's), the plan is valid, and it is cheaper than the
    schedule model's plan without it, wave for wave no costlier, holding the same items (in the order
    its ranks are chained, where they are) and on the same GPUs. The makespan moves, which would move
    items between the decided waves, are off (``moves.max_pricings`` 0)."""
    profile = load_solver("deterministic")
    profile = profile.model_copy(update={"moves": profile.moves.model_copy(update={"max_pricings": 0})})
    decided = solve(pool_problem, profile)
    placed = solve(pool_problem, profile, planners={"cpsat": _schedule_only})
    models = [o.model for o in decided.solver.outcomes]
    assert models[-1] == "schedule" and "ownership" in models
    assert decided.solver.status == placed.solver.status
    cpsat = next(c for c in decided.candidates if c.strategy == "cpsat")
    assert cpsat.valid
    assert decided.plan.cost_s < placed.plan.cost_s
    assert decided.plan.schedule.gpus == placed.plan.schedule.gpus
    for new, old in zip(decided.plan.waves, placed.plan.waves, strict=True):
        assert sorted(new.items) == sorted(old.items) and new.cost_s <= old.cost_s


def test_a_decided_pool_wave_may_leave_a_rank_of_its_group_idle(qwen36):
    """On the mixed workload of the FSDP2 test (dp 2 x cp 2, its 6.2 GB budget), the ownership model
    prices a wave cheapest with every chunk on one rank, and the plan keeps that decision: a rank that
    owns no token of a wave runs exactly (tests/hf/test_hf_fsdp_scattered.py), so no guard makes the
    plan dearer."""
    from cpplan.gpu_check.tiny_models import mixed_workload

    result = cpplan.plan(
        mixed_workload(0),
        topology=cpplan.Topology(dp=2, cp=2),
        model=qwen36,
        memory_bytes=6_227_702_579,
        solver=load_solver("deterministic"),
    )
    assert result.plan.num_waves >= 2
    assert any(len(set(wave.owner.tolist())) < 2 for wave in result.plan.waves)
