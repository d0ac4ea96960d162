"""Wave assignment: ``x[i, w, j]`` = item i runs in wave w with local layout j.

Each item is covered exactly once: by one (wave, layout) pair, or by an exact column taken in some wave slot
(:mod:`~cpplan.cpsat.columns`); a slot taking a column holds no other item. ``used[w]`` marks waves holding an
item or a column, and used waves come first. Waves are interchangeable, so item i may only use waves ``0..i``
(the lowest item of wave w has index at least w; likewise a column only slots up to its lowest item): every
plan has a relabelling that satisfies this, and the greedy plan (items in order) satisfies it as is.
"""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from cpplan.cpsat.columns import Column, ColumnVars, covering
from cpplan.cpsat.space import LayoutSpace


@dataclass(frozen=True, kw_only=True, eq=False)
class WaveVars:
    """``x[i][w][j]`` (an empty list for waves item i may not use), ``presence[i][w]`` (a linear
    expression, 0 or 1), ``used[w]``, and ``modelled[w]`` (a linear expression: 1 when wave w is used
    and takes no exact column)."""

    num_waves: int
    x: list[list[list[cp_model.IntVar]]]
    presence: list[list[cp_model.LinearExprT]]
    used: list[cp_model.IntVar]
    modelled: list[cp_model.LinearExprT]


def add_waves(
    model: cp_model.CpModel,
    space: LayoutSpace,
    num_waves: int,
    columns: tuple[Column, ...],
    column_vars: ColumnVars,
) -> WaveVars:
    """Assignment variables and constraints for ``num_waves`` candidate waves, with the exact
    ``columns`` as the other way to cover their items."""
    used = [model.new_bool_var(f"used[{w}]") for w in range(num_waves)]
    col = column_vars.col
    x: list[list[list[cp_model.IntVar]]] = []
    presence: list[list[cp_model.LinearExprT]] = []
    for item in space.items:
        i, num_layouts = item.item, len(item.layouts)
        rows = [
            [model.new_bool_var(f"x[{i},{w},{j}]") for j in range(num_layouts)] if w <= i else []
            for w in range(num_waves)
        ]
        model.add_exactly_one([v for row in rows for v in row] + covering(columns, column_vars, i))
        x.append(rows)
        presence.append([sum(row) if row else 0 for row in rows])
        for w, row in enumerate(rows):
            if row:
                model.add(used[w] >= presence[i][w])
    for w in range(num_waves):
        here = [presence[i][w] for i in range(len(space.items)) if x[i][w]]
        if col[w] is None:
            model.add(sum(here) >= used[w])
        else:
            model.add(used[w] >= col[w])
            model.add(sum(here) + col[w] >= used[w])
            model.add(sum(here) == 0).only_enforce_if(col[w])
        if w + 1 < num_waves:
            model.add(used[w] >= used[w + 1])
    modelled = [used[w] - col[w] if col[w] is not None else used[w] for w in range(num_waves)]
    return WaveVars(num_waves=num_waves, x=x, presence=presence, used=used, modelled=modelled)
