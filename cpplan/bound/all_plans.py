"""A lower bound on the price of every valid plan of a problem, and the scope it holds over.

A plan's price is the sum over its waves of the per-wave overhead, the compute seconds (per barrier the
slowest rank, summed over barriers) and the GDN hand-off's seconds (never negative, in any mode). Per
barrier the slowest rank costs at least the average rank, and a barrier's seconds are linear in a
rank's quantities with coefficients ``>= 0``, so a wave costs at least
``overhead + Σ_b coef_b · Q_w / cp`` whatever its layout, ownership and hand-off mode, and a plan at
least ``W · overhead + Σ_b coef_b · (Σ_w Q_w) / cp``: with :mod:`cpplan.bound.node_floors`'s least
number of waves ``W_0`` and least totals, a bound over every wave partition, layout, ownership and
hand-off mode (:data:`ALL_PLANS`). On ``cp > 1`` ranks every wave also pays a hand-off or an imbalance
(:mod:`cpplan.bound.handoff_floors`; :func:`crossing_terms_s` says how many waves must); for a few items,
every partition into waves is priced by those floors (:mod:`cpplan.bound.partitions`). On a pool of CP
groups of one size the bound is of the makespan (:mod:`cpplan.bound.pool_makespan`). Every term is rounded
toward a smaller bound.

Under dynamic CP the bound is of the makespan over every group size
(:func:`~cpplan.bound.pool_makespan.dynamic_pool_bound`). Where the argument does not hold (a card with
a negative coefficient, or a problem where some request alone, or some item in every wave, cannot fit)
the bound has the scope :data:`PROPOSED_WAVES`: the caller's own bound over the proposed waves stands,
this one says nothing."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from cpplan.bound.handoff_floors import (
    copy_seconds,
    crossing_floor_s,
    head_parallel_floor_s,
    item_level_floor_s,
    one_wave_floor_s,
    rows_floor_s,
)
from cpplan.bound.node_floors import common_nodes, memory_ranks, node_floors, whole_on_one_rank
from cpplan.bound.partitions import partition_bound_s
from cpplan.bound.passing_floors import passing_floor_s
from cpplan.bound.pool_makespan import dynamic_pool_bound, pool_bound, rounded_down
from cpplan.plans.outcome import Scope
from cpplan.plans.plan import Plan, SolverStats
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import best_wave
from cpplan.spec.quantities import QUANTITY_INDEX

ALL_PLANS = Scope.ALL_PLANS
"""The scope of a bound on every valid plan of the problem."""
PROPOSED_WAVES = Scope.PROPOSED_WAVES
"""The scope of a bound on the plans made of the proposed waves only (the ownership model's)."""
BOUND_SCOPES = (ALL_PLANS, PROPOSED_WAVES)

_TOKENS = QUANTITY_INDEX["tokens"]
_REMOTE_TOKENS = QUANTITY_INDEX["remote_tokens"]

ROUND_DOWN = 1e-9
"""Relative margin taken off the bound: float sums never lift it above the exact arithmetic's."""


@dataclass(frozen=True, kw_only=True)
class PlanBound:
    """A lower bound and its scope. ``bound_s``: seconds no plan in the scope costs less than (``None``
    where nothing is proved, scope :data:`PROPOSED_WAVES`); ``num_waves``: the least number of waves
    of such a plan; ``terms_s``: the bound's parts (``overhead``, each barrier, on several ranks
    ``handoff_or_imbalance``, and ``enumerated_partitions`` where the partitions of the items lift the
    sum; on a pool, ``summed_waves_over_groups``, ``costliest_item_wave`` and, for a few items or
    prefix units, ``enumerated_groups``; under dynamic CP, ``gpu_seconds_over_pool``,
    ``costliest_item_wave``, ``enumerated_runs`` and ``whole_blocks``: the largest the bound);
    ``wave_floor_s``: what every wave of any plan pays
    at least beyond its overhead and rank average (:func:`every_wave_floor_s`; 0 on one rank);
    ``best_plan_s``: the cheapest plan of the pool given, if
    any (``gap(best_plan_s)`` is then the pool's proven distance to the best plan); ``why``: where the
    scope is :data:`PROPOSED_WAVES`, the reason; ``new_plans``: where the waves were counted by a
    matching of pairs and ``layouts`` were given, the plan of those pairs (and the other requests
    alone), every wave priced under its best layout, when every wave fits: columns the decide stage
    may add to its pool."""

    bound_s: float | None
    scope: str
    num_waves: int = 0
    terms_s: dict[str, float] = field(default_factory=dict)
    best_plan_s: float | None = None
    new_plans: tuple[Plan, ...] = ()
    why: str = ""
    wave_floor_s: float = 0.0

    def gap(self, cost_s: float) -> float | None:
        """``(cost - bound) / cost`` of a plan priced ``cost_s`` (``None`` without a bound), never
        below zero."""
        if self.bound_s is None or cost_s <= 0:
            return None
        return max(0.0, (cost_s - self.bound_s) / cost_s)


def plan_bound(problem: Problem, plans: Sequence[Plan] = (), *, layouts: Sequence[str] = ()) -> PlanBound:
    """The lower bound of every valid plan of ``problem`` (see the module docstring); ``plans``, the
    pool of proposals, only name the cheapest (:attr:`PlanBound.best_plan_s`); with ``layouts``, the
    plan of the bound's matching where it found one (:attr:`PlanBound.new_plans`)."""
    best = min((p.cost_s for p in plans), default=None)
    topology = problem.topology
    if topology.dynamic_cp:
        return dynamic_bound(problem, best)
    summed = waves_bound(problem, best, layouts)
    return pool_bound(problem, summed) if topology.several_groups else summed


def dynamic_bound(problem: Problem, best: float | None) -> PlanBound:
    """:func:`plan_bound` of a pool under dynamic CP: its makespan's
    (:func:`~cpplan.bound.pool_makespan.dynamic_pool_bound`), where every group size's card has no
    negative coefficient."""
    cards = [problem.card.group_card(size) for size in problem.topology.group_sizes()]
    if any(_negative(card) for card in cards):
        return PlanBound(
            bound_s=None, scope=PROPOSED_WAVES, best_plan_s=best, why="a negative card coefficient"
        )
    bound, terms = dynamic_pool_bound(problem)
    return PlanBound(bound_s=bound, scope=ALL_PLANS, num_waves=1, terms_s=terms, best_plan_s=best)


def _negative(card) -> bool:
    """Whether ``card`` has a negative barrier, envelope or overhead coefficient (the bound's argument
    needs none)."""
    barriers = np.asarray(card.constants.barrier_coefficients, dtype=np.float64)
    return bool((barriers < 0).any() or (card.envelope_coefficients() < 0).any() or card.wave_overhead_s < 0)


def waves_bound(problem: Problem, best: float | None, layouts: Sequence[str]) -> PlanBound:
    """:func:`plan_bound` of the waves' summed prices (a plan's price on one CP group; on a pool, what
    its groups run together)."""
    card, topology = problem.card, problem.topology
    barriers = np.asarray(card.constants.barrier_coefficients, dtype=np.float64)
    if _negative(card):
        return PlanBound(
            bound_s=None, scope=PROPOSED_WAVES, best_plan_s=best, why="a negative card coefficient"
        )
    floors = node_floors(problem)
    if not floors.fits:
        return PlanBound(
            bound_s=None, scope=PROPOSED_WAVES, best_plan_s=best, why="a request alone does not fit"
        )
    num_waves = int(floors.waves[0])
    terms = {"overhead": num_waves * card.wave_overhead_s}
    per_barrier = barriers @ floors.totals / topology.cp
    for name, seconds in zip(card.barrier_names, per_barrier.tolist(), strict=True):
        terms[name] = seconds
    wave_floor = 0.0
    if topology.cp > 1:
        extra, wave_floor = crossing_terms_s(problem, num_waves, per_barrier)
        if extra > 0:
            terms["handoff_or_imbalance"] = extra
    enumerated = partition_bound_s(problem)
    if enumerated is not None and math.isinf(enumerated):
        return PlanBound(bound_s=None, scope=PROPOSED_WAVES, best_plan_s=best, why="some item fits no wave")
    if enumerated is not None and enumerated > math.fsum(terms.values()):
        terms["enumerated_partitions"] = enumerated - math.fsum(terms.values())
    total = math.fsum(terms.values()) * (1 - ROUND_DOWN)
    terms = {k: rounded_down(v * (1 - ROUND_DOWN)) for k, v in terms.items()}
    matched = matching_plan(problem, floors.pairs, layouts) if floors.pairs and layouts else None
    return PlanBound(
        bound_s=total,
        scope=ALL_PLANS,
        num_waves=num_waves,
        terms_s=terms,
        best_plan_s=best,
        new_plans=(matched,) if matched is not None else (),
        wave_floor_s=wave_floor * (1 - ROUND_DOWN),
    )


def matching_plan(problem: Problem, pairs: Sequence[tuple[int, int]], layouts: Sequence[str]) -> Plan | None:
    """The plan of request ``pairs`` (each a wave, split in two where it does not fit) and every other
    request alone, each wave priced under the best of ``layouts`` (cheapest that fits), in the order
    of their first item; ``None`` unless every item is one request and every wave fits."""
    if not bool((np.diff(problem.item_ptr) == 1).all()):
        return None
    item = problem.request_item
    paired = {r for pair in pairs for r in pair}
    groups = [tuple(sorted((int(item[a]), int(item[b])))) for a, b in pairs]
    groups += [(int(item[r]),) for r in range(problem.tree.num_requests) if r not in paired]
    waves = []
    for group in sorted(groups):
        wave, _ = best_wave(problem, group, layouts)
        if wave is None and len(group) == 2:
            alone = [best_wave(problem, (i,), layouts)[0] for i in group]
            if any(w is None for w in alone):
                return None
            waves.extend(alone)
            continue
        if wave is None:
            return None
        waves.append(wave)
    return Plan(strategy="matching", waves=tuple(sorted(waves, key=lambda w: min(w.items))))


def scoped_stats(stats: SolverStats, bound: PlanBound, cost_s: float) -> SolverStats:
    """``stats`` of a solver whose plan is priced ``cost_s``, its bound replaced by ``bound`` where that
    holds for all plans (``bound_scope``, and ``gap`` the plan's price over it; the model's own gap
    stays in ``model_gap``); as they are otherwise."""
    if bound.scope != ALL_PLANS or bound.bound_s is None:
        return stats
    return replace(stats, bound_s=bound.bound_s, bound_scope=ALL_PLANS, gap=bound.gap(cost_s))


def pool_scoped_stats(problem: Problem, stats: SolverStats, cost_s: float) -> SolverStats:
    """``stats`` of a pool's plan priced ``cost_s`` (its makespan) with the bound over every plan of the
    pool in place of the schedule model's own, where one is proved (:func:`scoped_stats`); ``stats``
    as they are where none is, or where the stats report no model run."""
    if not stats.outcomes:
        return stats
    return scoped_stats(stats, plan_bound(problem), cost_s)


def wave_crossing_floor_s(problem: Problem, packed_tokens: float, levels_s: float = 0.0) -> float:
    """The least hand-off of a wave of at least ``packed_tokens`` packed tokens on ``cp > 1`` ranks whose
    GDN states cross ranks at least once, in the cheapest mode the card offers: rounds or parallel
    passing (:func:`~cpplan.bound.handoff_floors.crossing_floor_s`) or head-parallel where offered (its
    latency, an even split's rows and ``levels_s``, a floor of its levels and copies); 0 where nothing
    is priced."""
    seconds, cp = problem.card.handoff, problem.topology.cp
    if not seconds.priced:
        return 0.0
    floor = crossing_floor_s(seconds)
    if seconds.head_parallel_priced:
        floor = min(floor, rows_floor_s(seconds, packed_tokens, cp) + levels_s)
    return floor


def crossing_terms_s(problem: Problem, num_waves: int, average_s: np.ndarray) -> tuple[float, float]:
    """What every plan of at least ``num_waves`` waves on ``cp > 1`` ranks pays beyond ``average_s``
    (per barrier, the bound's rank average over the plan) and ``num_waves`` overheads, for GDN states
    crossing ranks and ranks left unbalanced. A wave whose states never cross keeps every request's
    whole path on one rank (:func:`~cpplan.bound.node_floors.whole_on_one_rank`); every wave pays at
    least :func:`every_wave_floor_s` (``e``, nonzero where all requests share a prefix), so:

    - one wave: :func:`~cpplan.bound.handoff_floors.one_wave_floor_s` (the least over the modes), where
      some request cannot be whole on a rank its crossing floors only (head-parallel's and
      :func:`~cpplan.bound.passing_floors.passing_floor_s`); or a second overhead and two waves' ``e``
      (and one crossing, where some request cannot be whole);
    - where no request fits one rank whole, every wave crosses: each pays at least
      :func:`wave_crossing_floor_s` of its shortest possible request, and, head-parallel, the least
      levels and copies of an item (:func:`~cpplan.bound.handoff_floors.item_level_floor_s`);
    - where some request does not, the wave holding it crosses: at least one such floor, the others
      ``e`` each;
    - otherwise either some wave crosses or every request is whole on a rank, which needs
      :func:`~cpplan.bound.node_floors.memory_ranks`' count of rank slots, ``cp`` per wave: where that
      is more than ``num_waves`` waves hold, a crossing or one more overhead (and wave); every wave
      ``e``.

    Returns that and ``e`` (what each wave pays, however many the plan has).
    """
    seconds = problem.card.handoff
    if not seconds.priced:
        return 0.0, 0.0
    copy_s = copy_seconds(problem)
    item_levels = item_level_floor_s(problem, copy_s) if seconds.head_parallel_priced else 0.0
    every = every_wave_floor_s(problem, copy_s, item_levels)
    return _crossing_s(problem, num_waves, average_s, copy_s, item_levels, every), every


def _crossing_s(
    problem: Problem,
    num_waves: int,
    average_s: np.ndarray,
    copy_s: np.ndarray,
    item_levels: float,
    every: float,
) -> float:
    """:func:`crossing_terms_s`'s first part, from the per-node copies' seconds ``copy_s``, an item's
    least head-parallel levels ``item_levels`` and ``every``, :func:`every_wave_floor_s`."""
    overhead = problem.card.wave_overhead_s
    whole = whole_on_one_rank(problem)
    lengths = problem.request_tokens.astype(np.float64)
    if num_waves == 1:
        everything = np.arange(problem.tree.num_requests, dtype=np.int64)
        if whole.all():
            return min(one_wave_floor_s(problem, average_s, copy_s), overhead + 2 * every)
        passing = passing_floor_s(problem, everything, average_s)
        crossing = min(passing, head_parallel_floor_s(problem, everything, copy_s))
        shortest = float(lengths[~whole].min())
        return min(crossing, overhead + wave_crossing_floor_s(problem, shortest, item_levels) + every)
    if not whole.any():
        return num_waves * wave_crossing_floor_s(problem, float(lengths.min()), item_levels)
    if not whole.all():
        crossing = wave_crossing_floor_s(problem, float(lengths[~whole].min()), item_levels)
        return crossing + (num_waves - 1) * every
    slots = memory_ranks(problem)
    if slots is not None and slots[0] > problem.topology.cp * num_waves:
        crossing = wave_crossing_floor_s(problem, float(lengths.min()), item_levels)
        return min(crossing + (num_waves - 1) * every, overhead + (num_waves + 1) * every)
    return num_waves * every


def every_wave_floor_s(problem: Problem, copy_s: np.ndarray, levels_s: float = 0.0) -> float:
    """What any wave on ``cp > 1`` ranks pays beyond its rank average where every request of the problem
    passes some node besides the root (a system prompt all share): its GDN states cross ranks (at least
    :func:`wave_crossing_floor_s` of the shortest request, ``levels_s`` head-parallel), or every request
    sits whole on a rank. On two ranks or more, each then holds the common nodes: one more copy of them
    at least (``copy_s``, per node). On one rank, the others idle: per barrier the slowest rank is at
    least the loaded one, whose local seconds exceed an idle rank's (its remote tokens only) by at least
    the token coefficient less the remote one times the wave's tokens (at least the shortest
    request's), and the average is ``1 / cp`` of the way from an idle rank to it. 0 where no node is
    common to every request, or nothing is priced."""
    if not problem.card.handoff.priced:
        return 0.0
    cp = problem.topology.cp
    common = common_nodes(problem, np.arange(problem.tree.num_requests, dtype=np.int64))
    if common.size == 0:
        return 0.0
    shortest = float(problem.request_tokens.min())
    barriers = np.asarray(problem.card.constants.barrier_coefficients, dtype=np.float64)
    per_token = np.maximum(barriers[:, _TOKENS] - barriers[:, _REMOTE_TOKENS], 0.0)
    alone = (cp - 1) / cp * float(per_token.sum()) * shortest
    crossing = wave_crossing_floor_s(problem, shortest, levels_s)
    return min(crossing, float(copy_s[common].sum()), alone)
