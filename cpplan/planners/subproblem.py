"""A problem over some of a larger problem's items, and priced waves carried between the two.

A wave's packed segments name tree requests only through ``request_ids`` and ``seg_src`` (which
request's tokens a segment holds); its chunk statistics, ownership, quantities and prices depend on
tokens and positions alone. So a wave priced in the sub-problem is, with those indices and its item
indices mapped, the same priced wave of the larger problem: no re-packing, no re-pricing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import WavePlan
from cpplan.spec.workload import Workload


@dataclass(frozen=True, kw_only=True, eq=False)
class SubProblem:
    """``problem`` holds the items ``items`` of ``parent``, in that order."""

    parent: Problem
    problem: Problem
    items: np.ndarray
    """Sub-problem item ``j`` is parent item ``items[j]``."""
    requests: np.ndarray
    """Sub-problem tree request ``r`` is parent tree request ``requests[r]``."""

    @classmethod
    def of(cls, parent: Problem, items: Sequence[int], *, keep_order: bool = False) -> SubProblem:
        """The sub-problem of ``items`` under the parent's settings and pricing: ascending, or in the
        order given with ``keep_order`` (the items must then be distinct)."""
        chosen = (
            np.asarray(items, dtype=np.int64) if keep_order else np.unique(np.asarray(items, dtype=np.int64))
        )
        sub = sub_workload(parent.workload, chosen.tolist())
        problem = Problem.build(sub, parent.settings, reorder_waves=parent.reorder_waves)
        return cls.over(parent, problem, chosen)

    @classmethod
    def over(cls, parent: Problem, problem: Problem, items: Sequence[int]) -> SubProblem:
        """``problem``, already built over ``items`` of ``parent`` (in that order), as its sub-problem."""
        chosen = np.asarray(items, dtype=np.int64)
        return cls(parent=parent, problem=problem, items=chosen, requests=parent.item_requests(chosen))

    def to_parent(self, wave: WavePlan) -> WavePlan:
        """``wave`` of the sub-problem as the same priced wave of the parent."""
        items = self.items[np.asarray(wave.items, dtype=np.int64)]
        return _mapped(wave, items, self.requests.__getitem__)

    def from_parent(self, wave: WavePlan) -> WavePlan:
        """``wave`` of the parent (its items all in this sub-problem) as the same wave here."""
        items = _inverse(self.items, np.asarray(wave.items, dtype=np.int64))
        assert np.array_equal(self.items[items], wave.items), "the wave holds items outside the window"
        return _mapped(wave, items, lambda ids: _inverse(self.requests, ids))


def sub_workload(workload: Workload, items: Sequence[int]) -> Workload:
    """The workload of ``items`` (indices into ``workload``, in the order given), source lines kept."""
    lines = None if workload.lines is None else tuple(workload.lines[i] for i in items)
    return Workload(
        items=tuple(workload.items[i] for i in items),
        source=workload.source,
        lines=lines,
        token_ids=workload.token_ids,
    )


def _inverse(values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The positions in ``values`` (distinct, any order) of each of ``wanted``."""
    order = np.argsort(values, kind="stable")
    at = np.minimum(np.searchsorted(values[order], wanted), values.size - 1)
    return order[at]


def _mapped(wave: WavePlan, items: np.ndarray, requests: Callable[[np.ndarray], np.ndarray]) -> WavePlan:
    """``wave`` with item indices ``items`` and its tree request indices mapped by ``requests``."""
    layout = replace(
        wave.layout,
        request_ids=np.asarray(requests(wave.layout.request_ids), dtype=np.int64),
        seg_src=np.asarray(requests(wave.layout.seg_src), dtype=np.int64),
    )
    return replace(wave, items=tuple(items.tolist()), layout=layout)
