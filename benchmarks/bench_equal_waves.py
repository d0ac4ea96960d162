"""The cost of equal waves per GPU: each benchmark suite planned with and without it.

``python benchmarks/bench_equal_waves.py [--quick] [--output PATH]`` plans every workload of the fixed suite
(:func:`cpplan.bench.suites.suite`) at ``cp=4,dp=2`` and ``cp=2,dp=4`` and of the dynamic-CP suite
(:func:`cpplan.bench.suites.mixed_suite`) on a dynamic pool of 8 GPUs, at 40 GiB, with the deterministic
profile, twice: ``equal_waves=False`` (the unequal plans of before) and ``equal_waves=True`` (the
default on these pools). Each plan is the portfolio's verified winner. It prints the per-instance table
and the per-suite summary (geometric mean and worst ratio of the equal plan's makespan to the unequal
one's) and writes ``benchmarks/results/bench_equal_waves.json`` (``--quick``:
``./cpplan-bench/bench_equal_waves_quick.json``).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import cpplan
from cpplan.bench.outputs import ResultFiles
from cpplan.bench.suites import mixed_suite, suite

RESULTS = Path(__file__).resolve().parent / "results" / "bench_equal_waves.json"
QUICK_RESULTS = Path("cpplan-bench") / "bench_equal_waves_quick.json"
MEMORY = "40GiB"
MODEL = "qwen3.6-35b-a3b"
SUITES = {
    "fixed cp=4,dp=2": (suite, dict(cp=4, dp=2)),
    "fixed cp=2,dp=4": (suite, dict(cp=2, dp=4)),
    "dynamic dp=2,cp=4": (mixed_suite, dict(cp=4, dp=2, dynamic_cp=True)),
}


def run_case(workload, sizes: dict, equal: bool) -> dict:
    """One planning run: the winner's makespan, strategy, waves, padding waves and wall time."""
    topology = cpplan.Topology(**sizes, equal_waves=equal)
    started = time.perf_counter()
    result = cpplan.plan(
        workload, topology=topology, model=MODEL, memory_bytes=MEMORY, solver="deterministic"
    )
    schedule = result.plan.schedule
    padding = 0 if schedule is None or schedule.padding is None else sum(schedule.padding)
    return {
        "cost_s": result.cost_s,
        "strategy": result.strategy,
        "num_waves": result.plan.num_waves,
        "padding_waves": padding,
        "wall_s": time.perf_counter() - started,
    }


FILES = ResultFiles(results=RESULTS, quick=QUICK_RESULTS)
output_path = FILES.path


def main(quick: bool, out: Path) -> None:
    """Run every suite both ways, print the tables, save the JSON to ``out``."""
    rows, summary = [], {}
    for name, (cases_of, sizes) in SUITES.items():
        ratios = []
        for case in cases_of(quick=quick):
            workload = case.build()
            unequal, equal = run_case(workload, sizes, False), run_case(workload, sizes, True)
            ratio = equal["cost_s"] / unequal["cost_s"]
            ratios.append(ratio)
            rows.append(
                {"suite": name, "case": case.name, "unequal": unequal, "equal": equal, "ratio": ratio}
            )
            print(
                f"{name:18} {case.name:16} unequal {unequal['cost_s']:9.4f} s ({unequal['strategy']}) "
                f"equal {equal['cost_s']:9.4f} s ({equal['strategy']}, {equal['padding_waves']} padding) "
                f"x{ratio:.4f}",
                file=sys.stderr,
                flush=True,
            )
        summary[name] = {
            "cases": len(ratios),
            "geomean_ratio": math.exp(sum(math.log(r) for r in ratios) / len(ratios)),
            "worst_ratio": max(ratios),
            "slower_cases": sum(r > 1 + 1e-12 for r in ratios),
        }
    result = {
        "model": MODEL,
        "memory": MEMORY,
        "solver": "deterministic",
        "quick": quick,
        "machine": platform.platform(),
        "rows": rows,
        "summary": summary,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print("| suite | cases | slower | geomean equal/unequal | worst |\n|---|---|---|---|---|")
    for name, s in summary.items():
        ratios = f"{s['geomean_ratio']:.4f} | {s['worst_ratio']:.4f}"
        print(f"| {name} | {s['cases']} | {s['slower_cases']} | {ratios} |")
    print(f"saved {out}")


def cli(argv: list[str] | None = None) -> None:
    """Parse ``--quick`` and ``--output`` and run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the smaller suites (a smoke run)")
    FILES.add_option(parser)
    args = parser.parse_args(argv)
    main(args.quick, output_path(quick=args.quick, output=args.output))


if __name__ == "__main__":
    cli()
