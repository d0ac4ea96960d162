"""Runtime planning benchmark (and a memory-budget sweep): what one training step costs
to plan with the ``runtime`` profile, and what the joint model buys in that time.

Part 1 (steps): per-step RL workloads planned by one ``cpplan.Planner`` kept for the run (each step a
new workload drawn with its own seed, as a trainer's steps are), qwen3.6-35b-a3b at full depth:

- ``grpo8x8``: GRPO, 8 prompts x 8 rollouts, one item per rollout (prompt 2-6K, completion 0.3-3K);
- ``agent6x4``: agent rollouts, 6 tasks x 4 rollouts, one item per rollout, three turns each (each
  request the history so far; about 230K logical tokens);
- ``grpo32x8``: GRPO, 32 prompts x 8 rollouts (256 items, above the profile's ``max_items``);
- ``grpo16x4-shuffled``: GRPO, 4 prompts x 16 rollouts arriving in shuffled order (in-order greedy splits
  every group; the joint model regroups them: where the solver's value shows).

Per case: the whole ``plan`` call's wall time (p50 / p95 / p99 / max, against budget + 20 ms), how
many calls ran CP-SAT (status not ``skipped``), its statuses, the planned cost against the greedy
candidate's (so the solver's value at runtime shows), and greedy alone on a fresh problem (median).

Part 2 (memory sweep): 40 items (5 GRPO groups of 8, one item per rollout), CP2, 8 layers, a 0.05 s
time budget, per-rank memory swept from what one group needs to what all need: the planned cost of the
runtime and deterministic profiles and of greedy alone, and the largest increase over any smaller
budget (the target: none above 1%).

Usage: ``python benchmarks/bench_runtime.py [--steps N] [--quick] [--label NAME] [--output PATH]``.
Prints tables; writes JSON (default ``benchmarks/results/bench_runtime.json``; with ``--quick``,
``./cpplan-bench/bench_runtime_quick.json``, so a quick run never overwrites the committed results).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

import cpplan
from cpplan.bench.outputs import ResultFiles
from cpplan.bench.synthetic import agent_rollouts, grpo, shuffled
from cpplan.planners.greedy import greedy_plan
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import best_wave
from cpplan.spec.settings import Settings

RESULTS = Path(__file__).parent / "results" / "bench_runtime.json"
QUICK_RESULTS = Path("cpplan-bench") / "bench_runtime_quick.json"
"""Where ``--quick`` writes by default: relative to the current directory, away from :data:`RESULTS`."""
MODEL = "qwen3.6-35b-a3b"
BUDGET_S = 0.1
SLACK_S = 0.02
GIB = 2**30


def grpo_step(num_prompts: int, seed: int) -> cpplan.Workload:
    """One GRPO step: ``num_prompts`` x 8 rollouts, one item per rollout."""
    return grpo(
        num_prompts=num_prompts,
        group_size=8,
        system_tokens=0,
        prompt_tokens=(2000, 6000),
        completion_tokens=(300, 3000),
        items_per_prompt=False,
        seed=seed,
    )


def agent_step(seed: int) -> cpplan.Workload:
    """One agent step: 6 tasks x 4 rollouts of three turns, one item per rollout."""
    return agent_rollouts(
        num_tasks=6,
        rollouts_per_task=4,
        num_turns=(3, 3),
        task_tokens=(1000, 2000),
        turn_tokens=(400, 1400),
        seed=seed,
    )


def shuffled_step(seed: int) -> cpplan.Workload:
    """One GRPO step whose 4 x 16 rollouts arrive in shuffled order, one item per rollout."""
    base = grpo(
        num_prompts=4,
        group_size=16,
        system_tokens=1024,
        prompt_tokens=(4096, 8192),
        completion_tokens=(512, 2048),
        items_per_prompt=False,
        seed=seed,
    )
    return shuffled(base, seed)


CASES: tuple[tuple[str, Callable[[int], cpplan.Workload], int, str], ...] = (
    ("grpo8x8", lambda s: grpo_step(8, s), 4, "40GiB"),
    ("grpo8x8", lambda s: grpo_step(8, s), 8, "80GiB"),
    ("agent6x4", agent_step, 4, "40GiB"),
    ("agent6x4", agent_step, 8, "80GiB"),
    ("grpo32x8", lambda s: grpo_step(32, s), 4, "40GiB"),
    ("grpo16x4-shuffled", shuffled_step, 2, "40GiB"),
)


def percentile_ms(values: list[float], q: float) -> float:
    """The ``q``-th percentile of ``values`` (seconds) in milliseconds."""
    return 1e3 * float(np.percentile(values, q))


def step_row(result: cpplan.PlanResult, wall_s: float) -> dict:
    """What one planning call gave: wall time, CP-SAT status, winner, its cost and greedy's."""
    greedy = next((c for c in result.candidates if c.strategy == "greedy"), None)
    return {
        "wall_s": wall_s,
        "status": result.solver.status,
        "strategy": result.strategy,
        "cost_s": result.cost_s,
        "greedy_cost_s": None if greedy is None else greedy.cost_s,
        "candidate_ms": {c.strategy: round(1e3 * c.wall_s, 2) for c in result.candidates},
    }


def greedy_alone(settings: Settings, workload: cpplan.Workload, layouts) -> tuple[float, float]:
    """Seconds to build the problem and seconds for greedy alone on it (a fresh problem: no cache)."""
    t0 = time.perf_counter()
    problem = Problem.build(workload, settings)
    t1 = time.perf_counter()
    greedy_plan(problem, layouts)
    return t1 - t0, time.perf_counter() - t1


def run_case(name: str, make, cp: int, memory: str, steps: int) -> dict:
    """``steps`` planning calls of one case with one Planner, and greedy alone on each step."""
    planner = cpplan.Planner(model=MODEL, topology=cpplan.Topology(cp=cp), memory_bytes=memory)
    planner.plan(make(10_000))  # warm-up step, not counted
    rows, builds, greedies = [], [], []
    for step in range(steps):
        workload = make(step)
        t0 = time.perf_counter()
        result = planner.plan(workload)
        rows.append(step_row(result, time.perf_counter() - t0))
        build_s, greedy_s = greedy_alone(planner.settings, workload, planner.profile.greedy.layouts)
        builds.append(build_s)
        greedies.append(greedy_s)
    return summarize(name, cp, memory, workload, rows, builds, greedies)


def summarize(name, cp, memory, workload, rows, builds, greedies) -> dict:
    """One case's table row from its steps."""
    walls = [r["wall_s"] for r in rows]
    ran = [r for r in rows if r["status"] not in ("skipped", "no_time", "not_run")]
    ratios = [r["cost_s"] / r["greedy_cost_s"] for r in rows if r["greedy_cost_s"]]
    return {
        "case": name,
        "cp": cp,
        "memory": memory,
        "items": workload.num_items,
        "logical_tokens": workload.num_tokens,
        "steps": len(rows),
        "p50_ms": percentile_ms(walls, 50),
        "p95_ms": percentile_ms(walls, 95),
        "p99_ms": percentile_ms(walls, 99),
        "max_ms": 1e3 * max(walls),
        "within_budget": sum(w <= BUDGET_S + SLACK_S for w in walls) / len(walls),
        "cpsat_ran": len(ran) / len(rows),
        "statuses": dict(Counter(_status_kind(r["status"]) for r in rows)),
        "improved": sum(r["cost_s"] < r["greedy_cost_s"] * (1 - 1e-9) for r in rows if r["greedy_cost_s"]),
        "cost_vs_greedy": float(np.exp(np.mean(np.log(ratios)))) if ratios else None,
        "best_vs_greedy": min(ratios) if ratios else None,
        "mean_cost_s": statistics.fmean(r["cost_s"] for r in rows),
        "greedy_median_ms": 1e3 * statistics.median(greedies),
        "build_median_ms": 1e3 * statistics.median(builds),
        "rows": rows,
    }


def _status_kind(status: str) -> str:
    """The deciding CP-SAT run's status (the plan JSON's ``solver.status``: a typed outcome's)."""
    return status


def sweep(points: int) -> dict:
    """Memory sweep: 40 items (5 GRPO groups of 8), CP2, 8 layers, 0.05 s; cost per budget per way."""
    workload = grpo(
        num_prompts=5,
        group_size=8,
        system_tokens=0,
        prompt_tokens=(2000, 6000),
        completion_tokens=(300, 3000),
        items_per_prompt=False,
        seed=17,
    )
    model = cpplan.load_model(MODEL)
    topology = cpplan.Topology(cp=2)
    probe = Problem.build(
        workload, Settings(topology=topology, model=model, memory_bytes=2**60, num_layers=8)
    )
    group = max(best_wave(probe, range(8 * k, 8 * k + 8), ("full",))[0].peak_bytes for k in range(5))
    whole = best_wave(probe, range(40), ("full",))[0].peak_bytes
    budgets = [int(b) for b in np.linspace(group, whole * 1.02, points)]
    ways = {}
    for profile in ("runtime", "deterministic"):
        ways[profile] = [_sweep_cost(model, topology, b, profile, workload, 0.05) for b in budgets]
    layouts = cpplan.load_solver("runtime").greedy.layouts
    ways["greedy"] = [
        greedy_plan(
            Problem.build(workload, Settings(topology=topology, model=model, memory_bytes=b, num_layers=8)),
            layouts,
        ).cost_s
        for b in budgets
    ]
    return {
        "budgets_bytes": budgets,
        "costs_s": ways,
        "worst_increase": {way: _worst_increase(costs) for way, costs in ways.items()},
    }


def _sweep_cost(model, topology, budget, profile, workload, time_budget_s) -> float:
    """The cost of ``workload`` planned with ``profile`` at ``budget`` bytes per rank."""
    planner = cpplan.Planner(
        model=model, topology=topology, memory_bytes=budget, solver=profile, num_layers=8
    )
    return planner.plan(workload, time_budget_s).cost_s


def _worst_increase(costs: list[float]) -> float:
    """The largest relative cost increase of a budget over any smaller one."""
    return max((costs[j] / min(costs[:j]) - 1 for j in range(1, len(costs))), default=0.0)


def print_tables(cases: list[dict], swept: dict | None) -> None:
    """The step table and the sweep's worst increases."""
    head = (
        f"{'case':17} {'cp':>2} {'mem':>6} {'items':>5} {'p50':>6} {'p95':>6} {'p99':>6} {'max':>6} "
        f"{'<=b+20':>6} {'cpsat':>5} {'impr':>4} {'cost/greedy':>11} {'greedy ms':>9}  statuses"
    )
    print(head)
    for c in cases:
        print(
            f"{c['case']:17} {c['cp']:>2} {c['memory']:>6} {c['items']:>5} {c['p50_ms']:>6.1f} "
            f"{c['p95_ms']:>6.1f} {c['p99_ms']:>6.1f} {c['max_ms']:>6.1f} {c['within_budget']:>6.0%} "
            f"{c['cpsat_ran']:>5.0%} {c['improved']:>4} {c['cost_vs_greedy'] or 0:>11.5f} "
            f"{c['greedy_median_ms']:>9.1f}  {c['statuses']}"
        )
    if swept:
        print(
            "\nmemory sweep (5 GRPO groups x 8, CP2, 8 layers, 0.05 s): worst increase over a smaller budget"
        )
        for way, worst in swept["worst_increase"].items():
            print(f"  {way:13} {worst:+.2%}")


FILES = ResultFiles(results=RESULTS, quick=QUICK_RESULTS)
output_path = FILES.path


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and write its JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="5 steps, no sweep")
    parser.add_argument("--sweep-points", type=int, default=24)
    parser.add_argument("--label", default="after")
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help=f"default {RESULTS.name} in results/; with --quick, ./{QUICK_RESULTS}",
    )
    args = parser.parse_args(argv)
    args.output = output_path(quick=args.quick, output=args.output)
    steps = 5 if args.quick else args.steps
    cases = [run_case(name, make, cp, memory, steps) for name, make, cp, memory in CASES]
    swept = None if args.quick else sweep(args.sweep_points)
    print_tables(cases, swept)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(args.output.read_text()) if args.output.exists() else {}
    data[args.label] = {
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "budget_s": BUDGET_S,
        "cases": cases,
        "sweep": swept,
    }
    args.output.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
