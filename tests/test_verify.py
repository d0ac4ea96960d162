"""The independent verifier catches every kind of broken plan."""

from __future__ import annotations

import copy

import pytest

import cpplan
from cpplan import Topology
from cpplan.serialize import plan_to_dict
from cpplan.verify import verify_plan
from tests.conftest import middle_budget


@pytest.fixture(scope="module")
def planned(small_grpo, qwen36):
    """A valid plan of the small GRPO workload at CP2 (several waves)."""
    result = cpplan.plan(
        small_grpo, topology=Topology(cp=2), model=qwen36, memory_bytes=middle_budget(small_grpo, qwen36, 2)
    )
    return result.problem, plan_to_dict(result.problem, result.plan)


def check(problem, data):
    return verify_plan(data, problem.workload, problem.card, problem.budget_bytes)


def test_valid_plan_passes_and_is_repriced(planned):
    """A planner's plan passes, and the verifier's own price equals the plan's claimed cost."""
    problem, data = planned
    verdict = check(problem, data)
    assert verdict.valid, verdict.violations
    assert verdict.cost_s == pytest.approx(data["cost_s"], rel=1e-12)


def tamper(data, how):
    bad = copy.deepcopy(data)
    wave = bad["waves"][0]
    if how == "drop_request":
        wave["requests"].pop()
    elif how == "duplicate_request":
        bad["waves"][1]["requests"].append(copy.deepcopy(wave["requests"][0]))
    elif how == "overlap":
        wave["ranks"][1]["ranges"][0][0] -= 128
    elif how == "unowned":
        wave["ranks"][1]["ranges"][0][0] += 128
    elif how == "misaligned":
        wave["ranks"][0]["ranges"][0][1] -= 5
        wave["ranks"][1]["ranges"][0][0] -= 5
    elif how == "wrong_tokens":
        wave["segments"][0][2] -= 1
    elif how == "parent_after_child":
        wave["segments"][1][0] = 5
    elif how == "claimed_peak":
        wave["ranks"][0]["peak_bytes"] //= 2
    return bad


@pytest.mark.parametrize(
    ("how", "needle"),
    [
        ("drop_request", "in no wave"),
        ("duplicate_request", "appears in waves"),
        ("overlap", "overlaps"),
        ("unowned", "no owner"),
        ("misaligned", "chunks"),
        ("wrong_tokens", ""),
        ("parent_after_child", "parent"),
        ("claimed_peak", "peak_bytes"),
    ],
)
def test_tampered_plans_are_caught(planned, how, needle):
    """Dropped or duplicated requests, overlapping, missing or misaligned ownership, broken segments and
    a false peak claim are each reported."""
    problem, data = planned
    verdict = check(problem, tamper(data, how))
    assert not verdict.valid
    assert any(needle in v for v in verdict.violations), verdict.violations


def test_over_budget_is_caught(planned):
    """The same plan checked against a smaller budget fails, naming the wave, rank and bytes."""
    problem, data = planned
    verdict = verify_plan(data, problem.workload, problem.card, 2 * 2**30)
    assert not verdict.valid
    assert any("exceeds the budget of 2,147,483,648 bytes" in v for v in verdict.violations)
