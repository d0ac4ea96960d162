"""The least time one request's path can cost a wave under any contiguous CP split: a lower bound.

A contiguous ownership splits the path into at most ``cp`` runs, and every rank's quantities in the wave are
at least its run's, so the least, over splits of the path alone, of the per-barrier slowest-rank sum bounds
the wave's from below. The path is relaxed to a continuum (a run ``[s, e)`` owns ``e - s`` tokens and ``(e² -
s²) / 2`` pairs) and the barriers are merged into two groups, each run's load in a group ``token_s · (e - s) +
pair_s · (e² - s²) / 2 + offset_s``: both only lower the bound. With thresholds on both groups a greedy
decides feasibility exactly, bisection keeps the lower end of its bracket, and the least of ``τ + G*(τ)`` over
the first group's threshold is bounded on a grid by ``τ_k + G*(τ_{k+1})`` per interval, refined where lowest
(docs/time_model.md). Everything runs on arrays, one entry per (path, number of runs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BISECTIONS = 18
"""Bisection steps per least threshold (relative bracket 2⁻¹⁸ of the one-run load)."""
GRID = 10
"""Intervals per refinement of the first group's threshold."""
REFINEMENTS = 2
"""Times the lowest interval is subdivided (bound within about ``(ratio^(1/GRID))^-REFINEMENTS``)."""
RELATIVE_SLACK = 1e-9
"""Taken off every bound: covers the float error of the greedy's arithmetic many times over."""


@dataclass(frozen=True, kw_only=True, eq=False)
class RunLoad:
    """One group's seconds for a run ``[s, e)`` of a path, per entry (arrays of one shape):
    ``token_s · (e - s) + pair_s · (e² - s²) / 2 + offset_s``."""

    token_s: np.ndarray
    pair_s: np.ndarray
    offset_s: np.ndarray

    def __post_init__(self) -> None:
        kind = "quadratic" if (self.pair_s > 0).all() else "linear" if (self.pair_s == 0).all() else "mixed"
        if kind == "linear" and not (self.token_s > 0).all():
            kind = "mixed"
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_token_squared", self.token_s * self.token_s)  # what end() reuses
        object.__setattr__(self, "_token_doubled", 2 * self.token_s)

    def of(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """The load of the runs ``[start, end)``."""
        return self.token_s * (end - start) + self.pair_s * (end * end - start * start) / 2 + self.offset_s

    def end(self, start: np.ndarray, budget: np.ndarray) -> np.ndarray:
        """The furthest end of a run from ``start`` whose load stays within ``budget`` (``start`` itself
        when even an empty run is over it; ``inf`` for an infinite budget)."""
        room = budget - self.offset_s
        if self._kind == "quadratic":
            t, p = self.token_s, self.pair_s
            reach = (
                np.sqrt(
                    self._token_squared + p * (p * start * start + self._token_doubled * start + 2 * room)
                )
                - t
            ) / p
        elif self._kind == "linear":
            reach = start + room / self.token_s
        else:
            reach = self._mixed_end(start, room)
        return np.where(room >= 0, np.maximum(reach, start), start)

    def _mixed_end(self, start: np.ndarray, room: np.ndarray) -> np.ndarray:
        """:meth:`end` where entries differ in kind (or hold no work at all: no end)."""
        t, p = self.token_s, self.pair_s
        with np.errstate(invalid="ignore", divide="ignore"):
            by_pair = (
                np.sqrt(np.maximum(t * t + p * (p * start * start + 2 * t * start + 2 * room), 0)) - t
            ) / p
            linear = np.where(t > 0, start + room / np.where(t > 0, t, 1.0), np.inf)
        return np.where(p > 0, by_pair, linear)


def reaches(
    loads: tuple[RunLoad, ...], length: np.ndarray, budgets: tuple[np.ndarray, ...], runs: np.ndarray
) -> np.ndarray:
    """Whether ``runs`` runs cover ``[0, length)`` with every group's load within its budget."""
    position = np.zeros(np.broadcast_shapes(length.shape, *(b.shape for b in budgets), runs.shape))
    most = int(runs.max())
    alike = most == int(runs.min())  # every entry takes every step: no entry's position to hold back
    for step in range(most):
        end = loads[0].end(position, budgets[0])
        for load, budget in zip(loads[1:], budgets[1:], strict=True):
            end = np.minimum(end, load.end(position, budget))
        reached = np.minimum(end, length)
        position = reached if alike else np.where(step < runs, reached, position)
    return position >= length


def least_threshold(
    load: RunLoad, length: np.ndarray, runs: np.ndarray, other: tuple[RunLoad, np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(lower, upper)``: a bracket of the least budget of ``load`` with which ``runs`` runs cover the
    path (within ``other``'s group and budget, if given); ``upper`` is ``inf`` where none does."""
    lower = np.broadcast_to(load.offset_s, np.broadcast_shapes(length.shape, runs.shape)).astype(float)
    upper = load.of(np.zeros_like(lower), length + np.zeros_like(lower))
    loads = (load,) if other is None else (load, other[0])
    extra = () if other is None else (other[1],)
    feasible = reaches(loads, length, (upper, *extra), runs)
    upper = np.where(feasible, upper, np.inf)
    lower = np.where(feasible, lower, upper)
    for _ in range(BISECTIONS):
        middle = np.where(np.isfinite(upper), (lower + upper) / 2, lower)
        ok = reaches(loads, length, (middle, *extra), runs)
        upper = np.where(ok, middle, upper)
        lower = np.where(ok, lower, middle)
    return lower, upper


def least_pair_sum(first: RunLoad, second: RunLoad, length: np.ndarray, runs: np.ndarray) -> np.ndarray:
    """A lower bound of the least, over splits into at most ``runs`` runs, of the first group's slowest
    run plus the second group's slowest run."""
    low, high = least_threshold(first, length, runs)
    top = first.of(np.zeros_like(low), length + np.zeros_like(low))
    second_low, _ = least_threshold(second, length, runs)
    bound = top + second_low  # the first group's threshold at or above its one-run load
    left, right = high, np.maximum(top, high)
    for level in range(REFINEMENTS):
        grid = _geometric(left, right)
        star = _second_least(first, second, length[..., None], runs[..., None], grid)
        if level == 0:  # the first group's threshold between its least (``low``) and ``high``
            bound = np.minimum(bound, low + star[..., 0])
        pieces = grid[..., :-1] + star[..., 1:]
        best = np.argmin(pieces, axis=-1)
        last = level == REFINEMENTS - 1
        kept = pieces if last else np.where(np.arange(GRID) == best[..., None], np.inf, pieces)
        bound = np.minimum(bound, kept.min(axis=-1))
        left = np.take_along_axis(grid, best[..., None], axis=-1)[..., 0]
        right = np.take_along_axis(grid, best[..., None] + 1, axis=-1)[..., 0]
    return bound * (1 - RELATIVE_SLACK)


def _second_least(first: RunLoad, second: RunLoad, length, runs, first_budget) -> np.ndarray:
    """The lower end of the second group's least budget with the first group's at ``first_budget``."""
    shape = np.broadcast_shapes(np.shape(length), np.shape(runs), np.shape(first_budget))
    lower, _ = least_threshold(
        _broadcast(second, shape),
        np.broadcast_to(length, shape),
        np.broadcast_to(runs, shape),
        (_broadcast(first, shape), np.broadcast_to(first_budget, shape)),
    )
    return lower


def _broadcast(load: RunLoad, shape: tuple[int, ...]) -> RunLoad:
    """``load`` with its coefficients broadcast to ``shape`` (a trailing grid axis added if needed)."""

    def fit(values: np.ndarray) -> np.ndarray:
        while values.ndim < len(shape):
            values = values[..., None]
        return np.broadcast_to(values, shape)

    return RunLoad(token_s=fit(load.token_s), pair_s=fit(load.pair_s), offset_s=fit(load.offset_s))


def _geometric(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """``GRID + 1`` points from ``left`` to ``right`` (both included), evenly spaced in ratio."""
    steps = np.linspace(0.0, 1.0, GRID + 1)
    safe_left = np.maximum(left, np.finfo(float).tiny)
    ratio = np.maximum(right, safe_left) / safe_left
    grid = safe_left[..., None] * ratio[..., None] ** steps
    grid[..., 0], grid[..., -1] = left, right
    return grid
