"""The greedy exact planner and the full-sharing fallback, both anytime.

Items are taken in order. Each wave is the widest run of items from the first unplanned one that fits
(:class:`~cpplan.planners.widths.WidthSearch`: a peak model proposes widths, every candidate wave is
priced exactly), cut back to the boundary in its back half where the fewest tokens are shared
(:func:`~cpplan.planners.widths.cheapest_cut`: a prefix group stays whole rather than storing its
prompt in two waves), and kept in the cheapest of the given layouts that fits, with its contiguous CP
ownership. No wave is admitted whose priced peak exceeds the budget on any rank.

Under a wall-clock deadline the search stops when the deadline passes: the current wave keeps the
widest width found, and the items left are packed by :func:`hurried_waves` (full sharing, the
memory-minimal layout, at the last width, halved until it fits: about one pricing per wave), so a
complete plan is always returned and its notes say where the search stopped.
"""

from __future__ import annotations

from collections.abc import Sequence

from cpplan.errors import NoFitError
from cpplan.planners.deadline import Deadline
from cpplan.planners.split import split_item
from cpplan.planners.widths import WidthSearch, balanced_cut, cut_wave
from cpplan.pricing.problem import Problem
from cpplan.pricing.result import Plan
from cpplan.pricing.wave import WavePlan, best_wave

FLOOR_LAYOUT = "full"
"""The layout of the anytime floor (:func:`hurried_waves`): full sharing, the fewest packed tokens."""


def greedy_plan(
    problem: Problem, layouts: Sequence[str], *, strategy: str = "greedy", deadline: Deadline | None = None
) -> Plan:
    """Plan every item in order with the widest fitting waves, each cut where the least is shared.
    An item that fits no wave alone is split along its prefix tree into consecutive waves
    (:func:`split_item`); :class:`NoFitError`, naming the item, request, rank, bytes and budget, only
    when a single request cannot fit under any layout. Past ``deadline`` the rest is packed by
    :func:`hurried_waves` and the plan's notes say so."""
    layouts = tuple(layouts)
    search = WidthSearch(problem=problem, layouts=layouts)
    waves: list[WavePlan] = []
    start, n = 0, problem.num_items
    while start < n:
        if deadline is not None and deadline.expired():
            waves.extend(hurried_waves(search, start, layouts))
            note = f"deadline reached after {start} of {n} items; the rest packed with full sharing"
            return Plan(strategy=strategy, waves=tuple(waves), notes=(note,))
        found = search.widest(start, deadline)
        if found is None:
            waves.extend(split_item(problem, start, layouts))
            start += 1
            continue
        if deadline is not None and deadline.expired():  # keep the fitting wave found, hurry the rest
            waves.append(found[1])
            start += found[0]
            continue
        width, wave = cut_wave(problem, start, *found, layouts)
        best, _ = best_wave(problem, range(start, start + width), layouts)
        ending = last_two_waves(problem, start, best or wave, layouts)
        if ending is not None:
            waves.extend(ending)
            break
        waves.append(best or wave)
        start += width
    return Plan(strategy=strategy, waves=tuple(waves))


def last_two_waves(
    problem: Problem, start: int, first: WavePlan, layouts: Sequence[str]
) -> list[WavePlan] | None:
    """When the items after ``first`` (the next wave, from ``start``) fit in one wave, the plan's last
    two waves: ``first`` and that rest, or the two waves split at :func:`balanced_cut` when those fit
    and cost less (a greedy first wave can leave a small, costly last one). ``None`` when the rest
    needs more than one wave (or there is none)."""
    n, end = problem.num_items, start + len(first.items)
    if end >= n:
        return None
    rest, _ = best_wave(problem, range(end, n), layouts)
    if rest is None:
        return None
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


def cached_greedy_plan(problem: Problem, layouts: Sequence[str], deadline: Deadline | None = None) -> Plan:
    """:func:`greedy_plan`, computed once per problem and layout list and kept (or its refusal) in
    ``problem.memo.greedy_plans``: the portfolio's greedy candidate and the CP-SAT hint share it."""
    key = tuple(layouts)
    plans = problem.memo.greedy_plans
    if key not in plans:
        try:
            plans[key] = greedy_plan(problem, key, deadline=deadline)
        except NoFitError as exc:
            plans[key] = exc
    found = plans[key]
    if isinstance(found, NoFitError):
        raise found
    return found


def full_sharing_plan(problem: Problem, deadline: Deadline | None = None) -> Plan:
    """The greedy planner restricted to the memory-minimal layout (share every decision)."""
    return greedy_plan(problem, (FLOOR_LAYOUT,), strategy="full_sharing", deadline=deadline)
