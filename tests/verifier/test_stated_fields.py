"""The verifier checks every figure a plan states: each test starts from a real valid plan, edits exactly
one stated field, and expects the violation that names it (and nothing else). Each fails when the check
it names is removed."""

from __future__ import annotations

import copy

import pytest

from cpplan import Topology
from cpplan.verifier import verify_plan
from tests.conftest import middle_budget
from tests.verifier.test_verifier_mutants import plan_for, verdict_of


@pytest.fixture(scope="module")
def cp2(small_grpo, qwen36):
    """Small GRPO at CP2, the full plan JSON (solver, candidates, workload digests): two waves, the
    first laid out with full sharing, its solver bound over all plans."""
    return plan_for(small_grpo, qwen36, Topology(cp=2), middle_budget(small_grpo, qwen36, 2))


@pytest.fixture(scope="module")
def dp2(small_grpo, qwen36):
    """Small GRPO at dp=2, cp=2: wave 0 on GPUs [0, 1] (replica 0), wave 1 on [2, 3] (replica 1); its
    bound is of the schedule model's own."""
    return plan_for(small_grpo, qwen36, Topology(cp=2, dp=2), middle_budget(small_grpo, qwen36, 2))


def edited(plan, edit) -> tuple[str, ...]:
    """The verifier's violations on a copy of the plan's JSON after ``edit(data)``."""
    result, data = plan
    data = copy.deepcopy(data)
    edit(data)
    return verdict_of(result, data).violations


def test_the_fixtures_are_valid_and_state_what_the_tests_edit(cp2, dp2):
    """Both plans verify as written; the CP2 plan's first wave shares fully and its bound is over all
    plans; the dp=2 plan's waves lie on replicas 0 and 1."""
    assert verdict_of(*cp2).valid and verdict_of(*dp2).valid
    data = cp2[1]
    assert data["waves"][0]["layout"] == "full" and data["solver"]["bound_scope"] == "all plans"
    assert [(w["dp_rank"], w["gpus"]) for w in dp2[1]["waves"]] == [(0, [0, 1]), (1, [2, 3])]


@pytest.mark.parametrize("field", ["peak_bytes", "packed_tokens", "logical_tokens", "num_waves"])
def test_a_false_plan_total_is_named(cp2, field):
    """The plan's ``peak_bytes`` (its worst rank), ``packed_tokens`` and ``logical_tokens`` (its waves'
    sums) and ``num_waves`` are recomputed: a false one is the one violation."""
    value = {"peak_bytes": 1000, "packed_tokens": 1, "logical_tokens": 5}.get(field, 7)
    violations = edited(cp2, lambda d: d.update({field: value}))
    assert len(violations) == 1 and violations[0].startswith(f"plan {field} {value} but the verifier")


def test_a_deleted_plan_total_is_named(cp2):
    """A total the writer always emits, deleted, is a violation naming it."""
    assert edited(cp2, lambda d: d.pop("packed_tokens")) == ("plan: field 'packed_tokens' is missing",)


def test_the_safety_factor_is_the_cards(cp2):
    """The plan's ``safety`` is the card's safety factor."""
    assert edited(cp2, lambda d: d.update(safety=1.0)) == (
        "plan safety 1.0 but the card's safety factor is 1.1",
    )


@pytest.mark.parametrize(("dp_rank", "gpus"), [(7, [0, 1]), (1, [0, 1])])
def test_a_waves_dp_rank_is_the_replica_of_its_gpus(dp2, dp_rank, gpus):
    """A wave's ``dp_rank`` out of range (7 at dp=2) or naming the other replica than its ``gpus``
    is the one violation."""

    def edit(data):
        data["waves"][0]["dp_rank"] = dp_rank

    assert edited(dp2, edit) == (f"wave 0: dp_rank {dp_rank} but its gpus {gpus} lie on replica 0 (dp=2)",)


def test_a_waves_index_is_its_place(cp2):
    """A wave's ``index`` is its place in the plan."""
    assert edited(cp2, lambda d: d["waves"][1].update(index=0)) == (
        "wave 1: index 0 but it is wave 1 of the plan",
    )


@pytest.mark.parametrize(
    ("layout", "broken"),
    [
        ("none", "but segment 0 is on "),
        ("min_span:100000", ", shared, holds "),
        ("depth:0", ", shared, is at tree level 1"),
        ("zigzag", "is not a layout the planner writes"),
    ],
)
def test_a_renamed_layout_is_caught(cp2, layout, broken):
    """A fully shared wave renamed ``none`` (it shares segments), ``min_span`` of more tokens than a
    shared segment holds, ``depth:0`` (it shares a root) or a name no planner writes is the one
    violation."""
    violations = edited(cp2, lambda d: d["waves"][0].update(layout=layout))
    assert len(violations) == 1 and violations[0].startswith(f"wave 0: layout {layout!r}")
    assert broken in violations[0]


def test_a_wave_named_full_shares_every_prefix(cp2):
    """The second wave (its groups' prompts stored once per group, the system prompt repeated) renamed
    ``full`` is refused: two of its roots start with the same token."""
    assert cp2[1]["waves"][1]["layout"] == "prefix_grouped"
    violations = edited(cp2, lambda d: d["waves"][1].update(layout="full"))
    assert len(violations) == 1 and "both start with token" in violations[0] and "as roots" in violations[0]


def test_split_on_a_whole_wave_is_caught(cp2):
    """``split: true`` on a wave that holds every request of each item it lists is the one violation."""
    assert edited(cp2, lambda d: d["waves"][0].update(split=True)) == (
        "wave 0: split true but it holds every request of each item it lists",
    )


def test_a_waves_logical_tokens_are_its_requests(cp2):
    """A wave's ``logical_tokens`` are its requests' tokens."""
    stated = cp2[1]["waves"][0]["logical_tokens"]
    assert edited(cp2, lambda d: d["waves"][0].update(logical_tokens=stated + 1)) == (
        f"wave 0: logical_tokens {stated + 1} but its requests hold {stated}",
    )


def test_an_item_listed_twice_is_caught(cp2):
    """A wave listing one item twice is the one violation."""
    first = cp2[1]["waves"][0]["items"][0]
    assert edited(cp2, lambda d: d["waves"][0]["items"].append(first)) == (
        f"wave 0: item {first!r} is listed 2 times",
    )


def test_a_waves_card_cost_is_its_cost_by_the_card_alone(cp2):
    """``card_cost_s`` (no learned correction: the wave's cost) is recomputed."""
    violations = edited(cp2, lambda d: d["waves"][0].update(card_cost_s=1.0))
    assert len(violations) == 1 and violations[0].startswith(
        "wave 0: card_cost_s 1.0 but the verifier prices"
    )


@pytest.mark.parametrize("part", ["static", "moe_working_set"])
def test_a_zeroed_breakdown_part_is_caught(cp2, part):
    """A part of a rank's ``breakdown`` set to zero is the one violation naming the part."""
    violations = edited(cp2, lambda d: d["waves"][0]["ranks"][1]["breakdown"].update({part: 0}))
    assert len(violations) == 1
    assert violations[0].startswith(f"wave 0 rank 1: breakdown {part!r} is 0 but the verifier prices ")


def test_a_deleted_or_reshaped_breakdown_is_caught(cp2):
    """A rank without ``breakdown``, or with one part left out, is a violation naming it."""
    assert edited(cp2, lambda d: d["waves"][0]["ranks"][0].pop("breakdown")) == (
        "wave 0 rank 0: field 'breakdown' is missing",
    )
    violations = edited(cp2, lambda d: d["waves"][0]["ranks"][0]["breakdown"].pop("static"))
    assert (
        len(violations) == 1
        and "breakdown has " in violations[0]
        and "not the envelope's parts" in violations[0]
    )


def test_the_envelope_is_the_binding_one(cp2):
    """A rank's ``envelope`` renamed to another of the card's envelopes, one with fewer bytes, is the
    one violation."""
    assert cp2[1]["waves"][0]["ranks"][0]["envelope"] == "gdn_bottom"
    assert edited(cp2, lambda d: d["waves"][0]["ranks"][0].update(envelope="head")) == (
        "wave 0 rank 0: envelope 'head' but the binding one is 'gdn_bottom'",
    )


@pytest.mark.parametrize(
    "field", ["grad_tokens", "segments", "attn_pairs", "grad_attn_pairs", "remote_tokens"]
)
def test_every_local_quantity_is_recounted(cp2, field):
    """Each local quantity a rank states beyond ``tokens`` and ``loss_tokens`` is recounted."""
    stated = cp2[1]["waves"][1]["ranks"][0][field]
    violations = edited(cp2, lambda d: d["waves"][1]["ranks"][0].update({field: stated + 1}))
    assert violations == (f"wave 1 rank 0: {field} {stated + 1} but the verifier counts {stated}",)


@pytest.mark.parametrize("field", ["time_s", "card_peak_bytes"])
def test_a_ranks_seconds_and_card_peak_are_recomputed(cp2, field):
    """A rank's ``time_s`` (its barriers' seconds) and ``card_peak_bytes`` (its peak by the card
    alone) are recomputed."""
    violations = edited(cp2, lambda d: d["waves"][0]["ranks"][0].update({field: 1}))
    assert len(violations) == 1 and violations[0].startswith(
        f"wave 0 rank 0: {field} 1 but the verifier prices"
    )


def test_a_bound_over_all_plans_above_the_plans_cost_is_caught(cp2):
    """``solver.bound_s`` over all plans set above the plan's own cost (and its model's objective) is
    refused, naming the field."""
    cost = cp2[1]["cost_s"]
    violations = edited(cp2, lambda d: d["solver"].update(bound_s=cost + 0.1))
    assert (
        f"plan solver.bound_s {cost + 0.1} bounds all plans but lies above the plan's cost_s {cost}"
        in violations
    )
    assert all(v.startswith("plan solver.") for v in violations)


def test_a_models_bound_above_its_objective_is_caught(dp2):
    """A bound of the schedule model's own (scope ``its model``), set above that model's objective, is
    refused."""
    objective = dp2[1]["solver"]["objective_s"]
    violations = edited(dp2, lambda d: d["solver"].update(bound_s=objective + 0.1, bound_scope="its model"))
    assert (
        violations[0]
        == f"plan solver.bound_s {objective + 0.1} lies above its model's objective_s {objective}"
    )


def test_the_gap_is_the_bounds(cp2):
    """``solver.gap`` is ``(price - bound) / price``."""
    violations = edited(cp2, lambda d: d["solver"].update(gap=0.5))
    assert len(violations) == 1 and violations[0].startswith("plan solver.gap 0.5 but its bound ")


def test_the_chosen_strategy_is_the_cheapest_valid_candidate(cp2):
    """``strategy`` must name a valid candidate whose cost is the plan's, and no valid candidate may
    cost less; a candidate that is not valid may."""
    cheaper = [c for c in cp2[1]["candidates"] if c["strategy"] != cp2[1]["strategy"]]
    assert cheaper
    violations = edited(cp2, lambda d: d.update(strategy="nobody"))
    assert violations == ("plan strategy 'nobody' is not a valid candidate",)

    def undercut(data):
        other = next(c for c in data["candidates"] if c["strategy"] == cheaper[0]["strategy"])
        other["cost_s"] = data["cost_s"] / 2

    violations = edited(cp2, undercut)
    assert len(violations) == 1 and "the cheapest valid candidate is chosen" in violations[0]

    def undercut_invalid(data):
        undercut(data)
        next(c for c in data["candidates"] if c["strategy"] == cheaper[0]["strategy"])["valid"] = False

    assert edited(cp2, undercut_invalid) == ()


def test_the_chosen_candidates_cost_is_the_plans(cp2):
    """The chosen candidate's ``cost_s`` is the plan's."""
    strategy = cp2[1]["strategy"]

    def edit(data):
        next(c for c in data["candidates"] if c["strategy"] == strategy)["cost_s"] = 9.0

    violations = edited(cp2, edit)
    assert len(violations) == 1 and violations[0].startswith(
        f"plan candidate {strategy!r} (chosen) costs 9.0"
    )


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("items", 99, "plan workload.items 99 but the waves hold "),
        ("requests", 99, "plan workload.requests 99 but the waves hold "),
        ("sha256", "0" * 64, "plan workload.sha256 is not the digest of its wave_sha256"),
    ],
)
def test_the_workload_summary_is_recomputed(cp2, field, value, message):
    """The ``workload`` object's counts and the plan digest are the plan's own."""
    violations = edited(cp2, lambda d: d["workload"].update({field: value}))
    assert len(violations) == 1 and violations[0].startswith(message)


def test_a_wave_digest_is_that_of_its_requests(cp2):
    """A wave digest that is not its requests' (here the two swapped) is named."""

    def swap(data):
        digests = data["workload"]["wave_sha256"]
        digests[0], digests[1] = digests[1], digests[0]

    violations = edited(cp2, swap)
    assert "plan workload.wave_sha256[0] is not the digest of wave 0's requests" in violations


@pytest.mark.parametrize("field", ["layout", "split", "logical_tokens", "dp_rank", "card_cost_s"])
def test_a_deleted_wave_field_is_named(cp2, field):
    """A wave field the writer always emits, deleted, is the one violation naming it."""
    assert edited(cp2, lambda d: d["waves"][0].pop(field)) == (f"wave 0: field '{field}' is missing",)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"topology": Topology(cp=4)}, "the plan states topology tp=1,cp=2,ep=1,etp=1,pp=1,dp=1, but it is "),
        ({"num_layers": 8}, "the plan states layers 40, but it is checked with 8"),
        ({"phase": "warm"}, "the plan states phase 'cold', but it is checked with 'warm'"),
    ],
    ids=["topology", "layers", "phase"],
)
def test_a_card_of_other_settings_is_one_violation(cp2, qwen36, settings, message):
    """Checked with a card of another topology, depth or phase than the plan states, the verdict is the
    one violation naming both (no wave is priced: every figure would disagree)."""
    from cpplan.spec.settings import Settings

    result, data = cp2
    values = {"topology": Topology(cp=2), "model": qwen36, "memory_bytes": result.problem.memory_bytes}
    card = Settings(**{**values, **settings}).card
    verdict = verify_plan(data, result.problem.workload, card, result.problem.memory_bytes)
    assert len(verdict.violations) == 1 and verdict.violations[0].startswith(message), verdict.violations
    assert verdict.cost_s is None
