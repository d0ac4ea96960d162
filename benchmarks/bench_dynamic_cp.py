"""Dynamic CP against the best fixed CP and Megatron's dynamic CP on the mixed-length suite.

``python benchmarks/bench_dynamic_cp.py [--quick] [--output PATH]`` runs
:func:`cpplan.bench.dynamic.run_dynamic_bench` with the deterministic profile (reproducible plans) at 40
and 80 GiB on a pool of 8 GPUs, prints the per-instance table and writes
``benchmarks/results/bench_dynamic_cp.json`` (``--quick``: ``./cpplan-bench/bench_dynamic_cp_quick.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cpplan.bench.dynamic import format_summary, run_dynamic_bench
from cpplan.bench.outputs import ResultFiles

RESULTS = Path(__file__).resolve().parent / "results" / "bench_dynamic_cp.json"
QUICK_RESULTS = Path("cpplan-bench") / "bench_dynamic_cp_quick.json"


FILES = ResultFiles(results=RESULTS, quick=QUICK_RESULTS)
output_path = FILES.path


def main(argv: list[str] | None = None) -> None:
    """Run the suite, print the table, save the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the smaller suite (a smoke run)")
    FILES.add_option(parser)
    args = parser.parse_args(argv)
    out = output_path(quick=args.quick, output=args.output)

    def progress(case, memory, rows) -> None:
        found = ", ".join(f"{r.planner} {r.status} {r.cost_s}" for r in rows)
        print(f"{case.name} {memory}: {found}", file=sys.stderr, flush=True)

    result = run_dynamic_bench(quick=args.quick, solver="deterministic", progress=progress)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(format_summary(result["summary"]))
    print(f"\n{len(result['rows'])} runs in {result['wall_s']:.1f} s; saved {out}")


if __name__ == "__main__":
    main()
