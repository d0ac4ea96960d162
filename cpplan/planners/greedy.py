"""The greedy exact planner and the full-sharing fallback, both anytime.

Items are taken in order. Each wave is the widest run of items from the first unplanned one that fits
(:class:`~cpplan.planners.widths.WidthSearch`), cut back to where the fewest tokens are shared
(:func:`~cpplan.planners.widths.cheapest_cut`), in the cheapest given layout that fits (its ownership:
:func:`~cpplan.pricing.wave.edge_ownership`); the last two waves are re-split near the middle when that
costs less (:func:`last_two_waves`). No wave is admitted whose priced peak exceeds the budget on any
rank. Above :data:`WINDOW_ITEMS` items the same runs window by window (:func:`windowed_waves`). Under a
wall-clock deadline the search stops when only the time the floor needs is left, and the items left are
packed by :func:`hurried_waves` (full sharing, about one pricing per wave), so a complete plan is always
returned, about on time, its notes saying where the search stopped.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from cpplan.errors import NoFitError
from cpplan.planners.deadline import Deadline
from cpplan.planners.split import as_piece, best_piece, request_problem, request_refusal, tree_order
from cpplan.planners.subproblem import SubProblem
from cpplan.planners.widths import WidthSearch, balanced_cut, cut_wave
from cpplan.plans.plan import Plan
from cpplan.pricing.memo import memoized
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import WavePlan, best_wave, first_fitting, whole_item_wave

FLOOR_LAYOUT = "full"
"""The layout of the anytime floor (:func:`hurried_waves`): full sharing, the fewest packed tokens."""


WINDOW_ITEMS = 512
"""Above this many items greedy plans through windows of items (:func:`windowed_waves`)."""

WINDOW_WAVES = 8
"""A window holds about this many of the widest waves so far (the one meeting its end is planned
again in the next window)."""


def greedy_plan(
    problem: Problem, layouts: Sequence[str], *, strategy: str = "greedy", deadline: Deadline | None = None
) -> Plan:
    """Plan every item in order with the widest fitting waves, each cut where the least is shared.
    An item that fits no wave alone is split along its prefix tree into consecutive waves
    (:func:`split_item`); :class:`NoFitError`, naming the item, request, rank, bytes and budget, only
    when a single request cannot fit under any layout. Past ``deadline`` the rest is packed by
    :func:`hurried_waves` and the plan's notes say so."""
    layouts = tuple(layouts)
    if problem.num_items > WINDOW_ITEMS:
        waves, hurried_from = windowed_waves(problem, layouts, deadline)
    else:
        search = WidthSearch(problem=problem, layouts=layouts)
        waves, hurried_from = planned_waves(search, deadline, final=True)
    notes = ()
    if hurried_from is not None:
        n = problem.num_items
        notes = (f"deadline reached after {hurried_from} of {n} items; the rest packed with full sharing",)
    return Plan(strategy=strategy, waves=tuple(waves), notes=notes)


def planned_waves(
    search: WidthSearch, deadline: Deadline | None, *, final: bool
) -> tuple[list[WavePlan], int | None]:
    """Greedy's waves over every item of the search's problem, in its layouts, and the item from which it
    hurried (``None``: it did not). ``final``: the problem's last item is the workload's (only then are
    the last two waves balanced, :func:`last_two_waves`)."""
    problem, layouts = search.problem, search.layouts
    waves: list[WavePlan] = []
    start, n = 0, problem.num_items
    while start < n:
        if deadline is not None and deadline.left_s() <= search.floor_s(start):
            waves.extend(hurried_waves(search, start, layouts))
            return waves, start
        found = search.widest(start, deadline)
        if found is None:
            waves.extend(split_item(problem, start, layouts))
            start += 1
            continue
        if deadline is not None and deadline.left_s() < deadline.timing.finish_pricings * search.test_s:
            waves.append(hurried_finish(problem, start, found, layouts, deadline, search.test_s))
            start += found[0]
            continue
        width, wave = cut_wave(problem, start, *found, layouts)
        best, _ = best_wave(problem, range(start, start + width), layouts)
        ending = last_two_waves(problem, start, best or wave, layouts) if final else None
        if ending is not None:
            waves.extend(ending)
            break
        waves.append(best or wave)
        start += width
    return waves, None


def hurried_finish(
    problem: Problem,
    start: int,
    found: tuple[int, WavePlan],
    layouts: tuple[str, ...],
    deadline: Deadline,
    test_s: float,
) -> WavePlan:
    """The widest fitting wave ``found`` when there is no time to cut it or balance the ending: in the
    cheapest of ``layouts`` when one pricing per layout still fits before ``deadline`` (the first layout
    that fits is the memory-minimal one, full sharing, often not the cheapest), else as found."""
    width, wave = found
    if deadline.left_s() < len(layouts) * test_s:
        return wave
    best, _ = best_wave(problem, range(start, start + width), layouts)
    return best or wave


def windowed_waves(
    problem: Problem, layouts: tuple[str, ...], deadline: Deadline | None
) -> tuple[list[WavePlan], int | None]:
    """:func:`planned_waves` for a large problem, window by window: each window is a sub-problem of the
    next items (at least :data:`WINDOW_ITEMS`, :data:`WINDOW_WAVES` times the widest wave so far), so
    pricing a wave costs time in the window's size, not the problem's; every wave the window plans is
    kept except the one that meets its end (planned again in the next window; a window holding less
    than one wave is widened). The peak model carries over from window to window."""
    waves: list[WavePlan] = []
    start, n, size, hurried_from = 0, problem.num_items, WINDOW_ITEMS, None
    search = WidthSearch(problem=problem, layouts=layouts)
    while start < n:
        stop = min(n, start + size)
        sub = SubProblem.of(problem, range(start, stop))
        search = replace(search, problem=sub.problem)  # the problem's cached estimates are not carried over
        found, hurried = planned_waves(search, deadline, final=stop == n)
        keep = found if stop == n else _before_last(found)
        if not keep:
            size *= 2
            continue
        if hurried is not None and hurried_from is None:
            hurried_from = start + hurried
        waves.extend(sub.to_parent(wave) for wave in keep)
        start += max(max(wave.items) for wave in keep) + 1
        size = max(WINDOW_ITEMS, WINDOW_WAVES * max(len(wave.items) for wave in keep))
    return waves, hurried_from


def _before_last(waves: list[WavePlan]) -> list[WavePlan]:
    """The waves before the last one and every other piece of the item it holds (when it is split)."""
    first = min(waves[-1].items)
    return [wave for wave in waves if max(wave.items) < first]


def last_two_waves(
    problem: Problem, start: int, first: WavePlan, layouts: Sequence[str]
) -> list[WavePlan] | None:
    """When the items after ``first`` (the next wave, from ``start``) fit in one wave, the plan's last two
    waves: ``first`` and that rest, or the two waves split at :func:`balanced_cut` if those fit and cost less
    (a greedy first wave can leave a small, costly last one, or, at a larger budget, widen over the cut a
    smaller budget's plan makes). ``None`` when the rest needs more than one wave (or there is none)."""
    n, end = problem.num_items, start + len(first.items)
    if end >= n or first_fitting(problem, range(end, n), layouts)[0] is None:
        return None
    rest, _ = best_wave(problem, range(end, n), layouts)
    cut = start + balanced_cut(problem, start)
    if cut != end:
        head, _ = best_wave(problem, range(start, cut), layouts)
        tail, _ = best_wave(problem, range(cut, n), layouts)
        if head is not None and tail is not None and head.cost_s + tail.cost_s < first.cost_s + rest.cost_s:
            return [head, tail]
    return [first, rest]


def hurried_waves(search: WidthSearch, start: int, layouts: Sequence[str]) -> list[WavePlan]:
    """The anytime floor: items from ``start`` on in full-sharing waves of the width the peak model
    proposes, halved until they fit (:meth:`WidthSearch.quick`: about one pricing per wave); an item
    that fits no full-sharing wave alone goes to the split path."""
    problem = search.problem
    waves: list[WavePlan] = []
    while start < problem.num_items:
        found = search.quick(start, (FLOOR_LAYOUT,))
        if found is None:
            waves.extend(split_item(problem, start, layouts))
            start += 1
            continue
        width, wave = found
        waves.append(wave)
        start += width
    return waves


def split_item(problem: Problem, item: int, layouts: Sequence[str]) -> list[WavePlan]:
    """Consecutive ``split`` waves that together hold every request of ``item`` exactly once; the one
    full-sharing wave of :func:`~cpplan.pricing.wave.whole_item_wave` instead where that fits (whatever
    ``layouts`` the caller tried, an item some wave holds whole is never split).

    The item's requests, in prefix-tree order, become the items of a problem of their own, which greedy
    plans (:func:`planned_waves`: widths led by the peak model, cuts where the
    least is shared), so splitting costs a few pricings per piece, not a search over every width."""
    whole = whole_item_wave(problem, item)
    if whole is not None:
        return [whole]
    order = tree_order(problem, problem.item_requests([item]))
    layouts = tuple(layouts)
    if order.size == 1:  # one request: it fits alone or nothing does
        alone, lowest = best_piece(problem, item, order, layouts)
        if alone is None:
            raise request_refusal(problem, item, int(order[0]), lowest)
        return [alone]
    pieces = request_problem(problem, item, order)
    try:
        waves, _ = planned_waves(WidthSearch(problem=pieces, layouts=layouts), None, final=True)
    except NoFitError as exc:
        k = pieces.workload.index_of.get(exc.item, 0)
        _, lowest = best_piece(problem, item, order[k : k + 1], layouts)
        raise request_refusal(problem, item, int(order[k]), lowest) from None
    return [as_piece(wave, item, order) for wave in waves]


def cached_greedy_plan(problem: Problem, layouts: Sequence[str], deadline: Deadline | None = None) -> Plan:
    """:func:`best_greedy_plan`, computed once per problem, layout list and deadline
    (:attr:`Deadline.memo_key`: one key for every deterministic deadline and none) and kept (or its
    refusal) in ``problem.memo.planned``: the portfolio's greedy candidate and the CP-SAT hint share it."""
    key = tuple(layouts)
    limit = None if deadline is None else deadline.memo_key
    return memoized(
        problem.memo.planned, ("greedy", key, limit), lambda: best_greedy_plan(problem, key, deadline)
    )


REGROUP_GAIN = 1.1
"""Greedy also plans the items regrouped by shared prefix when that order puts this many times more
shared tokens side by side than the arrival order does."""


def best_greedy_plan(problem: Problem, layouts: Sequence[str], deadline: Deadline | None = None) -> Plan:
    """:func:`greedy_plan` in arrival order; when the arrival order scatters prefix groups (ordering
    the items by shared prefix puts :data:`REGROUP_GAIN` times more shared tokens side by side) and
    the deadline leaves ``timing.regroup_time_factor`` times what the first pass took, also greedy over
    that order, and the cheaper."""
    started = time.perf_counter()
    plan = greedy_plan(problem, layouts, deadline=deadline)
    first_pass_s = time.perf_counter() - started
    no_time = deadline is not None and deadline.left_s() < deadline.timing.regroup_time_factor * first_pass_s
    if plan.notes or no_time or not regrouping_helps(problem):
        return plan
    regrouped = regrouped_greedy_plan(problem, layouts, deadline)
    return regrouped if regrouped.cost_s < plan.cost_s else plan


def regrouping_helps(problem: Problem) -> bool:
    """Whether ordering the items by shared prefix puts :data:`REGROUP_GAIN` times more shared tokens
    side by side than their arrival order."""
    if problem.num_items < 3:
        return False
    regrouped = int(problem.shared_along(problem.prefix_order).sum())
    return regrouped > REGROUP_GAIN * int(problem.adjacent_shared_tokens.sum())


def regrouped_greedy_plan(problem: Problem, layouts: Sequence[str], deadline: Deadline | None = None) -> Plan:
    """Greedy over the items ordered by shared prefix (:attr:`Problem.prefix_order`), as a plan of
    ``problem``; its notes say the items were regrouped."""
    sub = SubProblem.of(problem, problem.prefix_order, keep_order=True)
    plan = greedy_plan(sub.problem, layouts, deadline=deadline)
    waves = tuple(sub.to_parent(wave) for wave in plan.waves)
    return Plan(strategy="greedy", waves=waves, notes=("items regrouped by shared prefix", *plan.notes))


def full_sharing_plan(problem: Problem, deadline: Deadline | None = None) -> Plan:
    """The greedy planner restricted to the memory-minimal layout (share every decision)."""
    return greedy_plan(problem, (FLOOR_LAYOUT,), strategy="full_sharing", deadline=deadline)
