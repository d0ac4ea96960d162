"""Plans made ahead: a trainer that knows its next batch submits it (:meth:`cpplan.Planner.plan_async`)
while the current one runs, and takes the plan when the pass that needs it comes.

The call is :meth:`cpplan.Planner.plan` of the batch: a trainer's framework hands each DP rank its own
rows, so the batch is the rank's share already and the planner is one CP group (its topology without
``dp``); a planner over ``dp > 1`` replicas would partition the rows again (``docs/runtime.md``).

Plans made ahead run in a worker process (``worker="process"``, the default) whose priority is below the
trainer's (``os.nice``), so planning never holds the training loop's interpreter (the GIL) nor takes
the cores from its step; each submission sends the planner as it is then (its learned correction
included) and gets the plan back. ``worker="thread"`` plans on the planner's own worker thread
(:meth:`cpplan.Planner.plan_async`) instead.

A plan is taken only for exactly the batch it was made for (the caller's key: the pass's rows and
flags); any other batch is planned then and there. A plan made ahead was priced before the passes in
between were observed, so what those passes teach the planner reaches the plan after it.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import multiprocessing.util
import os
from collections.abc import Hashable
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Literal

from cpplan.planner import Planner
from cpplan.plans.result import PlanResult
from cpplan.spec.workload import Workload

MAX_AHEAD = 2
"""Plans kept in flight at once (older ones are dropped when more are submitted)."""

WORKER_NICENESS = 10
"""How much lower than the trainer's the worker process's scheduling priority is (``os.nice``)."""


class PlanAhead:
    """Plans of ``planner`` submitted by key and taken by key, each at most once; made in a worker
    process below the trainer's priority (``worker="process"``) or on the planner's worker thread."""

    def __init__(self, planner: Planner, *, worker: Literal["process", "thread"] = "process") -> None:
        if worker not in ("process", "thread"):
            raise ValueError(f"worker must be 'process' or 'thread', got {worker!r}")
        self.planner = planner
        self.worker = worker
        self._processes: ProcessPoolExecutor | None = None
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
        if self.worker == "thread":
            self._pending[key] = self.planner.plan_async(workload)
        else:
            self._pending[key] = self._pool().submit(planned_ahead, self.planner, workload)
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

    def drain(self) -> None:
        """Wait until every plan in flight is done (kept to be taken, or failed): no planning of this
        helper runs after it returns (a benchmark calls it before timing another trainer's step)."""
        for future in list(self._pending.values()):
            if not future.cancelled():
                future.exception()

    def worker_pids(self) -> tuple[int, ...]:
        """The process ids of the worker processes started so far (none under ``worker="thread"``)."""
        processes = getattr(self._processes, "_processes", None) or {}
        return tuple(sorted(processes))

    def close(self) -> None:
        """Stop the worker process once its plans are done (a later :meth:`submit` starts another)."""
        pool, self._processes = self._processes, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def _pool(self) -> ProcessPoolExecutor:
        """The one worker process, started on first use from a fork server where the platform has one
        (a clean interpreter that imported cpplan, never a fork of the trainer: a forked copy would
        inherit the locks its threads held, torch's and the communication library's among them), else
        spawned."""
        if self._processes is None:
            methods = multiprocessing.get_all_start_methods()
            context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
            if context.get_start_method() == "forkserver":
                context.set_forkserver_preload(["cpplan.integrations.plan_ahead"])
            self._processes = ProcessPoolExecutor(
                max_workers=1, mp_context=context, initializer=_below_the_step
            )
            # A process started by multiprocessing joins its children as it ends, before the interpreter
            # shuts executors down, and by then the worker can no longer be told to stop: it is ended.
            multiprocessing.util.Finalize(self, _end_worker, args=(self._processes,), exitpriority=10)
        return self._processes


def planned_ahead(planner: Planner, workload: Workload) -> PlanResult:
    """In the worker process: ``planner.plan(workload)``, handed back without its pricing memo (the
    trainer only reads the plan, its problem and its candidates)."""
    result = planner.plan(workload)
    return dataclasses.replace(result, problem=dataclasses.replace(result.problem))


def _below_the_step() -> None:
    """The worker process's start: its priority :data:`WORKER_NICENESS` below the trainer's."""
    os.nice(WORKER_NICENESS)


def _end_worker(pool: ProcessPoolExecutor) -> None:
    """At the end of the trainer's process (or of the helper): the plans still in flight are dropped and
    the worker process ended, so that nothing waits for it."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
