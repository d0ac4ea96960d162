"""Objective: ``Σ_w (overhead · used[w] + T[w])`` in time units, with ``cp · T[w] ≥`` the wave's time
summed over ranks.

The model prices a wave's slowest rank by the rank average (ranks are symmetric in the joint model;
:func:`cpplan.cpsat.ownership.capped_split` then balances predicted seconds across the realized
chunks). Summed over ranks, the wave's time is linear in node copies: every copy's tokens, gradient
tokens, loss tokens, attention pairs and the tokens the other ``cp - 1`` ranks gather, plus segment
time for each segment start and for each of the ``cp - 1`` segments a rank boundary may split.
"""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from .layout import WaveTotals
from .waves import WaveVars


@dataclass(frozen=True, kw_only=True, eq=False)
class ObjectiveVars:
    """``T[w]`` (the wave's slowest-rank time units) and the per-wave overhead in time units."""

    time: list[cp_model.IntVar]
    overhead_units: int


def add_objective(
    model: cp_model.CpModel, waves: WaveVars, totals: WaveTotals, num_ranks: int, overhead_units: int
) -> ObjectiveVars:
    """``T[w]`` and the minimization."""
    ub = -(-totals.time_units_ub // num_ranks)
    time = []
    for w in range(waves.num_waves):
        t = model.new_int_var(0, ub, f"T[{w}]")
        model.add(num_ranks * t >= totals.time_units[w])
        time.append(t)
    model.minimize(
        cp_model.LinearExpr.weighted_sum(waves.used, [overhead_units] * waves.num_waves)
        + cp_model.LinearExpr.sum(time)
    )
    return ObjectiveVars(time=time, overhead_units=overhead_units)
