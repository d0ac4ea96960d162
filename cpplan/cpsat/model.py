"""The compiled CP-SAT model: every family added to one ``CpModel``, plus the values of a plan in it.

:func:`compile_model` states the joint model over ``num_waves`` candidate waves:
:mod:`~cpplan.cpsat.waves` (which item runs where, with which local layout),
:mod:`~cpplan.cpsat.sharing` (per-wave sharing of cross nodes, copies, segment starts, wave totals),
:mod:`~cpplan.cpsat.chunk_caps` (chunks and per-rank chunk caps; per-rank bounds),
:mod:`~cpplan.cpsat.memory` (every wave, envelope and rank within budget, in KiB) and
:mod:`~cpplan.cpsat.objective` (overhead per used wave plus the slowest rank's time).

:meth:`CompiledModel.evaluate` computes, in plain Python, the value every variable takes for a given
assignment and cross-node sharing (the least values the constraints allow), the objective and
whether every memory row holds: the complete hint, and the reference the tests check the solver by.

Each slot may instead take one of the exact ``columns`` (:mod:`~cpplan.cpsat.columns`): known
priced waves that fit, taken as they are, so that the greedy plan is always a solution of the model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from cpplan.cpsat.chunk_caps import OwnershipVars, add_ownership
from cpplan.cpsat.columns import Column, ColumnVars, add_columns
from cpplan.cpsat.memory import MemoryRows, add_memory, memory_rows, needed_quantities
from cpplan.cpsat.objective import ObjectiveVars, add_objective
from cpplan.cpsat.sharing import LayoutVars, add_layout
from cpplan.cpsat.space import LayoutSpace
from cpplan.cpsat.waves import WaveVars, add_waves
from cpplan.pricing.ownership import CHUNK_TOKENS
from cpplan.pricing.problem import Problem


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
    weighted: tuple[bool, ...]
    weight_cap: tuple[int, ...]
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
    needed: frozenset[str]
    fold_grad: bool
    fold_loss: bool

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
        return _evaluate(self, assignment, frozenset(shared), taken)

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
            tokens = (
                values.totals[w]["packed_tokens"] if self.num_ranks == 1 else CHUNK_TOKENS * values.cap[w]
            )
            for name, var in own.min_vars[w].items():
                m.add_hint(var, min(tokens, values.totals[w][name]))
            for e, (_, fraction) in enumerate(self.memory.per_token_kib):
                if (w, e) in self.rounding:
                    m.add_hint(self.rounding[(w, e)], -(-fraction * tokens // CHUNK_TOKENS))
            m.add_hint(self.objective.time[w], values.time[w])
            if own.weighted[w] is not None:
                m.add_hint(own.weighted[w], values.weighted[w])
                m.add_hint(own.weight_cap[w], values.weight_cap[w])


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
    fold_grad, fold_loss = space.all_grad, space.all_loss
    column_vars = add_columns(model, num_waves, columns)
    waves = add_waves(model, space, num_waves, columns, column_vars)
    layout = add_layout(model, space, waves, cp)
    rows = memory_rows(
        card,
        problem.memory_bytes,
        space.scaling,
        fold_grad=fold_grad,
        fold_loss=fold_loss,
        max_starts_per_chunk=space.max_starts_per_chunk,
    )
    weights = (rows.weight_chunk_kib, rows.weight_start_kib, rows.weight_max_kib) if rows.weighted else None
    ownership = add_ownership(
        model,
        waves,
        layout.totals,
        cp,
        fold_grad=fold_grad,
        fold_loss=fold_loss,
        needed=needed,
        weights=weights,
    )
    rounding = add_memory(model, rows, ownership, waves.used, column_vars.col)
    objective = add_objective(
        model,
        waves,
        layout.totals,
        cp,
        space.scaling.time(card.wave_overhead_s),
        columns,
        column_vars,
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
        needed=needed,
        fold_grad=fold_grad,
        fold_loss=fold_loss,
    )


def _evaluate(compiled: CompiledModel, assignment, shared: frozenset, taken: tuple) -> ModelValues:
    space, num_waves, cp = compiled.space, compiled.num_waves, compiled.num_ranks
    index = space.cross_index
    used = [False] * num_waves
    for i, (w, _) in enumerate(assignment):
        assert 0 <= w <= i and w < num_waves, (i, w)
        used[w] = True
    assert all(used[w] or not any(used[w + 1 :]) for w in range(num_waves)), "used waves come first"
    for w, g in enumerate(taken):
        if g is not None:
            items = tuple(i for i, (ww, _) in enumerate(assignment) if ww == w)
            assert compiled.columns[g].items == items and w in compiled.columns[g].slots, (w, g, items)
    modelled = [used[w] and taken[w] is None for w in range(num_waves)]
    copies: dict[tuple[int, int], int] = {}
    starts: dict[tuple[int, int], int] = {}
    root_starts: dict[tuple[int, int, int], int] = {}
    children: dict[int, list[int]] = {}
    for k, node in enumerate(space.cross):
        if node.parent in index:
            children.setdefault(index[node.parent], []).append(k)
    totals = [dict.fromkeys(_TOTALS, 0) for _ in range(num_waves)]

    def add(w: int, **amounts: int) -> None:
        for key, value in amounts.items():
            totals[w][key] += value

    for item in space.items:
        w, j = assignment[item.item]
        if not modelled[w]:
            continue
        lay = item.layouts[j]
        add(
            w,
            packed_tokens=lay.tokens,
            grad_tokens=lay.grad_tokens,
            loss_tokens=lay.loss_tokens,
            attn_pairs=lay.attn_pairs,
            grad_attn_pairs=lay.grad_attn_pairs,
            time_units=lay.time_units,
            segments=lay.fixed_starts,
        )
    for w in range(num_waves):
        present = {i for i, (ww, _) in enumerate(assignment) if ww == w and modelled[w]}
        for k in reversed(range(len(space.cross))):
            node = space.cross[k]
            if not any(i >= w for i in node.items):
                continue  # no variable: no item of this node may use wave w
            if not present.intersection(node.items):
                copies[(k, w)] = 0
            elif (k, w) in shared:
                copies[(k, w)] = 1
            else:
                total = sum(copies.get((j, w), 0) for j in children.get(k, ()))
                for i in present.intersection(node.items):
                    item = space.items[i]
                    lay = item.layouts[assignment[i][1]]
                    total += sum(lay.root_copies[r] for r, (_, p) in enumerate(item.roots) if p == node.node)
                    total += sum(count for v, count in item.ends if v == node.node)
                copies[(k, w)] = total
        for k, node in enumerate(space.cross):
            if (k, w) not in copies:
                continue
            c = copies[(k, w)]
            parent_shared = node.parent not in index or (index[node.parent], w) in shared
            starts[(k, w)] = c if parent_shared else 0
            add(
                w,
                packed_tokens=node.length * c,
                grad_tokens=node.length * node.grad * c,
                loss_tokens=node.length * node.loss * c,
                attn_pairs=node.attn_pairs * c,
                grad_attn_pairs=node.attn_pairs * node.grad * c,
                time_units=node.time_units * c,
                segments=starts[(k, w)],
            )
        for item in space.items:
            if w > item.item:
                continue
            ww, j = assignment[item.item]
            lay = item.layouts[j]
            for r, (_, p) in enumerate(item.roots):
                value = lay.root_copies[r] if ww == w and modelled[w] and (index[p], w) in shared else 0
                root_starts[(item.item, r, w)] = value
                add(w, segments=value)
    chunks, caps, times, kib_rows, weighted, weight_caps = [], [], [], [], [], []
    feasible = True
    rows = compiled.memory
    objective = 0
    for w in range(num_waves):
        t = totals[w]
        t["time_units"] += space.segment_time_units * (t["segments"] + (cp - 1) * modelled[w])
        chunk = -(-t["packed_tokens"] // CHUNK_TOKENS)
        cap = chunk if cp == 1 else -(-chunk // cp)
        time = -(-t["time_units"] // cp)
        chunks.append(chunk), caps.append(cap), times.append(time)
        tokens = t["packed_tokens"] if cp == 1 else CHUNK_TOKENS * cap
        values = {
            "tokens": tokens,
            "grad_tokens": min(tokens, t["grad_tokens"]),
            "loss_tokens": min(tokens, t["loss_tokens"]),
            "segments": t["segments"],
            "attn_pairs": t["attn_pairs"],
            "grad_attn_pairs": t["grad_attn_pairs"],
            "remote_tokens": t["packed_tokens"] if cp > 1 else 0,
        }
        kib = tuple(rows.rank_kib(e, cap, values) for e in range(len(rows.static_kib)))
        kib_rows.append(kib)
        total_weight = rows.weight_chunk_kib * chunk + rows.weight_start_kib * t["segments"]
        weight_cap = rows.weight_max_kib - (-total_weight // cp)
        by_weight = rows.weighted and all(
            rows.rank_kib_weighted(e, weight_cap, values) <= rows.budget_kib
            for e in range(len(rows.static_kib))
        )
        by_chunks = max(kib) <= rows.budget_kib
        weighted.append(by_weight and not by_chunks)
        weight_caps.append(weight_cap)
        if modelled[w] and not (by_chunks or by_weight):
            feasible = False
        objective += compiled.objective.overhead_units * used[w] + time
        if taken[w] is not None:
            objective += compiled.columns[taken[w]].time_units
    return ModelValues(
        assignment=tuple(tuple(a) for a in assignment),
        shared=shared,
        used=tuple(used),
        copies=copies,
        starts=starts,
        root_starts=root_starts,
        totals=tuple(totals),
        chunks=tuple(chunks),
        cap=tuple(caps),
        weighted=tuple(weighted),
        weight_cap=tuple(weight_caps),
        time=tuple(times),
        objective=objective,
        feasible=feasible,
        rank_kib=tuple(kib_rows),
        columns=taken,
    )


_TOTALS = (
    "packed_tokens",
    "grad_tokens",
    "loss_tokens",
    "attn_pairs",
    "grad_attn_pairs",
    "segments",
    "time_units",
)
