"""The portfolio's time budget as one immutable value handed to every strategy.

A :class:`Deadline` is a wall-clock instant (on :func:`time.perf_counter`) plus the instant its budget
started. Strategies ask it how much time is left, take a share of it for a sub-search, or keep a
reserve back. A *deterministic* deadline (a profile that must give the same plan on every machine)
never expires: every question about time left answers "unlimited", so no decision depends on the clock.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from cpplan.spec.profile import SolverProfile, TimingParams

if TYPE_CHECKING:
    from cpplan.pricing.problem import Problem


NO_TIME = "skipped: no time left"
"""The note (and candidate reason) of a strategy not started for lack of time (its outcome's
:class:`~cpplan.plans.outcome.Ended` is ``no_time``)."""


def verify_reserve_s(problem: Problem, timing: TimingParams) -> float:
    """Seconds to keep back from a deadline for verifying (and serializing) one plan of ``problem``."""
    return timing.verify_reserve_s(problem.logical_tokens(range(problem.num_items)))


@dataclass(frozen=True, kw_only=True)
class Deadline:
    """A point in time strategies stop by; immutable (:meth:`share` and :meth:`less` make new ones)."""

    start_s: float
    """The :func:`time.perf_counter` instant the budget started (what :meth:`elapsed_s` counts from)."""

    end_s: float
    """The :func:`time.perf_counter` instant it ends (``inf`` for a deterministic deadline)."""

    deterministic: bool = False
    """Whether this deadline ignores the clock: it never expires and always has unlimited time left."""

    timing: TimingParams = field(default_factory=TimingParams)
    """The profile's wall-time estimates (its ``[timing]`` table), which strategies handed only a
    deadline (greedy, seeded) decide by."""

    @classmethod
    def after(
        cls,
        seconds: float,
        *,
        deterministic: bool,
        start_s: float | None = None,
        timing: TimingParams | None = None,
    ) -> Deadline:
        """A deadline ``seconds`` after ``start_s`` (default: now); deterministic ones never expire.
        ``timing``: the profile's estimates (default: the shipped ones)."""
        start = time.perf_counter() if start_s is None else start_s
        return cls(
            start_s=start,
            end_s=math.inf if deterministic else start + seconds,
            deterministic=deterministic,
            timing=timing or TimingParams(),
        )

    @classmethod
    def of_profile(cls, profile: SolverProfile, *, start_s: float | None = None) -> Deadline:
        """The deadline of ``profile``: its time budget after ``start_s`` (default: now), deterministic
        as it is, with its timing estimates."""
        return cls.after(
            profile.time_budget_s, deterministic=profile.deterministic, start_s=start_s, timing=profile.timing
        )

    @property
    def memo_key(self) -> float | None:
        """What a result computed before this deadline is memoized by: ``None`` when deterministic (the
        clock decides nothing, as without a deadline), else its end instant, so that a result cut short
        at one deadline is never served to a caller with another."""
        return None if self.deterministic else self.end_s

    def left_s(self) -> float:
        """Seconds until the deadline (negative once past it; ``inf`` when deterministic)."""
        return math.inf if self.deterministic else self.end_s - time.perf_counter()

    def can_finish(self, needs_s: float) -> bool:
        """Whether work estimated at ``needs_s`` seconds (a :class:`TimingParams` estimate) fits in the
        time left: the one test every stage makes before work whose cost grows with the step (always
        true when deterministic: there the work limits decide, never the clock)."""
        return self.left_s() >= needs_s

    def expired(self) -> bool:
        """Whether the deadline has passed (never, when deterministic)."""
        return not self.deterministic and time.perf_counter() >= self.end_s

    def elapsed_s(self) -> float:
        """Seconds since the budget started."""
        return time.perf_counter() - self.start_s

    def share(self, fraction: float) -> Deadline:
        """A deadline at now + ``fraction`` x the time left (itself, when deterministic)."""
        if self.deterministic:
            return self
        now = time.perf_counter()
        return replace(self, end_s=now + fraction * (self.end_s - now))

    def within(self, seconds: float) -> Deadline:
        """A deadline at most ``seconds`` from now, never later than this one (itself, when deterministic)."""
        if self.deterministic:
            return self
        return replace(self, end_s=min(self.end_s, time.perf_counter() + seconds))

    def less(self, seconds: float) -> Deadline:
        """A deadline ``seconds`` earlier, keeping that much in reserve (itself, when deterministic)."""
        return self if self.deterministic else replace(self, end_s=self.end_s - seconds)
