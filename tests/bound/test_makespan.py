"""The makespan floor of whole jobs on identical machines (:mod:`cpplan.bound.makespan`): never above the
best packing, found by enumeration, and above the trivial floor where the jobs' sizes force it."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from cpplan.bound.makespan import BISECTIONS, bins_needed, makespan_floor


def _best_makespan(sizes: np.ndarray, machines: int) -> float:
    """The least makespan over every assignment of jobs to machines."""
    return min(
        float(np.bincount(assign, weights=sizes, minlength=machines).max())
        for assign in itertools.product(range(machines), repeat=sizes.size)
    )


@pytest.mark.parametrize("seed", range(6))
def test_the_floor_never_exceeds_the_best_packing(seed):
    """On random small instances (3 to 8 jobs, 2 or 3 machines, real sizes) the floor is at most the
    best makespan found by enumeration, and at least the trivial floor (largest job, mean load)."""
    rng = np.random.default_rng(seed)
    for _ in range(40):
        sizes = rng.uniform(0.5, 50.0, int(rng.integers(3, 9)))
        machines = int(rng.integers(2, 4))
        floor = makespan_floor(sizes, machines)
        assert (
            max(sizes.max(), sizes.sum() / machines) <= floor <= _best_makespan(sizes, machines) * (1 + 1e-12)
        )


def test_the_floor_sees_what_the_trivial_floor_misses():
    """Jobs of 16, 8, 8 and 8 on two machines: the trivial floor is 20 (the mean), but no packing is
    below 24 (two of the 8s share a machine, or one joins the 16); the bin count proves every capacity
    under 24 too small, so the floor is 24 to within the bisection's precision (its interval, from the
    mean 20 to the longest-first packing's 24, halved ``BISECTIONS`` times)."""
    sizes = np.array([16.0, 8.0, 8.0, 8.0])
    assert bins_needed(sizes, 23.9) == 3 and bins_needed(sizes, 24.0) == 2
    assert makespan_floor(sizes, 2) == pytest.approx(24.0, abs=4.0 * 2.0**-BISECTIONS)
    assert makespan_floor(sizes, 2) <= _best_makespan(sizes, 2)


def test_as_many_machines_as_jobs_is_the_largest_job():
    """With a machine per job the floor is the largest job, which is the best makespan."""
    assert makespan_floor(np.array([3.0, 7.0, 5.0]), 3) == 7.0
    assert makespan_floor(np.array([]), 2) == 0.0


def test_jobs_of_no_size_need_no_bin():
    """Jobs that are all of size zero (a barrier no job spends time in) need no bin and floor the
    makespan at zero, with no division by a zero capacity; at zero capacity a job with a size needs a
    bin of its own."""
    with np.errstate(all="raise"):
        assert bins_needed(np.zeros(5), 0.0) == 0
        assert makespan_floor(np.zeros(5), 2) == 0.0
        assert bins_needed(np.array([0.0, 1.0, 2.0]), 0.0) == 2
