"""``cpplan bench --dynamic-cp``: dynamic CP against the best fixed CP and Megatron's dynamic CP.

For each workload of :func:`cpplan.bench.suites.mixed_suite` and memory budget, on a pool of
:data:`POOL` GPUs (``dp * cp = 8``):

- **fixed CP c** for every c: the cheaper valid plan of cpplan's portfolio at ``Topology(cp=c,
  dp=8/c)`` and of the dynamic layer restricted to group size c (the same balance-aware wave forming
  and schedule model, so fixed CP gets everything but a per-wave group size); *best fixed* is the
  cheapest of them;
- **cpplan dynamic**: the portfolio at ``Topology(dp=2, cp=4, dynamic_cp=True)``;
- **Megatron dynamic CP**: :mod:`cpplan.bench.megatron_dynamic` on the same pool.

Every plan is priced by the evaluator and checked by the verifier on the same problem; costs are
makespans. The result states, per instance, the gain of dynamic over the best fixed CP and whether the
properties hold: dynamic never above the best fixed, no OOM plan of cpplan's, and no valid Megatron
plan cheaper than cpplan's.
"""

from __future__ import annotations

import math
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from cpplan.api import build_problem, solve
from cpplan.baselines import Outcome, outcome_of, run, timed
from cpplan.bench import megatron_dynamic
from cpplan.bench.suites import Case, mixed_suite
from cpplan.planners.cpsat_strategy import ensure_solver
from cpplan.planners.deadline import Deadline
from cpplan.planners.dynamic_cp import dynamic_greedy_plan
from cpplan.planners.schedule_strategy import dynamic_cpsat_planner
from cpplan.pricing.problem import Problem
from cpplan.spec.card import load_model
from cpplan.spec.profile import SolverProfile, load_solver
from cpplan.spec.topology import Topology
from cpplan.spec.units import parse_bytes

POOL = 8
FIXED_CPS = (1, 2, 4, 8)
DYNAMIC = Topology(dp=2, cp=4, dynamic_cp=True)
DEFAULT_MEMORIES = ("40GiB", "80GiB")


@dataclass(frozen=True, kw_only=True)
class DynamicRow:
    """One planner on one instance of the dynamic-CP suite."""

    case: str
    family: str
    memory: str
    planner: str
    status: str
    cost_s: float | None
    num_waves: int | None
    group_sizes: tuple[int, ...]
    plan_s: float
    note: str = ""

    @classmethod
    def of(cls, outcome: Outcome, case: Case, memory: str, planner: str) -> DynamicRow:
        """The row of ``outcome``."""
        plan = outcome.plan
        return cls(
            case=case.name,
            family=case.family,
            memory=memory,
            planner=planner,
            status=outcome.status,
            cost_s=None if plan is None else plan.cost_s,
            num_waves=None if plan is None else plan.num_waves,
            group_sizes=() if plan is None else tuple(sorted({w.cp for w in plan.waves})),
            plan_s=sum(outcome.plan_s),
            note=outcome.note,
        )


def _portfolio(problem: Problem, profile: SolverProfile) -> Outcome:
    result, plan_s, refusal = timed(lambda fresh: solve(fresh, profile), problem)
    plan = None if result is None else result.plan
    return outcome_of(
        "cpplan", problem, plan, plan_s, strategy=plan.strategy if plan else "", refusal=refusal
    )


def _restricted(problem: Problem, profile: SolverProfile, size: int) -> Outcome:
    """The dynamic layer at one group size: greedy, then the schedule model from it; the cheaper."""

    def plan_at(fresh: Problem):
        greedy = dynamic_greedy_plan(fresh, profile.greedy.layouts, allowed=(size,))
        deadline = Deadline.of_profile(profile)
        found, _ = dynamic_cpsat_planner(fresh, profile, deadline, allowed=(size,), hint=greedy)
        return min((p for p in (greedy, found) if p is not None), key=lambda p: p.cost_s)

    plan, plan_s, refusal = timed(plan_at, problem)
    return outcome_of("restricted", problem, plan, plan_s, strategy="restricted", refusal=refusal)


def _cheaper(a: Outcome, b: Outcome) -> Outcome:
    """The valid outcome with the smaller cost (``a`` on ties; a valid one over an invalid one)."""
    if a.valid and b.valid:
        return a if a.plan.cost_s <= b.plan.cost_s else b
    return a if a.valid or not b.valid else b


def run_instance(case: Case, memory: str, profile: SolverProfile, model) -> list[DynamicRow]:
    """Every fixed CP size, cpplan's dynamic CP and Megatron's on one workload and budget."""
    workload = case.build()
    budget = parse_bytes(memory)
    dynamic = build_problem(workload, topology=DYNAMIC, model=model, memory_bytes=budget)
    rows = []
    for cp in FIXED_CPS:
        fixed = build_problem(
            workload, topology=Topology(cp=cp, dp=POOL // cp), model=model, memory_bytes=budget
        )
        best = _cheaper(_portfolio(fixed, profile), _restricted(dynamic, profile, cp))
        rows.append(DynamicRow.of(best, case, memory, f"fixed_cp{cp}"))
    rows.append(DynamicRow.of(_portfolio(dynamic, profile), case, memory, "cpplan_dynamic"))
    megatron = run(megatron_dynamic.BASELINE, dynamic)
    rows.append(DynamicRow.of(megatron, case, memory, megatron_dynamic.NAME))
    return rows


def summary(rows: Sequence[DynamicRow]) -> list[dict[str, Any]]:
    """Per instance: the best fixed CP, dynamic, Megatron, the gain and the properties checked."""
    table = []
    for key in dict.fromkeys((r.case, r.memory) for r in rows):
        mine = {r.planner: r for r in rows if (r.case, r.memory) == key}
        fixed = [r for p, r in mine.items() if p.startswith("fixed_cp") and r.status == "valid"]
        best = min(fixed, key=lambda r: r.cost_s) if fixed else None
        ours, peer = mine["cpplan_dynamic"], mine[megatron_dynamic.NAME]
        valid = ours.status == "valid"
        table.append(
            {
                "case": key[0],
                "memory": key[1],
                "best_fixed": best.planner if best else None,
                "best_fixed_s": best.cost_s if best else None,
                "dynamic_s": ours.cost_s if valid else None,
                "dynamic_sizes": list(ours.group_sizes),
                "gain": best.cost_s / ours.cost_s if best and valid else None,
                "megatron_status": peer.status,
                "megatron_s": peer.cost_s,
                "never_above_best_fixed": bool(
                    valid and (best is None or ours.cost_s <= best.cost_s * (1 + 1e-9))
                ),
                "cpplan_oom_plans": sum(
                    r.status == "oom" for p, r in mine.items() if p != megatron_dynamic.NAME
                ),
                "megatron_not_cheaper": bool(
                    peer.status != "valid" or not valid or peer.cost_s >= ours.cost_s * (1 - 1e-9)
                ),
            }
        )
    return table


def run_dynamic_bench(
    *,
    quick: bool = False,
    model: str = "qwen3.6-35b-a3b",
    memories: Sequence[str] = DEFAULT_MEMORIES,
    solver: str = "deterministic",
    progress=None,
) -> dict[str, Any]:
    """Run the dynamic-CP suite; the JSON-ready result (settings, rows, per-instance summary)."""
    profile, card = load_solver(solver), load_model(model)
    if "cpsat" in profile.strategies:
        ensure_solver()  # no timed run pays for the import
    rows: list[DynamicRow] = []
    started = time.perf_counter()
    for case in mixed_suite(quick=quick):
        for memory in memories:
            found = run_instance(case, memory, profile, card)
            rows.extend(found)
            if progress is not None:
                progress(case, memory, found)
    return {
        "settings": {
            "quick": quick,
            "model": card.name,
            "memories": list(memories),
            "solver": profile.name,
            "pool": POOL,
            "dynamic_topology": str(DYNAMIC),
            "cases": [c.name for c in mixed_suite(quick=quick)],
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "wall_s": time.perf_counter() - started,
        "summary": summary(rows),
        "rows": [asdict(r) for r in rows],
    }


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_summary(table: Sequence[dict[str, Any]]) -> str:
    """The per-instance summary as a Markdown table, with the geometric-mean gain."""
    lines = [
        "| case | memory | best fixed | best fixed s | dynamic s (group sizes) | gain | Megatron dynamic s "
        "| dynamic ≤ best fixed | cpplan OOM plans | Megatron valid plans not cheaper |",
        "|" + "---|" * 10,
    ]
    for r in table:
        sizes = ",".join(str(g) for g in r["dynamic_sizes"])
        peer = f"{_fmt(r['megatron_s'], '.3f')} ({r['megatron_status']})"
        lines.append(
            f"| {r['case']} | {r['memory']} | {r['best_fixed'] or '-'} | {_fmt(r['best_fixed_s'], '.3f')} "
            f"| {_fmt(r['dynamic_s'], '.3f')} ({sizes}) | {_fmt(r['gain'], '.3f')}x | {peer} "
            f"| {'yes' if r['never_above_best_fixed'] else 'NO'} | {r['cpplan_oom_plans']} "
            f"| {'yes' if r['megatron_not_cheaper'] else 'NO'} |"
        )
    gains = [r["gain"] for r in table if r["gain"]]
    if gains:
        mean = math.exp(np.mean(np.log(gains)))
        lines.append(f"\ngeometric-mean gain of dynamic over the best fixed CP: {mean:.3f}x")
    return "\n".join(lines)
