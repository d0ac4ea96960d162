"""The compiled CP-SAT joint model: every family added to one ``CpModel``, plus the values of a plan in it.

:func:`compile_model` states the model over ``num_waves`` candidate waves (:mod:`~cpplan.cpsat.waves`,
:mod:`~cpplan.cpsat.sharing`, :mod:`~cpplan.cpsat.chunk_caps`, :mod:`~cpplan.cpsat.memory`,
:mod:`~cpplan.cpsat.objective`, exact :mod:`~cpplan.cpsat.columns`). :meth:`CompiledModel.evaluate`
computes in plain Python the least values the constraints allow for an assignment and cross-node
sharing, the objective and whether every memory row holds: the complete hint, and the tests' reference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from cpplan.cpsat.chunk_caps import OwnershipVars, add_ownership, folded_quantities
from cpplan.cpsat.columns import Column, ColumnVars, add_columns
from cpplan.cpsat.memory import MemoryRows, add_memory, memory_rows, needed_quantities
from cpplan.cpsat.objective import ObjectiveVars, add_objective
from cpplan.cpsat.sharing import LayoutVars, add_layout
from cpplan.cpsat.space import LayoutSpace
from cpplan.cpsat.waves import WaveVars, add_waves
from cpplan.pricing.ownership import CHUNK_TOKENS
from cpplan.pricing.problem import Problem
from cpplan.spec.quantities import ADDITIVE, QUANTITIES, QUANTITY_INDEX, RANK_BOUNDS, check_rules


@dataclass(frozen=True, kw_only=True)
class ModelValues:
    """Values of a plan in the model: per item ``(wave, layout)``, shared cross nodes per wave,
    per-wave totals, chunk caps and times, the objective (time units), memory feasibility, and per
    wave the exact column it takes (``None``: none). A wave taking a column holds no modelled item:
    its totals and ``time`` are zero, the objective adds the column's time, and the layout of its
    items in ``assignment`` is ignored."""

    assignment: tuple[tuple[int, int], ...]
    shared: frozenset[tuple[int, int]]
    used: tuple[bool, ...]
    copies: Mapping[tuple[int, int], int]
    starts: Mapping[tuple[int, int], int]
    root_starts: Mapping[tuple[int, int, int], int]
    totals: tuple[dict[str, int], ...]
    chunks: tuple[int, ...]
    cap: tuple[int, ...]
    time: tuple[int, ...]
    objective: int
    feasible: bool
    rank_kib: tuple[tuple[int, ...], ...] = field(default=())
    columns: tuple[int | None, ...] = field(default=())


@dataclass(frozen=True, kw_only=True, eq=False)
class CompiledModel:
    """A built CP-SAT model and handles to its variables (see the module docstring)."""

    problem: Problem
    space: LayoutSpace
    num_waves: int
    model: cp_model.CpModel
    waves: WaveVars
    layout: LayoutVars
    ownership: OwnershipVars
    memory: MemoryRows
    rounding: dict[tuple[int, int], cp_model.IntVar]
    objective: ObjectiveVars
    columns: tuple[Column, ...]
    column_vars: ColumnVars

    @property
    def num_ranks(self) -> int:
        """CP ranks."""
        return self.problem.topology.cp

    def evaluate(
        self,
        assignment: Sequence[tuple[int, int]],
        shared: set[tuple[int, int]],
        columns: Sequence[int | None] | None = None,
    ) -> ModelValues:
        """Values for items placed at ``assignment[i] = (wave, layout)``, cross nodes ``(k, w)`` in
        ``shared`` shared, and wave w taking exact column ``columns[w]`` (``None``: none; the column's
        items must be exactly the wave's). Waves must be used first and item i in a wave ``≤ i``."""
        taken = tuple(columns) if columns is not None else (None,) * self.num_waves
        assert len(taken) == self.num_waves
        shared = frozenset(shared)
        used = _check_assignment(self, assignment, taken)
        modelled = [used[w] and taken[w] is None for w in range(self.num_waves)]
        totals = [dict.fromkeys(_TOTALS, 0) for _ in range(self.num_waves)]
        _add_local_layouts(self.space, assignment, modelled, totals)
        layout = _LayoutValues(copies={}, starts={}, root_starts={})
        for w in range(self.num_waves):
            _add_cross_nodes(self.space, assignment, shared, modelled, w, totals[w], layout)
        waves = [_wave_values(self, totals[w], modelled[w]) for w in range(self.num_waves)]
        objective = sum(
            self.objective.overhead_units * used[w]
            + waves[w].time
            + (self.columns[taken[w]].time_units if taken[w] is not None else 0)
            for w in range(self.num_waves)
        )
        return ModelValues(
            assignment=tuple(tuple(a) for a in assignment),
            shared=shared,
            used=tuple(used),
            copies=layout.copies,
            starts=layout.starts,
            root_starts=layout.root_starts,
            totals=tuple(totals),
            chunks=tuple(v.chunks for v in waves),
            cap=tuple(v.cap for v in waves),
            time=tuple(v.time for v in waves),
            objective=objective,
            feasible=all(v.feasible for v in waves),
            rank_kib=tuple(v.rank_kib for v in waves),
            columns=taken,
        )

    def add_hint(self, values: ModelValues) -> None:
        """Hint every variable with ``values``."""
        m = self.model
        w_vars = self.waves
        for w, used in enumerate(values.used):
            m.add_hint(w_vars.used[w], used)
        for i, rows in enumerate(w_vars.x):
            for w, row in enumerate(rows):
                for j, var in enumerate(row):
                    m.add_hint(var, values.assignment[i] == (w, j) and values.columns[w] is None)
        lay = self.layout
        for k in range(len(self.space.cross)):
            for w in range(self.num_waves):
                if lay.c[k][w] is None:
                    continue
                m.add_hint(lay.n[k][w], values.copies[(k, w)] > 0)
                m.add_hint(lay.s[k][w], (k, w) in values.shared)
                m.add_hint(lay.c[k][w], values.copies[(k, w)])
                if lay.st[k][w] is not lay.c[k][w]:
                    m.add_hint(lay.st[k][w], values.starts[(k, w)])
        for key, var in lay.z.items():
            m.add_hint(var, values.root_starts[key])
        cols = self.column_vars
        for (w, g), var in cols.take.items():
            m.add_hint(var, values.columns[w] == g)
        for w, var in enumerate(cols.col):
            if var is not None:
                m.add_hint(var, values.columns[w] is not None)
        own = self.ownership
        for w in range(self.num_waves):
            m.add_hint(own.chunks[w], values.chunks[w])
            if own.cap[w] is not own.chunks[w]:
                m.add_hint(own.cap[w], values.cap[w])
            tokens = values.totals[w]["tokens"] if self.num_ranks == 1 else CHUNK_TOKENS * values.cap[w]
            for name, var in own.min_vars[w].items():
                m.add_hint(var, min(tokens, values.totals[w][name]))
            for e, (_, fraction) in enumerate(self.memory.per_token_kib):
                if (w, e) in self.rounding:
                    m.add_hint(self.rounding[(w, e)], -(-fraction * tokens // CHUNK_TOKENS))
            m.add_hint(self.objective.time[w], values.time[w])


def compile_model(
    problem: Problem, space: LayoutSpace, num_waves: int, columns: tuple[Column, ...] = ()
) -> CompiledModel:
    """Build the joint model over ``num_waves`` candidate waves, with the exact ``columns`` (see
    :mod:`~cpplan.cpsat.columns`) as options for every slot they may occupy."""
    assert num_waves >= 1
    assert problem.chunk_tokens == CHUNK_TOKENS, "the model counts ownership in 128-token chunks"
    model = cp_model.CpModel()
    cp = problem.topology.cp
    card = problem.card
    needed = needed_quantities(card)
    folded = folded_quantities(space.all_flagged)
    column_vars = add_columns(model, num_waves, columns)
    waves = add_waves(model, space, num_waves, columns, column_vars)
    layout = add_layout(model, space, waves, cp)
    rows = memory_rows(card, problem.memory_bytes, space.scaling, folded=folded)
    ownership = add_ownership(model, waves, layout.totals, cp, folded=folded, needed=needed)
    rounding = add_memory(model, rows, ownership, waves.used, column_vars.col)
    objective = add_objective(
        model, waves, layout.totals, cp, space.scaling.time(card.wave_overhead_s), columns, column_vars
    )
    return CompiledModel(
        problem=problem,
        space=space,
        num_waves=num_waves,
        model=model,
        waves=waves,
        layout=layout,
        ownership=ownership,
        memory=rows,
        rounding=rounding,
        objective=objective,
        columns=columns,
        column_vars=column_vars,
    )


_TOTALS = (*(q.name for q in ADDITIVE), "segments", "time_units")
"""What the model sums per wave: every additive quantity, segment starts and time units."""


def _check_assignment(compiled: CompiledModel, assignment, taken: tuple) -> list[bool]:
    """The used waves; asserts the model's own rules (item i in a wave ``≤ i``, used waves first, a
    taken column holds exactly its wave's items)."""
    num_waves = compiled.num_waves
    used = [False] * num_waves
    for i, (w, _) in enumerate(assignment):
        assert 0 <= w <= i and w < num_waves, (i, w)
        used[w] = True
    assert all(used[w] or not any(used[w + 1 :]) for w in range(num_waves)), "used waves come first"
    for w, g in enumerate(taken):
        if g is not None:
            items = tuple(i for i, (ww, _) in enumerate(assignment) if ww == w)
            assert compiled.columns[g].items == items and w in compiled.columns[g].slots, (w, g, items)
    return used


def _add(total: dict, amounts: tuple[int, ...], copies: int, time_units: int, starts: int) -> None:
    for q in ADDITIVE:
        total[q.name] += amounts[QUANTITY_INDEX[q.name]] * copies
    total["time_units"] += time_units * copies
    total["segments"] += starts


def _add_local_layouts(space: LayoutSpace, assignment, modelled: list[bool], totals: list[dict]) -> None:
    for item in space.items:
        w, j = assignment[item.item]
        if modelled[w]:
            lay = item.layouts[j]
            _add(totals[w], lay.amounts, 1, lay.time_units, lay.fixed_starts)


@dataclass(frozen=True, kw_only=True)
class _LayoutValues:
    copies: dict[tuple[int, int], int]
    starts: dict[tuple[int, int], int]
    root_starts: dict[tuple[int, int, int], int]


def _add_cross_nodes(
    space: LayoutSpace, assignment, shared: frozenset, modelled: list[bool], w: int, total, out: _LayoutValues
) -> None:
    """Copies and segment starts of every cross node (and local root) in wave ``w``: the least values the
    constraints of :mod:`~cpplan.cpsat.sharing` allow."""
    index = space.cross_index
    children: dict[int, list[int]] = {}
    for k, node in enumerate(space.cross):
        if node.parent in index:
            children.setdefault(index[node.parent], []).append(k)
    present = {i for i, (ww, _) in enumerate(assignment) if ww == w and modelled[w]}
    for k in reversed(range(len(space.cross))):
        node = space.cross[k]
        if any(i >= w for i in node.items):  # else no variable: no item of this node may use wave w
            out.copies[(k, w)] = _cross_copies(space, assignment, shared, present, k, w, out.copies, children)
    for k, node in enumerate(space.cross):
        if (k, w) in out.copies:
            c = out.copies[(k, w)]
            parent_shared = node.parent not in index or (index[node.parent], w) in shared
            out.starts[(k, w)] = c if parent_shared else 0
            _add(total, node.amounts, c, node.time_units, out.starts[(k, w)])
    for item in space.items:
        if w <= item.item:
            ww, j = assignment[item.item]
            lay = item.layouts[j]
            for r, (_, p) in enumerate(item.roots):
                here = ww == w and modelled[w] and (index[p], w) in shared
                out.root_starts[(item.item, r, w)] = lay.root_copies[r] if here else 0
                total["segments"] += out.root_starts[(item.item, r, w)]


def _cross_copies(
    space: LayoutSpace, assignment, shared, present: set[int], k: int, w: int, copies, children
) -> int:
    node = space.cross[k]
    if not present.intersection(node.items):
        return 0
    if (k, w) in shared:
        return 1
    total = sum(copies.get((j, w), 0) for j in children.get(k, ()))
    for i in present.intersection(node.items):
        item = space.items[i]
        lay = item.layouts[assignment[i][1]]
        total += sum(lay.root_copies[r] for r, (_, p) in enumerate(item.roots) if p == node.node)
        total += sum(count for v, count in item.ends if v == node.node)
    return total


@dataclass(frozen=True, kw_only=True)
class _WaveValues:
    chunks: int
    cap: int
    time: int
    rank_kib: tuple[int, ...]
    feasible: bool


def _wave_values(compiled: CompiledModel, t: dict, modelled: bool) -> _WaveValues:
    """Chunks, cap, rank-average time (:mod:`~cpplan.cpsat.objective`), every envelope's KiB for a rank
    at the model's bounds, and whether the memory rows hold."""
    space, cp, rows = compiled.space, compiled.num_ranks, compiled.memory
    t["time_units"] += space.segment_time_units * (t["segments"] + (cp - 1) * modelled)
    chunks = -(-t["tokens"] // CHUNK_TOKENS)
    cap = chunks if cp == 1 else -(-chunks // cp)
    tokens = t["tokens"] if cp == 1 else CHUNK_TOKENS * cap
    values = {q.name: _RANK_VALUES[q.rank_bound](t, tokens, q.name, cp) for q in QUANTITIES}
    kib = tuple(rows.rank_kib(e, cap, values) for e in range(len(rows.static_kib)))
    return _WaveValues(
        chunks=chunks,
        cap=cap,
        time=-(-t["time_units"] // cp),
        rank_kib=kib,
        feasible=not modelled or max(kib) <= rows.memory_kib,
    )


_RANK_VALUES = {
    "chunk_cap": lambda t, tokens, name, cp: tokens,
    "chunk_cap_or_total": lambda t, tokens, name, cp: min(tokens, t[name]),
    "wave_total": lambda t, tokens, name, cp: t[name],
    "wave_segments": lambda t, tokens, name, cp: t["segments"],
    "wave_packed": lambda t, tokens, name, cp: t["tokens"] if cp > 1 else 0,
}
check_rules("cpsat.joint_model._wave_values", _RANK_VALUES, RANK_BOUNDS)
