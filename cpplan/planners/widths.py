"""How wide the greedy planner's next wave is: the widest fitting width, then where to cut.

:class:`WidthSearch` finds the widest run of items from a start that fits, pricing as few candidate waves as
it can: a linear model ``peak ≈ static + slope · tokens`` (refitted on every priced wave) proposes the width,
every answer is an exactly priced wave (:func:`~cpplan.pricing.wave.first_fitting`), and a proposal outside
the bracket of known fitting and failing widths falls back to bisection; usually two pricings settle a wave.
:func:`cheapest_cut` then moves the cut back to where the fewest tokens are shared (a GRPO group or agent task
boundary), when that costs at most half the wave.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from cpplan.planners.deadline import Deadline
from cpplan.pricing.evaluator import price
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import WavePlan, first_fitting
from cpplan.spec.quantities import COUNTS, NUM_QUANTITIES, QUANTITIES, QUANTITY_INDEX, check_rules


@dataclass(kw_only=True, eq=False)
class WidthSearch:
    """The widest-fitting-wave search over one problem, carrying its peak model from wave to wave."""

    problem: Problem
    layouts: tuple[str, ...]
    slope: float | None = None
    """Bytes of busiest-rank peak per estimated packed token, from the last wave priced."""
    slope_tokens: float = 0.0
    """The estimated tokens of the wave :attr:`slope` was learned on."""
    last_width: int = 1
    """The width of the last wave found (the first guess when the model has no slope yet)."""
    num_priced: int = field(default=0)
    """Candidate widths tested so far (for benchmarks and tests)."""
    test_s: float = 0.0
    """Seconds the last candidate width took to price (what :meth:`floor_s` extrapolates)."""

    @cached_property
    def _static_bytes(self) -> float:
        return self.problem.card.constants.static_peak_bytes

    @cached_property
    def _cumulative_tokens(self) -> np.ndarray:
        """``c[k]``: estimated full-sharing packed tokens of items ``0..k-1`` taken together."""
        problem = self.problem
        shared = np.concatenate([[0], problem.adjacent_shared_tokens])
        return np.concatenate([[0], np.cumsum(problem.item_full_tokens - shared)]).astype(np.float64)

    def estimated_tokens(self, start: int, width: int) -> float:
        """Estimated full-sharing packed tokens of the wave ``start .. start + width - 1``."""
        c = self._cumulative_tokens
        first_shared = self.problem.adjacent_shared_tokens[start - 1] if start > 0 else 0
        return float(c[start + width] - c[start] + first_shared)

    def widest(self, start: int, deadline: Deadline | None = None) -> tuple[int, WavePlan] | None:
        """The widest fitting wave from item ``start`` (its width and a fitting priced version), or
        ``None`` when the item fits no wave alone. Once ``deadline`` leaves less time than the last test
        took, the widest fitting width found so far is returned."""
        bracket = _Bracket(fail_width=self.problem.num_items - start + 1)
        for step in range(bracket.fail_width):
            width = self._proposal(start, bracket, step)
            wave, lowest = self._priced(start, width, self.layouts)
            bracket.record(width, wave, lowest.peak_bytes)
            out_of_time = deadline is not None and deadline.left_s() < self.test_s  # next test overruns
            if bracket.closed or (bracket.fit_wave is not None and out_of_time):
                break
        if bracket.fit_wave is None:
            return None
        self.last_width = bracket.fit_width
        return bracket.fit_width, bracket.fit_wave

    def quick(self, start: int, layouts: Sequence[str]) -> tuple[int, WavePlan] | None:
        """A fitting wave from item ``start`` found fast, for when time is up: the peak model's width
        under ``layouts``, halved until it fits; ``None`` when the item alone does not fit them. While
        the model has no slope, every remaining item is priced at once when the average rank would hold
        them within :data:`PRIOR_FIT_SHARE` of the budget (one pricing for a small problem: a DP
        replica's share), else the item alone; either teaches the model its slope."""
        remaining = self.problem.num_items - start
        if self.slope is None and remaining > 1 and self._likely_fit(start, remaining):
            whole = self._test(start, remaining, layouts)
            if whole is not None:
                self.last_width = remaining
                return remaining, whole
        if self.slope is None:
            alone = self._test(start, 1, layouts)
            if alone is None or remaining == 1:
                return None if alone is None else (1, alone)
        width = min(max(1, self._model_width(start)), remaining)
        while True:
            width = cheapest_cut(self.problem, start, width)
            wave = self._test(start, width, layouts)
            if wave is not None:
                self.last_width = width
                return width, wave
            if width == 1:
                return None
            width //= 2

    def _likely_fit(self, start: int, width: int) -> bool:
        """Whether the average rank's peak, with the ``width`` items from ``start`` taken as chains of
        their estimated full-sharing tokens spread evenly over the ranks, is within
        :data:`PRIOR_FIT_SHARE` of the budget: a prior, no proof (the busiest rank holds more)."""
        tokens = self.estimated_tokens(start, width)
        cp = self.problem.topology.cp
        lengths = self.problem.item_full_tokens[start : start + width].astype(np.float64)
        mean = np.zeros(NUM_QUANTITIES)
        for quantity in QUANTITIES:
            if quantity.only == "all":
                mean[QUANTITY_INDEX[quantity.name]] = _EVEN_MEAN[quantity.count](tokens, lengths, cp)
        peak = price(self.problem.card, mean).peak_bytes[0]
        return bool(peak <= PRIOR_FIT_SHARE * self.problem.memory_bytes)

    def _test(self, start: int, width: int, layouts: Sequence[str]) -> WavePlan | None:
        """The first fitting wave of ``width`` items from ``start`` under ``layouts`` (or ``None``), priced
        quickly (:meth:`quick`'s tests: time is up)."""
        return self._priced(start, width, layouts, quick=True)[0]

    def _priced(
        self, start: int, width: int, layouts: Sequence[str], *, quick: bool = False
    ) -> tuple[WavePlan | None, WavePlan]:
        """:func:`first_fitting` of ``width`` items from ``start`` (``quick``: its quick pricing), its
        peak taught to the model and its time recorded."""
        started = time.perf_counter()
        wave, lowest = first_fitting(self.problem, range(start, start + width), layouts, quick=quick)
        self.num_priced += 1
        self.test_s = time.perf_counter() - started
        self._learn(start, width, lowest)
        return wave, lowest

    def floor_s(self, start: int) -> float:
        """Seconds the anytime floor (:meth:`quick` waves from ``start`` on, about
        :data:`FLOOR_TESTS_PER_WAVE` candidate widths each) is expected to take, from the last
        candidate's pricing time and the last width."""
        waves = -(-(self.problem.num_items - start) // max(1, self.last_width))
        return waves * FLOOR_TESTS_PER_WAVE * self.test_s

    def _learn(self, start: int, width: int, wave: WavePlan) -> None:
        tokens = self.estimated_tokens(start, width)
        above = wave.peak_bytes - self._static_bytes
        if tokens > 0 and above > 0:
            self.slope, self.slope_tokens = above / tokens, tokens

    def _proposal(self, start: int, bracket: _Bracket, step: int) -> int:
        """The next width to test, strictly between the widest known fit and the narrowest known
        failure: while no failure is known, the peak model's widest fitting width (the last width found
        while it has no slope); then the width where the peak, interpolated between the two ends,
        meets the budget; the bracket's middle once two tests in a row crept the same end (the peaks
        step, and interpolation would go on creeping) and from the :data:`MODEL_STEPS`-th test on."""
        lo, hi = bracket.fit_width + 1, bracket.fail_width - 1
        if step >= MODEL_STEPS or (abs(bracket.creep) >= 2 and bracket.fail_peak is not None):
            return (lo + hi) // 2
        if bracket.fit_peak is not None and bracket.fail_peak is not None:
            rise = bracket.fail_peak - bracket.fit_peak
            share = (self.problem.memory_bytes - bracket.fit_peak) / rise if rise > 0 else 0.5
            guess = bracket.fit_width + int(share * (bracket.fail_width - bracket.fit_width))
        else:
            guess = self._model_width(start)
        return min(max(guess, lo), hi)

    def _model_width(self, start: int) -> int:
        """The widest width from ``start`` whose estimated tokens the peak model admits."""
        if self.slope is None:
            return self.last_width
        room = (self.problem.memory_bytes - self._static_bytes) / self.slope
        if room > 2 * self.slope_tokens:  # learned on a much narrower wave: its fixed part inflates
            room *= NARROW_SLOPE_SHARE  # the slope less than a wide wave's does; aim below, a fit is cheap
        first_shared = self.problem.adjacent_shared_tokens[start - 1] if start > 0 else 0
        c = self._cumulative_tokens
        return int(np.searchsorted(c, c[start] - first_shared + room, side="right")) - 1 - start


@dataclass(kw_only=True, eq=False)
class _Bracket:
    """The widths known to fit and to fail for one wave, with their peaks."""

    fail_width: int
    fit_width: int = 0
    fit_wave: WavePlan | None = None
    fit_peak: int | None = None
    fail_peak: int | None = None
    creep: int = 0
    """How many tests in a row moved the same end of the bracket by at most :data:`CREEP` widths
    (interpolation creeps when the peaks step: then the next test bisects)."""

    def record(self, width: int, wave: WavePlan | None, peak: int) -> None:
        """Width ``width`` was priced: ``wave`` when it fits (else ``None``), its (lowest) peak."""
        if wave is not None:
            moved = width - self.fit_width
            self.creep = self.creep + 1 if self.creep > 0 and moved <= CREEP else int(moved <= CREEP)
            self.fit_width, self.fit_wave, self.fit_peak = width, wave, peak
        else:
            moved = self.fail_width - width
            self.creep = self.creep - 1 if self.creep < 0 and moved <= CREEP else -int(moved <= CREEP)
            self.fail_width, self.fail_peak = width, peak

    @property
    def closed(self) -> bool:
        """Whether the widest fitting width is known: the next one fails (or there is none)."""
        return self.fail_width - self.fit_width <= 1


CREEP = 2
"""A bracket end moved by at most this many widths crept (see :class:`_Bracket`)."""

FLOOR_TESTS_PER_WAVE = 2
"""Candidate widths the anytime floor prices per wave, in :meth:`WidthSearch.floor_s`."""

NARROW_SLOPE_SHARE = 0.6
"""The share of the model's room aimed at when its slope comes from a wave under half as wide: a
proposal that fits costs one pricing, one that fails costs one per layout."""

PRIOR_FIT_SHARE = 0.8
"""The share of the budget the average rank may fill, by :meth:`WidthSearch._likely_fit`'s prior, for
the anytime floor to price every remaining item at once before it knows the peak model's slope."""

_EVEN_MEAN = {
    "token": lambda tokens, lengths, cp: tokens / cp,
    "pair": lambda tokens, lengths, cp: float((lengths * (lengths + 1) / 2).sum()) / cp,
    "segment": lambda tokens, lengths, cp: lengths.size / cp,
    "remote": lambda tokens, lengths, cp: tokens * (cp - 1) / cp,
}
"""Per count, the average rank's amount for :meth:`WidthSearch._likely_fit`: ``tokens`` estimated
packed tokens spread evenly, each item a chain of its ``lengths`` tokens."""
check_rules("planners.widths.WidthSearch._likely_fit", _EVEN_MEAN, COUNTS)

MODEL_STEPS = 6
"""Tests of one wave's width led by the peak model and interpolation before the search bisects."""


def cheapest_cut(problem: Problem, start: int, width: int) -> int:
    """Where to end a wave of at most ``width`` items from ``start``: the boundary in the wave's back
    half across which items share the fewest tokens (the widest such cut on ties), so that a prefix
    group stays whole when that costs at most half the wave. The last wave takes everything."""
    if start + width >= problem.num_items:
        return width
    shortest = (width + 1) // 2
    shared = problem.adjacent_shared_tokens[start + shortest - 1 : start + width]
    return shortest + int(shared.size - 1 - np.argmin(shared[::-1]))


def cut_wave(
    problem: Problem, start: int, width: int, widest: WavePlan, layouts: Sequence[str]
) -> tuple[int, WavePlan]:
    """The wave :func:`cheapest_cut` chooses, with a fitting priced version, when moving the cut pays: the
    tokens it keeps from being stored twice, at the widest wave's seconds per packed token, cost more than the
    share of a wave's overhead the items it leaves behind add (on a cheap model a wave's fixed cost can
    outweigh a duplicated prompt). Otherwise, or when the shorter wave does not fit, the widest wave."""
    cut = cheapest_cut(problem, start, width)
    if cut == width or not _cut_pays(problem, start, width, cut, widest):
        return width, widest
    wave, _ = first_fitting(problem, range(start, start + cut), layouts)
    return (cut, wave) if wave is not None else (width, widest)


def _cut_pays(problem: Problem, start: int, width: int, cut: int, widest: WavePlan) -> bool:
    """Whether ending the wave at ``cut`` instead of ``width`` saves more seconds than it adds."""
    shared = problem.adjacent_shared_tokens
    overhead = problem.card.wave_overhead_s
    per_token = max(widest.cost_s - overhead, 0.0) / max(widest.packed_tokens, 1)
    saved = float(shared[start + width - 1] - shared[start + cut - 1]) * per_token
    return saved > overhead * (width - cut) / width


def balanced_cut(problem: Problem, start: int) -> int:
    """Where to split the items from ``start`` to the end into two waves: the boundary in the middle
    half sharing the fewest tokens, the one nearest the middle on ties (the middle itself when fewer
    than four items are left)."""
    remaining = problem.num_items - start
    lo, hi = max(1, remaining // 4), min(remaining - 1, remaining - remaining // 4)
    if hi <= lo:
        return max(1, remaining // 2)
    shared = problem.adjacent_shared_tokens[start + lo - 1 : start + hi]
    cuts = np.arange(lo, hi + 1)
    best = shared == shared.min()
    return int(cuts[best][np.argmin(np.abs(2 * cuts[best] - remaining))])
