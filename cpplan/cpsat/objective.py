"""Objective: ``Σ_w (overhead · used[w] + T[w]) + Σ_{w,g} take[w, g] · time[g]`` in time units.

Ranks are symmetric in the joint model, so ``cp · T[w] ≥`` the wave's time summed over ranks (every node
copy's amounts, the tokens the other ``cp - 1`` ranks gather, and segment time). Under CP, where the
items' floors (:mod:`cpplan.cpsat.wave_floors`) are known, one variable per barrier ``M[b, w]`` is at
least that barrier's rank average and every present item's floor in it, ``T[w] ≥ Σ_b M[b, w]`` and
``T[w] ≥`` every present item's wave floor. A wave that takes an exact column (:mod:`cpplan.cpsat.columns`)
has ``T[w] = 0`` and adds the column's exact time, rounded up.
"""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from cpplan.cpsat.columns import Column, ColumnVars
from cpplan.cpsat.sharing import WaveTotals
from cpplan.cpsat.space import LayoutSpace
from cpplan.cpsat.waves import WaveVars


@dataclass(frozen=True, kw_only=True, eq=False)
class ObjectiveVars:
    """``T[w]`` (the wave's rank-dependent time units), ``barrier[b][w]`` (``M[b, w]``: the slowest
    rank of barrier b; empty without floors) and the per-wave overhead in time units."""

    time: list[cp_model.IntVar]
    barrier: list[list[cp_model.IntVar]]
    overhead_units: int


def add_objective(
    model: cp_model.CpModel,
    space: LayoutSpace,
    waves: WaveVars,
    totals: WaveTotals,
    num_ranks: int,
    overhead_units: int,
    columns: tuple[Column, ...],
    column_vars: ColumnVars,
) -> ObjectiveVars:
    """``T[w]``, the barrier maxima and the minimization, exact columns taken at their own time."""
    # Barrier units round up per node copy and barrier, so their sum may pass the total's bound.
    ub = -(-2 * totals.time_units_ub // num_ranks) + max(
        (item.floor_units for item in space.items), default=0
    )
    time = []
    for w in range(waves.num_waves):
        t = model.new_int_var(0, ub, f"T[{w}]")
        model.add(num_ranks * t >= totals.time_units[w])
        time.append(t)
    barrier = _add_barriers(model, space, waves, totals, num_ranks, time, ub)
    taken = list(column_vars.take.items())
    column_time = cp_model.LinearExpr.weighted_sum(
        [var for _, var in taken], [columns[g].time_units for (_, g), _ in taken]
    )
    model.minimize(
        cp_model.LinearExpr.weighted_sum(waves.used, [overhead_units] * waves.num_waves)
        + cp_model.LinearExpr.sum(time)
        + column_time
    )
    return ObjectiveVars(time=time, barrier=barrier, overhead_units=overhead_units)


def _add_barriers(model, space: LayoutSpace, waves: WaveVars, totals: WaveTotals, num_ranks: int, time, ub):
    """The floors' rows: ``M[b, w]`` per barrier, ``T[w] ≥ Σ_b M[b, w]`` and each item's wave floor.
    A floor no higher than the item's own rank average can never bind and gets no row."""
    binding = {item.item: _binding_floors(item, num_ranks, len(totals.barrier_units)) for item in space.items}
    barrier: list[list[cp_model.IntVar]] = [[] for _ in totals.barrier_units]
    for w in range(waves.num_waves):
        present = [item.item for item in space.items if waves.x[item.item][w]]
        for b, units in enumerate(totals.barrier_units):
            m = model.new_int_var(0, ub, f"M[{b},{w}]")
            model.add(num_ranks * m >= units[w])
            for i in present:
                if binding[i][0][b]:
                    model.add(m >= space.items[i].barrier_floor_units[b] * waves.presence[i][w])
            barrier[b].append(m)
        if barrier:
            model.add(time[w] >= sum(barrier[b][w] for b in range(len(barrier))))
        for i in present:
            if binding[i][1]:
                model.add(time[w] >= space.items[i].floor_units * waves.presence[i][w])
    return barrier


def _binding_floors(item, num_ranks: int, num_barriers: int) -> tuple[list[bool], bool]:
    """Which of ``item``'s floors (per barrier, and its wave floor) lie above its own rank average in
    every local layout, so that a row for them can bind."""
    per_barrier = [
        num_ranks * item.barrier_floor_units[b] > min(lay.barrier_units[b] for lay in item.layouts)
        for b in range(num_barriers)
    ]
    return per_barrier, num_ranks * item.floor_units > min(lay.time_units for lay in item.layouts)
