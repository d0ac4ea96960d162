"""Items moved between waves, and whole requests between ranks: a plan's cheaper neighbours.

Between waves (:func:`moved_plan`), single items are moved or swapped between two of a plan's waves.

Each neighbour changes two waves; both are priced exactly (:func:`~cpplan.pricing.wave.best_wave` over
the profile's layouts) and the neighbour is taken where both fit and together cost less than the two
waves they replace (first improvement, then the scan starts again). Neighbours come in a fixed order:
per pair of waves (the costlier first), the swaps, pairs of items closest in full-sharing tokens first
(a swap of like-sized items keeps both waves within memory and changes what shares them), then every
single move. The search stops after ``max_pricings`` pricings, or at ``deadline`` under the clock,
so a deterministic profile gets the same plan on any machine. Between ranks (:func:`repacked_plan`),
each wave's whole requests are packed onto ranks again, the packing polished two ranks at a time
(:func:`~cpplan.pricing.wave.repacked_wave`), up to :data:`REPACK_ROUNDS` times. Within each wave
(:func:`chained_plan`), its ranks are chained round its packed order
(:func:`~cpplan.pricing.chained.chained_wave`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

from cpplan.planners.deadline import Deadline
from cpplan.plans.plan import Plan
from cpplan.pricing.chained import chained_wave
from cpplan.pricing.problem import Problem, group_problem
from cpplan.pricing.wave import WavePlan, best_wave, repacked_wave

REPACK_ROUNDS = 3
"""The most times :func:`repacked_plan` packs one wave's whole requests again, each from the order the
last left, while that makes the wave cheaper: the packing's ties are broken by the units' order, so a
second pass from a new order often finds a cheaper one (48 ShareGPT conversations at CP8: 0.6207 s,
0.5998 s, then 0.5908 s)."""

Neighbour = tuple[int, int, tuple[int, ...], tuple[int, ...]]
"""Two wave indices and the items each holds after the move or swap."""


def moved_plan(
    problem: Problem, plan: Plan, layouts: Sequence[str], *, max_pricings: int, deadline: Deadline
) -> Plan | None:
    """``plan`` (whole items only) with items moved between its waves while that makes it cheaper (see
    the module docstring), as strategy ``"moves"``; ``None`` where no move made it cheaper."""
    assert not plan.splits_an_item, "the moves keep items whole"

    def cheaper(waves: list[WavePlan], neighbour: Neighbour) -> list[WavePlan] | None:
        a, b, items_a, items_b = neighbour
        found = _cheaper(problem, layouts, waves[a], waves[b], items_a, items_b)
        if found is None:
            return None
        waves = list(waves)
        waves[a], waves[b] = found
        return waves

    waves, improved = first_improvements(
        list(plan.waves),
        lambda waves: neighbours(problem, waves),
        cheaper,
        max_pricings=max_pricings,
        deadline=deadline,
    )
    return Plan(strategy="moves", waves=tuple(waves)) if improved else None


def first_improvements(state, neighbours_of, better, *, max_pricings: int, deadline: Deadline):
    """``state`` improved while some neighbour improves it: the neighbours of the current state in
    order (``neighbours_of``), each tried (``better``: the improved state, or ``None``; two pricings
    each), the first improvement taken and the scan started again. Stops when no neighbour improves
    it, after ``max_pricings`` pricings, or at ``deadline``. Returns the state and whether it
    improved."""
    pricings, improved = 0, False
    while True:
        for neighbour in neighbours_of(state):
            if pricings + 2 > max_pricings or deadline.expired():
                return state, improved
            pricings += 2
            found = better(state, neighbour)
            if found is not None:
                state, improved = found, True
                break
        else:
            return state, improved


def repacked_plan(problem: Problem, plan: Plan, *, deadline: Deadline) -> Plan | None:
    """``plan`` with every wave whose whole requests, packed onto ranks again and polished, fit and cost
    less (:func:`~cpplan.pricing.wave.repacked_wave`, again from the new order while that is cheaper,
    at most :data:`REPACK_ROUNDS` times) taking that version, as strategy ``"moves"``;
    ``None`` where no wave did. Under the clock ``deadline`` stops it sooner."""
    waves, improved = list(plan.waves), False
    for k in range(len(waves)):
        for _ in range(REPACK_ROUNDS):
            if deadline.expired():
                break
            found = repacked_wave(problem, waves[k])
            if found is None or not found.fits(problem.memory_bytes) or found.cost_s >= waves[k].cost_s:
                break
            waves[k], improved = found, True
    return Plan(strategy="moves", waves=tuple(waves)) if improved else None


def chained_plan(problem: Problem, plan: Plan, *, rotations: int, deadline: Deadline) -> Plan | None:
    """``plan`` with every wave whose ranks, chained round its packed order, cost less
    (:func:`~cpplan.pricing.chained.chained_wave`, at ``rotations`` rotations, each wave priced for its
    own CP group) taking that version, as strategy ``"moves"``; ``None`` where no wave did. Under the
    clock ``deadline`` stops it sooner."""
    waves, improved = list(plan.waves), False
    for k, wave in enumerate(plan.waves):
        if deadline.expired():
            break
        found = chained_wave(group_problem(problem, wave.cp), wave, rotations=rotations)
        if found is not None:
            waves[k], improved = found, True
    return Plan(strategy="moves", waves=tuple(waves)) if improved else None


def neighbours(problem: Problem, waves: Sequence[WavePlan]) -> Iterator[Neighbour]:
    """Every move of one item from one wave to another and every swap of two items between two waves,
    in the module docstring's order."""
    tokens = problem.item_full_tokens
    by_cost = sorted(range(len(waves)), key=lambda k: (-waves[k].cost_s, k))
    for a, b in itertools.combinations(by_cost, 2):
        held_a, held_b = waves[a].items, waves[b].items
        yield from group_swaps(a, b, [(i,) for i in held_a], [(j,) for j in held_b], tokens)
        for src, dst, held_src, held_dst in ((a, b, held_a, held_b), (b, a, held_b, held_a)):
            if len(held_src) < 2:
                continue
            for i in held_src:
                yield src, dst, _without(held_src, i), tuple(sorted((*held_dst, i)))


def group_swaps(
    a: int, b: int, groups_a: Sequence[tuple[int, ...]], groups_b: Sequence[tuple[int, ...]], tokens
) -> Iterator[Neighbour]:
    """Every swap of a group of items of wave ``a`` (``groups_a``) with one of wave ``b``'s, the pair
    closest in full-sharing tokens (``tokens``, per item) first; each wave's items after it sorted."""
    every_a = tuple(i for group in groups_a for i in group)
    every_b = tuple(i for group in groups_b for i in group)

    def size(group: tuple[int, ...]) -> int:
        return int(sum(int(tokens[i]) for i in group))

    pairs = itertools.product(groups_a, groups_b)
    for x, y in sorted(pairs, key=lambda p: (abs(size(p[0]) - size(p[1])), p)):
        yield a, b, exchanged(every_a, x, y), exchanged(every_b, y, x)


def exchanged(items: tuple[int, ...], out: tuple[int, ...], into: tuple[int, ...]) -> tuple[int, ...]:
    """``items`` less ``out``, with ``into``, sorted."""
    return tuple(sorted((*(i for i in items if i not in out), *into)))


def _without(items: tuple[int, ...], item: int) -> tuple[int, ...]:
    return tuple(i for i in items if i != item)


def _cheaper(
    problem: Problem,
    layouts: Sequence[str],
    wave_a: WavePlan,
    wave_b: WavePlan,
    items_a: tuple[int, ...],
    items_b: tuple[int, ...],
) -> tuple[WavePlan, WavePlan] | None:
    """The two waves holding ``items_a`` and ``items_b``, where both fit and together cost less than
    ``wave_a`` and ``wave_b``; ``None`` otherwise."""
    new_a, _ = best_wave(problem, items_a, layouts)
    if new_a is None or new_a.cost_s >= wave_a.cost_s + wave_b.cost_s:
        return None
    new_b, _ = best_wave(problem, items_b, layouts)
    if new_b is None or new_a.cost_s + new_b.cost_s >= wave_a.cost_s + wave_b.cost_s:
        return None
    return new_a, new_b
