"""The GPU check's time limit: every step asks before it starts whether its estimate still fits."""

from __future__ import annotations

import time
from collections.abc import Callable

DEFAULT_LIMIT_S = 480.0
"""Eight minutes: the check's promise on one H200."""
RESERVE_S = 15.0
"""Kept back for writing the results."""


class TimeGuard:
    """Seconds left before ``limit_s`` (from construction) less :data:`RESERVE_S`; records what it
    refused."""

    def __init__(self, limit_s: float, clock: Callable[[], float] = time.perf_counter) -> None:
        if not limit_s > 0:
            raise ValueError(f"limit_s must be positive, got {limit_s!r}")
        self.limit_s = float(limit_s)
        self.clock = clock
        self.started = clock()
        self.skipped: list[str] = []

    def elapsed_s(self) -> float:
        """Seconds since the check started."""
        return self.clock() - self.started

    def left_s(self) -> float:
        """Seconds left for measuring (the reserve kept back)."""
        return self.limit_s - RESERVE_S - self.elapsed_s()

    def allows(self, what: str, estimate_s: float = 0.0) -> bool:
        """Whether ``what``, expected to take ``estimate_s``, starts now; a refusal is recorded."""
        if self.left_s() > estimate_s:
            return True
        if what not in self.skipped:
            self.skipped.append(what)
        return False


__all__ = ["DEFAULT_LIMIT_S", "RESERVE_S", "TimeGuard"]
