"""Pricing one wave: the wall time of ``price_wave`` (and of packing the wave) on the waves a planner prices.

Cases: the share waves of the GRPO cluster step (``bench_scale.cluster_step``, 1,024 completions) as a
DP rank plans them, at dp 16 x cp 4 (8 items of 8 requests) and dp 8 x cp 8 (16 items), the whole share
in one wave and one item alone, on sampled replicas; and two large waves: 600 small items at cp 4
(``bench_scale.small``) and the 256-completion cluster step in one wave at cp 8. Every wave is packed
under full sharing. Each repetition packs the wave afresh (timed as ``pack``) and prices it
(``price_wave``: its chunk statistics, ownership candidates, rank prices and hand-off modes); the table
gives the medians over ``--repeats`` repetitions per wave (pricing in wall and in CPU seconds) and the
load average beside them.

Usage: ``python benchmarks/bench_pricing.py [--repeats N] [--quick] [--output PATH]`` (prints a table,
writes JSON, default ``./cpplan-bench/bench_pricing.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from bench_scale import MODEL_CLUSTER, cluster_step, small

import cpplan
from cpplan.bench.outputs import QUICK_FOLDER
from cpplan.planners.replica_partition import replica_settings, replica_workload
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import price_wave

DEFAULT_OUTPUT = QUICK_FOLDER / "bench_pricing.json"
LAYOUT = "full"


def share_problems(num_completions: int, dp: int, cp: int, num_replicas: int) -> list[Problem]:
    """The problems of ``num_replicas`` sampled replicas' shares of the cluster step, as
    ``Planner.plan(step, replica=k)`` builds them."""
    planner = cpplan.Planner(
        model=MODEL_CLUSTER, topology=cpplan.Topology(dp=dp, cp=cp), memory_bytes="80GiB", solver="runtime"
    )
    workload = cluster_step(num_completions)
    partition = planner.partition(workload)
    settings = replica_settings(planner.settings)
    replicas = sorted({round(k * (dp - 1) / max(num_replicas - 1, 1)) for k in range(num_replicas)})
    shares = [replica_workload(workload, partition.items(k), k) for k in replicas]
    return [Problem.build(share, settings) for share in shares]


def whole_problem(workload, cp: int, memory: str) -> Problem:
    """The problem of ``workload`` at ``cp`` (dp 1)."""
    planner = cpplan.Planner(model=MODEL_CLUSTER, topology=f"cp={cp}", memory_bytes=memory, solver="runtime")
    return Problem.build(workload, planner.settings)


def cases(quick: bool) -> list[tuple[str, list[tuple[Problem, tuple[int, ...]]], int]]:
    """(name, the waves as (problem, items), repetitions per wave relative to ``--repeats``)."""
    found = []
    for dp, cp in ((16, 4), (8, 8)):
        problems = share_problems(1024, dp, cp, 2 if quick else 4)
        found.append((f"share dp{dp} cp{cp}", [(p, tuple(range(p.num_items))) for p in problems], 1))
        found.append((f"one item dp{dp} cp{cp}", [(p, (0,)) for p in problems], 1))
    small_items = whole_problem(small(600), 4, "40GiB")
    found.append(("600 small cp4", [(small_items, tuple(range(small_items.num_items)))], 10))
    if not quick:
        step = whole_problem(cluster_step(256), 8, "80GiB")
        found.append(("256 requests cp8", [(step, tuple(range(step.num_items)))], 10))
    return found


def time_wave(problem: Problem, items: tuple[int, ...], repeats: int) -> dict[str, list[float]]:
    """Seconds of packing and of pricing the wave, each repetition from a fresh packing (pricing also in
    this thread's CPU seconds, which other processes' load inflates less)."""
    found: dict[str, list[float]] = {"pack": [], "price": [], "price_cpu": []}
    for _ in range(repeats):
        started = time.perf_counter()
        layout = problem.pack(items, LAYOUT)
        packed, packed_cpu = time.perf_counter(), time.thread_time()
        price_wave(problem, items, layout, LAYOUT)
        found["price_cpu"].append(time.thread_time() - packed_cpu)
        found["price"].append(time.perf_counter() - packed)
        found["pack"].append(packed - started)
    return found


def run(*, repeats: int, quick: bool) -> dict:
    """Every case's medians."""
    rows = []
    for name, waves, divisor in cases(quick):
        found: dict[str, list[float]] = {"pack": [], "price": [], "price_cpu": []}
        for problem, items in waves:
            time_wave(problem, items, 3)  # warm: share masks, node counts, cached properties
            for key, values in time_wave(problem, items, max(repeats // divisor, 20)).items():
                found[key] += values
        layout = waves[0][0].pack(waves[0][1], LAYOUT)
        row = {
            "case": name,
            "cp": waves[0][0].topology.cp,
            "num_waves": len(waves),
            "num_requests": int(layout.request_ids.size),
            "num_segments": layout.num_segments,
            "packed_tokens": layout.packed_tokens,
            "samples": len(found["price"]),
            "price_wave_ms_median": 1e3 * statistics.median(found["price"]),
            "price_wave_cpu_ms_median": 1e3 * statistics.median(found["price_cpu"]),
            "pack_ms_median": 1e3 * statistics.median(found["pack"]),
            "loadavg": os.getloadavg(),
        }
        rows.append(row)
        print_row(row)
    return {
        "model": MODEL_CLUSTER,
        "layout": LAYOUT,
        "repeats": repeats,
        "cpplan": cpplan.__file__,
        "rows": rows,
    }


HEADER = (
    f"{'case':<20} {'cp':>2} {'waves':>5} {'requests':>8} {'segments':>8} {'tokens':>9} {'samples':>7} "
    f"{'price ms':>9} {'cpu ms':>7} {'pack ms':>8} load"
)


def print_row(r: dict) -> None:
    """One table line."""
    print(
        f"{r['case']:<20} {r['cp']:>2} {r['num_waves']:>5} {r['num_requests']:>8} {r['num_segments']:>8} "
        f"{r['packed_tokens']:>9,} {r['samples']:>7} {r['price_wave_ms_median']:>9.3f} "
        f"{r['price_wave_cpu_ms_median']:>7.3f} {r['pack_ms_median']:>8.3f} {r['loadavg'][0]:.2f}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    """Parse the options, run, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200, help="repetitions per small wave")
    parser.add_argument("--quick", action="store_true", help="two replicas per share, no 256-request wave")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help=f"default ./{DEFAULT_OUTPUT}")
    args = parser.parse_args(argv)
    print(HEADER)
    data = run(repeats=args.repeats, quick=args.quick)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
