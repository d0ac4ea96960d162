"""The seeded strategy: a baseline's waves re-priced under cpplan's ownership candidates."""

from __future__ import annotations

import numpy as np

from cpplan import Topology
from cpplan.baselines import prefix_grouper
from cpplan.bench.synthetic import grpo
from cpplan.planners.seeded import repair
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import price_wave
from cpplan.spec.settings import Settings

LAYOUTS = ("full", "none", "min_span:512")


def test_a_baselines_layout_is_owned_as_cpplans_proposers_own_a_wave(qwen36):
    """Prefix Grouper's wave of the one-wave GRPO step at CP8 (each prompt stored once per group, its
    ownership even contiguous shards) is repaired into its own layout under cpplan's ownership
    candidates: the balanced split free of ranges, 0.3916 s, cheaper than both the baseline's own
    ownership and the wave under cpplan's layouts, neither of which the repair keeps."""
    workload = grpo(
        num_prompts=2, group_size=8, system_tokens=2048, prompt_tokens=8192, completion_tokens=512
    )
    problem = Problem.build(
        workload, Settings(topology=Topology(cp=8), model=qwen36, memory_bytes=20 * 2**30)
    )
    proposal = prefix_grouper.plan(problem)
    (theirs,) = proposal.waves
    (wave,) = repair(problem, proposal, LAYOUTS).waves
    assert (wave.layout_name, wave.packed_tokens) == (theirs.layout_name, theirs.packed_tokens)
    assert (np.diff(wave.owner) < 0).any() and (np.diff(theirs.owner) >= 0).all()
    assert wave.cost_s == price_wave(problem, theirs.items, theirs.layout, theirs.layout_name).cost_s
    assert round(wave.cost_s, 4) == 0.3916 < round(theirs.cost_s, 4)
