"""Every instance whose proven gap is above 2% in earlier ``bench_bound.py`` runs, planned every way this
project has: the deterministic profile (the bench's plan), the offline profile (its 30 s budget, every
core, full presolve) and rounds and parallel passing alone (the card with head-parallel withdrawn, so
the planner must find its best crossing plan; its plan is valid under the full card at no higher a
price). Per instance the bound over all plans, the best plan found by any of them and its gap, and
where the gap sits: the hand-off the plan pays, what any head-parallel version of its waves pays at
least beyond their full-sharing rank average (:func:`~cpplan.bound.handoff_floors.head_parallel_floor_s`:
latency, rows, levels and the copies that cut levels, which a plan pays in its rank average; summed
over the waves, one CP group only) and the bound's own hand-off or imbalance term.

Usage: ``python benchmarks/bench_gap_classes.py [--runs SUITE:JSON ...] [--threshold F] [--output PATH]``
(``SUITE``: ``quick`` for ``bench_bound.py``'s default run, ``full`` for ``--full``; default: the three
committed runs; prints a table, writes JSON, default ``benchmarks/results/bench_gap_classes.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import cpplan
from cpplan.bound import plan_bound
from cpplan.bound.handoff_floors import copy_seconds, head_parallel_floor_s

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_bound  # the instances and their builders

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_RUNS = (
    f"quick:{RESULTS / 'bench_bound.json'}",
    f"full:{RESULTS / 'bench_bound_full_40gib.json'}",
    f"full:{RESULTS / 'bench_bound_full_80gib.json'}",
)
WAYS = ("deterministic", "offline", "no_head_parallel")
"""How each instance is planned: the two profiles, and the deterministic profile on the card without
head-parallel."""


def selected(runs: list[str], threshold: float) -> list[tuple]:
    """(suite, name, builder, topology, memory, committed gap) of every row above ``threshold`` in the
    runs, each instance once: a held-out step (suite ``step``) in its first run, a suite case once per
    plan and bound (at 80 GiB only where they differ from 40 GiB's)."""
    found, seen = [], set()
    for run in runs:
        suite_name, path = run.split(":", 1)
        data = json.loads(Path(path).read_text())
        rows = {(r["instance"], r["topology"], r["memory"]): r for r in data["rows"]}
        for memory in sorted({key[2] for key in rows}):
            for name, build, topology, mem in bench_bound.instances(False, memory, suite_name == "full"):
                row = rows.get((name, topology, mem))
                if row is None or row["new_gap"] <= threshold:
                    continue
                kind = "step" if name.startswith("step_") else suite_name
                key = (kind, name, topology, row["plan_s"], row["new_bound_s"])
                if key not in seen:
                    seen.add(key)
                    found.append((kind, name, build, topology, mem, row["new_gap"]))
    return found


def planned(build, topology: str, memory: str, way: str, card: cpplan.ModelCard):
    """The plan result of one way, and its seconds."""
    model = card.without_head_parallel() if way == "no_head_parallel" else card
    profile = "offline" if way == "offline" else "deterministic"
    started = time.perf_counter()
    result = cpplan.plan(
        build(), topology=cpplan.Topology.parse(topology), model=model, memory_bytes=memory, solver=profile
    )
    return result, time.perf_counter() - started


def where_it_sits(result) -> dict:
    """The plan's hand-off, the least head-parallel hand-off of its waves' requests, and the bound's
    hand-off or imbalance term (on one CP group; ``None`` on a pool)."""
    problem = result.problem
    waves = result.plan.waves
    fixed = not problem.topology.several_groups
    floor = None
    if fixed and problem.card.handoff.head_parallel_priced:
        copy_s = copy_seconds(problem)
        floor = sum(
            head_parallel_floor_s(problem, problem.item_requests(list(w.items)), copy_s) for w in waves
        )
    return {
        "plan_handoff_s": sum(w.handoff.seconds for w in waves),
        "plan_modes": sorted({w.gdn_handoff for w in waves}),
        "num_waves": len(waves),
        "head_parallel_floor_s": floor,
    }


def measure(entry: tuple, card: cpplan.ModelCard) -> dict:
    """One instance planned every way, with its bound and where its gap sits."""
    suite_name, name, build, topology, memory, committed = entry
    costs, times = {}, {}
    first = None
    for way in WAYS:
        result, seconds = planned(build, topology, memory, way, card)
        costs[way], times[way] = result.cost_s, seconds
        first = first or result
    bound = plan_bound(first.problem)
    best_way = min(WAYS, key=lambda w: costs[w])
    best = costs[best_way]
    return {
        "suite": suite_name,
        "instance": name,
        "topology": topology,
        "memory": memory,
        "committed_gap": committed,
        "plan_s": costs,
        "planning_s": times,
        "bound_s": bound.bound_s,
        "bound_terms_s": bound.terms_s,
        "gap": bound.gap(costs["deterministic"]),
        "best_way": best_way,
        "best_s": best,
        "best_gap": bound.gap(best),
        **where_it_sits(first),
        "loadavg": os.getloadavg()[0],
    }


HEADER = (
    f"{'suite':5} {'instance':18} {'topology':24} {'mem':5} {'determ.':>8} {'offline':>8} {'no HP':>8} "
    f"{'bound':>8} {'gap':>6} {'best gap':>8} {'handoff':>7} {'HP floor':>8} {'bound ho':>8} load"
)


def print_row(r: dict) -> None:
    """One table row."""
    p = r["plan_s"]
    floor = r["head_parallel_floor_s"]
    term = r["bound_terms_s"].get("handoff_or_imbalance", 0.0)
    print(
        f"{r['suite']:5} {r['instance']:18} {r['topology']:24} {r['memory']:5} {p['deterministic']:8.4f} "
        f"{p['offline']:8.4f} {p['no_head_parallel']:8.4f} {r['bound_s']:8.4f} {r['gap']:6.2%} "
        f"{r['best_gap']:8.2%} {r['plan_handoff_s']:7.4f} {'-' if floor is None else f'{floor:8.4f}':>8} "
        f"{term:8.4f} {r['loadavg']:.2f}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    """Parse the options, plan every selected instance every way, print and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs", nargs="+", default=list(DEFAULT_RUNS), help="SUITE:JSON of bench_bound runs"
    )
    parser.add_argument("--threshold", type=float, default=0.02, help="gaps above this are planned again")
    parser.add_argument("--output", type=Path, default=RESULTS / "bench_gap_classes.json")
    args = parser.parse_args(argv)
    card = cpplan.load_model(bench_bound.MODEL)
    print(HEADER)
    rows = []
    for entry in selected(args.runs, args.threshold):
        rows.append(measure(entry, card))
        print_row(rows[-1])
    above = [r for r in rows if r["best_gap"] > args.threshold]
    print(f"{len(rows)} instances above {args.threshold:.0%}; best of every way above it: {len(above)}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        json.dumps({"model": bench_bound.MODEL, "runs": args.runs, "rows": rows}, indent=1) + "\n"
    )
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
