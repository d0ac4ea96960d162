"""A wave's ``gdn_handoff`` in the plan JSON: written as the planner chose, read back (``"rounds"`` for
plans written before it), and checked by the verifier."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import cpplan
from cpplan import Topology
from cpplan.plans.plan_fields import GDN_HANDOFF_MODES
from cpplan.plans.plan_reader import wave_gdn_handoff
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.verifier import verify_plan


def _workload(lengths: list[int]) -> cpplan.Workload:
    rng = np.random.default_rng(3)
    requests = [cpplan.Request(tokens=rng.integers(0, 1000, n).tolist()) for n in lengths]
    return cpplan.Workload(
        items=tuple(cpplan.Item(id=f"i{k}", requests=(r,)) for k, r in enumerate(requests))
    )


@pytest.fixture(scope="module")
def plans(qwen36_two_modes):
    """At CP 4, the card offering rounds and parallel passing: one long request (spans every rank) and
    many short ones (continuations are short)."""
    qwen36 = qwen36_two_modes
    out = {}
    for name, lengths in (("long", [20_000]), ("short", [700] * 24)):
        workload = _workload(lengths)
        result = cpplan.plan(workload, topology=Topology(cp=4), model=qwen36, memory_bytes=80 * 2**30)
        out[name] = (result, plan_to_dict(result.problem, result.plan))
    return out


def test_the_plan_says_which_mode_each_wave_uses(plans):
    """Every wave of the full plan JSON and of the plan alone names its mode, the one the planner
    chose: parallel for the long request, rounds for the short ones."""
    for name, mode in (("long", "parallel"), ("short", "rounds")):
        result, alone = plans[name]
        for data in (result.to_dict(), alone):
            assert [w["gdn_handoff"] for w in data["waves"]] == [w.gdn_handoff for w in result.plan.waves]
            assert {w["gdn_handoff"] for w in data["waves"]} == {mode}
            assert all(wave_gdn_handoff(data, w) == mode for w in range(len(data["waves"])))


def test_a_plan_without_the_field_means_rounds(plans):
    """A plan written before the field (no ``gdn_handoff``) reads as rounds and is checked as rounds:
    a rounds plan still verifies, one whose waves claim the parallel cost does not."""
    for name, valid in (("short", True), ("long", False)):
        result, data = plans[name]
        old = copy.deepcopy(data)
        for wave in old["waves"]:
            del wave["gdn_handoff"]
        assert wave_gdn_handoff(old, 0) == "rounds"
        problem = result.problem
        verdict = verify_plan(old, problem.workload, problem.card, problem.memory_bytes)
        assert verdict.valid == valid, verdict.violations


@pytest.mark.parametrize("value", ["ring", 1, None])
def test_an_unknown_mode_is_refused(plans, value):
    """The plan as written (its wave in the mode it is priced in) verifies; a value that is no mode is a
    verifier violation naming the field and an InputError from the reader."""
    result, data = plans["long"]
    problem = result.problem
    assert data["waves"][0]["gdn_handoff"] in GDN_HANDOFF_MODES
    assert verify_plan(data, problem.workload, problem.card, problem.memory_bytes).valid
    bad = copy.deepcopy(data)
    bad["waves"][0]["gdn_handoff"] = value
    verdict = verify_plan(bad, problem.workload, problem.card, problem.memory_bytes)
    assert not verdict.valid
    assert any("gdn_handoff" in v for v in verdict.violations)
    with pytest.raises(cpplan.InputError, match="gdn_handoff"):
        wave_gdn_handoff(bad, 0)
