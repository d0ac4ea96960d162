"""Plans made ahead run in a worker process below the trainer's priority, and come back as the plan
``plan()`` gives."""

from __future__ import annotations

import os

import pytest

import cpplan
from cpplan.integrations.plan_ahead import WORKER_NICENESS, PlanAhead
from cpplan.plans.plan_writer import strip_timing
from tests.planners.test_plan_async import GREEDY, step


@pytest.fixture()
def planner() -> cpplan.Planner:
    """A greedy-only deterministic planner of one CP2 group, 4 layers of the Qwen3.6 card."""
    made = cpplan.Planner(
        model="qwen3.6-35b-a3b", topology="cp=2", memory_bytes="8GiB", solver=GREEDY, num_layers=4
    )
    yield made
    made.close()


def test_a_plan_made_ahead_comes_from_a_lower_priority_process(planner):
    """By default a plan made ahead is planned in a worker process (not this one) whose niceness is
    WORKER_NICENESS above this process's (capped at 19), and the plan taken is, byte for byte, the one
    ``plan()`` gives here."""
    ahead = PlanAhead(planner)
    try:
        wl = step(5)
        ahead.submit("next", wl)
        taken = ahead.take("next", wl)
        assert ahead.num_taken == 1 and ahead.num_planned_now == 0
        assert strip_timing(taken.to_dict()) == strip_timing(planner.plan(wl).to_dict())
        pids = ahead.worker_pids()
        assert pids and os.getpid() not in pids
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        assert all(os.getpriority(os.PRIO_PROCESS, pid) == min(mine + WORKER_NICENESS, 19) for pid in pids)
    finally:
        ahead.close()


def test_a_worker_plans_with_the_correction_learned_before_submission(planner):
    """The worker plans with the planner as it is at submission: after an observation that raises the
    memory correction, the plan made ahead prices ranks' peaks as a plan made here does."""
    wl = step(6)
    first = planner.plan(wl)
    peak = first.to_dict()["waves"][0]["ranks"][0]["card_peak_bytes"]
    planner.observe(first, wave=0, rank=0, peak_bytes=int(peak * 1.2))
    ahead = PlanAhead(planner)
    try:
        ahead.submit("next", wl)
        taken = ahead.take("next", wl)
        assert strip_timing(taken.to_dict()) == strip_timing(planner.plan(wl).to_dict())
        assert taken.to_dict()["waves"][0]["ranks"][0]["peak_bytes"] > peak
    finally:
        ahead.close()


def test_thread_worker_stays_available_and_bad_worker_is_refused(planner):
    """``worker="thread"`` plans on the planner's thread (no process started); another value is a
    ValueError naming the choices."""
    ahead = PlanAhead(planner, worker="thread")
    ahead.submit("k", step(7))
    ahead.take("k", step(7))
    assert ahead.worker_pids() == ()
    with pytest.raises(ValueError, match="process"):
        PlanAhead(planner, worker="fork")
