"""The verifier recounts a wave's GDN hand-off in the mode its plan names and refuses a wave whose
claimed cost is the other mode's price."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest

import cpplan
from cpplan import Topology
from cpplan.plans.plan import Plan
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.pricing.handoff import PARALLEL, ROUNDS, handoff_modes
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import price_wave
from cpplan.spec.settings import Settings
from cpplan.verifier import verify_plan


@pytest.fixture(scope="module")
def long_wave(qwen36_two_modes):
    """One 20K-token request at CP 4 (parallel passing wins where head-parallel is not offered), priced
    as the planner prices it, and its hand-off in both modes."""
    qwen36 = qwen36_two_modes
    workload = cpplan.Workload(
        items=(cpplan.Item(id="a", requests=(cpplan.Request(tokens=np.arange(20_000) % 997),)),)
    )
    problem = Problem.build(
        workload, Settings(topology=Topology(cp=4), model=qwen36, memory_bytes=80 * 2**30)
    )
    wave = price_wave(problem, [0], problem.pack([0], "full"), "full")
    modes = handoff_modes(wave.layout, wave.owner, problem.chunk_tokens, 4, problem.card.handoff)
    return problem, wave, modes


def _in_mode(wave, modes, mode):
    """``wave`` priced in ``mode`` instead of the chosen one."""
    handoff = modes[mode]
    cost_s = wave.cost_s - wave.handoff.seconds + handoff.seconds
    return dataclasses.replace(wave, handoff=handoff, gdn_handoff=mode, cost_s=cost_s)


def _verdict(problem, data):
    return verify_plan(data, problem.workload, problem.card, problem.memory_bytes)


def test_parallel_wave_costs_less_than_its_rounds(long_wave):
    """The planner chose parallel for the long wave, and its cost is below the same wave in rounds by
    the difference of the two hand-offs."""
    _, wave, modes = long_wave
    assert wave.gdn_handoff == PARALLEL
    rounds = _in_mode(wave, modes, ROUNDS)
    assert modes[PARALLEL].seconds < modes[ROUNDS].seconds
    assert wave.cost_s < rounds.cost_s
    assert rounds.cost_s - wave.cost_s == pytest.approx(modes[ROUNDS].seconds - modes[PARALLEL].seconds)


def test_a_claim_in_the_wrong_mode_is_refused(long_wave):
    """Each mode's plan verifies in its own mode; naming the other mode with the same claimed cost is
    refused with the cost violation; an old plan (no field) is checked as rounds."""
    problem, wave, modes = long_wave
    for mode, other in ((PARALLEL, ROUNDS), (ROUNDS, PARALLEL)):
        data = plan_to_dict(problem, Plan(strategy="greedy", waves=(_in_mode(wave, modes, mode),)))
        assert data["waves"][0]["gdn_handoff"] == mode
        verdict = _verdict(problem, data)
        assert verdict.valid, verdict.violations
        assert verdict.cost_s == pytest.approx(data["waves"][0]["cost_s"], rel=1e-12)
        wrong = copy.deepcopy(data)
        wrong["waves"][0]["gdn_handoff"] = other
        verdict = _verdict(problem, wrong)
        assert not verdict.valid
        assert any("cost_s" in v and repr(other) in v for v in verdict.violations), verdict.violations
        old = copy.deepcopy(data)
        del old["waves"][0]["gdn_handoff"]
        assert _verdict(problem, old).valid == (mode == ROUNDS)
