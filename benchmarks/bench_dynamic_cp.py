"""Dynamic CP against the best fixed CP and Megatron's dynamic CP on the mixed-length suite.

``python benchmarks/bench_dynamic_cp.py [--quick]`` runs :func:`cpplan.bench.dynamic.run_dynamic_bench`
with the deterministic profile (reproducible plans) at 40 and 80 GiB on a pool of 8 GPUs, prints the
per-instance table and writes ``benchmarks/results/bench_dynamic_cp.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from cpplan.bench.dynamic import format_summary, run_dynamic_bench

OUT = Path(__file__).resolve().parent / "results" / "bench_dynamic_cp.json"


def main(quick: bool) -> None:
    """Run the suite, print the table, save the JSON."""

    def progress(case, memory, rows) -> None:
        found = ", ".join(f"{r.planner} {r.status} {r.cost_s}" for r in rows)
        print(f"{case.name} {memory}: {found}", file=sys.stderr, flush=True)

    result = run_dynamic_bench(quick=quick, solver="deterministic", progress=progress)
    out = OUT.with_name("bench_dynamic_cp_quick.json") if quick else OUT
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(format_summary(result["summary"]))
    print(f"\n{len(result['rows'])} runs in {result['wall_s']:.1f} s; saved {out}")


if __name__ == "__main__":
    main("--quick" in sys.argv)
