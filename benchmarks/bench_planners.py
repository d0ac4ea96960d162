"""Planner benchmark: greedy, full sharing and CP-SAT (runtime and offline profiles) side by side.

Part 1 (quality): generated workloads (GRPO groups of 8 with long shared prompts, GRPO groups of 16
whose completions arrive as separate interleaved items, multi-turn agent trees, long-tail lengths
without sharing) at CP 1/2/4/8 under 80 GiB and 40 GiB. Per strategy: predicted cost_s, waves,
busiest-rank local tokens, planning seconds; for CP-SAT also its status, model objective, proven bound
and gap, and the offline model's value of the offline profile's greedy plan (taken as exact columns;
to tell "greedy already optimal" from the rest) and whether that plan also passes the conservative
per-rank rows without its columns.

Part 2 (latency): ``cpplan.plan`` with the runtime profile (0.1 s budget), repeated, on workloads of
at most 64 items and 250K tokens at CP 1 and CP 8: p50 / p99 / max wall time against budget + 20 ms.

Usage: ``python benchmarks/bench_planners.py [--quick] [--output PATH]``. Prints tables, writes JSON
(default ``benchmarks/results/bench_planners.json``, the committed results docs/cpsat.md cites; with
``--quick``, ``cpplan-bench/bench_planners_quick.json`` under the current directory, so that a quick
run never overwrites them unless ``--output`` names them).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

import cpplan
from cpplan import Topology, load_model, load_solver
from cpplan.bench.outputs import ResultFiles
from cpplan.bench.synthetic import agent_trees, grpo, long_tail
from cpplan.cpsat import SCALING
from cpplan.planners.cpsat_planner import cpsat_planner
from cpplan.planners.cpsat_strategy import compile_for, greedy_values
from cpplan.planners.deadline import Deadline
from cpplan.planners.greedy import full_sharing_plan, greedy_plan
from cpplan.plans.plan import Plan
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import local_tokens
from cpplan.spec.settings import Settings
from cpplan.spec.workload import Workload
from cpplan.verifier import verify_plan

GIB = 2**30
MODEL = "qwen3.6-35b-a3b"
RESULTS = Path(__file__).parent / "results" / "bench_planners.json"
QUICK_RESULTS = Path("cpplan-bench") / "bench_planners_quick.json"
"""Where ``--quick`` writes by default: relative to the current directory, away from :data:`RESULTS`."""


def interleaved(workload: Workload, seed: int) -> Workload:
    """The same items in a shuffled arrival order."""
    order = np.random.default_rng(seed).permutation(workload.num_items)
    return Workload(items=tuple(workload.items[k] for k in order))


def quality_workloads() -> dict[str, Workload]:
    """The four shapes of the quality benchmark, sized so that several configurations need more
    than one wave."""
    return {
        "grpo8": grpo(
            num_prompts=8,
            group_size=8,
            system_tokens=2048,
            prompt_tokens=(4096, 8192),
            completion_tokens=(512, 2048),
            seed=1,
        ),
        "grpo16-split": interleaved(
            grpo(
                num_prompts=4,
                group_size=16,
                system_tokens=1024,
                prompt_tokens=(4096, 8192),
                completion_tokens=(512, 2048),
                seed=2,
                items_per_prompt=False,
            ),
            seed=2,
        ),
        "agent": agent_trees(num_trees=16, depth=3, branching=3, turn_tokens=(512, 2048), seed=3),
        "longtail": long_tail(num_items=64, median_tokens=6000, max_tokens=32768, seed=4),
    }


def latency_workloads() -> dict[str, Workload]:
    """At most 64 items and 250K tokens each."""
    return {
        "grpo8": grpo(
            num_prompts=6,
            group_size=8,
            system_tokens=2048,
            prompt_tokens=(2048, 3072),
            completion_tokens=(256, 640),
            seed=5,
        ),
        "grpo16-split": interleaved(
            grpo(
                num_prompts=4,
                group_size=16,
                system_tokens=1024,
                prompt_tokens=(1536, 3072),
                completion_tokens=(256, 768),
                seed=6,
                items_per_prompt=False,
            ),
            seed=6,
        ),
        "agent": agent_trees(num_trees=12, depth=3, branching=3, turn_tokens=(256, 1024), seed=7),
        "longtail": long_tail(num_items=64, median_tokens=2400, max_tokens=16384, seed=8),
    }


def busiest_tokens(plan: Plan) -> int:
    """The largest local token count of any rank in any wave."""
    return int(max(local_tokens(w).max() for w in plan.waves))


def plan_row(problem: Problem, plan: Plan | None, seconds: float) -> dict:
    """Cost, waves, busiest-rank tokens, planning time and the verifier's verdict of one plan."""
    if plan is None:
        return {"cost_s": None, "waves": None, "busiest_tokens": None, "plan_s": seconds, "valid": None}
    verdict = verify_plan(plan_to_dict(problem, plan), problem.workload, problem.card, problem.memory_bytes)
    return {
        "cost_s": plan.cost_s,
        "waves": plan.num_waves,
        "busiest_tokens": busiest_tokens(plan),
        "plan_s": seconds,
        "valid": verdict.valid,
    }


def run_quality(workload: Workload, cp: int, memory_gib: int, offline_budget_s: float) -> dict:
    """Every strategy on one configuration (a fresh problem per strategy: no shared caches)."""
    card = load_model(MODEL)

    def fresh() -> Problem:
        return Problem.build(
            workload, Settings(topology=Topology(cp=cp), model=card, memory_bytes=memory_gib * GIB)
        )

    rows: dict[str, dict] = {}
    runtime, offline = load_solver("runtime"), load_solver("offline").with_time_budget(offline_budget_s)
    problem = fresh()
    t0 = time.perf_counter()
    greedy = greedy_plan(problem, runtime.greedy.layouts)
    rows["greedy"] = plan_row(problem, greedy, time.perf_counter() - t0)
    problem = fresh()
    t0 = time.perf_counter()
    rows["full_sharing"] = plan_row(problem, full_sharing_plan(problem), time.perf_counter() - t0)
    for name, profile in (("cpsat_runtime", runtime), ("cpsat_offline", offline)):
        problem = fresh()
        t0 = time.perf_counter()
        deadline = Deadline.after(profile.time_budget_s, deterministic=profile.deterministic, start_s=t0)
        plan, stats = cpsat_planner(problem, profile, deadline)
        row = plan_row(problem, plan, time.perf_counter() - t0)
        row.update(
            status=stats.status,
            objective_s=stats.objective_s,
            bound_s=stats.bound_s,
            gap=stats.gap,
            stage_s=stats.stage_s,
            model_size=[stats.num_booleans, stats.num_integers, stats.num_constraints],
        )
        rows[name] = row
    # The offline model exactly as the offline run built it: its greedy plan (the offline profile's
    # layouts) as columns; and that plan's value in it, with and without the columns.
    problem = fresh()
    offline_greedy = greedy_plan(problem, offline.greedy.layouts)
    space, compiled = compile_for(problem, offline, offline_greedy)
    values = greedy_values(compiled, space, offline_greedy)
    conservative = greedy_values(compiled, space, offline_greedy, as_columns=False)
    return {
        "rows": rows,
        "offline_greedy_cost_s": offline_greedy.cost_s,
        "greedy_in_model_s": SCALING.seconds(values.objective),
        "greedy_admitted_by_model": values.feasible,
        "greedy_inside_conservative_rows": conservative.feasible,
    }


def verdict(entry: dict) -> str:
    """Where CP-SAT stands against greedy, and why."""
    rows = entry["rows"]
    greedy = rows["greedy"]["cost_s"]
    costs = [rows[k]["cost_s"] for k in ("cpsat_runtime", "cpsat_offline") if rows[k]["cost_s"] is not None]
    best = min(costs, default=None)
    offline = rows["cpsat_offline"]
    edge = (
        ""
        if entry["greedy_inside_conservative_rows"]
        else "; greedy's waves are at the memory edge (in the model as exact columns only)"
    )
    if best is not None and best < greedy * (1 - 1e-6):
        return f"beats greedy by {100 * (1 - best / greedy):.3f}%{edge}"
    bound, model_greedy = offline["bound_s"], entry["greedy_in_model_s"]
    if bound is not None and bound >= model_greedy - 1e-6:
        return f"greedy already optimal in the model (the proven bound reaches it){edge}"
    if bound is not None:
        gap = 100 * (model_greedy - bound) / model_greedy
        return f"greedy proven within {gap:.2f}% of the model optimum{edge}"
    return f"no better plan found within budget; CP-SAT {offline['status']}{edge}"


def print_quality(results: list[dict]) -> None:
    header = (
        f"{'workload':<13}{'cp':>3}{'GiB':>5} | {'strategy':<14}{'cost_s':>10}{'waves':>6}{'busiest':>9}"
        f"{'gap':>8}{'plan_ms':>9}  status"
    )
    print(header)
    print("-" * len(header))
    for entry in results:
        first = True
        for name, row in entry["rows"].items():
            lead = f"{entry['workload']:<13}{entry['cp']:>3}{entry['memory_gib']:>5}" if first else " " * 21
            first = False
            cost = f"{row['cost_s']:.4f}" if row["cost_s"] is not None else "-"
            waves = row["waves"] if row["waves"] is not None else "-"
            busiest = row["busiest_tokens"] if row["busiest_tokens"] is not None else "-"
            gap = f"{100 * row['gap']:.2f}%" if row.get("gap") is not None else ""
            print(
                f"{lead} | {name:<14}{cost:>10}{waves:>6}{busiest:>9}{gap:>8}"
                f"{1e3 * row['plan_s']:>9.1f}  {row.get('status', '')}"
            )
        print(f"{'':21} | -> {entry['verdict']}")


def run_latency(runs: int, budget_s: float) -> list[dict]:
    """Repeated ``cpplan.plan`` calls with the runtime profile; p50 / p99 / max wall seconds."""
    card, profile = load_model(MODEL), load_solver("runtime").with_time_budget(budget_s)
    results = []
    for name, workload in latency_workloads().items():
        tokens = sum(item.num_tokens for item in workload.items)
        assert workload.num_items <= 64 and tokens <= 250_000, (name, workload.num_items, tokens)
        for cp in (1, 8):
            times, winners, statuses = [], [], []
            cpplan.plan(workload, topology=Topology(cp=cp), model=card, memory_bytes=80 * GIB, solver=profile)
            for _ in range(runs):
                t0 = time.perf_counter()
                result = cpplan.plan(
                    workload, topology=Topology(cp=cp), model=card, memory_bytes=80 * GIB, solver=profile
                )
                times.append(time.perf_counter() - t0)
                winners.append(result.strategy)
                statuses.append(result.solver.status)
            ms = 1e3 * np.array(times)
            results.append(
                {
                    "workload": name,
                    "items": workload.num_items,
                    "tokens": tokens,
                    "cp": cp,
                    "runs": runs,
                    "p50_ms": float(np.percentile(ms, 50)),
                    "p99_ms": float(np.percentile(ms, 99)),
                    "max_ms": float(ms.max()),
                    "limit_ms": 1e3 * budget_s + 20,
                    "cpsat_statuses": {s: statuses.count(s) for s in sorted(set(statuses))},
                    "winners": {s: winners.count(s) for s in sorted(set(winners))},
                }
            )
    return results


def print_latency(results: list[dict]) -> None:
    header = (
        f"{'workload':<13}{'items':>6}{'tokens':>8}{'cp':>3}{'p50_ms':>8}{'p99_ms':>8}{'max_ms':>8}"
        "  cpsat status"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        ok = "ok" if r["p99_ms"] <= r["limit_ms"] else "OVER"
        print(
            f"{r['workload']:<13}{r['items']:>6}{r['tokens']:>8}{r['cp']:>3}{r['p50_ms']:>8.1f}"
            f"{r['p99_ms']:>8.1f}{r['max_ms']:>8.1f}  {ok} {r['cpsat_statuses']}"
        )


FILES = ResultFiles(results=RESULTS, quick=QUICK_RESULTS)
output_path = FILES.path


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark (``argv``: the command line's arguments, default ``sys.argv``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="CP 1 and 8 only, shorter offline budget, fewer runs"
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help=f"default {RESULTS.relative_to(RESULTS.parents[2])}; with --quick, ./{QUICK_RESULTS}",
    )
    args = parser.parse_args(argv)
    args.output = output_path(quick=args.quick, output=args.output)
    cps = (1, 8) if args.quick else (1, 2, 4, 8)
    offline_budget_s = 3.0 if args.quick else 8.0
    runs = 20 if args.quick else 100
    started = time.perf_counter()
    quality = []
    for name, workload in quality_workloads().items():
        for cp in cps:
            for memory_gib in (80, 40):
                entry = {"workload": name, "cp": cp, "memory_gib": memory_gib}
                entry.update(run_quality(workload, cp, memory_gib, offline_budget_s))
                entry["verdict"] = verdict(entry)
                quality.append(entry)
    print_quality(quality)
    offline_gaps = [
        e["rows"]["cpsat_offline"]["gap"] for e in quality if e["rows"]["cpsat_offline"]["gap"] is not None
    ]
    within = sum(g <= 0.02 for g in offline_gaps)
    print(f"\noffline profile within 2% of its proven bound: {within}/{len(quality)} configurations")
    print()
    latency = run_latency(runs, 0.1)
    print_latency(latency)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
        "model": MODEL,
        "quick": args.quick,
        "offline_budget_s": offline_budget_s,
        "quality": quality,
        "latency": latency,
        "wall_s": time.perf_counter() - started,
    }
    args.output.write_text(json.dumps(data, indent=1) + "\n")
    print(f"\nwrote {args.output} ({data['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
