"""CP-SAT inside the portfolio: never worse than greedy, real layout choices, deterministic bytes
across processes, and fallbacks when a solver raises, finds nothing or returns an invalid plan."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cpplan import Item, Request, Topology, Workload, load_model, load_solver
from cpplan.api import solve
from cpplan.bench.synthetic import agent_trees, grpo, long_tail, to_jsonl
from cpplan.planners.cpsat_planner import cpsat_planner
from cpplan.planners.cpsat_strategy import joint_plan
from cpplan.planners.deadline import Deadline
from cpplan.planners.greedy import greedy_plan
from cpplan.plans.outcome import ModelOutcome, Status
from cpplan.plans.plan import Plan, SolverStats
from cpplan.plans.plan_writer import strip_timing
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import price_wave
from cpplan.spec.profile import GreedyParams
from cpplan.spec.settings import Settings
from tests.support.grpo_arrivals import shuffled_completions


def _stats(status: Status, **values) -> SolverStats:
    """Statistics of a fake CP-SAT candidate whose ownership model ended with ``status``."""
    return SolverStats(outcomes=(ModelOutcome(model="ownership", status=status),), **values)


MODEL_PATH = Path(__file__).resolve().parents[1] / "data" / "qwen36_uncalibrated.toml"
MODEL = load_model(MODEL_PATH)
GIB = 2**30


def problem_of(workload, *, cp=1, memory_bytes=80 * GIB, layers=4) -> Problem:
    return Problem.build(
        workload,
        Settings(topology=Topology(cp=cp), model=MODEL, memory_bytes=memory_bytes, num_layers=layers),
    )


def with_greedy_layouts(profile, layouts):
    return profile.model_copy(update={"greedy": GreedyParams(layouts=layouts)})


CASES = [
    ("shuffled grpo, cp1", shuffled_completions(0), 1, 6 * GIB),
    ("shuffled grpo, cp2", shuffled_completions(1), 2, 5 * GIB),
    ("agent trees, cp2", agent_trees(num_trees=5, depth=3, branching=2, turn_tokens=(200, 800)), 2, 6 * GIB),
    ("long tail, cp4", long_tail(num_items=14, median_tokens=1500, max_tokens=5000), 4, 4 * GIB),
]


@pytest.mark.parametrize(("name", "workload", "cp", "memory"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("profile", ["runtime", "deterministic"])
def test_chosen_plan_never_costs_more_than_greedy(name, workload, cp, memory, profile):
    """The portfolio's plan costs at most the greedy candidate's, and whenever CP-SAT returns a plan it
    verifies valid (its plan fits every rank). The tight CP2 case is one where the conservative model
    admits no plan with greedy's wave count: CP-SAT reports infeasible and greedy still wins."""
    problem = problem_of(workload, cp=cp, memory_bytes=memory)
    result = solve(problem, load_solver(profile).with_time_budget(2.0))
    by_strategy = {c.strategy: c for c in result.candidates}
    assert result.cost_s <= by_strategy["greedy"].cost_s + 1e-12
    cpsat = by_strategy["cpsat"]
    assert cpsat.valid or cpsat.reason == "ownership model no answer (infeasible)", cpsat.reason


def test_cpsat_beats_greedy_when_arrival_order_splits_groups():
    """With GRPO completions arriving interleaved, in-order greedy splits groups across waves and
    stores prompts twice. The joint model, warm-started from that plan, regroups them (strictly
    cheaper); the portfolio's plan is as cheap (greedy also plans the items regrouped by shared prefix,
    and CP-SAT starts from the cheaper), and its answer carries a bound not above its objective."""
    problem = problem_of(shuffled_completions(0), memory_bytes=6 * GIB)
    profile = load_solver("deterministic")
    in_order = greedy_plan(problem, profile.greedy.layouts)
    deadline = Deadline.after(1.0, deterministic=True)
    regrouped, stats = joint_plan(problem, profile, in_order, deadline, profile.cpsat)
    assert regrouped is not None and regrouped.cost_s < in_order.cost_s * 0.99
    assert stats.status in ("optimal", "feasible")
    result = solve(problem, profile)
    assert result.cost_s <= regrouped.cost_s + 1e-9
    assert result.solver.status in ("optimal", "feasible")
    assert result.solver.bound_s is not None and result.solver.bound_s <= result.solver.objective_s + 1e-9
    assert set(result.solver.stage_s) >= {"build", "presolve", "search", "realize", "verify"}


def test_solver_declines_a_short_shared_prefix():
    """Each item's two requests share a 2-token prefix: sharing it saves two tokens but adds a
    segment, which costs more. Hinted with the full-sharing plan, CP-SAT unshares it: one segment per
    request and a lower cost than full sharing."""
    rng = np.random.default_rng(0)
    items = tuple(
        Item(
            id=f"i{k}",
            requests=tuple(
                Request(tokens=np.concatenate([[k, k], rng.integers(100, 10**5, 600)])) for _ in "ab"
            ),
        )
        for k in range(3)
    )
    problem = problem_of(Workload(items=items), layers=None)
    profile = with_greedy_layouts(load_solver("deterministic"), ("full",))
    plan, stats = cpsat_planner(problem, profile, Deadline.after(profile.time_budget_s, deterministic=True))
    assert stats.status == "optimal" and plan is not None
    full = solve(problem, profile).candidates
    full_cost = next(c.cost_s for c in full if c.strategy == "greedy")
    assert plan.num_waves == 1
    assert plan.waves[0].layout.num_segments == 6
    assert plan.waves[0].packed_tokens == 6 * 602
    assert plan.cost_s < full_cost


def test_solver_shares_on_the_grpo_shape():
    """DESIGN.md's GRPO shape (2 prompts x 8 completions, 2,048-token system prompt, 8,192-token
    prompts, 512-token completions): hinted with the no-sharing plan (two waves), CP-SAT shares
    everything and packs 26,624 tokens into one wave, as cheap as the full-sharing fallback."""
    workload = grpo(
        num_prompts=2, group_size=8, system_tokens=2048, prompt_tokens=8192, completion_tokens=512
    )
    problem = problem_of(workload, layers=None)
    profile = with_greedy_layouts(load_solver("deterministic"), ("none",))
    plan, stats = cpsat_planner(problem, profile, Deadline.after(profile.time_budget_s, deterministic=True))
    assert stats.status == "optimal" and plan is not None
    assert plan.num_waves == 1
    assert plan.packed_tokens == 26_624
    candidates = {c.strategy: c for c in solve(problem, profile).candidates}
    assert candidates["greedy"].num_waves == 2
    assert plan.cost_s < candidates["greedy"].cost_s / 2
    assert plan.cost_s <= candidates["full_sharing"].cost_s + 1e-12


@pytest.mark.slow  # two planning processes
def test_deterministic_profile_gives_identical_bytes_in_two_processes(tmp_path):
    """Two separate processes planning with the deterministic profile write the same plan JSON,
    byte for byte, once timing fields are removed."""
    path = tmp_path / "work.jsonl"
    path.write_text(to_jsonl(shuffled_completions(3)))
    command = [
        sys.executable,
        "-c",
        "from cpplan.cli import run; run()",
        "plan",
        str(path),
        "--model",
        str(MODEL_PATH),
        "--topology",
        "cp=2",
        "--memory",
        "5GiB",
        "--layers",
        "4",
        "--solver",
        "deterministic",
        "--quiet",
    ]
    outputs = [subprocess.run(command, capture_output=True, text=True, check=True).stdout for _ in range(2)]
    plans = [json.loads(text) for text in outputs]
    assert plans[0]["solver"]["status"] in ("optimal", "feasible")
    texts = [json.dumps(strip_timing(plan), indent=1) for plan in plans]
    assert texts[0] == texts[1]


def _greedy_problem():
    return problem_of(long_tail(num_items=6, median_tokens=1500, max_tokens=4000), cp=2, memory_bytes=4 * GIB)


def test_fallback_when_the_solver_raises():
    """A CP-SAT backend that raises is recorded as an invalid candidate with the exception named; the
    greedy plan is returned."""

    def broken(problem, profile, deadline):
        raise RuntimeError("solver crashed")

    result = solve(_greedy_problem(), load_solver("runtime"), planners={"cpsat": broken})
    cpsat = next(c for c in result.candidates if c.strategy == "cpsat")
    assert not cpsat.valid and cpsat.reason == "raised RuntimeError: solver crashed"
    assert result.strategy in ("greedy", "full_sharing", "seeded")


def test_fallback_when_the_solver_times_out_without_a_solution():
    """A backend that times out with no solution is recorded with its status; the real CP-SAT
    backend with no time left skips itself and says so; either way a greedy plan comes back."""

    def timed_out(problem, profile, deadline):
        return None, _stats(Status.UNKNOWN)

    problem = _greedy_problem()
    result = solve(problem, load_solver("runtime"), planners={"cpsat": timed_out})
    cpsat = next(c for c in result.candidates if c.strategy == "cpsat")
    assert not cpsat.valid and cpsat.reason == "ownership model no answer (unknown)"
    assert result.solver.status == "unknown"
    hurried = solve(problem, load_solver("runtime").with_time_budget(1e-6))
    cpsat = next(c for c in hurried.candidates if c.strategy == "cpsat")
    assert cpsat.reason == "skipped: no time left"
    assert hurried.strategy in ("greedy", "full_sharing", "seeded")


def test_fallback_when_the_solver_returns_an_invalid_plan():
    """A backend returning a plan that overflows a rank's memory (and one that drops an item) is
    caught by the verifier, listed as invalid with the violation, and not chosen."""
    problem = _greedy_problem()
    everything = list(range(problem.num_items))
    overfull = price_wave(problem, everything, problem.pack(everything, "full"), "full")
    assert not overfull.fits(problem.memory_bytes)

    def overflowing(problem, profile, deadline):
        return Plan(strategy="cpsat", waves=(overfull,)), SolverStats(
            outcomes=(ModelOutcome(model="ownership", status=Status.FEASIBLE),)
        )

    result = solve(problem, load_solver("runtime"), planners={"cpsat": overflowing})
    cpsat = next(c for c in result.candidates if c.strategy == "cpsat")
    assert not cpsat.valid and "exceeds the budget" in cpsat.reason
    assert result.strategy != "cpsat"

    def dropping(problem, profile, deadline):
        one = price_wave(problem, [0], problem.pack([0], "full"), "full")
        return Plan(strategy="cpsat", waves=(one,)), SolverStats(
            outcomes=(ModelOutcome(model="ownership", status=Status.FEASIBLE),)
        )

    result = solve(problem, load_solver("runtime"), planners={"cpsat": dropping})
    cpsat = next(c for c in result.candidates if c.strategy == "cpsat")
    assert not cpsat.valid and "is in no wave" in cpsat.reason
