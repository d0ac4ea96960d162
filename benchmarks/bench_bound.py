"""The lower bound over all plans beside the plan it bounds: per instance the plan's price, the bound
before the per-wave floors (the module at ``--old-ref``) and now, the proven gap of each, what the plan
pays in GDN hand-off and in imbalance (per barrier the slowest rank less the average, summed over its
waves and barriers), and the bound's own time (on a copy of the problem with a memo of its own, so that
nothing the planning computed, such as the partitions' set floors, is reused).

Instances: the quick suite (``cpplan.bench.suites.suite(quick=True)``; ``--full``: the whole suite,
``suite()``, whose 22 cases at CP 1, 2, 4 and 8 are the 88-instance suite) at CP 1, 2, 4 and 8 and
``--memory`` per rank, each also on a pool of two CP2 groups (``dp=2,cp=2``) and on that pool under
dynamic CP (``dp=2,cp=2,dynamic_cp=1``), and eight held-out-style steps shaped like the bound issue's
(GRPO groups, agent trees, a long tail, a wave of ten long unique requests: ``STEPS``). Each is planned
by ``cpplan.plan`` under ``--profile`` (the CLI's default, ``deterministic``); the old bound is
``plan_bound`` of ``cpplan/bound/all_plans.py`` as of ``--old-ref`` (loaded beside the current package,
reading its node floors), ``-`` where it does not load or proves nothing. ``--compare OLD.json`` takes
the old bounds from an earlier run's JSON instead (its new bounds; an instance it lacks has none). The
table ends with the median and the largest gap, old and new, and the bound's median and largest time;
the load average stands beside every row.

Usage: ``python benchmarks/bench_bound.py [--quick] [--full] [--profile NAME] [--memory SIZE] [--old-ref REF]
[--compare OLD.json] [--output PATH]`` (prints a table, writes JSON, default
``./cpplan-bench/bench_bound.json``).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import cpplan
from cpplan.bench.held_out import agent_trees_step, grpo_step, long_tail_step, long_unique_step
from cpplan.bench.outputs import QUICK_FOLDER
from cpplan.bench.suites import suite
from cpplan.bound import plan_bound

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = QUICK_FOLDER / "bench_bound.json"
MODEL = "qwen3.6-35b-a3b"
OLD_REF = "c546626"
"""The commit whose bound the table calls old: the last before the per-wave floors."""
CP_SIZES = (1, 2, 4, 8)
POOL = "dp=2,cp=2"
DYNAMIC_POOL = "dp=2,cp=2,dynamic_cp=1"


STEPS: tuple[tuple[str, Callable[[], cpplan.Workload], str, str], ...] = (
    ("step_grpo", grpo_step, "cp=2", "20GiB"),
    ("step_agent_trees", agent_trees_step, "cp=4", "20GiB"),
    ("step_long_tail", long_tail_step, "cp=4", "40GiB"),
    ("step_grpo", grpo_step, "cp=8", "20GiB"),
    ("step_agent_trees", agent_trees_step, "cp=8", "40GiB"),
    ("step_long_unique", long_unique_step, "cp=8", "40GiB"),
    ("step_grpo", grpo_step, POOL, "20GiB"),
    ("step_grpo", grpo_step, DYNAMIC_POOL, "20GiB"),
)
"""Held-out-style steps: (name, workload, topology, memory per rank)."""


def old_bound_module(ref: str):
    """``cpplan/bound/all_plans.py`` as of ``ref``, loaded as a module of its own (``None`` where git
    or the ref is missing)."""
    try:
        text = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{ref}:cpplan/bound/all_plans.py"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    path = Path(tempfile.mkdtemp()) / "old_all_plans.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("old_all_plans", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_all_plans"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # an old module that no longer loads against today's package
        print(f"old bound at {ref} does not load: {exc}", file=sys.stderr)
        return None
    return module


def instances(quick: bool, memory: str, full: bool = False):
    """(name, workload builder, topology, memory) of every instance (``full``: the whole suite's cases,
    not the quick suite's)."""
    found = []
    for case in suite(quick=not full):
        for cp in (2, 8) if quick else CP_SIZES:
            found.append((case.name, case.build, f"cp={cp}", memory))
        found.append((case.name, case.build, POOL, memory))
        found.append((case.name, case.build, DYNAMIC_POOL, memory))
    return found + list(STEPS)


def compared_bounds(path: Path | None) -> dict[tuple[str, str, str], float | None]:
    """The bound of every instance of an earlier run's JSON (``--compare``), by (instance, topology,
    memory): its new bound, which this run calls old; empty without a path."""
    if path is None:
        return {}
    rows = json.loads(path.read_text())["rows"]
    return {(r["instance"], r["topology"], r["memory"]): r["new_bound_s"] for r in rows}


def measure(name, build, topology: str, memory: str, profile: str, old) -> dict:
    """One instance's plan, bounds, gaps and the bound's time (``old``: a module with ``plan_bound``,
    or a dict of an earlier run's bounds, :func:`compared_bounds`)."""
    workload = build()
    started = time.perf_counter()
    result = cpplan.plan(
        workload, topology=cpplan.Topology.parse(topology), model=MODEL, memory_bytes=memory, solver=profile
    )
    plan_s = time.perf_counter() - started
    problem, cost = result.problem, result.cost_s
    fresh = dataclasses.replace(problem)  # a memo of its own: nothing the planning computed is reused
    started = time.perf_counter()
    new = plan_bound(fresh)
    bound_s = time.perf_counter() - started
    if isinstance(old, dict):
        before = old.get((name, topology, memory))
    else:
        before = old.plan_bound(problem).bound_s if old is not None else None
    waves = result.plan.waves
    cards = [problem.card.group_card(w.cp) for w in waves]  # a dynamic-CP wave's own group size
    average = sum(
        float((np.asarray(c.constants.barrier_coefficients) @ w.quantities.sum(axis=0)).sum()) / w.cp
        for c, w in zip(cards, waves, strict=True)
    )
    paid = sum(w.cost_s - c.wave_overhead_s - w.handoff.seconds for c, w in zip(cards, waves, strict=True))
    return {
        "instance": name,
        "topology": topology,
        "memory": memory,
        "num_waves": result.plan.num_waves,
        "plan_s": cost,
        "old_bound_s": before,
        "new_bound_s": new.bound_s,
        "new_scope": new.scope.value,
        "new_terms_s": new.terms_s,
        "old_gap": None if before is None else max(0.0, (cost - before) / cost),
        "new_gap": new.gap(cost),
        "plan_handoff_s": sum(w.handoff.seconds for w in waves),
        "plan_imbalance_s": paid - average,
        "plan_modes": sorted({w.gdn_handoff for w in waves}),
        "bound_time_s": bound_s,
        "planning_s": plan_s,
        "loadavg": os.getloadavg()[0],
    }


HEADER = (
    f"{'instance':<18} {'topology':<10} {'memory':>6} {'waves':>5} {'plan s':>8} {'old bound':>9} "
    f"{'new bound':>9} {'old gap':>7} {'new gap':>7} {'handoff':>7} {'imbal.':>7} {'bound ms':>8} "
    f"{'plan s':>6} load"
)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2%}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def print_row(r: dict) -> None:
    """One table line."""
    print(
        f"{r['instance']:<18} {r['topology']:<10} {r['memory']:>6} {r['num_waves']:>5} {r['plan_s']:>8.4f} "
        f"{_num(r['old_bound_s']):>9} {_num(r['new_bound_s']):>9} {_pct(r['old_gap']):>7} "
        f"{_pct(r['new_gap']):>7} {r['plan_handoff_s']:>7.4f} {r['plan_imbalance_s']:>7.4f} "
        f"{1e3 * r['bound_time_s']:>8.1f} {r['planning_s']:>6.1f} "
        f"{r['loadavg']:.2f}",
        flush=True,
    )


def _kind(topology: str) -> str:
    """The class a row's gap is summarized in: ``cp=N`` on one group, ``pool`` or ``dynamic pool``."""
    if "dynamic_cp" in topology:
        return "dynamic pool"
    return "pool" if "dp=" in topology else topology


def summary(rows: list[dict]) -> dict:
    """Median and largest gap, old and new (``None`` where no row has one; a row without a bound counts
    as a gap of 100%), overall and per class (:func:`_kind`), and the bound's median and largest
    time."""

    def gaps(key: str) -> list[float]:
        return [1.0 if r[key] is None else r[key] for r in rows]

    found = {}
    for key in ("old_gap", "new_gap"):
        values = gaps(key)
        found[key] = {"median": statistics.median(values), "max": max(values)}
    for kind in sorted({_kind(r["topology"]) for r in rows}):
        kept = [r for r in rows if _kind(r["topology"]) == kind]
        found[kind] = {
            key: {"median": statistics.median(g), "max": max(g)}
            for key in ("old_gap", "new_gap")
            for g in [[1.0 if r[key] is None else r[key] for r in kept]]
        }
    times = [r["bound_time_s"] for r in rows]
    found["bound_time_s"] = {"median": statistics.median(times), "max": max(times)}
    return found


def main(argv: list[str] | None = None) -> None:
    """Parse the options, run, print and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the suite at CP 2 and 8 only")
    parser.add_argument("--full", action="store_true", help="the whole suite (88 instances at CP 1-8)")
    parser.add_argument("--profile", default="deterministic", help="solver profile (default: deterministic)")
    parser.add_argument("--memory", default="40GiB", help="memory per rank for the suite (default 40GiB)")
    parser.add_argument("--old-ref", default=OLD_REF, help=f"git ref of the old bound (default {OLD_REF})")
    parser.add_argument(
        "--compare", type=Path, default=None, help="an earlier run's JSON: its bounds are the old ones"
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help=f"default ./{DEFAULT_OUTPUT}")
    args = parser.parse_args(argv)
    old = compared_bounds(args.compare) if args.compare else old_bound_module(args.old_ref)
    print(HEADER)
    rows = []
    for name, build, topology, memory in instances(args.quick, args.memory, args.full):
        rows.append(measure(name, build, topology, memory, args.profile, old))
        print_row(rows[-1])
    found = summary(rows)
    for key in ("old_gap", "new_gap"):
        print(f"{key}: median {found[key]['median']:.2%}, max {found[key]['max']:.2%} (no bound: 100%)")
    for kind, gaps in found.items():
        if kind.startswith(("cp=", "pool", "dynamic")):
            old_gap, new_gap = gaps["old_gap"], gaps["new_gap"]
            print(
                f"{kind}: median / max gap old {old_gap['median']:.2%} / {old_gap['max']:.2%}, "
                f"new {new_gap['median']:.2%} / {new_gap['max']:.2%}"
            )
    times = found["bound_time_s"]
    print(f"bound time: median {1e3 * times['median']:.1f} ms, max {1e3 * times['max']:.1f} ms")
    data = {
        "model": MODEL,
        "profile": args.profile,
        "old_ref": str(args.compare) if args.compare else args.old_ref,
        "cpplan": cpplan.__file__,
        "rows": rows,
        "summary": found,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
