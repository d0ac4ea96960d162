"""More budget, never a costlier plan: every step planned under the default ``deterministic`` profile at its
budget and at ``--factors`` times it, and under the ``offline`` profile (the clock, 30 s), side by side.

Steps: the held-out-style steps of ``benchmarks/bench_bound.py`` (``STEPS``: GRPO groups, agent trees, a
long tail, ten long unique requests, at CP 2, 4, 8, on a pool and under dynamic CP) and the README's first
command (``examples/grpo.jsonl`` at ``cp=2``, 8 GiB). Per step and profile the plan's price and the
planning seconds; a price above the default profile's at its own budget is flagged ``costlier``. The
profiles run one after another per step, so each row's load average covers them all.

Usage: ``python benchmarks/bench_budget.py [--factors 2 4] [--output PATH]`` (prints a table, writes JSON,
default ``./cpplan-bench/bench_budget.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import cpplan
from cpplan.bench.outputs import QUICK_FOLDER
from cpplan.spec.profile import SolverProfile, load_solver

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_bound import MODEL, STEPS  # the held-out-style steps, defined once

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = QUICK_FOLDER / "bench_budget.json"


def profiles(factors: list[float]) -> dict[str, SolverProfile]:
    """The default profile at its budget and at each factor of it, and the offline profile."""
    default = load_solver("deterministic")
    found = {"default": default}
    for factor in factors:
        found[f"default x{factor:g}"] = default.with_time_budget(default.time_budget_s * factor)
    found["offline"] = load_solver("offline")
    return found


def steps():
    """(name, workload builder, topology, memory) of every step."""
    readme = ("readme", lambda: cpplan.Workload.from_jsonl(ROOT / "examples" / "grpo.jsonl"), "cp=2", "8GiB")
    return [*STEPS, readme]


def measure(name, build, topology: str, memory: str, chosen: dict[str, SolverProfile]) -> dict:
    """One step planned under every profile: price and seconds per profile, and which are costlier
    than the default profile's plan."""
    workload = build()
    row = {"step": name, "topology": topology, "memory": memory, "cost_s": {}, "planning_s": {}}
    for label, profile in chosen.items():
        started = time.perf_counter()
        topo = cpplan.Topology.parse(topology)
        result = cpplan.plan(workload, topology=topo, model=MODEL, memory_bytes=memory, solver=profile)
        row["planning_s"][label] = time.perf_counter() - started
        row["cost_s"][label] = result.cost_s
    base = row["cost_s"]["default"]
    row["costlier"] = [label for label, cost in row["cost_s"].items() if cost > base]
    row["loadavg"] = os.getloadavg()[0]
    return row


def main(argv: list[str] | None = None) -> None:
    """Parse the options, run, print and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--factors", type=float, nargs="*", default=[2.0, 4.0], help="budget factors")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help=f"default ./{DEFAULT_OUTPUT}")
    args = parser.parse_args(argv)
    chosen = profiles(args.factors)
    labels = list(chosen)
    heads = " ".join(f"{label:>14}" for label in labels)
    print(f"{'step':<18} {'topology':<24} {heads}  costlier load")
    rows = []
    for name, build, topology, memory in steps():
        row = measure(name, build, topology, memory, chosen)
        rows.append(row)
        cells = " ".join(f"{row['cost_s'][k]:>8.4f} {row['planning_s'][k]:>4.1f}s" for k in labels)
        flagged = ",".join(row["costlier"]) or "-"
        print(f"{name:<18} {topology:<24} {cells}  {flagged:<8} {row['loadavg']:.2f}")
    costlier = sum(bool(r["costlier"]) for r in rows)
    print(f"{costlier} of {len(rows)} steps have a plan costlier than the default profile's")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    payload = {"model": MODEL, "profiles": labels, "cpplan": cpplan.__version__, "rows": rows}
    args.output.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
