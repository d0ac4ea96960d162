"""Proportionate learning: after observations at ratio r to the card, the next plan's capacity shrinks by
about r (not r times a compounded margin), it costs little more than the plan the true card gives, and it
is safe under the truth."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cpplan
from cpplan.bench.synthetic import grpo
from cpplan.planners.deadline import Deadline
from cpplan.planners.portfolio import solve
from cpplan.pricing.problem import Problem
from cpplan.spec.correction import identity_for
from tests.calibration.test_online import GREEDY, planner

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "grpo.jsonl"
MEMORY = "5.5GB"
"""A budget tight against the 8-layer card's static floor: a margin on the scale costs tokens out of
proportion there (the old compounded 10% made plans up to 1.40x the true card's on these workloads)."""


def workload(seed: int) -> cpplan.Workload:
    """Sixteen GRPO groups of four (prompts of 1-2k tokens): fine enough that one wave more or less is a
    small step in cost."""
    return grpo(
        num_prompts=16,
        group_size=4,
        system_tokens=512,
        prompt_tokens=(1024, 2048),
        completion_tokens=(256, 1024),
        seed=seed,
    )


def true_card_plan(p: cpplan.Planner, w: cpplan.Workload, memory: float, time: float):
    """The plan the true card (the card scaled exactly by the truth's ratios) gives, same profile."""
    correction = dataclasses.replace(
        identity_for(p.settings.card_alone), memory_scale=memory, time_scale=time
    )
    settings_ = dataclasses.replace(p.settings, correction=correction)
    return solve(Problem.build(w, settings_), p.profile, deadline=Deadline.of_profile(p.profile, start_s=0.0))


def card_seconds(result) -> float:
    """The plan's seconds under the card alone (the truth's seconds are k_time times this)."""
    return sum(w["card_cost_s"] for w in result.to_dict()["waves"])


def true_peaks(result, k: float) -> list[float]:
    """Every rank's peak under a truth of k x the card."""
    return [k * r["card_peak_bytes"] for w in result.to_dict()["waves"] for r in w["ranks"]]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    k_memory=st.floats(0.8, 1.3),
    k_time=st.floats(0.8, 1.3),
    num_observations=st.integers(1, 3),
    rank=st.integers(0, 1),
)
def test_next_plan_is_near_the_true_cards_plan_and_safe(k_memory, k_time, num_observations, rank):
    """Over synthetic truths (memory and seconds k x the card's, k in 0.8-1.3) and one to three observed
    waves (one rank each), the next plan costs (under the truth) at most 1.15x the true card's plan and
    every rank's true peak fits the budget."""
    p = planner(memory_bytes=MEMORY)
    for step in range(num_observations):
        result = p.plan(workload(seed=step))
        wave = result.to_dict()["waves"][0]
        p.observe(
            result,
            wave=0,
            rank=rank,
            peak_bytes=math.ceil(k_memory * wave["ranks"][rank]["card_peak_bytes"]),
            seconds=k_time * wave["card_cost_s"],
        )
    target = workload(seed=99)
    learned = p.plan(target)
    truth = true_card_plan(p, target, k_memory, k_time)
    assert card_seconds(learned) <= 1.15 * card_seconds(truth), (card_seconds(learned), card_seconds(truth))
    assert max(true_peaks(learned, k_memory)) <= p.settings.memory_bytes


def test_the_readme_example_keeps_its_layouts_after_one_observation():
    """The README's GRPO example (CP2, 8 GiB): one observation of a peak 8.6% and seconds 24% above the
    prediction leaves the next plan within 1.15x of the true card's (under the truth), with every wave
    fully shared and no item split; before the fix it went from 3 to 8 waves (1.52x the true card's)."""
    p = cpplan.Planner(model="qwen3.6-35b-a3b", topology="cp=2", memory_bytes="8GiB", solver=GREEDY)
    w = cpplan.Workload.from_jsonl(EXAMPLE)
    first = p.plan(w)
    wave = first.to_dict()["waves"][0]
    rank = max(wave["ranks"], key=lambda r: r["peak_bytes"])
    p.observe(
        first,
        wave=0,
        rank=rank["rank"],
        peak_bytes=round(1.086 * rank["peak_bytes"]),
        seconds=1.24 * wave["cost_s"],
    )
    k_memory, k_time = p.learning.verdicts("memory")[0].ratio, p.learning.verdicts("time")[0].ratio
    assert p.correction.memory_scale == pytest.approx(k_memory * 1.03, rel=1e-5)
    assert p.correction.time_scale == pytest.approx(k_time, rel=1e-5)
    learned, truth = p.plan(w), true_card_plan(p, w, k_memory, k_time)
    assert card_seconds(learned) <= 1.15 * card_seconds(truth)
    waves = learned.to_dict()["waves"]
    assert all(x["layout"] == "full" and not x["split"] for x in waves), [
        (x["layout"], x["split"]) for x in waves
    ]
