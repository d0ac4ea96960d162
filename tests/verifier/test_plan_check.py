"""The independent verifier catches every kind of broken plan."""

from __future__ import annotations

import copy

import pytest

import cpplan
from cpplan import Topology
from cpplan.plans.plan_writer import plan_to_dict
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
    return verify_plan(data, problem.workload, problem.card, problem.memory_bytes)


def test_valid_plan_passes_and_is_repriced(planned):
    """A planner's plan passes, and the verifier's own price equals the plan's claimed cost."""
    problem, data = planned
    verdict = check(problem, data)
    assert verdict.valid, verdict.violations
    assert verdict.cost_s == pytest.approx(data["cost_s"], rel=1e-12)


def tamper(data, how):
    """A copy of the plan broken one way, and the violations (exact messages) that break must produce."""
    bad = copy.deepcopy(data)
    wave = bad["waves"][0]
    ranks = wave["ranks"]
    if how == "drop_request":
        entry = wave["requests"].pop()
        item, k = entry["item"], entry["request"]
        held = sum(e["item"] == item for e in wave["requests"])
        return bad, [
            f"request {k} of item {item!r} is in no wave",
            f"wave 0: item {item!r} has {held} of its {held + 1} requests "
            "(waves never split an item unless marked split)",
        ]
    if how == "duplicate_request":
        entry = copy.deepcopy(wave["requests"][0])
        bad["waves"][1]["requests"].append(entry)
        item, k = entry["item"], entry["request"]
        return bad, [
            f"request {k} of item {item!r} appears in waves 0 and 1",
            f"wave 1: request {k} of item {item!r} belongs to an item not listed",
        ]
    if how == "overlap":
        ranks[1]["ranges"][0][0] -= 128
        start, end = ranks[1]["ranges"][0]
        return bad, [f"wave 0 rank 1: range [{start}, {end}) overlaps another owner"]
    if how == "unowned":
        ranks[1]["ranges"][0][0] += 128
        return bad, ["wave 0: 128 packed tokens have no owner"]
    if how == "misaligned":
        ranks[0]["ranges"][0][1] -= 5
        ranks[1]["ranges"][0][0] -= 5
        (start0, end0), (start1, end1) = ranks[0]["ranges"][0], ranks[1]["ranges"][0]
        return bad, [
            f"wave 0 rank 0: range [{start0}, {end0}) is not on 128-token chunks",
            f"wave 0 rank 1: range [{start1}, {end1}) is not on 128-token chunks",
        ]
    if how == "wrong_tokens":
        wave["segments"][0][2] -= 1
        packed = wave["packed_tokens"]
        return bad, [f"wave 0: packed_tokens {packed} but segments hold {packed - 1}"]
    if how == "parent_after_child":
        wave["segments"][1][0] = 5
        return bad, ["wave 0 segment 1: parent 5 does not come before it"]
    if how == "claimed_peak":
        peak = ranks[0]["peak_bytes"]
        ranks[0]["peak_bytes"] //= 2
        return bad, [f"wave 0 rank 0: peak_bytes {peak // 2} but the verifier prices {peak}"]
    raise AssertionError(how)


@pytest.mark.parametrize(
    "how",
    [
        "drop_request",
        "duplicate_request",
        "overlap",
        "unowned",
        "misaligned",
        "wrong_tokens",
        "parent_after_child",
        "claimed_peak",
    ],
)
def test_tampered_plans_are_caught(planned, how):
    """Dropped or duplicated requests, overlapping, missing or misaligned ownership, broken segments
    (a shortened segment: the packed tokens the segments hold no longer match the wave's claim) and a
    false peak claim are each reported, with the message that names what is broken."""
    problem, data = planned
    bad, expected = tamper(data, how)
    verdict = check(problem, bad)
    assert not verdict.valid
    missing = [m for m in expected if m not in verdict.violations]
    assert not missing, (missing, verdict.violations)


def test_a_false_packed_tokens_claim_is_the_only_violation(planned):
    """A wave whose segments, chains and owners are intact but whose ``packed_tokens`` claim is off
    by one is refused for that claim alone: the packed-tokens check is the only one that sees it."""
    problem, data = planned
    bad = copy.deepcopy(data)
    wave = bad["waves"][1]
    packed = wave["packed_tokens"]
    wave["packed_tokens"] = packed + 1
    verdict = check(problem, bad)
    assert verdict.violations == (f"wave 1: packed_tokens {packed + 1} but segments hold {packed}",)


def test_over_budget_is_caught(planned):
    """The same plan checked against a smaller budget fails, naming the wave, rank and bytes."""
    problem, data = planned
    verdict = verify_plan(data, problem.workload, problem.card, 2 * 2**30)
    assert not verdict.valid
    assert any("exceeds the budget of 2,147,483,648 bytes" in v for v in verdict.violations)


def test_rank_sums_equal_a_mask_per_rank():
    """The verifier's piece-based per-rank sums (runs of one segment and one owner, closed-form per
    run; tokens a loss mask marks in segments not flagged whole, from prefix sums) equal the plain
    definition, one boolean mask per rank over every token: tokens, gradient and loss tokens, attention
    pairs (position + 1 per token), pieces (runs of one segment's tokens on the rank), tokens owned
    elsewhere."""
    import numpy as np

    from cpplan.verifier.owners import OwnerRuns
    from cpplan.verifier.rank_prices import pieces_of, rank_sums

    rng = np.random.default_rng(11)
    for _ in range(50):
        num_segments, cp = int(rng.integers(1, 9)), int(rng.integers(1, 5))
        lengths = rng.integers(1, 60, num_segments)
        segments = [
            (-1, int(p), int(n)) for p, n in zip(rng.integers(0, 500, num_segments), lengths, strict=True)
        ]
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).tolist()
        packed = int(lengths.sum())
        cuts = np.unique(np.concatenate([[0], rng.integers(0, packed, 4)]))
        owners = rng.integers(-1, cp, cuts.size)
        runs = OwnerRuns(start=cuts, end=np.append(cuts[1:], packed), owner=owners)
        seg_grad, seg_loss = rng.random(num_segments) < 0.7, rng.random(num_segments) < 0.5
        masked = {s: rng.random(int(lengths[s])) < 0.3 for s in range(num_segments) if rng.random() < 0.5}
        sums = rank_sums(
            pieces_of(segments, offsets, runs),
            {"grad": seg_grad, "loss": seg_loss},
            packed,
            cp,
            masked={"loss": masked},
            seg_start=np.array([p for _, p, _ in segments]),
        )
        owner = np.repeat(owners, np.diff(np.append(cuts, packed)))
        seg_of = np.repeat(np.arange(num_segments), lengths)
        pos = np.concatenate([np.arange(p, p + n) for _, p, n in segments])
        grad, loss = seg_grad[seg_of], seg_loss[seg_of]
        for s, marks in masked.items():
            loss[offsets[s] : offsets[s] + marks.size] |= marks
        for r in range(cp):
            mine = owner == r
            assert sums["tokens"][r] == mine.sum()
            assert sums["grad_tokens"][r] == (mine & grad).sum()
            assert sums["loss_tokens"][r] == (mine & loss).sum()
            assert sums["attn_pairs"][r] == (pos[mine] + 1).sum()
            assert sums["grad_attn_pairs"][r] == (pos[mine & grad] + 1).sum()
            starts = mine & np.r_[True, (owner[1:] != owner[:-1]) | (seg_of[1:] != seg_of[:-1])]
            assert sums["segments"][r] == starts.sum()
            assert sums["remote_tokens"][r] == packed - mine.sum()


def test_a_shared_segment_whose_requests_differ_is_caught(planned):
    """Checked against a workload where one request's shared prefix differs by one token, the plan's
    shared segment holds tokens that differ from that request: the verifier reads every request back
    token by token and names the wave, segment and request."""
    import numpy as np

    problem, data = planned
    workload = problem.workload
    item = workload.items[1]
    tokens = item.requests[1].tokens.copy()
    tokens[3] += 1
    changed = item.model_copy(
        update={"requests": (item.requests[0], cpplan.Request(tokens=tokens), *item.requests[2:])}
    )
    other = cpplan.Workload(items=(workload.items[0], changed, *workload.items[2:]))
    verdict = verify_plan(data, other, problem.card, problem.memory_bytes)
    assert not verdict.valid
    assert any("holds tokens that differ from request 1 of 'p1'" in v for v in verdict.violations), (
        verdict.violations
    )
    assert np.array_equal(workload.items[1].requests[1].tokens[:3], tokens[:3])
