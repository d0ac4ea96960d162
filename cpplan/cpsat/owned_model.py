"""The ownership model: which priced waves run, and which CP rank owns every chunk of each, in one model
whose objective is the evaluator's price (docs/cpsat.md, "The ownership model").

Each distinct proposed wave (items and packed layout) is a *column*. The model covers every item with
chosen columns, each either *as is* (its known ownership, the evaluator's price rounded down) or *free*:
a contiguous rank-ordered split of its chunks (:mod:`~cpplan.cpsat.rank_split`) inside a window around
the known ones, with per-rank memory floors in KiB (never more permissive than the evaluator:
:mod:`~cpplan.cpsat.scaling`), per-barrier slowest-rank times rounded down, and the GDN hand-off per
mode (:mod:`~cpplan.cpsat.handoff_terms`). So a plan's objective is never above its price, and the
proven bound holds for every plan made of the columns. The split may be taken in another chunk order
(a column's ``order``: :func:`reordered_column`, the second pass of
:func:`~cpplan.cpsat.owned_solve.reordered`): there every rank's chunks of a scattered ownership are
one run, so the same rows move chunks between ranks from any ownership.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from cpplan.cpsat.handoff_terms import HandoffVars, add_handoff, add_reordered_handoff
from cpplan.cpsat.rank_split import RankSplit, boundary_windows, is_rank_ordered, seed_boundaries
from cpplan.cpsat.scaling import FINE_SCALING, Scaling
from cpplan.cpsat.split_tables import SplitTables, chunk_matrix, split_tables
from cpplan.pricing.ownership import contiguous_split
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import WavePlan
from cpplan.spec.quantities import QUANTITY_INDEX


@dataclass(frozen=True, kw_only=True, eq=False)
class OwnedColumn:
    """One proposed wave: its cheapest priced version (``wave``), the chunk order a new split takes
    (``order``: ``None`` for packed order), the known ownerships contiguous in that order (``seeds``,
    boundaries per rank) and whether the model may choose a new split."""

    wave: WavePlan
    seeds: tuple[tuple[int, ...], ...]
    free: bool
    order: np.ndarray | None = None


@dataclass(frozen=True, kw_only=True, eq=False)
class FreeVars:
    """A free column's variables: its split, per-barrier maxima, hand-off and per-rank memory rows."""

    split: RankSplit
    barrier: tuple[cp_model.IntVar, ...]
    handoff: HandoffVars | None
    average_units: int
    order: np.ndarray

    def owners(self, solver: cp_model.CpSolver) -> np.ndarray:
        """The chosen owner of every chunk, in packed order."""
        owner = np.empty_like(self.order)
        owner[self.order] = self.split.owners(solver)
        return owner


@dataclass(frozen=True, kw_only=True, eq=False)
class OwnedModel:
    """The compiled ownership model (see the module docstring)."""

    problem: Problem
    columns: tuple[OwnedColumn, ...]
    model: cp_model.CpModel
    scaling: Scaling
    as_is: tuple[cp_model.IntVar, ...]
    free: tuple[cp_model.IntVar | None, ...]
    time: tuple[cp_model.IntVar, ...]
    free_vars: tuple[FreeVars | None, ...]
    overhead_units: int
    least_units: tuple[int, ...] = ()
    """Per column the least time any of its versions can take (its exact time as is; for a free column
    at most its barriers' rank averages): what :func:`cover_bound` shares out."""


def cover_bound(owned: OwnedModel) -> int:
    """A lower bound of every plan of the model, without the solver: each item pays, at least, the
    cheapest share (by logical tokens) of the least time plus overhead of a column holding it, and a
    plan of columns pays each column's least time in full over its items."""
    problem = owned.problem
    best = [float("inf")] * problem.num_items
    for column, least in zip(owned.columns, owned.least_units, strict=True):
        items = [int(i) for i in column.wave.items]
        tokens = [problem.logical_tokens([i]) for i in items]
        total = sum(tokens) or 1
        for i, t in zip(items, tokens, strict=True):
            best[i] = min(best[i], (least + owned.overhead_units) * t / total)
    return int(sum(best) * (1 - 1e-12))


def pool_columns(
    problem: Problem, plans: Sequence[Sequence[WavePlan]], *, max_free: int
) -> tuple[OwnedColumn, ...]:
    """The distinct waves of ``plans`` (none splitting an item: a pool's,
    :class:`~cpplan.planners.decide.Pool`) as columns: one per item set and packed layout, its cheapest
    version priced, every rank-ordered ownership seen as a seed (the time-balanced contiguous split where
    none was seen); the ``max_free`` costliest columns may take a new split."""
    found: dict[tuple, list[WavePlan]] = {}
    for plan in plans:
        for wave in plan:
            assert not wave.split, "a column holds whole items: plans splitting one stay out of the pool"
            found.setdefault(layout_key(wave), []).append(wave)
    columns = []
    for versions in found.values():
        best = min(versions, key=lambda w: w.cost_s)
        cp = problem.topology.cp
        ordered = [w.owner for w in versions if is_rank_ordered(w.owner)]
        if not ordered:  # priced under a split free of ranges: the window goes round the time-balanced one
            weights = best.stats.quantity_matrix() @ problem.card.constants.time_coefficients
            ordered = [contiguous_split(weights, cp)]
        seeds = tuple(dict.fromkeys(tuple(seed_boundaries(owner, cp)) for owner in ordered))
        columns.append((best, seeds))
    ranked = sorted(range(len(columns)), key=lambda g: -columns[g][0].cost_s)
    chosen = set(ranked[:max_free])
    return tuple(
        OwnedColumn(wave=wave, seeds=seeds, free=g in chosen and problem.topology.cp > 1)
        for g, (wave, seeds) in enumerate(columns)
    )


def reordered_column(problem: Problem, wave: WavePlan, around: np.ndarray) -> OwnedColumn:
    """``wave`` (as is) as a column whose new split is taken in the order of the chunk ownership
    ``around``, around it (:func:`chunk_order`): free only where that ownership is not contiguous in
    packed order."""
    order = chunk_order(around)
    seeds = (tuple(seed_boundaries(around[order], problem.topology.cp)),)
    return OwnedColumn(wave=wave, seeds=seeds, order=order, free=not is_rank_ordered(around))


def chunk_order(owner: np.ndarray) -> np.ndarray:
    """The chunks by owner, then position: the order in which ``owner`` is contiguous and rank-ordered."""
    return np.argsort(owner, kind="stable")


def layout_key(wave: WavePlan) -> tuple:
    """What makes two priced waves one column: their items and their packed layout."""
    layout = wave.layout
    return (
        tuple(sorted(wave.items)),
        layout.seg_offset.tobytes(),
        layout.seg_length.tobytes(),
        layout.seg_parent.tobytes(),
        layout.request_ids.tobytes(),
    )


def compile_owned(
    problem: Problem, columns: tuple[OwnedColumn, ...], *, window_chunks: int, scaling: Scaling = FINE_SCALING
) -> OwnedModel:
    """Build the ownership model over ``columns`` (see the module docstring)."""
    model = cp_model.CpModel()
    card = problem.card
    overhead = scaling.time_lower(card.wave_overhead_s)
    as_is, free, times, free_vars, least = [], [], [], [], []
    cover: dict[int, list[cp_model.IntVar]] = {i: [] for i in range(problem.num_items)}
    for g, column in enumerate(columns):
        wave = column.wave
        asis = model.new_bool_var(f"as_is[{g}]")
        exact = scaling.time_lower(wave.prices.compute_s + wave.handoff.seconds)
        time = model.new_int_var(0, max(exact, 1) * 4 + 10**6, f"time[{g}]")
        model.add(time >= exact * asis)
        taken = [asis]
        fv = None
        chosen = None
        least.append(exact)
        if column.free:
            chosen = model.new_bool_var(f"free[{g}]")
            fv = _free_column(model, problem, column, g, chosen, time, window_chunks, scaling)
            least[-1] = min(exact, fv.average_units)
            taken.append(chosen)
        for i in wave.items:
            cover[int(i)].extend(taken)
        as_is.append(asis)
        free.append(chosen)
        times.append(time)
        free_vars.append(fv)
    for i, literals in cover.items():
        assert literals, f"item {i} is in no column"
        model.add_exactly_one(literals)
    used = [lit for g in range(len(columns)) for lit in (as_is[g], free[g]) if lit is not None]
    model.minimize(sum(times) + overhead * sum(used))
    return OwnedModel(
        problem=problem,
        columns=columns,
        model=model,
        scaling=scaling,
        as_is=tuple(as_is),
        free=tuple(free),
        time=tuple(times),
        free_vars=tuple(free_vars),
        overhead_units=overhead,
        least_units=tuple(least),
    )


def _free_column(
    model: cp_model.CpModel,
    problem: Problem,
    column: OwnedColumn,
    g: int,
    chosen: cp_model.IntVar,
    time: cp_model.IntVar,
    window_chunks: int,
    scaling: Scaling,
) -> FreeVars:
    """The split, memory rows, barrier maxima and hand-off of a free column; ``time`` is at least its
    barriers and hand-off when ``chosen``."""
    cp, card = problem.topology.cp, problem.card
    tables = split_tables(column.wave)
    order = np.arange(tables.num_chunks) if column.order is None else column.order
    windows = boundary_windows(column.seeds, tables.num_chunks, window_chunks)
    split = RankSplit(model=model, num_chunks=tables.num_chunks, num_ranks=cp, windows=windows, name=f"c{g}")
    ordered = _Ordered.of(tables, order)
    tokens = [split.owned(r, ordered.tokens) for r in range(cp)]
    _add_memory_rows(model, problem, split, ordered, chosen, scaling)
    barrier, average = _add_barriers(model, card, split, ordered, scaling, f"c{g}")
    # valid without enforcement (a barrier's slowest rank is at least its rank average): a linear row the
    # relaxation sees, where the enforced one below is a big-M row
    model.add(time >= average * chosen)
    handoff = None
    if card.handoff.priced and column.order is None:
        handoff = add_handoff(model, split, tables, tokens, card.handoff, scaling.seconds_per_unit)
    elif card.handoff.priced:
        handoff = add_reordered_handoff(
            model, split, tables, order, tokens, card.handoff, scaling.seconds_per_unit
        )
    model.add(time >= sum(barrier) + (handoff.units if handoff else 0)).only_enforce_if(chosen)
    split.hint(column.seeds[0])
    return FreeVars(split=split, barrier=tuple(barrier), handoff=handoff, average_units=average, order=order)


@dataclass(frozen=True, kw_only=True, eq=False)
class _Ordered:
    """A column's per-chunk constants in the chunk order its split takes: tokens, additive quantities
    (:func:`~cpplan.cpsat.split_tables.chunk_matrix`), and where a piece starts: ``starts`` (per
    boundary) where the chunk before is the packed predecessor that the chunk's segment continues from,
    so a piece starts there only when a rank's range does; ``pieces`` (per chunk) where that predecessor
    lies elsewhere in the order, counted as a piece whoever owns it (never fewer than there are)."""

    tokens: np.ndarray
    matrix: np.ndarray
    starts: np.ndarray
    pieces: np.ndarray
    packed: int

    @classmethod
    def of(cls, tables: SplitTables, order: np.ndarray) -> _Ordered:
        continues = tables.continues[order] >= 0
        adjacent = np.r_[False, order[1:] == order[:-1] + 1]
        return cls(
            tokens=tables.tokens[order],
            matrix=chunk_matrix(tables.stats)[order],
            starts=np.r_[continues & adjacent, False].astype(np.int64),
            pieces=(continues & ~adjacent).astype(np.int64),
            packed=int(tables.stats.packed_tokens),
        )


def _add_memory_rows(model, problem: Problem, split: RankSplit, ordered: _Ordered, chosen, scaling: Scaling):
    """For every rank and envelope, ``static + Σ own chunks' bytes + pieces at the start ≤ B / safety``,
    in ``scaling``'s memory units (each rounded up, the budget down)."""
    card = problem.card
    coefficients = card.envelope_coefficients()
    budget = scaling.memory_kib(problem.memory_bytes, card.safety)
    remote, segments = QUANTITY_INDEX["remote_tokens"], QUANTITY_INDEX["segments"]
    for e in range(coefficients.shape[0]):
        coef = coefficients[e]
        positive = ordered.matrix @ coef + coef[segments] * ordered.pieces
        per_chunk = np.ceil(positive / scaling.bytes_per_unit - 1e-9) - np.floor(
            coef[remote] * ordered.tokens / scaling.bytes_per_unit
        )
        static = scaling.static(card.envelope_static_bytes[e]) + scaling.memory_coef(
            coef[remote] * ordered.packed
        )
        piece_kib = scaling.memory_coef(coef[segments])
        for r in range(split.num_ranks):
            row = static + split.owned(r, per_chunk.astype(np.int64))
            if piece_kib and r > 0:
                row = row + piece_kib * split.at_start(r, ordered.starts)
            model.add(row <= budget).only_enforce_if(chosen)


def _add_barriers(model, card, split: RankSplit, ordered: _Ordered, scaling: Scaling, name: str):
    """Per barrier, a variable at least every rank's seconds in it (each chunk's rounded down); and the
    sum over barriers of their rank averages (rounded down), a lower bound of the barriers' sum."""
    remote = QUANTITY_INDEX["remote_tokens"]
    result, averages = [], []
    for b, coef in enumerate(card.constants.barrier_coefficients):
        # pieces at a rank's start are left out of its time: a lower bound (no card prices time per piece)
        per_chunk_s = ordered.matrix @ coef - coef[remote] * ordered.tokens
        per_chunk = np.floor(per_chunk_s / scaling.seconds_per_unit + 1e-9).astype(np.int64)
        const = math.floor(coef[remote] * ordered.packed / scaling.seconds_per_unit + 1e-9)
        upper = int(np.abs(per_chunk).sum()) + const + 1
        var = model.new_int_var(0, upper, f"{name}.barrier[{b}]")
        for r in range(split.num_ranks):
            model.add(var >= const + split.owned(r, per_chunk))
        result.append(var)
        averages.append(const + int(per_chunk.sum()) // split.num_ranks)
    return result, sum(averages)
