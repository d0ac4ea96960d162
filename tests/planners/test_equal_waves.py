"""Equal waves per GPU from every strategy, under fixed and dynamic CP: every pool rank runs the same
number of waves, the plan JSON says so, the verifier agrees, and the opt-out gives the unequal plans."""

from __future__ import annotations

import math

import numpy as np
import pytest

import cpplan
from cpplan.planners import PLANNERS
from cpplan.planners.deadline import Deadline
from cpplan.planners.dynamic_cp import pool_padding_s
from cpplan.planners.greedy import cached_greedy_plan
from cpplan.plans.plan import balanced
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.plans.pool_schedule import wave_counts
from cpplan.pricing.problem import Problem, group_problem
from cpplan.runtime.pool import materialize_pool, pool_waves
from cpplan.spec.settings import Settings
from cpplan.spec.workload import Item, Request, Workload
from cpplan.verifier import verify_plan

TOPOLOGIES = {
    "fixed": cpplan.Topology(cp=2, dp=4),
    "dynamic": cpplan.Topology(cp=2, dp=4, dynamic_cp=True),
}


@pytest.fixture(scope="module")
def uneven() -> Workload:
    """One 24,000-token request among forty of 1,000-3,000 tokens: at 7 GiB a pool of eight GPUs cannot
    give every GPU the same work in the same number of waves."""
    rng = np.random.default_rng(7)
    items = [Item(id="long", requests=(Request(tokens=rng.integers(0, 150_000, 24_000)),))]
    items += [
        Item(id=f"s{i}", requests=(Request(tokens=rng.integers(0, 150_000, int(rng.integers(1000, 3000)))),))
        for i in range(40)
    ]
    return Workload(items=tuple(items))


def _problem(workload: Workload, topology: cpplan.Topology, model) -> Problem:
    settings = Settings.from_user(topology=topology, model=model, memory_bytes="7GiB", num_layers=4)
    return Problem.build(workload, settings)


def _padded_makespan(plan, padding_s: float) -> float:
    """Each pool rank's last finish plus its padding waves at ``padding_s``, recomputed here."""
    schedule = plan.schedule
    finish = [0.0] * schedule.pool
    for wave, start, group in zip(plan.waves, schedule.start_s, schedule.gpus, strict=True):
        for g in group:
            finish[g] = max(finish[g], start + wave.cost_s)
    return max(f + p * padding_s for f, p in zip(finish, schedule.padding, strict=True))


@pytest.mark.parametrize("kind", list(TOPOLOGIES))
@pytest.mark.parametrize("strategy", list(PLANNERS))
def test_every_strategy_gives_every_gpu_the_same_number_of_waves(strategy, kind, uneven, qwen36):
    """Every strategy's plan, under fixed CP with dp = 4 and under dynamic CP, gives every pool rank the
    same number of real plus padding waves; ``pool_waves`` (of the plan and of its JSON) gives every rank
    a list of that length, padding as trailing ``None``; the cost is the padded makespan at the card's
    per-wave cost; the JSON states ``equal_waves`` and the padding, and the verifier agrees."""
    problem = _problem(uneven, TOPOLOGIES[kind], qwen36)
    profile = cpplan.load_solver("deterministic")
    plan, _ = PLANNERS[strategy](problem, profile, Deadline.of_profile(profile))
    assert plan is not None and plan.schedule is not None
    counts = wave_counts(plan.schedule.gpus, 8)
    assert len({n + p for n, p in zip(counts, plan.schedule.padding, strict=True)}) == 1
    overhead = problem.card.wave_overhead_s
    assert plan.schedule.padding_s == overhead
    assert math.isclose(plan.cost_s, _padded_makespan(plan, overhead), rel_tol=1e-12)
    data = plan_to_dict(problem, plan)
    assert data["topology"]["equal_waves"] is True and data["padding"]["waves"] == list(plan.schedule.padding)
    lengths = {len(pool_waves(data, g)) for g in range(8)} | {len(pool_waves(plan, g)) for g in range(8)}
    assert lengths == {max(counts)}
    verdict = verify_plan(data, problem.workload, problem.card, problem.memory_bytes)
    assert verdict.valid, verdict.violations
    assert math.isclose(verdict.cost_s, plan.cost_s, rel_tol=1e-9)


def test_padding_is_paid_and_the_opt_out_restores_the_unequal_plan(uneven, qwen36):
    """On this workload the unequal greedy plan leaves GPUs with fewer waves; under equal waves the
    same waves padded would cost their padding, so the equal plan costs at least the unequal one and
    at most those waves padded. The opt-out's plan JSON has neither ``equal_waves`` nor ``padding``,
    its ``pool_waves`` no ``None``, and it verifies as the unequal makespan."""
    profile = cpplan.load_solver("deterministic")
    deadline = Deadline.of_profile(profile)
    topology = TOPOLOGIES["fixed"]
    off = _problem(uneven, topology.model_copy(update={"equal_waves": False}), qwen36)
    unequal, _ = PLANNERS["greedy"](off, profile, deadline)
    counts = wave_counts(unequal.schedule.gpus, 8)
    assert len(set(counts)) > 1 and unequal.schedule.padding is None
    on = _problem(uneven, topology, qwen36)
    equal, _ = PLANNERS["greedy"](on, profile, deadline)
    naive_padding = [max(counts) - n for n in counts]
    overhead = on.card.wave_overhead_s
    finish = [0.0] * 8
    for wave, start, group in zip(
        unequal.waves, unequal.schedule.start_s, unequal.schedule.gpus, strict=True
    ):
        for g in group:
            finish[g] = max(finish[g], start + wave.cost_s)
    naive = max(f + p * overhead for f, p in zip(finish, naive_padding, strict=True))
    assert unequal.cost_s <= equal.cost_s <= naive + 1e-12
    data = plan_to_dict(off, unequal)
    assert "padding" not in data and "equal_waves" not in data["topology"]
    assert all(entry is not None for g in range(8) for entry in pool_waves(data, g))
    verdict = verify_plan(data, off.workload, off.card, off.memory_bytes)
    assert verdict.valid and verdict.cost_s == pytest.approx(unequal.cost_s, rel=1e-12)


def test_the_verifier_refuses_unequal_waves_claimed_equal(uneven, qwen36):
    """A plan claiming equal waves whose padding leaves ranks with unequal totals (too little or too
    much), whose padding is left out while its ranks' counts differ under a topology that requires equal
    waves, or whose cost leaves the padding out, is refused."""
    problem = _problem(uneven, TOPOLOGIES["fixed"], qwen36)
    layouts = cpplan.load_solver("deterministic").greedy.layouts
    in_order = cached_greedy_plan(group_problem(problem, problem.topology.cp), layouts)
    plan = balanced(in_order, problem.topology.pool, pool_padding_s(problem))  # uneven wave counts
    data = plan_to_dict(problem, plan)
    assert len(set(wave_counts([w["gpus"] for w in data["waves"]], 8))) > 1
    assert verify_plan(data, problem.workload, problem.card, problem.memory_bytes).valid
    padding = data["padding"]["waves"]
    edits = {
        "claims equal waves": {**data, "padding": {**data["padding"], "waves": [0] * 8}},
        "claims equal waves ": {
            **data,
            "padding": {**data["padding"], "waves": [padding[0] + 1, *padding[1:]]},
        },
        "requires equal waves": {k: v for k, v in data.items() if k != "padding"},
        "cost_s": {**data, "cost_s": max(w["start_s"] + w["cost_s"] for w in data["waves"])},
    }
    assert edits["cost_s"]["cost_s"] < data["cost_s"]
    for violation, edited in edits.items():
        verdict = verify_plan(edited, problem.workload, problem.card, problem.memory_bytes)
        assert not verdict.valid and any(violation.strip() in v for v in verdict.violations), violation


def test_materialize_pool_gives_none_for_padding_waves(uneven, qwen36):
    """``materialize_pool`` gives a batch per real wave and ``None`` per padding wave, every pool rank's
    list of one length."""
    problem = _problem(uneven, TOPOLOGIES["fixed"], qwen36)
    result = cpplan.solve(problem, cpplan.load_solver("deterministic"))
    lists = [materialize_pool(result, uneven, pool_rank=g) for g in range(8)]
    assert len({len(batches) for batches in lists}) == 1
    for g, batches in enumerate(lists):
        assert sum(b is None for b in batches) == result.plan.schedule.padding[g]
