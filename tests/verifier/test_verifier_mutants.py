"""The verifier, check by check: each kind of break in a planner's plan is reported with its exact
message, and nothing else a valid plan holds is. Written against the survivors of mutation testing
(docs/robustness.md, "Mutation testing"): every test here fails when the check it names is deleted or
weakened."""

from __future__ import annotations

import copy

import pytest

import cpplan
from cpplan import Topology
from cpplan.spec.profile import load_solver
from cpplan.spec.workload_digest import plan_digest
from cpplan.verifier import verify_plan
from tests.conftest import middle_budget


def plan_for(workload, model, topology, budget, **kwargs) -> tuple[cpplan.PlanResult, dict]:
    """A deterministic plan and its JSON dictionary (without moving items between waves: the tests edit
    fields of the proposals' own wave shapes, a first wave sharing fully)."""
    profile = load_solver("deterministic")
    profile = profile.model_copy(update={"moves": profile.moves.model_copy(update={"max_pricings": 0})})
    result = cpplan.plan(
        workload, topology=topology, model=model, memory_bytes=budget, solver=profile, **kwargs
    )
    return result, result.to_dict()


def verdict_of(result: cpplan.PlanResult, data: dict, **kwargs) -> cpplan.Verification:
    """The verifier's verdict on ``data`` against the result's own workload, card and budget."""
    problem = result.problem
    budget = kwargs.pop("budget", problem.memory_bytes)
    return verify_plan(data, problem.workload, problem.card, budget, **kwargs)


@pytest.fixture(scope="module")
def fixed(small_grpo, qwen36):
    """Small GRPO at CP2 (one replica): two waves run one after the other."""
    return plan_for(small_grpo, qwen36, Topology(cp=2), middle_budget(small_grpo, qwen36, 2))


@pytest.fixture(scope="module")
def replicas(small_grpo, qwen36):
    """Small GRPO at CP2 over two replicas: two waves side by side on GPUs [0, 1] and [2, 3]."""
    return plan_for(small_grpo, qwen36, Topology(cp=2, dp=2), middle_budget(small_grpo, qwen36, 2))


@pytest.fixture(scope="module")
def pooled(small_grpo, qwen36):
    """Small GRPO with dynamic CP over a pool of four GPUs, at the budget of a CP4 group: the plan mixes
    CP groups of two and of one."""
    topology = Topology(cp=2, dp=2, dynamic_cp=True)
    return plan_for(small_grpo, qwen36, topology, middle_budget(small_grpo, qwen36, 4))


@pytest.fixture(scope="module")
def single(small_grpo, qwen36):
    """Small GRPO at CP1 on one GPU, at the budget of a CP4 group: nine waves in sequence, over a
    second in all."""
    return plan_for(small_grpo, qwen36, Topology(cp=1), middle_budget(small_grpo, qwen36, 4))


@pytest.fixture(scope="module")
def single_replicas(small_grpo, qwen36):
    """Small GRPO at CP1 over two replicas (a pool of two GPUs, groups of one)."""
    return plan_for(small_grpo, qwen36, Topology(cp=1, dp=2), middle_budget(small_grpo, qwen36, 2))


@pytest.fixture(scope="module")
def split():
    """An item too large for one wave, split into two consecutive waves marked split, then a wave of
    two small items."""
    from tests.planners.test_split import CARD, PAIR_A, TOPOLOGY, WHOLE, WORKLOAD

    return plan_for(WORKLOAD, CARD, TOPOLOGY, (PAIR_A + WHOLE) // 2, num_layers=4)


def test_fixtures_have_the_shapes_the_tests_rely_on(fixed, replicas, pooled, single, single_replicas, split):
    """The fixed plan has two waves in sequence on GPUs [0, 1]; the replicas plan two waves side by
    side; the pooled plan mixes CP groups of two and of one, every pool rank running the same number of
    waves; the CP1 plan nine waves in sequence; the split plan two split waves of item 'big' and a
    third, unsplit wave."""
    shapes = {
        "fixed": [(w["cp"], w["gpus"]) for w in fixed[1]["waves"]],
        "replicas": [(w["cp"], w["gpus"], w["start_s"]) for w in replicas[1]["waves"]],
        "pooled": [(w["cp"], w["gpus"]) for w in pooled[1]["waves"]],
        "single": [(w["cp"], w["gpus"]) for w in single[1]["waves"]],
        "single_replicas": [w["gpus"] for w in single_replicas[1]["waves"]],
        "split": [(w["items"], w["split"]) for w in split[1]["waves"]],
    }
    assert shapes["fixed"] == [(2, [0, 1]), (2, [0, 1])]
    assert shapes["replicas"] == [(2, [0, 1], 0.0), (2, [2, 3], 0.0)]
    assert {cp for cp, _ in shapes["pooled"]} == {1, 2}
    per_rank = [sum(g in gpus for _, gpus in shapes["pooled"]) for g in range(4)]
    assert len(set(per_rank)) == 1
    assert shapes["single"] == [(1, [0])] * 9
    assert sorted(map(tuple, shapes["single_replicas"])) == [(0,), (0,), (1,), (1,)]
    assert shapes["split"] == [(["big"], True), (["big"], True), (["small", "after"], False)]


@pytest.mark.parametrize("name", ["fixed", "replicas", "pooled", "single", "single_replicas", "split"])
def test_valid_plans_verify_with_their_own_prices(name, request):
    """Every planner plan (fixed CP, replicas, dynamic CP, CP1, a split item) verifies with no
    violation; the verifier's plan cost, per-wave costs and worst peak are the plan's claims."""
    result, data = request.getfixturevalue(name)
    verdict = verdict_of(result, data)
    assert verdict.valid and verdict.violations == ()
    assert verdict.cost_s == pytest.approx(data["cost_s"], rel=1e-12)
    assert verdict.wave_costs_s == pytest.approx([w["cost_s"] for w in data["waves"]], rel=1e-12)
    claimed_peak = max(r["peak_bytes"] for w in data["waves"] for r in w["ranks"])
    assert abs(verdict.peak_bytes - claimed_peak) <= 2


def test_the_plan_cost_is_the_sum_in_sequence_and_the_makespan_side_by_side(fixed, replicas, pooled):
    """On one replica the plan costs the sum of its waves; over replicas (and under dynamic CP) the
    last finish of the replay, each wave starting when its GPUs are all free: for the replicas the
    larger of the two side-by-side waves, for the pooled plan (groups of two and one, no padding) less
    than its waves' sum."""
    for result, data in (fixed, replicas, pooled):
        verdict = verdict_of(result, data)
        costs = verdict.wave_costs_s
        free = [0.0] * result.problem.card.topology.pool
        for wave, cost in zip(data["waves"], costs, strict=True):
            start = max(free[g] for g in wave["gpus"])
            for g in wave["gpus"]:
                free[g] = start + cost
        expected = max(free) if result.problem.card.topology.dp > 1 else sum(costs)
        assert verdict.cost_s == pytest.approx(expected, rel=1e-12)
    assert verdict_of(*replicas).cost_s == pytest.approx(max(verdict_of(*replicas).wave_costs_s), rel=1e-12)
    assert pooled[1]["padding"]["waves"] == [0, 0, 0, 0]
    assert verdict_of(*pooled).cost_s < sum(verdict_of(*pooled).wave_costs_s)
    assert verdict_of(*replicas).cost_s < sum(verdict_of(*replicas).wave_costs_s)


@pytest.mark.parametrize("data", [{}, {"waves": []}, {"waves": {"0": {}}}, {"waves": "x"}])
def test_a_plan_without_waves_is_one_violation(fixed, data):
    """A plan with no list of waves is refused with one violation and no price."""
    verdict = verdict_of(fixed[0], data)
    assert verdict == cpplan.Verification(
        valid=False, violations=("plan has no waves",), cost_s=None, peak_bytes=None
    )
    assert verdict.wave_costs_s == ()


def _misaligned(data: dict, chunk: int) -> list[str]:
    """The verifier's messages for the plan's ranges read with ``chunk``-token chunks."""
    found = []
    for w, wave in enumerate(data["waves"]):
        for entry in wave["ranks"]:
            for start, end in entry["ranges"]:
                if start % chunk or (end % chunk and end != wave["packed_tokens"]):
                    rank = entry["rank"]
                    found.append(
                        f"wave {w} rank {rank}: range [{start}, {end}) is not on {chunk}-token chunks"
                    )
    return found


def test_the_chunk_size_comes_from_the_argument_then_the_plan_then_the_default(fixed):
    """Ranges are checked on ``chunk_tokens`` chunks: the argument's, else the plan's, else 128. Read
    with 2,048-token chunks, the plan's 128-token ranges that are off them are reported (and only they);
    the fixed plan's ranks meet at 3,072 tokens, a multiple of 512 and 1,024 but not of 2,048."""
    result, data = fixed
    assert data["chunk_tokens"] == 128
    expected = tuple(_misaligned(data, 2048))
    assert expected
    assert verdict_of(result, data, chunk_tokens=2048).violations == expected
    claims_2048 = {**data, "chunk_tokens": 2048}
    assert verdict_of(result, claims_2048).violations == expected
    assert verdict_of(result, claims_2048, chunk_tokens=128).valid
    no_claim = {k: v for k, v in data.items() if k != "chunk_tokens"}
    assert verdict_of(result, no_claim).valid
    assert not verdict_of(result, no_claim, chunk_tokens=129).valid


def _in_no_wave(wave: dict) -> list[str]:
    keys = sorted((e["item"], e["request"]) for e in wave["requests"])
    return [f"request {k} of item {item!r} is in no wave" for item, k in keys]


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda wave: wave.pop("segments"), "KeyError: 'segments'"),
        (lambda wave: wave.update(segments=None), "TypeError: 'NoneType' object is not iterable"),
        (
            lambda wave: wave["segments"][0].__setitem__(0, "root"),
            "ValueError: invalid literal for int() with base 10: 'root'",
        ),
        (lambda wave: wave["segments"].__setitem__(0, [-1, 0]), "ValueError: not enough values to unpack"),
    ],
)
def test_a_malformed_wave_is_reported_and_the_others_still_checked(fixed, change, error):
    """A wave the verifier cannot read is one violation naming the exception; its requests are then in
    no wave; the next wave is still priced (and, now first on its GPUs, its claimed start is off)."""
    result, data = fixed
    bad = copy.deepcopy(data)
    change(bad["waves"][0])
    verdict = verdict_of(result, bad)
    first, *rest = verdict.violations
    assert first.startswith(f"wave 0: malformed ({error}")
    start = bad["waves"][1]["start_s"]
    assert rest == [
        *_in_no_wave(data["waves"][0]),
        f"wave 1: start_s {start} but the replay starts it at 0.0",
    ]
    assert verdict.wave_costs_s == pytest.approx([data["waves"][1]["cost_s"]], rel=1e-12)


@pytest.mark.parametrize("value", [1, "wave", [], None])
def test_a_wave_that_is_not_an_object_is_a_violation_not_a_crash(fixed, value):
    """A wave entry that is not a JSON object (a number, a string, a list, null) is one violation
    naming its type; its requests are in no wave; the next wave is still priced."""
    result, data = fixed
    bad = copy.deepcopy(data)
    bad["waves"][0] = value
    verdict = verdict_of(result, bad)
    first, *rest = verdict.violations
    assert first == f"wave 0: malformed (a wave is a JSON object, got {type(value).__name__})"
    assert rest[: len(_in_no_wave(data["waves"][0]))] == _in_no_wave(data["waves"][0])
    assert verdict.wave_costs_s == pytest.approx([data["waves"][1]["cost_s"]], rel=1e-12)


def test_a_false_plan_cost_is_the_only_violation(fixed, single):
    """A plan whose waves all check but whose total ``cost_s`` is off (beyond the relative tolerance
    of 1e-9, absolute below one second) is refused for that alone; within the tolerance it passes; a
    claim that is not a number, or none, is refused for that alone. The CP1 plan costs over a second, so
    its tolerance is relative."""
    assert verdict_of(*single).cost_s > 1.0
    for result, data in (fixed, single):
        total = verdict_of(result, data).cost_s
        scale = max(1.0, total)
        off = {**data, "cost_s": total + 1.5e-9 * scale}
        assert verdict_of(result, off).violations == (
            f"plan cost_s {off['cost_s']} differs from the verifier's {total}",
        )
        assert verdict_of(result, {**data, "cost_s": total + 0.9e-9 * scale}).valid
        for claim in (None, "1.0", True):
            assert verdict_of(result, {**data, "cost_s": claim}).violations == (
                f"plan cost_s {claim!r} is not a number of seconds",
            )
    result, data = fixed
    without = {k: v for k, v in data.items() if k != "cost_s"}
    assert verdict_of(result, without).violations == ("plan: field 'cost_s' is missing",)


def test_a_false_wave_cost_is_the_only_violation(fixed):
    """A wave's claimed ``cost_s`` off by more than the tolerance is one violation naming the wave and
    both figures; the replay uses the verifier's own price, so the next wave's start still checks."""
    result, data = fixed
    bad = copy.deepcopy(data)
    wave = bad["waves"][0]
    priced = wave["cost_s"]
    wave["cost_s"] = priced + 2e-9
    verdict = verdict_of(result, bad)
    assert len(verdict.violations) == 1
    assert verdict.violations[0].startswith(f"wave 0: cost_s {priced + 2e-9} but the verifier prices ")
    figure, mode = verdict.violations[0].split(" but the verifier prices ")[1].split(" ", 1)
    assert (
        float(figure) == pytest.approx(priced, rel=1e-12)
        and mode == f"(GDN hand-off {wave['gdn_handoff']!r})"
    )
    wave["cost_s"] = priced + 0.5e-9
    assert verdict_of(result, bad).valid


def test_peak_claims_are_checked_within_two_bytes(fixed):
    """A rank's ``peak_bytes`` claim may be off by up to two bytes (rounding); three is a violation."""
    result, data = fixed
    bad = copy.deepcopy(data)
    rank = bad["waves"][1]["ranks"][1]
    peak = rank["peak_bytes"]
    for delta in (-2, 2):
        rank["peak_bytes"] = peak + delta
        assert verdict_of(result, bad).valid, delta
    for delta in (-3, 3):
        rank["peak_bytes"] = peak + delta
        assert verdict_of(result, bad).violations == (
            f"wave 1 rank 1: peak_bytes {peak + delta} but the verifier prices {peak}",
        )
    del rank["peak_bytes"]
    assert verdict_of(result, bad).violations == (
        f"wave 1 rank 1: peak_bytes None but the verifier prices {peak}",
    )


def test_token_claims_are_checked(fixed):
    """A rank's ``tokens`` and ``loss_tokens`` claims must be the tokens it owns and the owned tokens
    whose logits are needed; a missing claim is reported as ``None`` against the verifier's count."""
    result, data = fixed
    bad = copy.deepcopy(data)
    rank = bad["waves"][0]["ranks"][0]
    tokens, loss = rank["tokens"], rank["loss_tokens"]
    rank["tokens"] += 1
    rank["loss_tokens"] -= 1
    assert verdict_of(result, bad).violations == (
        f"wave 0 rank 0: tokens {tokens + 1} but owns {tokens}",
        f"wave 0 rank 0: loss_tokens {loss - 1} but the verifier counts {loss} owned tokens whose logits "
        "are needed",
    )
    del rank["tokens"], rank["loss_tokens"]
    assert verdict_of(result, bad).violations == (
        f"wave 0 rank 0: tokens None but owns {tokens}",
        f"wave 0 rank 0: loss_tokens None but the verifier counts {loss} owned tokens whose logits "
        "are needed",
    )


def test_the_budget_is_a_bound_the_worst_peak_may_meet(fixed):
    """A plan whose worst rank peak equals the budget fits; one byte less and that rank, and only
    ranks above the new budget, are reported with the bytes."""
    result, data = fixed
    worst = verdict_of(result, data).peak_bytes
    assert verdict_of(result, data, budget=worst).valid
    over = [
        (w, entry["rank"])
        for w, wave in enumerate(data["waves"])
        for entry in wave["ranks"]
        if abs(entry["peak_bytes"] - worst) <= 2
    ]
    assert over
    violations = verdict_of(result, data, budget=worst - 1).violations
    assert len(violations) == len(over)
    for (w, rank), message in zip(over, violations, strict=True):
        assert message == (
            f"wave {w} rank {rank}: predicted peak {worst:,} bytes exceeds the budget of {worst - 1:,} bytes"
        )


def test_a_split_wave_not_marked_split_is_caught(split):
    """Item 'big' in two waves, one no longer marked split: the wave holds part of an item without
    the mark, and the item is split over waves that are not all marked."""
    result, data = split
    bad = copy.deepcopy(data)
    bad["waves"][1]["split"] = False
    assert verdict_of(result, bad).violations == (
        "wave 1: item 'big' has 2 of its 4 requests (waves never split an item unless marked split)",
        "item 'big' is split over waves [0, 1]; waves [1] are not marked split",
    )


def _reordered(data: dict, order: list[int]) -> dict:
    """``data`` with its waves in ``order``, each ``index`` its new place and the workload's wave
    digests in the same order (what a plan of those waves in that order states)."""
    digests = [data["workload"]["wave_sha256"][w] for w in order]
    workload = {**data["workload"], "wave_sha256": digests, "sha256": plan_digest(digests)}
    waves = [{**data["waves"][w], "index": k} for k, w in enumerate(order)]
    return {**data, "waves": waves, "workload": workload}


def test_split_waves_after_other_waves_are_consecutive(split):
    """The split item's two waves placed after the small items' wave (waves 1 and 2) are still
    consecutive: with the claimed starts not replayed, the plan verifies."""
    result, data = split
    later = _reordered(data, [2, 0, 1])
    verdict = verdict_of(result, later, check_starts=False)
    assert verdict.valid, verdict.violations


def test_split_waves_must_be_consecutive(split):
    """The split item's two waves moved apart (the small items' wave between them) are reported as not
    consecutive; with the claimed starts not replayed, that is the only violation."""
    result, data = split
    bad = _reordered(data, [0, 2, 1])
    assert verdict_of(result, bad, check_starts=False).violations == (
        "item 'big' is split over waves [0, 2], which are not consecutive",
    )
    assert not verdict_of(result, bad).valid


def test_a_part_of_a_plan_is_checked_against_its_requests(fixed):
    """A plan holding only the first wave verifies against that wave's requests (with its starts not
    replayed); against the whole workload, every request of the other wave is in no wave."""
    result, data = fixed
    first = {**data, "waves": data["waves"][:1]}
    first.pop("cost_s")
    held = [(e["item"], e["request"]) for e in data["waves"][0]["requests"]]
    assert verdict_of(result, first, requests=held, check_starts=False).valid
    assert verdict_of(result, first, requests=held[:-1], check_starts=False).valid
    assert verdict_of(result, first).violations == tuple(_in_no_wave(data["waves"][1]))
    assert verdict_of(result, first, requests=[*held, ("p0", 99)]).valid


def test_requests_outside_the_workload_are_named(fixed):
    """A request index one past its item's last request, and a request of an item the workload lacks,
    are each named as not in the workload (never read as malformed); a listed item the workload lacks
    is named too; the wave's other requests are still read (none of them is in no wave)."""
    result, data = fixed
    bad = copy.deepcopy(data)
    wave = bad["waves"][0]
    entry = wave["requests"][0]
    item, k = entry["item"], entry["request"]
    num_requests = sum(e["item"] == item for e in wave["requests"])
    entry["request"] = num_requests
    violations = verdict_of(result, bad).violations
    assert f"request {num_requests} of item {item!r} is not in the workload" in violations
    assert [v for v in violations if "in no wave" in v] == [f"request {k} of item {item!r} is in no wave"]
    assert not any("malformed" in v for v in violations), violations
    entry["request"], entry["item"] = k, "ghost"
    wave["items"].insert(0, "ghost")
    violations = verdict_of(result, bad).violations
    assert f"request {k} of item 'ghost' is not in the workload" in violations
    assert "wave 0: item 'ghost' is not in the workload" in violations
    assert f"wave 0: item {item!r} has {num_requests - 1} of its {num_requests} requests" in " ".join(
        violations
    )
    assert [v for v in violations if "in no wave" in v] == [f"request {k} of item {item!r} is in no wave"]


def test_a_repeated_request_does_not_hide_the_ones_after_it(fixed):
    """A request of wave 0 repeated first in wave 1 is reported (as a repeat, and as an item wave 1
    does not list); wave 1's own requests after it are still read, so nothing else is reported."""
    result, data = fixed
    bad = copy.deepcopy(data)
    entry = copy.deepcopy(data["waves"][0]["requests"][0])
    bad["waves"][1]["requests"].insert(0, entry)
    item, k = entry["item"], entry["request"]
    assert verdict_of(result, bad).violations == (
        f"wave 1: request {k} of item {item!r} belongs to an item not listed",
        f"request {k} of item {item!r} appears in waves 0 and 1",
    )


def _chain(data: dict, w: int = 0, r: int = 0) -> list[int]:
    return data["waves"][w]["requests"][r]["segments"]


def test_request_chains_are_read_segment_by_segment(fixed):
    """A chain naming a segment that does not exist, skipping one, or ending early is reported for
    that request, naming its wave, index, item and the segment (or the tokens read back)."""
    result, data = fixed
    request = result.problem.workload.items[0].requests[0]
    assert data["waves"][0]["requests"][0]["item"] == "p0" and data["waves"][0]["requests"][0]["request"] == 0
    chain = _chain(data)
    assert len(chain) == 3
    cases = {
        (chain[0], chain[1], 99): "wave 0: request 0 of 'p0' names segment 99, out of range",
        (chain[0], chain[2]): f"wave 0: request 0 of 'p0' has a broken chain at segment {chain[2]}",
        (chain[1], chain[2]): f"wave 0: request 0 of 'p0' has a broken chain at segment {chain[1]}",
    }
    for bad_chain, message in cases.items():
        bad = copy.deepcopy(data)
        bad["waves"][0]["requests"][0]["segments"] = list(bad_chain)
        assert message in verdict_of(result, bad).violations, bad_chain
    bad = copy.deepcopy(data)
    bad["waves"][0]["requests"][0]["segments"] = chain[:2]
    read = sum(data["waves"][0]["segments"][s][2] for s in chain[:2])
    violations = verdict_of(result, bad).violations
    message = f"wave 0: request 0 of 'p0' reads back {read} of {request.num_tokens} tokens"
    assert violations[0] == message, violations


def test_segment_trees_are_checked_segment_by_segment(fixed):
    """An empty segment, a segment naming itself as parent, a root not starting at position 0 and a
    child not continuing its parent are each reported with the wave, segment and positions; a request
    reading through the child that does not continue its parent (its parent right, its start wrong)
    has a broken chain there."""
    result, data = fixed
    segments = data["waves"][0]["segments"]
    parent, position, _ = segments[2]
    assert parent == 1 and position == segments[1][1] + segments[1][2]
    cases = {
        (2, 2, 0): "wave 0 segment 2: length 0 < 1",
        (1, 0, 1): "wave 0 segment 1: parent 1 does not come before it",
        (0, 1, 5): "wave 0 segment 0: a root segment starts at position 5, not 0",
        (2, 1, position + 1): f"wave 0 segment 2: position {position + 1} does not continue parent 1",
    }
    for (s, field, value), message in cases.items():
        bad = copy.deepcopy(data)
        bad["waves"][0]["segments"][s][field] = value
        violations = verdict_of(result, bad).violations
        assert violations[0] == message, violations
    through = [e for e in data["waves"][0]["requests"] if 2 in e["segments"]]
    assert through
    for entry in through:
        name = f"request {entry['request']} of {entry['item']!r}"
        assert f"wave 0: {name} has a broken chain at segment 2" in violations, violations


def test_ranks_must_be_listed_once_each(fixed):
    """Ownership names each CP rank exactly once: a rank listed twice, or missing, is reported."""
    result, data = fixed
    bad = copy.deepcopy(data)
    ranks = bad["waves"][0]["ranks"]
    ranks.append({**ranks[1], "ranges": []})
    assert verdict_of(result, bad).violations == ("wave 0: ranks listed are not exactly 0..1",)
    bad["waves"][0]["ranks"] = bad["waves"][0]["ranks"][:1]
    violations = verdict_of(result, bad).violations
    packed = data["waves"][0]["packed_tokens"]
    start = data["waves"][0]["ranks"][1]["ranges"][0][0]
    assert violations[:2] == (
        "wave 0: ranks listed are not exactly 0..1",
        f"wave 0: {packed - start} packed tokens have no owner",
    )


def test_owned_ranges_are_read_in_any_order_and_any_cut(fixed):
    """The same ownership listed with the ranks in reverse order, or with a rank's range cut in two
    touching ranges on a chunk boundary, verifies with the same price."""
    result, data = fixed
    reverse = copy.deepcopy(data)
    for wave in reverse["waves"]:
        wave["ranks"] = wave["ranks"][::-1]
    assert verdict_of(result, reverse).valid
    cut = copy.deepcopy(data)
    for wave in cut["waves"]:
        for entry in wave["ranks"]:
            start, end = entry["ranges"][0]
            middle = start + (end - start) // 256 * 128
            assert start < middle < end
            entry["ranges"][0:1] = [[start, middle], [middle, end]]
    verdict = verdict_of(result, cut)
    assert verdict.valid, verdict.violations
    assert verdict.wave_costs_s == verdict_of(result, data).wave_costs_s


def test_owned_ranges_outside_the_wave_or_empty_are_refused(fixed):
    """A range past the packed tokens, starting below zero or empty is reported and ignored (its
    tokens then have no owner)."""
    result, data = fixed
    packed = data["waves"][0]["packed_tokens"]
    start = data["waves"][0]["ranks"][1]["ranges"][0][0]
    for bad_range in ([start, packed + 1], [-128, packed], [start, start]):
        bad = copy.deepcopy(data)
        bad["waves"][0]["ranks"][1]["ranges"] = [bad_range]
        violations = verdict_of(result, bad).violations
        lo, hi = bad_range
        assert violations[:2] == (
            f"wave 0 rank 1: range [{lo}, {hi}) outside [0, {packed})",
            f"wave 0: {packed - start} packed tokens have no owner",
        ), violations


def test_a_gap_at_the_end_is_unowned(fixed):
    """The last rank's range ending one chunk early (on a chunk boundary) leaves the wave's tail with
    no owner; the rank's token claim is then off by the same count."""
    result, data = fixed
    bad = copy.deepcopy(data)
    packed = data["waves"][0]["packed_tokens"]
    end = packed // 128 * 128
    assert end < packed
    bad["waves"][0]["ranks"][1]["ranges"][0][1] = end
    tokens = data["waves"][0]["ranks"][1]["tokens"]
    violations = verdict_of(result, bad).violations
    assert violations[:2] == (
        f"wave 0: {packed - end} packed tokens have no owner",
        f"wave 0 rank 1: tokens {tokens} but owns {tokens - (packed - end)}",
    )


def test_overlapping_ranges_go_to_the_later_one(fixed):
    """When rank 1's range reaches a chunk into rank 0's, the overlap is reported and the tokens in it
    are counted as rank 1's (ranges are written in the order listed)."""
    result, data = fixed
    bad = copy.deepcopy(data)
    bad["waves"][0]["ranks"][1]["ranges"][0][0] -= 128
    start, end = bad["waves"][0]["ranks"][1]["ranges"][0]
    ranks = data["waves"][0]["ranks"]
    violations = verdict_of(result, bad).violations
    assert violations[0] == f"wave 0 rank 1: range [{start}, {end}) overlaps another owner"
    assert f"wave 0 rank 0: tokens {ranks[0]['tokens']} but owns {ranks[0]['tokens'] - 128}" in violations
    loss = ranks[0]["loss_tokens"]
    assert (
        f"wave 0 rank 0: loss_tokens {loss} but the verifier counts {loss - 128} owned tokens whose logits "
        "are needed"
    ) in violations
    assert f"wave 0 rank 1: tokens {ranks[1]['tokens']} but owns {ranks[1]['tokens'] + 128}" in violations


def _without(data: dict, key: str) -> dict:
    bad = copy.deepcopy(data)
    for wave in bad["waves"]:
        wave.pop(key)
    return bad


def test_waves_without_a_group_size_take_the_topologys(fixed, single):
    """A plan written before waves named their CP group size verifies: each wave takes the topology's
    ``cp``."""
    for result, data in (fixed, single):
        verdict = verdict_of(result, _without(data, "cp"))
        assert verdict.valid, verdict.violations


def test_a_wave_groups_size_must_be_one_the_topology_allows(fixed, pooled, single):
    """A wave's ``cp`` must be an integer group size of the topology (not a float, string or boolean
    that compares equal): otherwise the wave is refused, naming the sizes allowed, and not priced."""
    cases = [
        (fixed, 2.0, "2.0", "(2)"),
        (fixed, "2", "'2'", "(2)"),
        (fixed, 4, "4", "(2)"),
        (single, True, "True", "(1)"),
        (pooled, 3, "3", "(1, 2, 4)"),
    ]
    for (result, data), size, shown, allowed in cases:
        bad = copy.deepcopy(data)
        bad["waves"][0]["cp"] = size
        topology = result.problem.card.topology
        verdict = verdict_of(result, bad)
        assert verdict.violations[0] == (
            f"wave 0: cp {shown} is not a group size of topology {topology} {allowed}"
        ), verdict.violations
        assert len(verdict.wave_costs_s) == len(data["waves"]) - 1


def test_waves_without_gpus_are_dealt_round_robin_to_the_replicas(replicas, fixed):
    """A plan written before schedules (no ``gpus``) verifies when its waves, dealt round robin to the
    replicas, start where they claim: over two replicas the two waves run side by side, on one they
    run in sequence."""
    for result, data in (replicas, fixed):
        verdict = verdict_of(result, _without(data, "gpus"))
        assert verdict.valid, verdict.violations
    result, data = replicas
    late = _without(data, "gpus")
    late["waves"][1]["start_s"] = data["waves"][0]["cost_s"]
    assert verdict_of(result, late).violations == (
        f"wave 1: start_s {data['waves'][0]['cost_s']} but the replay starts it at 0.0",
    )


def test_gpus_must_be_an_aligned_block_of_the_pool(replicas, single_replicas):
    """A wave's ``gpus`` must list its group size of consecutive integer pool ranks starting at a
    multiple of the size, inside the pool; anything else is reported with the pool's size."""
    result, data = replicas
    for gpus in ([1, 2], [2, 3, 4], [2], [4, 5], [2, 3.0], "2,3", [3, 2]):
        bad = copy.deepcopy(data)
        bad["waves"][1]["gpus"] = gpus
        violations = verdict_of(result, bad, check_starts=False).violations
        assert violations == (f"wave 1: gpus {gpus!r} is not an aligned block of 2 ranks of the pool of 4",)
    result, data = single_replicas
    bad = copy.deepcopy(data)
    bad["waves"][0]["gpus"] = [2]
    assert verdict_of(result, bad, check_starts=False).violations == (
        "wave 0: gpus [2] is not an aligned block of 1 ranks of the pool of 2",
    )


def test_swapped_replicas_still_verify_and_a_shared_one_delays(replicas, small_grpo, qwen36):
    """Waves on each other's replica still start at zero; both on one replica, the second starts when
    the first finishes, so its claimed start of zero is reported. Under equal waves (the default over
    replicas) the shared placement also breaks the plan's claim of one wave per GPU, and that is
    reported too; a plan that opted out (``equal_waves=False``) is refused for the start alone."""
    opted_out = plan_for(
        small_grpo, qwen36, Topology(cp=2, dp=2, equal_waves=False), middle_budget(small_grpo, qwen36, 2)
    )
    assert "padding" in replicas[1] and "padding" not in opted_out[1]
    for (result, data), equal in ((replicas, True), (opted_out, False)):
        swapped = copy.deepcopy(data)
        swapped["waves"][0]["gpus"], swapped["waves"][1]["gpus"] = [2, 3], [0, 1]
        swapped["waves"][0]["dp_rank"], swapped["waves"][1]["dp_rank"] = 1, 0
        assert verdict_of(result, swapped).valid
        shared = copy.deepcopy(data)
        shared["waves"][1]["gpus"], shared["waves"][1]["dp_rank"] = [0, 1], 0
        first = verdict_of(result, data).wave_costs_s[0]
        delayed = f"wave 1: start_s 0.0 but the replay starts it at {first}"
        unequal = (
            "the plan claims equal waves per GPU, but with padding pool ranks run 0 to 2 waves "
            "(real waves [2, 2, 0, 0], padding [0, 0, 0, 0])"
        )
        expected = (delayed, unequal) if equal else (delayed,)
        assert verdict_of(result, shared).violations == expected


def test_claimed_starts_are_replayed_unless_absent_or_not_numbers(single):
    """Each wave's ``start_s`` must be when the replay starts it (the sum of the earlier waves' costs on
    one GPU, within the tolerance); a missing, boolean or non-numeric claim is not checked, and
    ``check_starts=False`` skips the replay's checks."""
    result, data = single
    starts = [w["start_s"] for w in data["waves"]]
    assert starts[0] == 0.0 and starts[2] > 0
    for claim, valid in ((starts[2] + 2e-9, False), (starts[2] + 0.5e-9, True), (None, True), (True, True)):
        bad = copy.deepcopy(data)
        bad["waves"][2]["start_s"] = claim
        assert verdict_of(result, bad).valid == valid, claim
    bad = copy.deepcopy(data)
    bad["waves"][2]["start_s"] = 0
    assert verdict_of(result, bad).violations == (
        f"wave 2: start_s 0 but the replay starts it at {starts[2]}",
    )
    assert verdict_of(result, bad, check_starts=False).valid


def test_a_group_size_the_card_cannot_price_is_refused_before_any_wave(pooled, qwen36):
    """A card that supports CP groups of at most two cannot be resolved for the pooled plan's pool of
    four (a resolved card holds every group size's card), so such a plan is never priced: the error
    names the field, the card and the group size."""
    result, _ = pooled
    limited = cpplan.ModelCard.model_validate({**qwen36.model_dump(), "supports": "pp == 1 and cp <= 2"})
    with pytest.raises(cpplan.UnsupportedTopologyError) as caught:
        limited.resolve(result.problem.card.topology)
    message = str(caught.value)
    assert message.startswith("field 'topology.dynamic_cp': model card 'qwen3.6-35b-a3b' cannot price ")
    assert "dynamic CP group size 4 of the pool of 4 GPUs" in message


def test_a_range_outside_the_wave_does_not_hide_the_next(fixed):
    """A rank listing a range outside the wave before its real one: the bad range is reported and
    skipped, the real one still read (so nothing else is reported)."""
    result, data = fixed
    bad = copy.deepcopy(data)
    ranges = bad["waves"][0]["ranks"][1]["ranges"]
    packed = data["waves"][0]["packed_tokens"]
    ranges.insert(0, [-128, 0])
    assert verdict_of(result, bad).violations == (f"wave 0 rank 1: range [-128, 0) outside [0, {packed})",)


def test_a_range_inside_another_splits_it_in_three_runs(fixed):
    """Rank 0 listed as owning the whole wave, then rank 1 a chunk-aligned middle part: the middle goes
    to rank 1 (the later range), the rest stays rank 0's, in three runs; the overlap is reported and
    the token claims are checked against that ownership."""
    result, data = fixed
    bad = copy.deepcopy(data)
    packed = data["waves"][0]["packed_tokens"]
    ranks = bad["waves"][0]["ranks"]
    ranks[0]["ranges"], ranks[1]["ranges"] = [[0, packed]], [[1280, 2560]]
    ranks[0]["tokens"], ranks[1]["tokens"] = packed - 1280, 1280
    violations = verdict_of(result, bad).violations
    assert violations[0] == "wave 0 rank 1: range [1280, 2560) overlaps another owner"
    assert not any(" but owns " in v or "malformed" in v for v in violations), violations


def test_a_gap_at_the_start_is_unowned(fixed):
    """Rank 0's range starting one chunk late leaves the wave's first chunk with no owner."""
    result, data = fixed
    bad = copy.deepcopy(data)
    bad["waves"][0]["ranks"][0]["ranges"][0][0] += 128
    tokens = data["waves"][0]["ranks"][0]["tokens"]
    violations = verdict_of(result, bad).violations
    assert violations[:2] == (
        "wave 0: 128 packed tokens have no owner",
        f"wave 0 rank 0: tokens {tokens} but owns {tokens - 128}",
    )


def test_a_segment_on_no_chain_is_reported(fixed):
    """A request left out of its wave leaves the leaf segment only it used on no chain: reported with
    the wave and segment."""
    result, data = fixed
    bad = copy.deepcopy(data)
    entry = bad["waves"][0]["requests"].pop()
    leaf = entry["segments"][-1]
    assert all(leaf not in e["segments"] for e in bad["waves"][0]["requests"])
    assert f"wave 0: segment {leaf} is used by no request" in verdict_of(result, bad).violations


def _with_grad(workload: cpplan.Workload, grad) -> cpplan.Workload:
    """The workload with each request's ``grad`` set by ``grad(item index, request index)``."""
    return cpplan.Workload(
        items=tuple(
            item.model_copy(
                update={
                    "requests": tuple(
                        cpplan.Request(
                            tokens=r.tokens, grad=grad(i, k), output=r.output, loss_mask=r.loss_mask
                        )
                        for k, r in enumerate(item.requests)
                    )
                }
            )
            for i, item in enumerate(workload.items)
        )
    )


@pytest.mark.parametrize("grad", ["none", "mixed"])
def test_gradient_free_requests_are_priced_without_gradients(small_grpo, qwen36, grad):
    """With no request taking gradients, or only some (a shared prefix then carries gradients when any
    request through it does, whichever is read last), the plan verifies against the verifier's own
    per-segment gradient flags; checked against the workload with gradients (so every segment needs
    them), its waves cost more than they claim."""
    rule = (lambda i, k: False) if grad == "none" else (lambda i, k: k == 0)
    workload = _with_grad(small_grpo, rule)
    result, data = plan_for(workload, qwen36, Topology(cp=2), middle_budget(small_grpo, qwen36, 2))
    verdict = verdict_of(result, data)
    assert verdict.valid, verdict.violations
    problem = result.problem
    with_grad = verify_plan(data, small_grpo, problem.card, 2**60)
    assert any(v.startswith("wave 0: cost_s ") for v in with_grad.violations), with_grad.violations
    assert with_grad.cost_s > verdict.cost_s


def test_a_rank_owning_one_token_must_claim_it(fixed):
    """Read with one-token chunks, rank 1 owning only the wave's last token and claiming no token
    count is reported (a missing claim never matches, whatever the rank owns)."""
    result, data = fixed
    bad = copy.deepcopy(data)
    packed = data["waves"][0]["packed_tokens"]
    ranks = bad["waves"][0]["ranks"]
    ranks[0]["ranges"], ranks[1]["ranges"] = [[0, packed - 1]], [[packed - 1, packed]]
    del ranks[1]["tokens"]
    violations = verdict_of(result, bad, chunk_tokens=1).violations
    assert "wave 0 rank 1: tokens None but owns 1" in violations, violations


def test_a_wave_without_segments_holds_no_tokens(fixed):
    """A wave whose segment list is empty holds no packed tokens: its claim, its requests' chains and
    its owners' ranges are each reported against zero tokens (read, not malformed)."""
    result, data = fixed
    bad = copy.deepcopy(data)
    wave = bad["waves"][0]
    wave["segments"] = []
    violations = verdict_of(result, bad).violations
    assert f"wave 0: packed_tokens {wave['packed_tokens']} but segments hold 0" in violations, violations
    assert not any("malformed" in v for v in violations), violations
