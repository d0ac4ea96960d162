"""Objective: ``Σ_w (overhead · used[w] + T[w]) + Σ_{w,g} take[w, g] · time[g]`` in time units.

Ranks are symmetric in the joint model, so ``cp · T[w] ≥`` the wave's time summed over ranks (every node
copy's amounts, the tokens the other ``cp - 1`` ranks gather, and segment time): the rank average, the
time of a balanced ownership, which the ownership model then decides (a floor assuming contiguous ranks
would overstate what scattered chunks cost). A wave that takes an exact column
(:mod:`cpplan.cpsat.columns`) has ``T[w] = 0`` and adds the column's exact time, rounded up.
"""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from cpplan.cpsat.columns import Column, ColumnVars
from cpplan.cpsat.sharing import WaveTotals
from cpplan.cpsat.waves import WaveVars


@dataclass(frozen=True, kw_only=True, eq=False)
class ObjectiveVars:
    """``T[w]`` (the wave's rank-dependent time units) and the per-wave overhead in time units."""

    time: list[cp_model.IntVar]
    overhead_units: int


def add_objective(
    model: cp_model.CpModel,
    waves: WaveVars,
    totals: WaveTotals,
    num_ranks: int,
    overhead_units: int,
    columns: tuple[Column, ...],
    column_vars: ColumnVars,
) -> ObjectiveVars:
    """``T[w]`` and the minimization, exact columns taken at their own time."""
    ub = -(-2 * totals.time_units_ub // num_ranks)  # twice any wave's rank average: a loose domain
    time = []
    for w in range(waves.num_waves):
        t = model.new_int_var(0, ub, f"T[{w}]")
        model.add(num_ranks * t >= totals.time_units[w])
        time.append(t)
    taken = list(column_vars.take.items())
    column_time = cp_model.LinearExpr.weighted_sum(
        [var for _, var in taken], [columns[g].time_units for (_, g), _ in taken]
    )
    model.minimize(
        cp_model.LinearExpr.weighted_sum(waves.used, [overhead_units] * waves.num_waves)
        + cp_model.LinearExpr.sum(time)
        + column_time
    )
    return ObjectiveVars(time=time, overhead_units=overhead_units)
