"""Objective: ``Σ_w (overhead · used[w] + T[w]) + Σ_{w,g} take[w, g] · time[g]`` in time units, with
``cp · T[w] ≥`` the wave's time summed over ranks.

The model prices a wave's slowest rank by the rank average (ranks are symmetric in the joint model;
:func:`cpplan.cpsat.chunk_caps.capped_split` then balances predicted seconds across the realized
chunks). Summed over ranks, the wave's time is linear in node copies: every copy's tokens, gradient
tokens, loss tokens, attention pairs and the tokens the other ``cp - 1`` ranks gather, plus segment
time for each segment start and for each of the ``cp - 1`` segments a rank boundary may split.
A wave that takes an exact column (:mod:`cpplan.cpsat.columns`) holds no modelled item (``T[w] = 0``)
and adds ``Σ_g take[w, g] · time[g]`` instead: the column's exact slowest-rank time, rounded up.
"""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from cpplan.cpsat.columns import Column, ColumnVars
from cpplan.cpsat.sharing import WaveTotals
from cpplan.cpsat.waves import WaveVars


@dataclass(frozen=True, kw_only=True, eq=False)
class ObjectiveVars:
    """``T[w]`` (the wave's slowest-rank time units) and the per-wave overhead in time units."""

    time: list[cp_model.IntVar]
    overhead_units: int


def add_objective(
    model: cp_model.CpModel,
    waves: WaveVars,
    totals: WaveTotals,
    num_ranks: int,
    overhead_units: int,
    columns: tuple[Column, ...] = (),
    column_vars: ColumnVars | None = None,
) -> ObjectiveVars:
    """``T[w]`` and the minimization, exact columns taken at their own time."""
    ub = -(-totals.time_units_ub // num_ranks)
    time = []
    for w in range(waves.num_waves):
        t = model.new_int_var(0, ub, f"T[{w}]")
        model.add(num_ranks * t >= totals.time_units[w])
        time.append(t)
    taken = list(column_vars.take.items()) if column_vars is not None else []
    column_time = cp_model.LinearExpr.weighted_sum(
        [var for _, var in taken], [columns[g].time_units for (_, g), _ in taken]
    )
    model.minimize(
        cp_model.LinearExpr.weighted_sum(waves.used, [overhead_units] * waves.num_waves)
        + cp_model.LinearExpr.sum(time)
        + column_time
    )
    return ObjectiveVars(time=time, overhead_units=overhead_units)
