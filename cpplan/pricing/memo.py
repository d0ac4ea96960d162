"""Work the planners of one problem share: share masks, node counts, priced waves and the planners' own
per-problem results (greedy plans, their refusals).

A :class:`PricingMemo` belongs to one :class:`~cpplan.pricing.problem.Problem` object (a field of it,
made fresh with every problem and left out of equality and repr); a copy of the problem gets an empty
memo. The pricing caches are pure functions of the problem, so they never go stale. The planners keep
what they compute per problem in :attr:`PricingMemo.planned`, a store pricing does not look into (so it
imports none of the planners' types); an entry computed under a wall-clock deadline is what that deadline
allowed, which is why no proposal is handed between stages through it (the planner's loop passes its pool
explicitly) and why a problem is built anew for every planning call (``Planner.plan`` does), so a plan
cached under one call's deadline never serves another call.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from cpplan.errors import NoFitError

T = TypeVar("T")


@dataclass(frozen=True, eq=False)
class PricingMemo:
    """Per-problem caches, filled as the planners ask (the dictionaries are the only mutable part)."""

    share_masks: dict[str, np.ndarray] = field(default_factory=dict)
    """The prefix-tree node mask of each layout spec (``"full"``, ``"min_span:512"``, ...)."""

    priced_waves: dict[tuple[tuple[int, ...], bytes], Any] = field(default_factory=dict)
    """Priced waves (:class:`~cpplan.pricing.wave.WavePlan`, which reads the problem holding this memo)
    by (item indices, the bytes of the sharing decisions the layout takes on those items): layouts that
    pack a wave identically are priced once, and the greedy, full-sharing and seeded strategies of one
    portfolio call share the work."""

    node_counts: dict[tuple[int, ...], np.ndarray] = field(default_factory=dict)
    """Per item set, how many of its requests pass through each prefix-tree node (what decides which
    sharing decisions a layout takes on a wave): computed once for every layout and strategy."""

    planned: dict[Hashable, object] = field(default_factory=dict)
    """What the planners compute once per problem, by a key that starts with the planner's name (say
    ``("greedy", layouts)``: a greedy plan or its refusal, which the portfolio's greedy candidate and the
    CP-SAT strategy's hint and columns share), filled through :func:`memoized`."""

    group_problems: dict[int, Any] = field(default_factory=dict)
    """Under dynamic CP, the :class:`~cpplan.pricing.problem.Problem` priced for waves of each other CP
    group size (same workload, tree and pool; ``cp`` = the size): made once per size."""


def memoized(store: dict[Hashable, object], key: Hashable, make: Callable[[], T]) -> T:
    """``store[key]``, made by ``make()`` on first use; a refusal (:class:`NoFitError`) is kept too
    and raised again on every call."""
    if key not in store:
        try:
            store[key] = make()
        except NoFitError as exc:
            store[key] = exc
    found = store[key]
    if isinstance(found, NoFitError):
        raise found
    return found
