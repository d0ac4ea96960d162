"""``cpplan bench``: every planner on the fixed suite, priced by one evaluator, checked by one verifier.

For each workload of :func:`cpplan.bench.suites.suite`, each CP size and each memory budget, every peer of
:mod:`cpplan.bench.peers` and cpplan's portfolio (:func:`cpplan.api.solve`) plan the same problem. Each
planner is timed over ``repeats`` runs; its last plan is priced by the numpy evaluator and checked by the
independent verifier. A baseline wave over the budget is counted as an OOM, never repaired.
"""

from __future__ import annotations

import math
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from cpplan.api import build_problem, solve
from cpplan.baselines import Baseline, Outcome, outcome_of, run, timed
from cpplan.bench.peers import PEERS
from cpplan.bench.suites import Case, sharegpt_available, suite
from cpplan.planners import PLANNERS
from cpplan.planners.cpsat_strategy import ensure_solver
from cpplan.plans.plan import Plan
from cpplan.pricing.problem import Problem
from cpplan.spec.card import load_model
from cpplan.spec.profile import SolverProfile, load_solver
from cpplan.spec.topology import Topology
from cpplan.spec.units import parse_bytes

CPPLAN = "cpplan"
DEFAULT_MODEL = "qwen3.6-35b-a3b"
DEFAULT_MEMORIES = ("40GiB", "80GiB")
DEFAULT_CPS = (1, 2, 4, 8)


@dataclass(frozen=True, kw_only=True)
class Row:
    """One planner on one instance: its :class:`~cpplan.baselines.base.Outcome` as a flat record of the
    bench JSON, labelled with the case, CP size and memory budget."""

    case: str
    family: str
    cp: int
    memory: str
    planner: str
    status: str  # valid | oom | refused | invalid
    cost_s: float | None
    num_waves: int | None
    packed_tokens: int | None
    logical_tokens: int
    busiest_over_mean: float | None
    num_oom_waves: int
    worst_oom: str
    strategy: str
    plan_s: tuple[float, ...] = field(default=())
    note: str = ""
    cpsat: dict[str, Any] = field(default_factory=dict)
    """cpplan's rows only: the CP-SAT strategy's model objective, the evaluator's price of its plan,
    its proven bound, status and the terms of any difference (``SolverStats.price_terms_s``), and the
    cheapest other valid candidate's price."""

    @classmethod
    def of(cls, outcome: Outcome, case: Case, problem: Problem, memory: str) -> Row:
        """The row of ``outcome`` (a run on ``problem``, an instance of ``case`` with ``memory``)."""
        plan = outcome.plan
        worst = max(outcome.ooms, key=lambda o: o.peak_bytes) if outcome.ooms else None
        return cls(
            case=case.name,
            family=case.family,
            cp=problem.topology.cp,
            memory=memory,
            planner=outcome.name,
            status=outcome.status,
            cost_s=None if plan is None else plan.cost_s,
            num_waves=None if plan is None else plan.num_waves,
            packed_tokens=None if plan is None else plan.packed_tokens,
            logical_tokens=(
                problem.logical_tokens(range(problem.num_items)) if plan is None else plan.logical_tokens
            ),
            busiest_over_mean=None if plan is None else plan.busiest_over_mean,
            num_oom_waves=len({o.wave for o in outcome.ooms}),
            worst_oom=str(worst) if worst else "",
            strategy=outcome.strategy,
            plan_s=outcome.plan_s,
            note=outcome.note,
        )


def run_instance(
    case: Case,
    problem: Problem,
    memory: str,
    profile: SolverProfile,
    *,
    repeats: int,
    baselines: Sequence[Baseline],
) -> list[Row]:
    """Every baseline and cpplan's portfolio on one problem."""
    outcomes = [run(baseline, problem, repeats=repeats) for baseline in baselines]
    result, plan_s, refusal = timed(lambda fresh: solve(fresh, profile), problem, repeats=repeats)
    plan, strategy = (result.plan, strategy_label(result.plan)) if result is not None else (None, "")
    outcomes.append(outcome_of(CPPLAN, problem, plan, plan_s, strategy=strategy, refusal=refusal))
    rows = [Row.of(o, case, problem, memory) for o in outcomes]
    if result is not None:
        rows[-1] = replace(rows[-1], cpsat=cpsat_detail(result))
    return rows


def cpsat_detail(result) -> dict[str, Any]:
    """What the CP-SAT strategy claimed and what its plan costs (see :attr:`Row.cpsat`)."""
    by_strategy = {c.strategy: c for c in result.candidates}
    ours = by_strategy.get("cpsat")
    others = [
        c.cost_s for c in result.candidates if c.strategy != "cpsat" and c.valid and c.cost_s is not None
    ]
    stats = result.solver
    return {
        "status": stats.status,
        "objective_s": stats.objective_s,
        "price_s": ours.cost_s if ours is not None and ours.valid else None,
        "bound_s": stats.bound_s,
        "price_terms_s": dict(stats.price_terms_s),
        "best_other_s": min(others) if others else None,
        "winner": result.plan.strategy,
    }


def strategy_label(plan: Plan) -> str:
    """The portfolio strategy that made ``plan``, with its notes: ``greedy: items regrouped by shared
    prefix`` is greedy over the items ordered by shared prefix, which the ``cpplan_greedy`` row (items
    in arrival order) is not, so a plain ``greedy`` label means the same plan as that row's."""
    return f"{plan.strategy}: {'; '.join(plan.notes)}" if plan.notes else plan.strategy


def run_bench(
    *,
    quick: bool = False,
    model: str = DEFAULT_MODEL,
    memories: Sequence[str] = DEFAULT_MEMORIES,
    cps: Sequence[int] = DEFAULT_CPS,
    solver: str = "runtime",
    repeats: int | None = None,
    progress=None,
) -> dict[str, Any]:
    """Run the suite; returns the JSON-ready result (settings, per-instance rows, headline)."""
    repeats = repeats if repeats is not None else (1 if quick else 3)
    profile = load_solver(solver)
    card = load_model(model)
    baselines = list(PEERS.values())
    if "cpsat" in profile.strategies:
        ensure_solver()  # as a trainer's Planner does once: no timed run pays for the import
    rows: list[Row] = []
    started = time.perf_counter()
    for case in suite(quick=quick):
        workload = case.build()
        for cp in cps:
            for memory in memories:
                problem = build_problem(
                    workload, topology=Topology(cp=cp), model=card, memory_bytes=parse_bytes(memory)
                )
                found = run_instance(case, problem, memory, profile, repeats=repeats, baselines=baselines)
                rows.extend(found)
                if progress is not None:
                    progress(case, cp, memory, found)
    return {
        "settings": {
            "quick": quick,
            "model": card.name,
            "memories": list(memories),
            "cps": list(cps),
            "solver": profile.name,
            "strategies": [s for s in profile.strategies if s in PLANNERS],
            "repeats": repeats,
            "sharegpt": sharegpt_available(),
            "cases": [c.name for c in suite(quick=quick)],
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "wall_s": time.perf_counter() - started,
        "headline": headline(rows),
        "rows": [asdict(r) for r in rows],
    }


def headline(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Per family (and ``all``) and planner: validity, OOMs, step seconds against cpplan, waves, packed
    tokens, imbalance and planning time (median and p99 over every timed run)."""
    ours = {(r.case, r.cp, r.memory): r for r in rows if r.planner == CPPLAN}
    families = ["all", *dict.fromkeys(r.family for r in rows)]
    planners = list(dict.fromkeys(r.planner for r in rows))
    table = []
    for family in families:
        for planner in planners:
            mine = [r for r in rows if r.planner == planner and family in ("all", r.family)]
            if not mine:
                continue
            ratios = []
            for r in mine:
                base = ours.get((r.case, r.cp, r.memory))
                if r.status == "valid" and base is not None and base.status == "valid":
                    ratios.append(r.cost_s / base.cost_s)
            priced = [r for r in mine if r.cost_s is not None]
            times = np.array([t for r in mine for t in r.plan_s])
            table.append(
                {
                    "family": family,
                    "planner": planner,
                    "instances": len(mine),
                    "valid": sum(r.status == "valid" for r in mine),
                    "oom_plans": sum(r.status == "oom" for r in mine),
                    "oom_waves": sum(r.num_oom_waves for r in mine),
                    "refused": sum(r.status == "refused" for r in mine),
                    "invalid": sum(r.status == "invalid" for r in mine),
                    "step_s": math.fsum(r.cost_s for r in priced),
                    "vs_cpplan": float(np.exp(np.mean(np.log(ratios)))) if ratios else None,
                    "vs_cpplan_max": max(ratios) if ratios else None,
                    "compared": len(ratios),
                    "waves": sum(r.num_waves for r in priced),
                    "packed_tokens": sum(r.packed_tokens for r in priced),
                    "busiest_over_mean": float(np.mean([r.busiest_over_mean for r in priced]))
                    if priced
                    else None,
                    "plan_ms_median": float(np.median(times) * 1e3) if times.size else None,
                    "plan_ms_p99": float(np.percentile(times, 99) * 1e3) if times.size else None,
                }
            )
    return table


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_headline(table: Sequence[dict[str, Any]], *, families: Sequence[str] | None = None) -> str:
    """The headline as a Markdown table."""
    header = (
        "| family | planner | valid | OOM plans (waves) | refused | step s Σ | vs cpplan (geo, max) "
        "| waves | packed tokens | busiest/mean | plan ms p50 | p99 |"
    )
    lines = [header, "|" + "---|" * 12]
    for row in table:
        if families is not None and row["family"] not in families:
            continue
        lines.append(
            f"| {row['family']} | {row['planner']} | {row['valid']}/{row['instances']} "
            f"| {row['oom_plans']} ({row['oom_waves']}) | {row['refused']} | {row['step_s']:.2f} "
            f"| {_fmt(row['vs_cpplan'], '.3f')}, {_fmt(row['vs_cpplan_max'], '.3f')} "
            f"| {row['waves']} | {row['packed_tokens']:,} | {_fmt(row['busiest_over_mean'], '.3f')} "
            f"| {_fmt(row['plan_ms_median'], '.1f')} | {_fmt(row['plan_ms_p99'], '.1f')} |"
        )
    return "\n".join(lines)


def format_pivot(table: Sequence[dict[str, Any]]) -> str:
    """Planner by family: step seconds against cpplan (geometric mean over instances where both plans
    verify) and how many of the planner's plans verify."""
    families = list(dict.fromkeys(r["family"] for r in table))
    planners = list(dict.fromkeys(r["planner"] for r in table))
    cell = {(r["planner"], r["family"]): r for r in table}
    lines = [
        "| planner | " + " | ".join(families) + " |",
        "|---|" + "---|" * len(families),
    ]
    for planner in planners:
        parts = []
        for family in families:
            row = cell.get((planner, family))
            if row is None:
                parts.append("")
                continue
            ratio = "-" if row["vs_cpplan"] is None else f"{row['vs_cpplan']:.2f}x"
            parts.append(f"{ratio} ({row['valid']}/{row['instances']} valid)")
        lines.append(f"| {planner} | " + " | ".join(parts) + " |")
    return "\n".join(lines)


def format_cpsat(rows: Sequence[dict[str, Any]]) -> str:
    """Per cpplan row: CP-SAT's objective, the evaluator's price of its plan, the bound, their ratios
    and the terms of the difference, and the winner with its margin over the next best."""
    header = (
        "| case | cp | memory | winner | CP-SAT objective s | price s | objective/price | bound s "
        "| bound/best | best other s | CP-SAT vs other | terms (s) | status |"
    )
    lines = [header, "|" + "---|" * 13]
    for r in rows:
        d = r.get("cpsat") or {}
        if r["planner"] != CPPLAN or not d:
            continue
        obj, price, bound, other = (
            d.get("objective_s"),
            d.get("price_s"),
            d.get("bound_s"),
            d.get("best_other_s"),
        )
        best = min(x for x in (price, other) if x is not None) if (price or other) else None
        terms = ", ".join(f"{k} {v:.2e}" for k, v in d.get("price_terms_s", {}).items() if abs(v) >= 1e-6)
        lines.append(
            f"| {r['case']} | {r['cp']} | {r['memory']} | {d.get('winner')} | {_fmt(obj, '.4f')} "
            f"| {_fmt(price, '.4f')} | {_fmt(_ratio(obj, price), '.4f')} | {_fmt(bound, '.4f')} "
            f"| {_fmt(_ratio(bound, best), '.3f')} | {_fmt(other, '.4f')} "
            f"| {_fmt(_ratio(price, other), '.4f')} "
            f"| {terms or '-'} | {d.get('status', '')[:40]} |"
        )
    return "\n".join(lines)


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def format_rows(rows: Sequence[dict[str, Any]]) -> str:
    """Every instance and planner as a Markdown table."""
    header = (
        "| case | cp | memory | planner | status | step s | waves | packed | busiest/mean | OOM waves "
        "| plan ms p50 | p99 | worst OOM |"
    )
    lines = [header, "|" + "---|" * 13]
    for r in rows:
        times = np.array(r["plan_s"]) * 1e3
        lines.append(
            f"| {r['case']} | {r['cp']} | {r['memory']} | {r['planner']} | {r['status']} "
            f"| {_fmt(r['cost_s'], '.3f')} | {_fmt(r['num_waves'], 'd')} | {_fmt(r['packed_tokens'], ',')} "
            f"| {_fmt(r['busiest_over_mean'], '.3f')} | {r['num_oom_waves']} "
            f"| {np.median(times):.1f} | {np.percentile(times, 99):.1f} | {r['worst_oom']} |"
        )
    return "\n".join(lines)
