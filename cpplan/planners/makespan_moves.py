"""Items moved between a pool plan's waves, or waves merged, where that ends the step sooner: the
makespan's neighbours.

On a pool of CP groups the step ends when its busiest GPU does, so a wave on that GPU costing a little
less can shorten the step even where the waves' sum grows. :func:`makespan_moved_plan` takes a
scheduled plan and, while it finds one, takes a neighbour that lowers its makespan: an item moved from a
wave on a GPU that ends last (a *critical* wave, the costliest first) to another wave of its group size
(the one on the earliest-ending GPUs first), or two items swapped between them (like-sized first, as in
:mod:`~cpplan.planners.item_moves`; :func:`critical_neighbours`); on a plan of too many waves for
those, a critical wave merged into another of its group size instead (one wave fewer;
:func:`critical_merges`). The changed waves are priced exactly
(:func:`~cpplan.pricing.wave.best_wave` on the group's problem) and the plan placed again
(:func:`~cpplan.plans.plan.placed_again`); the first neighbour that fits and ends sooner is taken and
the scan starts again. The search stops after ``max_pricings`` pricings or at ``deadline``, so a
deterministic profile gets the same plan on any machine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

from cpplan.planners.deadline import Deadline
from cpplan.planners.item_moves import Neighbour, exchanged, first_improvements, group_swaps
from cpplan.plans.plan import Plan, placed_again
from cpplan.pricing.problem import Problem, group_problem
from cpplan.pricing.wave import best_wave

MIN_GAIN = 1e-9
"""Relative makespan a neighbour must save to be taken (float noise never counts as a gain)."""


def makespan_moved_plan(
    problem: Problem,
    plan: Plan,
    layouts: Sequence[str],
    *,
    max_pricings: int,
    deadline: Deadline,
    padding_s: float | None = None,
    merge_waves: bool = False,
) -> Plan | None:
    """``plan`` (scheduled on a pool) with items moved between its waves while that lowers its makespan,
    or, with ``merge_waves`` (a plan too long for those moves), waves merged while that does (see the
    module docstring; within ``max_pricings``; ``padding_s``: the seconds of a padding wave under equal
    waves); ``None`` where nothing did, or where some wave holds part of an item."""
    assert plan.schedule is not None, "only a scheduled plan has a makespan"
    if plan.splits_an_item:
        return None

    def sooner(plan: Plan, neighbour: Neighbour) -> Plan | None:
        a, b, items_a, items_b = neighbour
        return _sooner(problem, layouts, plan, (a, b), (items_a, items_b), padding_s)

    search = critical_merges if merge_waves else critical_neighbours
    moved, improved = first_improvements(
        plan,
        lambda plan: search(problem, plan),
        sooner,
        max_pricings=max_pricings,
        deadline=deadline,
    )
    return moved if improved else None


def critical_merges(problem: Problem, plan: Plan) -> Iterator[Neighbour]:
    """Every critical wave of ``plan`` (the cheapest first) merged into another wave of its group size
    (the one on the earliest-ending GPUs first): every item moved, one wave fewer."""
    waves, ends = plan.waves, gpu_ends(plan)
    for a in sorted(_critical(plan, ends), key=lambda k: (waves[k].cost_s, k)):
        for b in _others(plan, a, ends):
            yield a, b, (), exchanged(waves[b].items, (), waves[a].items)


def critical_neighbours(problem: Problem, plan: Plan) -> Iterator[Neighbour]:
    """Every swap and move from a critical wave of ``plan`` to another wave of its group size: critical
    waves by cost (the costliest first), the other waves by when their GPUs end (the earliest first);
    per pair, the swaps of two units (:func:`wave_units`: the items below the prefix the whole wave
    shares, a prompt group, say), like-sized first, the moves of one unit, then the same for single
    items."""
    waves, ends = plan.waves, gpu_ends(plan)
    tokens = problem.item_full_tokens
    units = [wave_units(problem, wave.items) for wave in waves]
    singles = [[(i,) for i in wave.items] for wave in waves]
    for a in sorted(_critical(plan, ends), key=lambda k: (-waves[k].cost_s, k)):
        for b in _others(plan, a, ends):
            yield from _exchanges(a, b, units[a], units[b], tokens)
            if units[a] != singles[a] or units[b] != singles[b]:
                yield from _exchanges(a, b, singles[a], singles[b], tokens)


def _critical(plan: Plan, ends: list[float]) -> list[int]:
    """The waves of ``plan`` on a GPU that ends last (``ends``: :func:`gpu_ends`)."""
    last = max(ends, default=0.0)
    return [k for k, group in enumerate(plan.schedule.gpus) if any(ends[g] >= last for g in group)]


def _others(plan: Plan, a: int, ends: list[float]) -> list[int]:
    """The waves of ``plan`` other than ``a`` of its group size, by when their GPUs end (``ends``: the
    earliest first)."""
    gpus, waves = plan.schedule.gpus, plan.waves
    found = [b for b in range(len(waves)) if b != a and waves[b].cp == waves[a].cp]
    return sorted(found, key=lambda b: (max(ends[g] for g in gpus[b]), b))


def _exchanges(a: int, b: int, groups_a: list, groups_b: list, tokens) -> Iterator[Neighbour]:
    """:func:`~cpplan.planners.item_moves.group_swaps` of ``groups_a`` (wave ``a``'s) with ``groups_b``,
    then the moves of a group of ``groups_a`` to ``b`` (where ``a`` keeps some)."""
    yield from group_swaps(a, b, groups_a, groups_b, tokens)
    if len(groups_a) > 1:
        every_a = tuple(i for group in groups_a for i in group)
        every_b = tuple(i for group in groups_b for i in group)
        for x in groups_a:
            yield a, b, exchanged(every_a, x, ()), exchanged(every_b, (), x)


def wave_units(problem: Problem, items: tuple[int, ...]) -> list[tuple[int, ...]]:
    """``items`` grouped by where their first requests leave the prefix every one of them shares: items
    whose paths part there at the same node form a unit (in order of first item)."""
    tree = problem.tree
    paths = [tree.path(int(problem.item_requests([i])[0])) for i in items]
    counts: dict[int, int] = {}
    for path in paths:
        for node in path:
            counts[node] = counts.get(node, 0) + 1
    units: dict[int, list[int]] = {}
    for item, path in zip(items, paths, strict=True):
        parting = next((node for node in path if counts[node] < len(items)), path[-1])
        units.setdefault(parting, []).append(item)
    return [tuple(group) for group in units.values()]


def gpu_ends(plan: Plan) -> list[float]:
    """When each GPU of ``plan``'s pool finishes its last wave (padding waves not counted)."""
    schedule = plan.schedule
    ends = [0.0] * schedule.pool
    for wave, start, group in zip(plan.waves, schedule.start_s, schedule.gpus, strict=True):
        for g in group:
            ends[g] = max(ends[g], start + wave.cost_s)
    return ends


def _sooner(
    problem: Problem,
    layouts: Sequence[str],
    plan: Plan,
    pair: tuple[int, int],
    held: tuple[tuple[int, ...], tuple[int, ...]],
    padding_s: float | None,
) -> Plan | None:
    """``plan`` with waves ``pair`` holding the items ``held`` (a wave left with none dropped), placed
    again, where both fit and it ends sooner; ``None`` otherwise."""
    waves = list(plan.waves)
    group = group_problem(problem, waves[pair[0]].cp)
    for k, items in zip(pair, held, strict=True):
        if not items:
            continue
        wave, _ = best_wave(group, items, layouts)
        if wave is None:
            return None
        waves[k] = wave
    emptied = {k for k, items in zip(pair, held, strict=True) if not items}
    kept = [k for k in range(len(waves)) if k not in emptied]
    schedule = plan.schedule
    schedule = dataclasses.replace(
        schedule,
        gpus=tuple(schedule.gpus[k] for k in kept),
        start_s=tuple(schedule.start_s[k] for k in kept),
    )
    changed = dataclasses.replace(plan, waves=tuple(waves[k] for k in kept), schedule=schedule)
    moved = placed_again(changed, padding_s)
    return moved if moved.cost_s < plan.cost_s * (1 - MIN_GAIN) else None
