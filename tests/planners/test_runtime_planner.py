"""The runtime Planner: budgets checked, settings-derived work done once, a complete plan whatever
the budget."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

import cpplan
from cpplan.planners.deadline import verify_reserve_s
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.verifier import verify_plan


@pytest.fixture(scope="module")
def planner(qwen36) -> cpplan.Planner:
    """A runtime planner for Qwen3.6 at CP2 and 8 layers, with room for a few small GRPO items."""
    return cpplan.Planner(model=qwen36, topology="cp=2", memory_bytes="6GiB", num_layers=8)


@pytest.mark.parametrize("budget", [0, -0.1, math.nan, math.inf, -math.inf, True, "0.1", [0.1]])
def test_bad_time_budgets_are_refused(planner, small_grpo, budget):
    """A time budget that is not a positive, finite number of seconds is an InputError naming the
    field, before any planning."""
    with pytest.raises(cpplan.InputError, match=r"field 'time_budget'.*positive number of seconds"):
        planner.plan(small_grpo, budget)


def test_a_budget_too_short_for_greedy_still_gives_a_complete_valid_plan(planner, small_grpo):
    """With a budget far below what greedy needs, plan() neither raises nor overruns by more than the
    verification reserve and a few pricings: it returns the full-sharing floor, verified, every
    later strategy skipped, and the candidates say why."""
    result = planner.plan(small_grpo, 1e-6)
    problem = result.problem
    assert verify_plan(
        plan_to_dict(problem, result.plan), small_grpo, problem.card, problem.memory_bytes
    ).valid
    assert all(w.layout_name == "full" for w in result.plan.waves)
    reasons = {c.strategy: c.reason for c in result.candidates}
    assert result.strategy == "greedy" and "deadline reached after 0 of" in reasons["greedy"]
    assert all(reasons[s] == "skipped: no time left" for s in ("cpsat", "full_sharing", "seeded"))
    assert result.wall_s < 1e-6 + verify_reserve_s(problem, planner.profile.timing) + 0.25


def test_settings_derived_work_is_done_once(planner, small_grpo):
    """Every step reuses the planner's resolved card, its coefficient vectors and, per distinct budget,
    one profile object."""
    first = planner.plan(small_grpo, 0.05)
    second = planner.plan(small_grpo, 0.05)
    assert first.problem.card is second.problem.card is planner.card
    assert planner.card.constants is second.problem.card.constants
    assert planner._profile_for(0.05) is planner._profile_for(0.05)
    assert planner._profile_for(None) is planner.profile


def test_planner_imports_the_solver_when_made_not_in_its_first_step():
    """A planner whose profile runs CP-SAT imports OR-Tools (and warms the solver up) when it is made;
    one whose profile does not, never imports it."""
    code = "\n".join(
        [
            "import sys, cpplan",
            "from cpplan.spec.profile import SolverProfile",
            "greedy_only = SolverProfile(name='g', time_budget_s=0.1, strategies=('greedy',))",
            "cpplan.Planner(model='qwen3-8b', memory_bytes='20GiB', solver=greedy_only)",
            "print('ortools' in sys.modules)",
            "cpplan.Planner(model='qwen3-8b', memory_bytes='20GiB')",
            "print('ortools' in sys.modules, 'cpplan.cpsat.joint_model' in sys.modules)",
        ]
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "True"]


def test_the_solver_gap_is_the_models_and_says_so(small_grpo, qwen36):
    """CP-SAT's own gap is its model's: the plan JSON's solver block carries ``model_gap`` and the
    typed outcomes (the ownership model's bound over the proposed waves); ``gap`` is the plan's price
    over the bound of every plan where ``bound_scope`` says so, and the summary line says which model
    proved what and of which plans the bound is, never that the plan is optimal."""
    import io

    from rich.console import Console

    from cpplan.cli.plan_table import print_summary

    result = cpplan.plan(
        small_grpo, topology=cpplan.Topology(cp=2), model=qwen36, memory_bytes="12GiB", solver="deterministic"
    )
    solver = result.to_dict()["solver"]
    assert solver["model_gap"] is not None and solver["status"] == "optimal"
    assert [o["model"] for o in solver["outcomes"]] == ["joint", "ownership"]
    assert solver["outcomes"][-1]["bound_scope"] == "proposed waves"
    assert solver["bound_scope"] == "all plans"
    cpsat_price = next(c["cost_s"] for c in result.to_dict()["candidates"] if c["strategy"] == "cpsat")
    assert solver["gap"] == pytest.approx((cpsat_price - solver["bound_s"]) / cpsat_price)
    out = io.StringIO()
    print_summary(result, Console(file=out, width=200))
    text = " ".join(out.getvalue().split())
    assert "ownership model proved its answer optimal" in text
    assert "best possible plan under the cost model" in text
    assert "solver optimal," not in out.getvalue() and "model gap -" not in out.getvalue()


def test_the_summary_names_the_winner_when_cpsat_loses(small_grpo, qwen36):
    """When another strategy's plan is chosen, the summary line names it and its cost beside CP-SAT's
    own plan's cost, and what CP-SAT's bound covers; when CP-SAT's plan is chosen, it says CP-SAT
    decided it; a tie reads as a tie."""
    import dataclasses

    from cpplan.plans.plan import Candidate

    result = cpplan.plan(
        small_grpo, topology=cpplan.Topology(cp=2), model=qwen36, memory_bytes="12GiB", solver="deterministic"
    )
    assert result.solver.status == "optimal"
    greedy = dataclasses.replace(result.plan, strategy="greedy")
    own = Candidate(strategy="cpsat", cost_s=greedy.cost_s + 1.0, valid=True, reason="", wall_s=0.0)
    lost = _summary(dataclasses.replace(result, plan=greedy, candidates=(own,)))
    assert (
        f"chosen: greedy at {greedy.cost_s:.4f} s predicted, cheaper than CP-SAT's plan at {own.cost_s:.4f} s"
        in lost
    )
    assert "ownership model proved its answer optimal" in lost and "best possible plan under the cost" in lost
    decided = dataclasses.replace(result.plan, strategy="cpsat")
    alone = Candidate(strategy="cpsat", cost_s=decided.cost_s, valid=True, reason="", wall_s=0.0)
    won = _summary(dataclasses.replace(result, plan=decided, candidates=(alone,)))
    assert "chosen: cpsat at" in won and "decided by CP-SAT" in won and "tied with it" not in won
    same = Candidate(strategy="greedy", cost_s=decided.cost_s, valid=True, reason="", wall_s=0.0)
    tied = _summary(dataclasses.replace(result, plan=decided, candidates=(alone, same)))
    assert "(greedy tied with it), decided by CP-SAT" in tied and "cheaper than" not in tied


def _summary(result) -> str:
    """The summary :func:`print_summary` prints for ``result``, its white space collapsed."""
    import io

    from rich.console import Console

    from cpplan.cli.plan_table import print_summary

    out = io.StringIO()
    print_summary(result, Console(file=out, width=400))
    return " ".join(out.getvalue().split())


def test_a_first_one_shot_call_does_not_spend_its_budget_importing_the_solver():
    """In a fresh process, ``cpplan.plan`` with the runtime profile (0.1 s) imports OR-Tools before its
    budget starts: CP-SAT still runs on the first call instead of being skipped for lack of time."""
    code = "\n".join(
        [
            "import cpplan",
            "from cpplan.bench.synthetic import grpo",
            "wl = grpo(num_prompts=2, group_size=4, system_tokens=64, prompt_tokens=256,",
            "          completion_tokens=64)",
            "r = cpplan.plan(wl, topology=cpplan.Topology(cp=2), model='qwen3-8b', memory_bytes='20GiB')",
            "print(r.solver.status)",
        ]
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert not out.stdout.strip().startswith("skipped"), out.stdout


def test_planning_names_do_not_import_the_solver():
    """Touching the planning API (``cpplan.Planner``, ``plan``, ``solve``, ``verify``) imports neither
    OR-Tools nor torch: the solver is imported where a CP-SAT model is built or a planner warms it up."""
    code = "\n".join(
        [
            "import sys, cpplan",
            "cpplan.Planner, cpplan.plan, cpplan.solve, cpplan.verify, cpplan.Workload",
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'ortools', 'torch'}))",
        ]
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
