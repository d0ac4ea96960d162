"""Plans made ahead: a trainer that knows its next batch submits it (:meth:`cpplan.Planner.plan_async`)
while the current one runs, and takes the plan when the pass that needs it comes.

The call is :meth:`cpplan.Planner.plan` of the batch: a trainer's framework hands each DP rank its own
rows, so the batch is the rank's share already and the planner is one CP group (its topology without
``dp``); a planner over ``dp > 1`` replicas would partition the rows again (``docs/runtime.md``).

A plan is taken only for exactly the batch it was made for (the caller's key: the pass's rows and
flags); any other batch is planned then and there. A plan made ahead was priced before the passes in
between were observed, so what those passes teach the planner reaches the plan after it.
"""

from __future__ import annotations

from collections.abc import Hashable
from concurrent.futures import Future

from cpplan.planner import Planner
from cpplan.plans.result import PlanResult
from cpplan.spec.workload import Workload

MAX_AHEAD = 2
"""Plans kept in flight at once (older ones are dropped when more are submitted)."""


class PlanAhead:
    """Plans of ``planner`` submitted by key and taken by key, each at most once."""

    def __init__(self, planner: Planner) -> None:
        self.planner = planner
        self._pending: dict[Hashable, Future[PlanResult]] = {}
        self.num_taken = 0
        """Plans taken from those made ahead (the rest were planned when needed)."""
        self.num_planned_now = 0
        """Plans made when needed (no plan ahead matched)."""

    def submit(self, key: Hashable, workload: Workload) -> None:
        """Start planning ``workload`` (the batch of ``key``) on the planner's worker thread, unless it is
        already under way."""
        if key in self._pending:
            return
        self._pending[key] = self.planner.plan_async(workload)
        while len(self._pending) > MAX_AHEAD:
            self._pending.pop(next(iter(self._pending))).cancel()

    def take(self, key: Hashable, workload: Workload) -> PlanResult:
        """The plan made ahead for ``key`` (waiting for it if it is still running), else ``workload``
        planned now. A plan ahead that failed is planned again now, so its error surfaces here."""
        future = self._pending.pop(key, None)
        if future is not None and not future.cancelled():
            try:
                result = future.result()
            except Exception:
                result = None
            if result is not None:
                self.num_taken += 1
                return result
        self.num_planned_now += 1
        return self.planner.plan(workload)

    def pending(self, key: Hashable) -> bool:
        """Whether a plan for ``key`` was submitted and not yet taken."""
        return key in self._pending
