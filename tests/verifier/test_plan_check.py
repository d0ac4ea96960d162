"""The independent verifier catches every kind of broken plan."""

from __future__ import annotations

import copy

import pytest

import cpplan
from cpplan import Topology
from cpplan.pricing.serialize import plan_to_dict
from cpplan.verifier import verify_plan
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


def test_rank_sums_equal_a_mask_per_rank():
    """The verifier's run-based per-rank sums equal the plain definition (one boolean mask per rank):
    tokens, gradient and loss tokens, attention pairs (position + 1 per token) and pieces (runs of one
    segment's tokens on the rank)."""
    import numpy as np

    from cpplan.verifier.rank_prices import rank_sums

    rng = np.random.default_rng(11)
    for _ in range(50):
        num_tokens, cp = int(rng.integers(1, 400)), int(rng.integers(1, 5))
        owner = np.repeat(rng.integers(0, cp, num_tokens // 7 + 1), 7)[:num_tokens]
        seg_of = np.sort(rng.integers(0, 9, num_tokens))
        pos = rng.integers(0, 1000, num_tokens)
        grad, loss = rng.random(num_tokens) < 0.7, rng.random(num_tokens) < 0.5
        sums = rank_sums(owner, seg_of, pos, grad, loss, cp)
        for r in range(cp):
            mine = owner == r
            assert sums["tokens"][r] == mine.sum()
            assert sums["grad_tokens"][r] == (mine & grad).sum()
            assert sums["loss_tokens"][r] == (mine & loss).sum()
            assert sums["attn_pairs"][r] == (pos[mine] + 1).sum()
            assert sums["grad_attn_pairs"][r] == (pos[mine & grad] + 1).sum()
            starts = mine & np.r_[True, (owner[1:] != owner[:-1]) | (seg_of[1:] != seg_of[:-1])]
            assert sums["segments"][r] == starts.sum()
