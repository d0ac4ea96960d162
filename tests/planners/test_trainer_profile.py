"""The trainer profile (the TRL and verl adapters' default) plans without reading the clock: a busy
machine may slow planning, never change the plan a training step executes."""

from __future__ import annotations

import itertools
import time

import pytest

import cpplan
from cpplan.integrations.rollout_items import RolloutRow, grouped_workload
from cpplan.plans.plan_writer import strip_timing


@pytest.fixture(scope="module")
def grpo_pass() -> cpplan.Workload:
    """A TRL log-prob pass: 4 prompts of 300 to 450 tokens, 8 completions each of 20 to 90 tokens."""
    rows = [
        RolloutRow(
            prompt=tuple(3 + (p * 977 + 13 * i) % 8000 for i in range(300 + 50 * p)),
            completion=tuple(3 + (p * 31 + g * 7 + 11 * i) % 8000 for i in range(20 + (p * 7 + g * 13) % 71)),
        )
        for p in range(4)
        for g in range(8)
    ]
    return grouped_workload(rows, keep_empty=False)[0]


def _plan(workload: cpplan.Workload, solver: str) -> dict:
    planner = cpplan.Planner(
        model="qwen3.6-35b-a3b", topology="cp=2", memory_bytes="6GiB", solver=solver, num_layers=8
    )
    return strip_timing(planner.plan(workload).to_dict())


def _crawling_clock(monkeypatch) -> None:
    """``time.perf_counter`` jumps 10 s at every read, as on a machine too busy for any deadline."""
    ticks = itertools.count()
    monkeypatch.setattr(time, "perf_counter", lambda: 10.0 * next(ticks))


def test_trainer_plan_does_not_depend_on_the_clock(grpo_pass, monkeypatch):
    """Under a clock on which every deadline has long passed, the trainer profile's plan is the same
    byte for byte as on a quiet machine, where the runtime profile's plan changes."""
    quiet = {solver: _plan(grpo_pass, solver) for solver in ("trainer", "runtime")}
    _crawling_clock(monkeypatch)
    assert _plan(grpo_pass, "trainer") == quiet["trainer"]
    assert _plan(grpo_pass, "runtime") != quiet["runtime"]


def test_trainer_profile_decides_with_cpsat(grpo_pass):
    """The trainer profile still runs its CP-SAT stages (they are bounded by work, not skipped)."""
    planner = cpplan.Planner(
        model="qwen3.6-35b-a3b", topology="cp=2", memory_bytes="6GiB", solver="trainer", num_layers=8
    )
    result = planner.plan(grpo_pass)
    assert result.solver.deciding is not None and result.solver.deciding.status.answered
