"""The portfolio's parts: every kind of strategy fault becomes a recorded outcome."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from cpplan import NoFitError, Settings, Topology
from cpplan.planners import PLANNERS
from cpplan.planners.deadline import Deadline
from cpplan.planners.portfolio import StrategyOutcome, run_strategy
from cpplan.plans.outcome import Ended
from cpplan.pricing.problem import Problem
from cpplan.spec.profile import load_solver

LAYOUTS = ("full", "none", "min_span:512")


@pytest.fixture(scope="module")
def settings(qwen36) -> Settings:
    """The Qwen3.6 card at CP2, 80 GiB, 8 layers."""
    return Settings(topology=Topology(cp=2), model=qwen36, memory_bytes=80 * 2**30, num_layers=8)


def test_run_strategy_records_every_kind_of_fault(small_grpo, settings):
    """One strategy's run becomes an immutable outcome: a missing backend, a refusal (kept for the
    portfolio to raise), an error and a plan, each with its note, how it ended (typed) and no plan where
    there is none."""
    problem = Problem.build(small_grpo, settings)
    profile, deadline = load_solver("deterministic"), Deadline.after(1.0, deterministic=True)

    def refusing(problem, profile, deadline):
        raise NoFitError("too big")

    def crashing(problem, profile, deadline):
        raise KeyError("x")

    missing = run_strategy("cpsat", None, problem, profile, deadline)
    assert missing == StrategyOutcome(strategy="cpsat", ended=Ended.UNAVAILABLE, note="backend not available")
    refused = run_strategy("greedy", refusing, problem, profile, deadline)
    assert refused.note == "refused: too big" and isinstance(refused.refusal, NoFitError)
    assert refused.ended is Ended.REFUSED
    crashed = run_strategy("greedy", crashing, problem, profile, deadline)
    assert crashed.note == "raised KeyError: 'x'" and crashed.plan is None and not crashed.valid
    assert crashed.ended is Ended.FAILED
    ran = run_strategy("greedy", PLANNERS["greedy"], problem, profile, deadline)
    assert ran.plan is not None and ran.verdict is None and ran.note == "" and ran.ended is Ended.PLANNED
    with pytest.raises(dataclasses.FrozenInstanceError):
        ran.note = "changed"  # type: ignore[misc]


def test_only_the_cpsat_package_runs_cp_sat():
    """No module of ``cpplan.planners`` imports OR-Tools: every CP-SAT model is built, solved and read
    back in ``cpplan.cpsat`` (its one solver call, ``run_solver``), the planners hand it problems."""
    import ast

    import cpplan.planners

    for path in sorted(Path(cpplan.planners.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n.split(".")[0] == "ortools" for n in names), f"{path.name} imports OR-Tools"
