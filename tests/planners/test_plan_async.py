"""Planning ahead: Planner.plan_async returns a Future of the plan plan() gives, and the trainers' plan-ahead
helper hands a batch's plan made ahead to the pass of exactly that batch."""

from __future__ import annotations

import threading
import time

import pytest

import cpplan
from cpplan.bench.synthetic import grpo
from cpplan.integrations.plan_ahead import PlanAhead
from cpplan.plans.plan_writer import strip_timing
from cpplan.spec.profile import load_solver

GREEDY = load_solver("deterministic").model_copy(update={"strategies": ("greedy",)})


def step(seed: int) -> cpplan.Workload:
    """A small GRPO step (6 prompts x 4 completions)."""
    return grpo(
        num_prompts=6,
        group_size=4,
        system_tokens=32,
        prompt_tokens=(200, 900),
        completion_tokens=(50, 300),
        seed=seed,
    )


@pytest.fixture(scope="module")
def planner() -> cpplan.Planner:
    """A greedy-only deterministic planner over 2 replicas of CP2, 4 layers of the Qwen3.6 card."""
    topology = cpplan.Topology(dp=2, cp=2)
    made = cpplan.Planner(
        model="qwen3.6-35b-a3b", topology=topology, memory_bytes="3.5GiB", solver=GREEDY, num_layers=4
    )
    yield made
    made.close()


def test_plan_async_gives_the_plan_plan_gives(planner):
    """The Future's result is, byte for byte, what plan() returns for the same arguments (the whole
    step, one replica, and the assembled step)."""
    wl = step(0)
    for replica in (None, 1, "all"):
        future = planner.plan_async(wl, replica=replica)
        got = strip_timing(future.result(timeout=60).to_dict())
        assert got == strip_timing(planner.plan(wl, replica=replica).to_dict())


def test_plan_async_runs_on_another_thread_in_submission_order(planner):
    """Plans run on the planner's worker thread (not the caller's), one at a time, in the order they
    were submitted, while the caller goes on."""
    seen: list[tuple[int, str]] = []

    def spy(problem, profile, deadline):
        seen.append((problem.workload.num_items, threading.current_thread().name))
        return None, None

    futures = [
        planner.plan_async(step(seed), planners={"greedy": spy, "full_sharing": spy}) for seed in (1, 2)
    ]
    with pytest.raises(cpplan.NoFitError):
        futures[0].result(timeout=60)  # the spy plans nothing: the error comes back through the Future
    with pytest.raises(cpplan.NoFitError):
        futures[1].result(timeout=60)
    assert seen and all(name.startswith("cpplan-plan") for _, name in seen)
    assert threading.current_thread().name not in {name for _, name in seen}


def test_plan_ahead_takes_only_the_batch_it_was_made_for(planner):
    """A plan submitted for a key is taken by the pass of that key (once, without planning again); a
    pass of another key, or the same key a second time, plans then and there."""
    ahead = PlanAhead(planner)
    first, second = step(3), step(4)
    ahead.submit("next", first)
    assert ahead.pending("next")
    time.sleep(0.01)
    taken = ahead.take("next", first)
    assert ahead.num_taken == 1 and ahead.num_planned_now == 0
    assert strip_timing(taken.to_dict()) == strip_timing(planner.plan(first).to_dict())
    other = ahead.take("next", second)  # taken already: planned now, for the batch given
    assert ahead.num_planned_now == 1
    assert other.problem.workload is second


def test_plan_ahead_keeps_a_bounded_number_in_flight(planner):
    """Submitting more batches than are kept drops the oldest: its pass plans anew."""
    ahead = PlanAhead(planner)
    for k in range(4):
        ahead.submit(k, step(k))
    assert not ahead.pending(0) and not ahead.pending(1)
    assert ahead.pending(2) and ahead.pending(3)
    ahead.take(3, step(3))
    ahead.take(2, step(2))
    assert ahead.num_taken == 2
