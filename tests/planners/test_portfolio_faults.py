"""Fault injection: a CP-SAT backend that raises, times out without a solution, returns a plan that
breaks a constraint, or disagrees with the evaluator never costs more than time. The portfolio falls
back to a verified plan, records what happened in the result, and crashes nothing."""

from __future__ import annotations

import dataclasses
import time

import pytest

import cpplan
from cpplan.api import solve
from cpplan.bench.synthetic import grpo
from cpplan.planners import PLANNERS
from cpplan.planners.greedy import greedy_plan
from cpplan.plans.outcome import ModelOutcome, Status
from cpplan.plans.plan import Plan, SolverStats
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import price_wave
from cpplan.spec.settings import Settings
from cpplan.verifier import verify_plan


def _stats(status: Status, **values) -> SolverStats:
    """Statistics of a fake CP-SAT candidate whose ownership model ended with ``status``."""
    return SolverStats(outcomes=(ModelOutcome(model="ownership", status=status),), **values)


CARD = cpplan.load_model("qwen3-8b")


@pytest.fixture(scope="module")
def problem() -> Problem:
    """A GRPO workload at CP2 whose budget fits every item alone but not all of them in one wave."""
    workload = grpo(
        num_prompts=4, group_size=3, system_tokens=256, prompt_tokens=512, completion_tokens=(64, 256), seed=3
    )
    topology = cpplan.Topology(cp=2)
    roomy = Problem.build(workload, Settings(topology=topology, model=CARD, memory_bytes=2**50, num_layers=4))
    items = range(workload.num_items)
    whole = price_wave(roomy, items, roomy.pack(items, "full"), "full").peak_bytes
    single = max(price_wave(roomy, [i], roomy.pack([i], "full"), "full").peak_bytes for i in items)
    budget = (whole + single) // 2
    return Problem.build(workload, Settings(topology=topology, model=CARD, memory_bytes=budget, num_layers=4))


@pytest.fixture(scope="module")
def profile() -> cpplan.SolverProfile:
    """The runtime profile: greedy, full sharing, then CP-SAT (replaced by the fakes below)."""
    return cpplan.load_solver("runtime")


def _greedy(problem: Problem) -> Plan:
    return greedy_plan(problem, ("full",), strategy="cpsat")


def _check_fallback(result: cpplan.PlanResult, problem: Problem) -> cpplan.Candidate:
    """The chosen plan is not CP-SAT's, re-verifies as valid, and CP-SAT's candidate is recorded."""
    assert result.strategy in ("greedy", "full_sharing", "seeded")
    verdict = verify_plan(
        plan_to_dict(problem, result.plan), problem.workload, problem.card, problem.memory_bytes
    )
    assert verdict.valid, verdict.violations
    (cpsat,) = [c for c in result.candidates if c.strategy == "cpsat"]
    assert not cpsat.valid
    return cpsat


def test_fixture_needs_several_waves(problem):
    """The budget is tight enough that the greedy plan has more than one wave (so a one-wave plan
    breaks the memory constraint) and loose enough that no item is split."""
    plan = greedy_plan(problem, ("full",))
    assert plan.num_waves >= 2
    assert not any(w.split for w in plan.waves)


def test_solver_raising(problem, profile):
    """A backend that raises is recorded with the exception and the greedy plan is chosen."""

    def raising(problem, profile, deadline):
        raise RuntimeError("CP-SAT crashed: model invalid")

    result = solve(problem, profile, planners={"cpsat": raising})
    cpsat = _check_fallback(result, problem)
    assert cpsat.reason == "raised RuntimeError: CP-SAT crashed: model invalid"


def test_solver_timing_out_without_solution(problem, profile):
    """A backend that uses the whole budget and finds nothing is recorded as 'no solution', with its
    status kept as the result's solver statistics."""
    short = profile.with_time_budget(0.05)

    def timing_out(problem, profile, deadline):
        time.sleep(max(0.0, deadline.left_s()))
        return None, SolverStats(
            outcomes=(ModelOutcome(model="ownership", status=Status.UNKNOWN),), wall_s=profile.time_budget_s
        )

    result = solve(problem, short, planners={"cpsat": timing_out})
    cpsat = _check_fallback(result, problem)
    assert cpsat.reason == "ownership model no answer (unknown)"
    assert result.solver.status == Status.UNKNOWN


def test_solver_dropping_a_request(problem, profile):
    """A plan that leaves out its last wave (so requests are in no wave) is rejected by the verifier."""

    def dropping(problem, profile, deadline):
        plan = _greedy(problem)
        return Plan(strategy="cpsat", waves=plan.waves[:-1]), SolverStats(
            outcomes=(ModelOutcome(model="ownership", status=Status.OPTIMAL),)
        )

    cpsat = _check_fallback(solve(problem, profile, planners={"cpsat": dropping}), problem)
    assert cpsat.reason.startswith("invalid: request")
    assert "is in no wave" in cpsat.reason


def test_solver_repeating_a_request(problem, profile):
    """A plan that runs a wave twice (each of its requests twice) is rejected."""

    def repeating(problem, profile, deadline):
        plan = _greedy(problem)
        return Plan(strategy="cpsat", waves=(*plan.waves, plan.waves[0])), SolverStats(
            outcomes=(ModelOutcome(model="ownership", status=Status.OPTIMAL),)
        )

    cpsat = _check_fallback(solve(problem, profile, planners={"cpsat": repeating}), problem)
    assert "appears in waves" in cpsat.reason


def _one_wave(problem: Problem):
    items = range(problem.num_items)
    return price_wave(problem, items, problem.pack(items, "full"), "full")


def test_solver_breaking_the_memory_budget(problem, profile):
    """A plan that puts every item in one wave, over the budget, is rejected by the verifier's own
    token-by-token price."""

    def overfull(problem, profile, deadline):
        return Plan(strategy="cpsat", waves=(_one_wave(problem),)), SolverStats(
            outcomes=(ModelOutcome(model="ownership", status=Status.OPTIMAL),)
        )

    cpsat = _check_fallback(solve(problem, profile, planners={"cpsat": overfull}), problem)
    assert "exceeds the budget" in cpsat.reason


def test_solver_underpricing_memory(problem, profile):
    """Evaluator/solver disagreement on memory: a wave whose stated peaks were lowered under the
    budget is re-priced by the verifier, found over budget and rejected."""

    def underpricing(problem, profile, deadline):
        wave = _one_wave(problem)
        lowered = dataclasses.replace(
            wave.prices, peak_bytes=wave.prices.peak_bytes * 0 + problem.memory_bytes - 1
        )
        return Plan(strategy="cpsat", waves=(dataclasses.replace(wave, prices=lowered),)), None

    cpsat = _check_fallback(solve(problem, profile, planners={"cpsat": underpricing}), problem)
    assert "but the verifier prices" in cpsat.reason or "exceeds the budget" in cpsat.reason
    assert "(+" in cpsat.reason  # every rank's mismatch is counted


def test_solver_underpricing_time(problem, profile):
    """Evaluator/solver disagreement on time: waves whose stated cost was halved are rejected, so a
    plan cannot win on a price the evaluator does not confirm."""

    def cheapening(problem, profile, deadline):
        plan = _greedy(problem)
        waves = tuple(dataclasses.replace(w, cost_s=w.cost_s / 2) for w in plan.waves)
        return Plan(strategy="cpsat", waves=waves), SolverStats(
            outcomes=(ModelOutcome(model="ownership", status=Status.OPTIMAL),)
        )

    cpsat = _check_fallback(solve(problem, profile, planners={"cpsat": cheapening}), problem)
    assert "cost_s" in cpsat.reason and "but the verifier prices" in cpsat.reason


def test_solver_objective_disagreeing_with_evaluator(problem, profile):
    """A valid plan whose solver objective is far below the evaluator's price is ranked by the
    verified price (so it loses to the cheaper greedy plan) and the disagreement is recorded."""

    def optimistic(problem, profile, deadline):
        waves = tuple(
            price_wave(problem, [i], problem.pack([i], "full"), "full") for i in range(problem.num_items)
        )
        return Plan(strategy="cpsat", waves=waves), SolverStats(
            outcomes=(ModelOutcome(model="ownership", status=Status.OPTIMAL),), objective_s=0.001
        )

    result = solve(problem, profile, planners={"cpsat": optimistic})
    assert result.strategy in ("greedy", "full_sharing", "seeded")
    (cpsat,) = [c for c in result.candidates if c.strategy == "cpsat"]
    assert cpsat.valid
    assert cpsat.cost_s > result.cost_s
    assert "solver/evaluator disagreement" in cpsat.reason
    assert result.solver.objective_s == 0.001


def test_solver_returning_garbage(problem, profile):
    """A backend returning something that is not a plan is recorded as unreadable; nothing crashes."""

    def garbage(problem, profile, deadline):
        return object(), _stats(Status.OPTIMAL)

    def not_a_pair(problem, profile, deadline):
        return None

    for fake in (garbage, not_a_pair):
        cpsat = _check_fallback(solve(problem, profile, planners={"cpsat": fake}), problem)
        assert "unreadable plan" in cpsat.reason or "raised TypeError" in cpsat.reason


def test_every_backend_failing_is_a_typed_error(problem, profile):
    """When every strategy fails, the portfolio raises NoFitError listing each strategy's failure."""

    def raising(problem, profile, deadline):
        raise RuntimeError("boom")

    fakes = {name: raising for name in profile.strategies}
    with pytest.raises(cpplan.NoFitError) as info:
        solve(problem, profile, planners=fakes)
    for name in fakes:
        assert f"{name}: raised RuntimeError: boom" in str(info.value)


def test_cli_survives_a_faulty_backend(tmp_path, monkeypatch, capsys):
    """Through the CLI, a raising CP-SAT backend still gives exit 0 with a verified plan, and the
    candidates in the plan JSON record the failure."""
    import json

    from cpplan.bench.synthetic import to_jsonl
    from cpplan.cli import main

    def raising(problem, profile, deadline):
        raise RuntimeError("CP-SAT crashed")

    monkeypatch.setitem(PLANNERS, "cpsat", raising)
    workload = grpo(num_prompts=2, group_size=2, system_tokens=64, prompt_tokens=128, completion_tokens=32)
    (tmp_path / "w.jsonl").write_text(to_jsonl(workload))
    out = tmp_path / "plan.json"
    code = main(
        ["plan", str(tmp_path / "w.jsonl"), "--model", "qwen3-8b", "--memory", "20GiB", "--output", str(out)]
    )
    assert code == 0
    data = json.loads(out.read_text())
    reasons = {c["strategy"]: c["reason"] for c in data["candidates"]}
    assert reasons["cpsat"] == "raised RuntimeError: CP-SAT crashed"
    assert data["strategy"] in ("greedy", "full_sharing")
    assert "Traceback" not in capsys.readouterr().err
