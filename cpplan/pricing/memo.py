"""Work the planners of one problem share: share masks, node counts, priced waves and greedy plans.

A :class:`PricingMemo` belongs to one :class:`~cpplan.pricing.problem.Problem` object (a field of it,
made fresh with every problem and left out of equality and repr). Everything in it is a pure function
of the problem, so an entry can never go stale; a copy of the problem gets an empty memo.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from cpplan.errors import NoFitError

if TYPE_CHECKING:
    from cpplan.pricing.problem import Problem
    from cpplan.pricing.result import Plan
    from cpplan.pricing.wave import WavePlan


@dataclass(frozen=True, eq=False)
class PricingMemo:
    """Per-problem caches, filled as the planners ask (the dictionaries are the only mutable part)."""

    share_masks: dict[str, np.ndarray] = field(default_factory=dict)
    """The prefix-tree node mask of each layout spec (``"full"``, ``"min_span:512"``, ...)."""

    priced_waves: dict[tuple[tuple[int, ...], bytes], WavePlan] = field(default_factory=dict)
    """Priced waves by (item indices, the bytes of the sharing decisions the layout takes on those
    items): layouts that pack a wave identically are priced once, and the greedy, full-sharing and
    seeded strategies of one portfolio call share the work."""

    node_counts: dict[tuple[int, ...], np.ndarray] = field(default_factory=dict)
    """Per item set, how many of its requests pass through each prefix-tree node (what decides which
    sharing decisions a layout takes on a wave): computed once for every layout and strategy."""

    greedy_plans: dict[tuple[str, ...], Plan | NoFitError] = field(default_factory=dict)
    """The greedy plan (or its refusal) by the layouts it tried: the portfolio's greedy candidate and
    the CP-SAT strategy's hint and columns are one computation."""

    dynamic_plans: dict[tuple[str, ...], Plan | NoFitError] = field(default_factory=dict)
    """The dynamic-CP greedy plan (or its refusal) by the layouts it tried: the portfolio's candidate
    and the schedule model's hint."""

    group_problems: dict[int, Problem] = field(default_factory=dict)
    """Under dynamic CP, the problem priced for waves of each other CP group size (same workload, tree
    and pool; ``cp`` = the size): made once per size."""


def memoized_plan(
    plans: dict[tuple[str, ...], Plan | NoFitError], key: tuple[str, ...], make: Callable[[], Plan]
) -> Plan:
    """``plans[key]``, made by ``make()`` on first use; a refusal (:class:`NoFitError`) is kept too
    and raised again on every call."""
    if key not in plans:
        try:
            plans[key] = make()
        except NoFitError as exc:
            plans[key] = exc
    found = plans[key]
    if isinstance(found, NoFitError):
        raise found
    return found
