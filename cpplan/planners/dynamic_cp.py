"""Dynamic CP: every wave chooses its CP group size from the pool, and the step's cost is its makespan.

A wave of group size ``g`` (a power of two up to the pool) runs on an aligned block of ``g`` pool ranks
and is priced on the *group problem* at ``cp = g`` (:func:`group_problem`): the same card terms as a
fixed-CP plan at ``g``. The greedy dynamic planner (:func:`dynamic_greedy_plan`) keeps the candidate of
least makespan (ties to the earlier; padding waves counted under equal waves, :func:`pool_padding_s`):
the fixed-CP greedy plan at every group size (the topology's ``cp`` first), at every size the step
partitioned over the pool's groups (:func:`~cpplan.planners.replica_partition.partitioned_greedy_plans`),
then per group-size assignment of :func:`item_sizes` the waves of :func:`sized_plans` (in order under
token caps, or cut into one or two waves per group), balanced over the pool. An item that fits no group
alone takes the split path at the pool size (docs/dynamic_cp.md).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from cpplan.errors import InputError, NoFitError
from cpplan.planners.block_sizes import MAX_ITEMS, makespan_sizes
from cpplan.planners.deadline import Deadline
from cpplan.planners.greedy import cached_greedy_plan, split_item
from cpplan.planners.replica_partition import partitioned_greedy_plans
from cpplan.planners.split import widest
from cpplan.plans.plan import Plan, balanced
from cpplan.pricing.memo import memoized
from cpplan.pricing.ownership import contiguous_split
from cpplan.pricing.problem import Problem, group_problem
from cpplan.pricing.wave import WavePlan, best_wave


def pool_padding_s(problem: Problem) -> float | None:
    """The seconds of one empty padding wave when every GPU of the pool must run the same number of
    waves (:attr:`~cpplan.spec.topology.Topology.needs_equal_waves`): the card's fixed per-wave cost at
    the topology's own CP size (what the verifier charges); ``None`` otherwise."""
    return problem.card.wave_overhead_s if problem.topology.needs_equal_waves else None


def group_sizes(problem: Problem, allowed: Sequence[int] | None = None) -> tuple[int, ...]:
    """The topology's group sizes (those in ``allowed``, when given) that leave every rank a token of the
    whole workload to own; under fixed CP, its ``cp`` alone."""
    distinct = int(problem.tree.node_length.sum())
    sizes = [g for g in problem.topology.group_sizes() if allowed is None or g in allowed]
    return tuple(g for g in sizes if g <= distinct) or tuple(sizes[:1])


def at_each_size(
    problem: Problem,
    plan_at: Callable[[int], Plan | None],
    deadline: Deadline | None,
    allowed: Sequence[int] | None = None,
) -> tuple[list[Plan], NoFitError | None]:
    """The group-size sweep: ``plan_at(size)`` for each of :func:`group_sizes` (the topology's ``cp``
    first), stopping once a plan is found and a wall-clock ``deadline`` has expired. Returns the plans
    found, in order (``None`` answers left out), and the last refusal: a size too small for some
    request (:class:`NoFitError`) does not stop the sweep, as other sizes may hold it."""
    plans: list[Plan] = []
    refusal: NoFitError | None = None
    for size in sorted(group_sizes(problem, allowed), key=lambda g: g != problem.topology.cp):
        if plans and deadline is not None and deadline.expired():
            break
        try:
            plan = plan_at(size)
        except NoFitError as exc:
            refusal = exc
            continue
        if plan is not None:
            plans.append(plan)
    return plans, refusal


def smallest_fit(
    problem: Problem, item: int, layouts: Sequence[str], allowed: Sequence[int] | None = None
) -> int | None:
    """The smallest group size at which ``item`` alone fits one wave (``None``: none, even the largest)."""
    for size in group_sizes(problem, allowed):
        if alone_s(problem, layouts, item, size) is not None:
            return size
    return None


def packed_waves(
    problem: Problem, items: Sequence[int], layouts: Sequence[str], *, max_tokens: int | None = None
) -> list[WavePlan]:
    """``items`` in order in the widest fitting waves of ``problem`` (a group problem), each holding at
    most ``max_tokens`` logical tokens unless one item alone has more; an item that fits no wave alone
    takes the split path."""
    items = list(items)
    waves: list[WavePlan] = []
    start = 0
    while start < len(items):
        first, _ = best_wave(problem, [items[start]], layouts)
        if first is None:
            waves.extend(split_item(problem, items[start], layouts))
            start += 1
            continue

        def attempt(width: int, at: int = start) -> WavePlan | None:
            chosen = items[at : at + width]
            if max_tokens is not None and problem.logical_tokens(chosen) > max_tokens:
                return None
            return best_wave(problem, chosen, layouts)[0]

        width, best = widest(attempt, first, len(items) - start)
        waves.append(best)
        start += width
    return waves


def token_caps(problem: Problem, items: Sequence[int], size: int) -> list[int | None]:
    """Wave token caps to try for ``items`` at group size ``size``: none (the widest waves), and about
    one or two waves per group of the pool."""
    groups = problem.topology.pool // size
    total = problem.logical_tokens(items) if len(items) else 0
    return [None, -(-total // groups), -(-total // (2 * groups))]


def sized_plans(problem: Problem, sizes: Sequence[int], layouts: Sequence[str]) -> Iterator[Plan]:
    """Every item ``i`` in waves of group size ``sizes[i]`` (the items of one size in order), all the waves
    balanced over the pool: one plan per token cap of :func:`token_caps`, lazily (no cap first)."""
    classes = {g: [i for i in range(problem.num_items) if sizes[i] == g] for g in sorted(set(sizes))[::-1]}
    for k in range(3):
        waves: list[WavePlan] = []
        for size, items in classes.items():
            cap = token_caps(problem, items, size)[k]
            waves.extend(packed_waves(group_problem(problem, size), items, layouts, max_tokens=cap))
        plan = Plan(strategy="greedy", waves=tuple(waves))
        yield balanced(plan, problem.topology.pool, pool_padding_s(problem))
    for per_group in (1, 2):
        waves = []
        for size, items in classes.items():
            count = per_group * (problem.topology.pool // size)
            waves.extend(split_waves(group_problem(problem, size), items, layouts, count))
        plan = Plan(strategy="greedy", waves=tuple(waves))
        yield balanced(plan, problem.topology.pool, pool_padding_s(problem))


def split_waves(problem: Problem, items: Sequence[int], layouts: Sequence[str], count: int) -> list[WavePlan]:
    """``items`` in order cut into ``count`` consecutive runs of about equal logical tokens (one or two
    per group of the pool: what a token cap filled in order misses when it leaves a small remainder wave
    that some group then runs on top of a full one), each run one wave where it fits, else packed by
    :func:`packed_waves`."""
    if not items:
        return []
    tokens = np.array([problem.logical_tokens([i]) for i in items], dtype=np.float64)
    runs = np.bincount(contiguous_split(tokens, min(count, len(items))))
    waves: list[WavePlan] = []
    start = 0
    for width in runs.tolist():
        run = list(items[start : start + width])
        start += width
        wave = best_wave(problem, run, layouts)[0] if run else None
        waves.extend([wave] if wave is not None else packed_waves(problem, run, layouts) if run else [])
    return waves


def item_sizes(
    problem: Problem, layouts: Sequence[str], allowed: Sequence[int] | None = None
) -> Iterator[list[int]]:
    """Group-size assignments to try, lazily: every item at the topology's ``cp`` first (nothing to
    price before it), then at each other size where all fit, then per floor ``f`` every item at
    ``max(f, its smallest fit)`` (the largest size for an item that fits no group whole), then the
    balance-minded one of :func:`spread_sizes`, then the makespan-minded one of
    :func:`~cpplan.planners.block_sizes.makespan_sizes` (small groups first, then a larger group on
    their union; up to :data:`~cpplan.planners.block_sizes.MAX_ITEMS` items); distinct assignments
    only."""
    sizes = group_sizes(problem, allowed)
    base = problem.topology.cp if problem.topology.cp in sizes else sizes[0]
    first = [base] * problem.num_items
    yield first
    fits = [smallest_fit(problem, i, layouts, allowed) for i in range(problem.num_items)]
    uniform = [size for size in sizes if all(f is not None and f <= size for f in fits)]
    floors = [[max(floor, f or sizes[-1]) for f in fits] for floor in sizes]
    found = [first]
    for assignment in [[size] * problem.num_items for size in uniform] + floors:
        if assignment not in found:
            found.append(assignment)
            yield assignment
    spread = spread_sizes(problem, layouts, sizes, [f or sizes[-1] for f in fits])
    if spread not in found:
        found.append(spread)
        yield spread
    if problem.num_items > MAX_ITEMS:
        return
    placed = makespan_sizes(alone_seconds(problem, layouts, sizes), sizes, problem.topology.pool)
    if placed is not None and placed not in found:
        yield placed


def alone_s(problem: Problem, layouts: Sequence[str], item: int, size: int) -> float | None:
    """The price of ``item``'s wave alone at group size ``size`` (``None`` where it fits no wave)."""
    wave = best_wave(group_problem(problem, size), [item], layouts)[0]
    return None if wave is None else wave.cost_s


def alone_seconds(problem: Problem, layouts: Sequence[str], sizes: Sequence[int]) -> np.ndarray:
    """Per item and group size, :func:`alone_s` (``inf`` where the item does not fit)."""
    seconds = np.full((problem.num_items, len(sizes)), math.inf)
    for k, size in enumerate(sizes):
        for item in range(problem.num_items):
            alone = alone_s(problem, layouts, item, size)
            seconds[item, k] = math.inf if alone is None else alone
    return seconds


def spread_sizes(
    problem: Problem, layouts: Sequence[str], sizes: Sequence[int], fits: Sequence[int]
) -> list[int]:
    """Every item at the smallest size, from the one it fits at, where its own seconds (its wave alone,
    less the per-wave constants) are at most the pool's average load: an item too long for one GPU's
    share of the step takes a group large enough to finish within it."""

    def seconds(item: int, size: int) -> float | None:
        alone = alone_s(problem, layouts, item, size)
        return None if alone is None else alone - group_problem(problem, size).card.wave_overhead_s

    alone = [seconds(i, f) or 0.0 for i, f in enumerate(fits)]
    share = sum(a * f for a, f in zip(alone, fits, strict=True)) / problem.topology.pool
    found = []
    for item, fit in enumerate(fits):
        larger = [g for g in sizes if g >= fit]
        found.append(next((g for g in larger if (seconds(item, g) or math.inf) <= share), larger[-1]))
    return found


def dynamic_greedy_plan(
    problem: Problem,
    layouts: Sequence[str],
    *,
    deadline: Deadline | None = None,
    allowed: Sequence[int] | None = None,
) -> Plan:
    """The smallest-makespan plan of the candidates in this module's docstring (the topology's own ``cp``
    plans first and always; the others while ``deadline`` allows), over the group sizes in ``allowed``
    (default: all). Raises :class:`NoFitError` when a request fits no group, not even the largest."""

    def fixed(size: int) -> Plan:  # the fixed-CP greedy plan of the group problem, balanced over the pool
        plan = cached_greedy_plan(group_problem(problem, size), layouts, deadline)
        return balanced(plan, problem.topology.pool, pool_padding_s(problem))

    candidates, refusal = at_each_size(problem, fixed, deadline, allowed)
    for size in group_sizes(problem, allowed) if candidates else ():
        if problem.num_items >= problem.topology.pool // size > 1:
            with contextlib.suppress(InputError, NoFitError):  # a share left empty or too large
                candidates.extend(partitioned_greedy_plans(group_problem(problem, size), layouts, deadline))
    for assignment in item_sizes(problem, layouts, allowed):
        try:
            for plan in sized_plans(problem, assignment, layouts):
                candidates.append(plan)
                if deadline is not None and deadline.expired():
                    break
        except NoFitError as exc:  # a request too large for some group: other sizes may hold it
            refusal = exc
        if deadline is not None and deadline.expired() and candidates:
            break
    if not candidates:
        assert refusal is not None
        raise refusal
    return min(candidates, key=lambda plan: plan.cost_s)


def cached_dynamic_plan(
    problem: Problem, layouts: Sequence[str], *, deadline: Deadline | None = None
) -> Plan:
    """:func:`dynamic_greedy_plan`, computed once per problem, layout list and deadline
    (:attr:`Deadline.memo_key`), or its refusal: the portfolio's greedy candidate and the schedule
    model's hint share it (kept in ``problem.memo.planned``)."""
    key = tuple(layouts)
    limit = None if deadline is None else deadline.memo_key
    return memoized(
        problem.memo.planned,
        ("dynamic", key, limit),
        lambda: dynamic_greedy_plan(problem, key, deadline=deadline),
    )
