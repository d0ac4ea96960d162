"""Online recalibration: Planner.observe learns a safe correction of memory and time, rejects wild
readings, saves and loads it, and every reader (evaluator, CP-SAT, verifier) prices with it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import cpplan
from cpplan import InputError, Planner, Topology
from cpplan.bench.synthetic import grpo
from cpplan.calibration.online import TrustPolicy
from cpplan.plans.plan_writer import strip_timing
from cpplan.spec.profile import SolverProfile

MODEL = "qwen3.6-35b-a3b"
GREEDY = SolverProfile(name="greedy-only", time_budget_s=30, deterministic=True, strategies=("greedy",))


def workload(seed: int, prompts: int = 6) -> cpplan.Workload:
    """A GRPO-like workload of a few small groups (a new shape for every seed)."""
    return grpo(
        num_prompts=prompts,
        group_size=4,
        system_tokens=512,
        prompt_tokens=(2048, 4096),
        completion_tokens=(256, 1024),
        seed=seed,
    )


def planner(**overrides) -> Planner:
    """The 8-layer CP2 planner the tests learn with (greedy only, so plans are quick)."""
    arguments = dict(model=MODEL, topology="cp=2", memory_bytes="7GB", solver=GREEDY, num_layers=8)
    return Planner(**{**arguments, **overrides})


def observe_truth(p: Planner, result, k: float) -> None:
    """Feed every rank of every wave a simulated truth: k x the card's own peak and wave seconds."""
    data = result.to_dict()
    for w, wave in enumerate(data["waves"]):
        for rank in wave["ranks"]:
            p.observe(
                result,
                wave=w,
                rank=rank["rank"],
                peak_bytes=math.ceil(k * rank["card_peak_bytes"]),
                seconds=k * wave["card_cost_s"],
            )


def ratios_to_truth(result, k: float) -> tuple[list[float], list[float]]:
    """Every rank's planned peak over the truth (k x card) and every wave's planned seconds over its
    truth."""
    data = result.to_dict()
    peaks = [r["peak_bytes"] / (k * r["card_peak_bytes"]) for w in data["waves"] for r in w["ranks"]]
    times = [w["cost_s"] / (k * w["card_cost_s"]) for w in data["waves"]]
    return peaks, times


@pytest.mark.parametrize("k", [0.8, 1.25])
def test_three_steps_of_a_simulated_truth_give_safe_tight_predictions(k):
    """On a simulated truth (observed = k x the card's prediction, memory and time), after three observed
    steps a fresh workload's planned peaks and wave seconds are at least the truth and at most 1.10x it
    on every rank and wave."""
    p = planner()
    for step in range(3):
        observe_truth(p, p.plan(workload(seed=step)), k)
    peaks, times = ratios_to_truth(p.plan(workload(seed=99, prompts=8)), k)
    assert min(peaks) >= 1.0 and max(peaks) <= 1.10, (min(peaks), max(peaks))
    assert min(times) >= 1.0 - 1e-9 and max(times) <= 1.10, (min(times), max(times))  # seconds: no margin


def test_first_under_prediction_makes_the_next_plan_safe():
    """With the card 25% under the truth, the very next plan after the first observation already
    budgets at least the truth on the observed shape (every rank of every wave)."""
    p = planner()
    first = p.plan(workload(seed=0))
    assert first.to_dict()["correction"] is None
    data = first.to_dict()
    p.observe(
        first, wave=0, rank=0, peak_bytes=math.ceil(1.25 * data["waves"][0]["ranks"][0]["card_peak_bytes"])
    )
    peaks, _ = ratios_to_truth(p.plan(workload(seed=0)), 1.25)
    assert min(peaks) >= 1.0
    assert p.correction.memory_scale == pytest.approx(1.25 * 1.03, rel=1e-5)


def test_plan_json_carries_corrected_and_card_peaks():
    """Plan JSON ranks carry peak_bytes (what admission budgets, corrected) and card_peak_bytes (the card
    alone); equal before learning, apart by the learned scale after, and the plan records the correction."""
    p = planner()
    result = p.plan(workload(seed=0))
    ranks = [r for w in result.to_dict()["waves"] for r in w["ranks"]]
    assert all(r["peak_bytes"] == r["card_peak_bytes"] for r in ranks)
    observe_truth(p, result, 0.8)
    data = p.plan(workload(seed=0)).to_dict()
    scale = data["correction"]["memory_scale"]
    assert scale == p.correction.memory_scale < 1
    for r in (r for w in data["waves"] for r in w["ranks"]):
        assert r["peak_bytes"] == pytest.approx(scale * r["card_peak_bytes"], rel=1e-9)


def test_a_wild_observation_is_rejected_and_reported():
    """A reading 10x the card's prediction (on every rank of one wave) is outside the trust window: it is
    rejected, reported with its reason, and the correction is what the good readings give."""
    p = planner()
    result = p.plan(workload(seed=0))
    observe_truth(p, result, 1.1)
    before = p.correction
    wild = p.plan(workload(seed=1))
    data = wild.to_dict()
    for rank in data["waves"][0]["ranks"]:
        (verdict,) = p.observe(wild, wave=0, rank=rank["rank"], peak_bytes=10 * rank["card_peak_bytes"])
        assert not verdict.trusted and "trust window" in verdict.reason
    assert p.correction == before
    report = p.learning.report()
    assert len(report.rejected) == len(data["waves"][0]["ranks"])
    assert "rejected" in report.summary() and "10.0000x" in report.summary()


def test_a_wild_first_observation_is_rejected():
    """Before any evidence the window is centred on the card itself: a first reading of 10x is
    rejected and the planner keeps budgeting against the card alone."""
    p = planner()
    result = p.plan(workload(seed=0))
    peak = result.to_dict()["waves"][0]["ranks"][0]["card_peak_bytes"]
    (verdict,) = p.observe(result, wave=0, rank=0, peak_bytes=10 * peak)
    assert not verdict.trusted
    assert p.correction.is_identity


def test_a_lasting_change_is_learned_after_confirming_steps():
    """Readings 3x the card from three distinct steps agree with each other: the third re-admits them
    (a real change of regime, not a glitch) and the correction then covers them."""
    p = planner()
    for step in range(3):
        result = p.plan(workload(seed=step))
        data = result.to_dict()
        verdicts = p.observe(
            result, wave=0, rank=0, peak_bytes=3 * data["waves"][0]["ranks"][0]["card_peak_bytes"]
        )
        assert verdicts[0].trusted is (step == 2)
    assert p.correction.memory_scale >= 3.0
    assert all(v.trusted for v in p.learning.verdicts("memory"))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"wave": 0, "rank": 0, "peak_bytes": -1}, "peak_bytes"),
        ({"wave": 0, "rank": 0, "peak_bytes": float("nan")}, "peak_bytes"),
        ({"wave": 0, "rank": 0, "peak_bytes": 1.5e9}, "peak_bytes"),
        ({"wave": 0, "rank": 0, "peak_bytes": True}, "peak_bytes"),
        ({"wave": 0, "rank": 0, "seconds": float("inf")}, "seconds"),
        ({"wave": 0, "rank": 0, "seconds": -2.0}, "seconds"),
        ({"wave": 0, "rank": 0}, "peak_bytes"),
        ({"wave": 99, "rank": 0, "peak_bytes": 10**9}, "wave"),
        ({"wave": 0, "rank": 2, "peak_bytes": 10**9}, "rank"),
        ({"wave": -1, "rank": 0, "peak_bytes": 10**9}, "wave"),
    ],
)
def test_bad_observations_are_input_errors(kwargs, field):
    """A negative, NaN, non-integer or boolean peak, non-finite or negative seconds, no measurement at
    all, and an unknown wave or rank are InputErrors naming the field; nothing is recorded."""
    p = planner()
    result = p.plan(workload(seed=0))
    with pytest.raises(InputError) as info:
        p.observe(result, **kwargs)
    assert info.value.field == field
    assert p.learning.observations == []


def test_an_observation_for_another_topology_is_refused():
    """A result planned for CP4 (or another depth or phase) cannot teach a CP2 planner."""
    p = planner()
    for other in (planner(topology="cp=4"), planner(num_layers=12), planner(phase="warm")):
        result = other.plan(workload(seed=0))
        with pytest.raises(InputError, match="planned for") as info:
            p.observe(result, wave=0, rank=0, peak_bytes=10**10)
        assert info.value.field == "result"
    with pytest.raises(InputError, match="PlanResult"):
        p.observe({"waves": []}, wave=0, rank=0, peak_bytes=10**10)


def _trained(seed_steps: int = 2) -> tuple[Planner, list]:
    p = planner()
    results = []
    for step in range(seed_steps):
        result = p.plan(workload(seed=step))
        observe_truth(p, result, 0.9)
        results.append(result)
    return p, results


def test_save_and_load_give_the_same_correction_and_plans(tmp_path):
    """A saved planner loads with the same settings, profile, policy and observations: the same
    correction byte for byte, and the same plan JSON for a new workload."""
    p, _ = _trained()
    path = tmp_path / "state.jsonl"
    p.save(path)
    q = Planner.load(path)
    assert json.dumps(q.correction.to_dict()) == json.dumps(p.correction.to_dict())
    assert q.profile == p.profile and q.learning.policy == p.learning.policy
    fresh = workload(seed=7)
    assert strip_timing(q.plan(fresh).to_dict()) == strip_timing(p.plan(fresh).to_dict())


def test_replicas_fed_the_same_observations_agree_byte_for_byte():
    """Two planners (data-parallel replicas) that observe the same readings in the same order learn the
    same correction and make byte-identical plans; a different order of distinct readings may not."""
    a, b = planner(), planner()
    for step in range(2):
        ra, rb = a.plan(workload(seed=step)), b.plan(workload(seed=step))
        observe_truth(a, ra, 1.2)
        observe_truth(b, rb, 1.2)
    assert a.correction == b.correction
    fresh = workload(seed=5)
    text_a = json.dumps(strip_timing(a.plan(fresh).to_dict()))
    assert text_a == json.dumps(strip_timing(b.plan(fresh).to_dict()))


def test_state_file_errors_name_the_line(tmp_path):
    """A planner state that does not parse names its file and line; a bad field names it too."""
    p, _ = _trained(1)
    path = tmp_path / "state.jsonl"
    p.save(path)
    lines = path.read_text().splitlines()
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join([*lines[:2], "{not json", *lines[2:]]) + "\n")
    with pytest.raises(InputError) as info:
        Planner.load(broken)
    assert info.value.line == 3 and str(broken) in str(info.value)
    record = json.loads(lines[1])
    record["peak_bytes"] = -5
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([lines[0], json.dumps(record)]) + "\n")
    with pytest.raises(InputError) as info:
        Planner.load(bad)
    assert (info.value.line, info.value.field) == (2, "peak_bytes")
    header = json.loads(lines[0])
    del header["topology"]
    headless = tmp_path / "headless.jsonl"
    headless.write_text(json.dumps(header) + "\n")
    with pytest.raises(InputError) as info:
        Planner.load(headless)
    assert (info.value.line, info.value.field) == (1, "topology")


def test_corrected_plans_verify_against_their_correction(tmp_path, capsys):
    """The independent verifier re-checks a corrected plan against the correction it records (and
    against a saved planner state's, --learned); against the card alone its claimed peaks disagree."""
    from cpplan.bench.synthetic import to_jsonl
    from cpplan.cli import main

    p, _ = _trained()
    wl = workload(seed=3)
    data = p.plan(wl).to_dict()
    settings = dict(topology=Topology(cp=2), model=MODEL, memory_bytes="7GB", num_layers=8)
    assert cpplan.verify(data, wl, **settings).valid
    alone = {**data, "correction": None}
    assert any("verifier prices" in v for v in cpplan.verify(alone, wl, **settings).violations)
    plan_path, wl_path, state = tmp_path / "plan.json", tmp_path / "w.jsonl", tmp_path / "state.jsonl"
    plan_path.write_text(json.dumps(alone))
    wl_path.write_text(to_jsonl(wl))
    p.save(state)
    args = ["verify", str(plan_path), str(wl_path), "--model", MODEL, "--topology", "cp=2"]
    args += ["--memory", "7GB", "--layers", "8"]
    assert main(args) == 1
    assert main([*args, "--learned", str(state)]) == 0
    capsys.readouterr()


def test_the_correction_reaches_the_cpsat_rows():
    """A planner that learned the card is 40% low plans more waves, with CP-SAT in the portfolio, and
    every wave fits the budget by the corrected prices (the joint model budgets against them too)."""
    profile = SolverProfile(
        name="cpsat-too", time_budget_s=60, deterministic=True, strategies=("greedy", "cpsat")
    )
    p = planner(solver=profile, memory_bytes="8GB")
    wl = workload(seed=4, prompts=4)
    before = p.plan(wl)
    observe_truth(p, before, 1.4)
    after = p.plan(wl)
    assert after.plan.num_waves > before.plan.num_waves
    assert any(c.strategy == "cpsat" and c.valid for c in after.candidates)
    assert all(w.fits(8 * 10**9) for w in after.plan.waves)
    assert after.problem.card.term_bytes.tolist() == pytest.approx(
        (np.array(before.problem.card.term_bytes) * p.correction.memory_scale).tolist()
    )


def test_trust_policy_is_validated():
    """A policy that cannot decide anything (trust factor at most 1, an empty window, negative margins)
    is refused naming the field."""
    for field, value in (("trust_factor", 1.0), ("window", 0), ("min_margin", -0.1), ("confirm", 1)):
        with pytest.raises(InputError) as info:
            TrustPolicy(**{field: value})
        assert info.value.field == f"policy.{field}"


def test_a_bad_recorded_correction_is_an_input_error():
    """A plan whose recorded correction is not a positive finite scale, or was learned for another
    topology, is refused naming the field, not verified against a made-up card."""
    p, _ = _trained(1)
    wl = workload(seed=3)
    data = p.plan(wl).to_dict()
    settings = dict(topology=Topology(cp=2), model=MODEL, memory_bytes="7GB", num_layers=8)
    for change, field in (
        ({"memory_scale": -1.0}, "correction.memory_scale"),
        ({"time_scale": "x"}, "correction.time_scale"),
    ):
        with pytest.raises(InputError) as info:
            cpplan.verify({**data, "correction": {**data["correction"], **change}}, wl, **settings)
        assert info.value.field == field
    other = {**data["correction"], "topology": "cp=4"}
    with pytest.raises(InputError, match="not for these settings"):
        cpplan.verify({**data, "correction": other}, wl, **settings)
