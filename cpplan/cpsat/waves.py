"""Wave assignment: ``x[i, w, j]`` = item i runs in wave w with local layout j.

Each item takes exactly one (wave, layout) pair; ``used[w]`` marks waves holding an item, and used
waves come first. Waves are interchangeable, so item i may only use waves ``0..i`` (the lowest item
of wave w has index at least w): every plan has a relabelling that satisfies this, and the greedy
plan (items in order) satisfies it as is.
"""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from .space import LayoutSpace


@dataclass(frozen=True, kw_only=True, eq=False)
class WaveVars:
    """``x[i][w][j]`` (an empty list for waves item i may not use), ``presence[i][w]`` (a linear
    expression, 0 or 1) and ``used[w]``."""

    num_waves: int
    x: list[list[list[cp_model.IntVar]]]
    presence: list[list[cp_model.LinearExprT]]
    used: list[cp_model.IntVar]


def add_waves(model: cp_model.CpModel, space: LayoutSpace, num_waves: int) -> WaveVars:
    """Assignment variables and constraints for ``num_waves`` candidate waves."""
    used = [model.new_bool_var(f"used[{w}]") for w in range(num_waves)]
    x: list[list[list[cp_model.IntVar]]] = []
    presence: list[list[cp_model.LinearExprT]] = []
    for item in space.items:
        i, num_layouts = item.item, len(item.layouts)
        rows = [
            [model.new_bool_var(f"x[{i},{w},{j}]") for j in range(num_layouts)] if w <= i else []
            for w in range(num_waves)
        ]
        model.add_exactly_one([v for row in rows for v in row])
        x.append(rows)
        presence.append([sum(row) if row else 0 for row in rows])
        for w, row in enumerate(rows):
            if row:
                model.add(used[w] >= presence[i][w])
    for w in range(num_waves):
        model.add(sum(presence[i][w] for i in range(len(space.items)) if x[i][w]) >= used[w])
        if w + 1 < num_waves:
            model.add(used[w] >= used[w + 1])
    return WaveVars(num_waves=num_waves, x=x, presence=presence, used=used)
