"""Verifier benchmark: the independent verifier's time on share plans and on large plans.

Cases (Qwen3.6-35B-A3B at full depth, 80 GiB per rank for the shares, 40 GiB for the large plans):

- ``share 16x4 k``: replica ``k``'s plan of the GRPO cluster step of 1,024 completions (128 prompts x 8
  completions, :func:`bench_scale.cluster_step`) at dp 16 x cp 4, as a DP rank plans it
  (``Planner(...).plan(step, replica=k)``, runtime profile): 8 items x 8 requests;
- ``share 8x8 k``: the same at dp 8 x cp 8: 16 items x 8 requests;
- ``small 600``: greedy's plan of 600 small items at cp 4 (:func:`bench_scale.small`);
- ``one_item 10000``: greedy's plan of one item of 10,000 requests at cp 4, split over waves
  (:func:`bench_scale.one_item`).

Per case, interleaved over ``--repeats`` rounds: ``plan_to_dict`` (the plan serialized as the verifier
reads it, what every planning call does before verifying a candidate) and ``verify_plan`` on that
dictionary; medians (and p90) of each, the load average beside them. The same script times any checkout
(``PYTHONPATH=<checkout>``), so a before/after pair is two runs of it.

Usage: ``python benchmarks/bench_verify.py [--repeats N] [--label NAME] [--output PATH]``; prints a table
and writes JSON (default ``./cpplan-bench/bench_verify.json``, never the committed results).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_scale import MODEL_CLUSTER, cluster_step, one_item, small

import cpplan
from cpplan.bench.outputs import QUICK_FOLDER
from cpplan.planners.greedy import greedy_plan
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.pricing.problem import Problem
from cpplan.verifier import verify_plan

DEFAULT_OUTPUT = QUICK_FOLDER / "bench_verify.json"
"""Where a run writes by default: relative to the current directory, away from ``benchmarks/results``."""


def share_cases(dp: int, cp: int, replicas: list[int]) -> list[tuple[str, object, object]]:
    """``(name, problem, plan)`` of replicas' plans of the 1,024-completion cluster step at ``dp x cp``."""
    step = cluster_step(1024)
    planner = cpplan.Planner(
        model=MODEL_CLUSTER, topology=cpplan.Topology(dp=dp, cp=cp), memory_bytes="80GiB", solver="runtime"
    )
    cases = []
    for k in replicas:
        result = planner.plan(step.model_copy(), replica=k)
        cases.append((f"share {dp}x{cp} {k}", result.problem, result.plan))
    return cases


def large_cases() -> list[tuple[str, object, object]]:
    """``(name, problem, plan)`` of greedy's plans of 600 small items and of one 10,000-request item."""
    planner = cpplan.Planner(model=MODEL_CLUSTER, topology=cpplan.Topology(cp=4), memory_bytes="40GiB")
    cases = []
    for name, workload in (("small 600", small(600)), ("one_item 10000", one_item(10_000))):
        problem = Problem.build(workload, planner.settings)
        cases.append((name, problem, greedy_plan(problem, planner.profile.greedy.layouts)))
    return cases


def time_case(problem, plan) -> tuple[float, float, bool]:
    """One serialization and one verification of ``plan``: their seconds and the verdict."""
    t0 = time.perf_counter()
    data = plan_to_dict(problem, plan)
    t1 = time.perf_counter()
    verdict = verify_plan(
        data, problem.workload, problem.card, problem.memory_bytes, chunk_tokens=problem.chunk_tokens
    )
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, verdict.valid


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(repeats: int, large_repeats: int) -> list[dict]:
    """Every case timed, interleaved round by round (a large case only in its first ``large_repeats``
    rounds); one row per case."""
    cases = share_cases(16, 4, [0, 5, 11]) + share_cases(8, 8, [0, 3, 6]) + large_cases()
    timings: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in cases}
    loads: list[float] = []
    valid: dict[str, bool] = {}
    for round_ in range(repeats):
        for name, problem, plan in cases:
            if name.startswith("share") or round_ < large_repeats:
                serialize_s, verify_s, ok = time_case(problem, plan)
                timings[name].append((serialize_s, verify_s))
                valid[name] = ok
        loads.append(os.getloadavg()[0])
    rows = []
    for name, problem, plan in cases:
        serialize = [t[0] for t in timings[name]]
        verify = [t[1] for t in timings[name]]
        rows.append(
            {
                "case": name,
                "waves": plan.num_waves,
                "items": problem.workload.num_items,
                "requests": problem.workload.num_requests,
                "repeats": len(verify),
                "valid": valid[name],
                "serialize_p50_s": statistics.median(serialize),
                "verify_p50_s": statistics.median(verify),
                "verify_p90_s": quantile(verify, 0.9),
                "total_p50_s": statistics.median([a + b for a, b in timings[name]]),
                "load_avg_median": statistics.median(loads),
            }
        )
    return rows


def print_table(rows: list[dict]) -> None:
    """One line per case: its size, the medians in milliseconds and the median load average."""
    print(
        f"{'case':<16} {'waves':>5} {'items':>5} {'reqs':>6} {'n':>4} {'serialize ms':>12} "
        f"{'verify ms':>9} {'verify p90':>10} {'both ms':>8} {'valid':>5} {'load':>5}"
    )
    for r in rows:
        print(
            f"{r['case']:<16} {r['waves']:>5} {r['items']:>5} {r['requests']:>6} {r['repeats']:>4} "
            f"{1e3 * r['serialize_p50_s']:>12.3f} {1e3 * r['verify_p50_s']:>9.3f} "
            f"{1e3 * r['verify_p90_s']:>10.3f} {1e3 * r['total_p50_s']:>8.3f} {r['valid']!s:>5} "
            f"{r['load_avg_median']:>5.2f}"
        )


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark, print its table and write its JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200, help="rounds over the share cases")
    parser.add_argument("--large-repeats", type=int, default=7, help="rounds that also time the large cases")
    parser.add_argument("--label", default="run", help="the key this run is stored under in the JSON")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help=f"default ./{DEFAULT_OUTPUT}")
    args = parser.parse_args(argv)
    rows = run(args.repeats, args.large_repeats)
    print_table(rows)
    data = json.loads(args.output.read_text()) if args.output.exists() else {}
    data[args.label] = {
        "machine": f"{platform.machine()}, {platform.python_version()}, {os.cpu_count()} CPUs",
        "cpplan": str(Path(cpplan.__file__).parent),
        "rows": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
