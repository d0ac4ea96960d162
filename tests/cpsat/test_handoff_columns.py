"""The CP-SAT exact columns carry a wave's GDN hand-off in the mode it runs, not the rounds' bound."""

from __future__ import annotations

import numpy as np

import cpplan
from cpplan import Topology
from cpplan.cpsat.columns import make_columns
from cpplan.cpsat.scaling import SCALING
from cpplan.pricing.handoff import PARALLEL, ROUNDS, handoff_modes
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import price_wave
from cpplan.spec.settings import Settings


def test_column_time_is_the_chosen_modes_cost(qwen36_two_modes):
    """A 20K-token request at CP 4 runs its hand-off in parallel (head-parallel not offered): its
    column's time is its barriers plus the parallel hand-off, below what the rounds would cost."""
    qwen36 = qwen36_two_modes
    workload = cpplan.Workload(
        items=(cpplan.Item(id="a", requests=(cpplan.Request(tokens=np.arange(20_000) % 997),)),)
    )
    problem = Problem.build(
        workload, Settings(topology=Topology(cp=4), model=qwen36, memory_bytes=80 * 2**30)
    )
    wave = price_wave(problem, [0], problem.pack([0], "full"), "full")
    modes = handoff_modes(wave.layout, wave.owner, problem.chunk_tokens, 4, problem.card.handoff)
    (column,) = make_columns([[wave]], SCALING, problem.memory_bytes, 1)
    assert wave.gdn_handoff == PARALLEL
    assert column.time_units == SCALING.time(wave.prices.compute_s + modes[PARALLEL].seconds)
    assert column.time_units < SCALING.time(wave.prices.compute_s + modes[ROUNDS].seconds)
