"""A lower bound on the least makespan of indivisible jobs on identical machines (``P || C_max``), the
floor of the busiest rank where whole requests are packed onto ranks.

A makespan ``C`` is impossible when the jobs need more than ``m`` bins of capacity ``C``. Martello and
Toth's bound ``L2`` counts the bins any packing needs: for ``0 <= K <= C / 2``, the jobs above
``C - K`` and those in ``(C / 2, C - K]`` each take a bin of their own (two of them never share one),
the jobs in ``[K, C / 2]`` fit only into the room those second bins leave or into new bins, so
``L(K) = n_big + max(0, ⌈(S_3 - (|J_2| C - S_2)) / C⌉)`` bins are needed (``n_big``: the jobs above
``C / 2``; ``S_2``, ``S_3``: the sizes of the second and third sets), and ``L2`` is the largest over
``K``. It holds for real sizes; :func:`makespan_floor` bisects on ``C`` from the trivial floor
(the largest job, the mean load), keeping only capacities proved impossible, so what it returns is a
makespan no packing beats.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BISECTIONS = 24
"""Halvings of the interval between the trivial floor and a packing's makespan (longest job first, to
the least loaded machine): the floor is then within ``2^-24`` of that interval of the best one the bin
count proves."""
LIFT_PROBE = 1e-6
"""Relative step above the trivial floor at which one bin count decides whether to bisect at all: most
packings are balanced there, and the bound prices thousands of waves' floors."""
COUNT_SLACK = 1e-9
"""Taken off a bin count's fraction before it is rounded up: float error never adds a bin."""


def bins_needed(sizes: np.ndarray, capacity: float) -> int:
    """Martello and Toth's ``L2``: a floor on the bins of ``capacity`` that ``sizes`` (each at most
    ``capacity``) need."""
    return _Jobs.of(sizes).bins_needed(capacity)


@dataclass(frozen=True)
class _Jobs:
    """Job sizes sorted ascending, their prefix sums and distinct values: what every bin count of one
    bisection reads."""

    sizes: np.ndarray
    prefix: np.ndarray
    distinct: np.ndarray

    @classmethod
    def of(cls, sizes: np.ndarray) -> _Jobs:
        ordered = np.sort(np.asarray(sizes, dtype=np.float64))
        return cls(ordered, np.concatenate([[0.0], np.cumsum(ordered)]), np.unique(ordered))

    def bins_needed(self, capacity: float) -> int:
        """:func:`bins_needed` at ``capacity``."""
        sizes, prefix, half = self.sizes, self.prefix, capacity / 2
        if capacity <= 0:  # only jobs of no size fit: none needs a bin, every other one its own
            return int(np.count_nonzero(sizes > 0))
        num_small = int(np.searchsorted(sizes, half, side="right"))  # J3 candidates: at most C / 2
        big = sizes.size - num_small
        if num_small == 0:
            return big
        ks = np.concatenate([[0.0], self.distinct[: np.searchsorted(self.distinct, half, side="right")]])
        third = prefix[num_small] - prefix[np.searchsorted(sizes, ks, side="left")]  # J3: at least K
        second_to = np.searchsorted(sizes, capacity - ks, side="right")  # J2: above C / 2, at most C - K
        count2 = np.maximum(second_to - num_small, 0)
        sum2 = np.where(count2 > 0, prefix[np.maximum(second_to, num_small)] - prefix[num_small], 0.0)
        spill = (third - (count2 * capacity - sum2)) / capacity
        extra = np.ceil(np.maximum(spill, 0.0) - COUNT_SLACK).astype(np.int64)
        return big + int(extra.max())


def makespan_floor(sizes: np.ndarray, num_machines: int) -> float:
    """A floor on the least makespan of jobs of ``sizes`` (each whole on one machine) on
    ``num_machines`` identical machines: at least the largest job and the mean load, raised by bisection
    to a capacity under which :func:`bins_needed` exceeds the machines (bisected only where it does
    just above the trivial floor)."""
    sizes = np.asarray(sizes, dtype=np.float64)
    if sizes.size <= num_machines:
        return float(sizes.max(initial=0.0))
    low, high = (
        max(float(sizes.max()), float(sizes.sum()) / num_machines),
        _longest_first(sizes, num_machines),
    )
    jobs = _Jobs.of(sizes)
    if jobs.bins_needed(low * (1 + LIFT_PROBE)) <= num_machines:
        return low  # nothing proves more than the trivial floor within a hair of it: no bisection
    for _ in range(BISECTIONS):
        middle = (low + high) / 2
        if not low < middle < high:
            break
        if jobs.bins_needed(middle) > num_machines:
            low = middle  # no packing fits under ``middle``
        else:
            high = middle
    return low


def _longest_first(sizes: np.ndarray, num_machines: int) -> float:
    """The makespan of one packing: jobs longest first, each to the least loaded machine (no floor can
    exceed it, so the bisection searches below it)."""
    loads = [0.0] * num_machines
    for size in sorted(sizes.tolist(), reverse=True):
        least = min(range(num_machines), key=loads.__getitem__)
        loads[least] += size
    return max(loads)
