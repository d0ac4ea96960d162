"""Exact wave columns: known-feasible priced waves the joint model may take as they are.

The joint model's per-rank memory bounds are conservative, so a wave the exact evaluator accepts at the
memory edge can break them. A *column* is such a wave, already priced (a fitting
:class:`~cpplan.pricing.wave.WavePlan`), at its slot in its plan (waves by lowest item). ``take[w, g]``
says "wave w is exactly column g"; every item is covered once, by an ``x[i, w, l]`` or a taken column; a
slot taking a column holds no ``x`` item and is exempt from the conservative rows; the objective adds
the column's exact time, rounded up. So every plan made of columns (greedy's among them) is a solution
of the model, and the proven bound is a lower bound of a model that contains it (docs/cpsat.md, "Exact
columns", says why columns take their own slot only).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from cpplan.cpsat.scaling import Scaling
from cpplan.pricing.wave import WavePlan


@dataclass(frozen=True, kw_only=True, eq=False)
class Column:
    """A priced wave that fits, its items (ascending), the slots it may take, and its exact time less
    the per-wave overhead (barriers and hand-off) in model time units (rounded up)."""

    wave: WavePlan
    items: tuple[int, ...]
    slots: tuple[int, ...]
    time_units: int


@dataclass(frozen=True, kw_only=True, eq=False)
class ColumnVars:
    """``take[(w, g)]`` per allowed (slot, column) pair and ``col[w]`` per slot (``None`` when no
    column may occupy slot w)."""

    take: dict[tuple[int, int], cp_model.IntVar]
    col: list[cp_model.IntVar | None]


def make_columns(
    plans: Iterable[Sequence[WavePlan]], scaling: Scaling, memory_bytes: int, num_waves: int
) -> tuple[Column, ...]:
    """Columns of the fitting waves of ``plans`` (each a sequence of waves, none splitting an item: the joint
    model runs only on plans of whole items): one per item set (the cheapest wave given, first on ties), in
    the order first seen, with every slot (position in a plan, below ``num_waves``) at which it was seen."""
    best: dict[tuple[int, ...], WavePlan] = {}
    slots: dict[tuple[int, ...], list[int]] = {}
    for plan in plans:
        assert not any(wave.split for wave in plan), "a column holds whole items"
        ordered = sorted(plan, key=lambda wave: min(wave.items))
        for w, wave in enumerate(ordered[:num_waves]):
            assert wave.fits(memory_bytes), "a column must be a wave the exact evaluator accepts"
            items = tuple(sorted(wave.items))
            if items not in best or wave.cost_s < best[items].cost_s:
                best[items] = wave
            if w not in slots.setdefault(items, []):
                slots[items].append(w)
    return tuple(
        Column(
            wave=wave,
            items=items,
            slots=tuple(sorted(slots[items])),
            time_units=scaling.time(wave.prices.compute_s + wave.handoff.seconds),
        )
        for items, wave in best.items()
    )


def add_columns(model: cp_model.CpModel, num_waves: int, columns: tuple[Column, ...]) -> ColumnVars:
    """``take`` for every allowed (slot, column) pair and ``col`` per slot (see the module docstring);
    :func:`~cpplan.cpsat.waves.add_waves` ties them to the items."""
    take: dict[tuple[int, int], cp_model.IntVar] = {}
    for g, column in enumerate(columns):
        for w in column.slots:
            assert w <= column.items[0] and w < num_waves, (w, column.items)
            take[(w, g)] = model.new_bool_var(f"take[{w},{g}]")
    col: list[cp_model.IntVar | None] = []
    for w in range(num_waves):
        here = [var for (ww, _), var in take.items() if ww == w]
        if not here:
            col.append(None)
            continue
        var = model.new_bool_var(f"col[{w}]")
        model.add(var == sum(here))
        col.append(var)
    return ColumnVars(take=take, col=col)


def covering(columns: tuple[Column, ...], column_vars: ColumnVars, item: int) -> list[cp_model.IntVar]:
    """The ``take`` literals of the columns that hold ``item``."""
    return [var for (_, g), var in column_vars.take.items() if item in columns[g].items]


def columns_with_items(columns: tuple[Column, ...], items: Iterable[int]) -> list[int]:
    """Indices of the columns whose item set is ``items``."""
    key = tuple(sorted(items))
    return [g for g, column in enumerate(columns) if column.items == key]
