"""The greedy exact planner and the full-sharing fallback.

Items are taken in order. For each wave the width is grown (1, 2, 4, ...) while the wave still fits,
then binary-searched between the last width that fits and the first that does not. Every candidate
wave is priced exactly: its packed layout (the cheapest fitting one of the given layouts) and its
contiguous CP ownership. No wave is admitted whose priced peak exceeds the budget on any rank.
"""

from __future__ import annotations

from collections.abc import Sequence

from cpplan.errors import NoFitError
from cpplan.planners.split import split_item, widest
from cpplan.pricing.problem import Problem
from cpplan.pricing.result import Plan
from cpplan.pricing.wave import WavePlan, best_wave


def greedy_plan(problem: Problem, layouts: Sequence[str], *, strategy: str = "greedy") -> Plan:
    """Plan every item in order with the widest fitting waves. An item that fits no wave alone is split
    along its prefix tree into consecutive waves (:func:`split_item`); :class:`NoFitError`, naming the
    item, request, rank, bytes and budget, only when a single request cannot fit under any layout."""
    waves: list[WavePlan] = []
    start, n = 0, problem.num_items
    while start < n:
        first, _ = best_wave(problem, [start], layouts)
        if first is None:
            waves.extend(split_item(problem, start, layouts))
            start += 1
            continue
        width, best = widest(
            lambda w, at=start: best_wave(problem, range(at, at + w), layouts)[0], first, n - start
        )
        waves.append(best)
        start += width
    return Plan(strategy=strategy, waves=tuple(waves))


def cached_greedy_plan(problem: Problem, layouts: Sequence[str]) -> Plan:
    """:func:`greedy_plan`, computed once per problem and layout list and kept (or its refusal) in
    ``problem.memo.greedy_plans``: the portfolio's greedy candidate and the CP-SAT hint share it."""
    key = tuple(layouts)
    plans = problem.memo.greedy_plans
    if key not in plans:
        try:
            plans[key] = greedy_plan(problem, key)
        except NoFitError as exc:
            plans[key] = exc
    found = plans[key]
    if isinstance(found, NoFitError):
        raise found
    return found


def full_sharing_plan(problem: Problem) -> Plan:
    """The greedy planner restricted to the memory-minimal layout (share every decision)."""
    return greedy_plan(problem, ("full",), strategy="full_sharing")
