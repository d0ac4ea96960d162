"""Wall seconds and cost of the CLI's default solver profile (``deterministic``) per case.

    python benchmarks/bench_default_profile.py [--cases readme,sharegpt400,suite] [--solver deterministic]
        [--repeats 1] [--output ./cpplan-bench/bench_default_profile.json] [--compare OLD.json]

Cases: ``readme`` is the README's first command (``examples/grpo.jsonl``, Qwen3.6-35B-A3B, 8 GiB) at
CP 1, 2, 4 and 8, timed as a fresh ``cpplan plan`` process (start-up included) and in process;
``sharegpt400`` the first 400 ShareGPT conversations (the ``data`` extra) at CP1 with 20 GiB and CP2
with 8 GiB; ``suite`` every workload of ``cpplan bench --quick`` at CP 1, 2, 4 and 8 with 40 GiB (24
instances). In-process walls count from after a warm-up call (OR-Tools imported, CP-SAT warmed up).
Old against new: run it with ``PYTHONPATH`` at the old checkout, then at the new one with ``--compare``
naming the old run's JSON: every case whose plan cost moved is printed (``digest``, a hash of the plan's
waves, says which plans changed). Prints a table with the load average.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import cpplan
from cpplan.spec.topology import Topology
from cpplan.spec.workload import Workload

ROOT = Path(cpplan.__file__).resolve().parents[1]
"""The checkout whose cpplan is imported (its ``examples/``)."""
README_WORKLOAD = ROOT / "examples" / "grpo.jsonl"
MODEL = "qwen3.6-35b-a3b"
SUITE_CPS = (1, 2, 4, 8)
SUITE_MEMORY = "40GiB"
"""The ``suite`` cases: every quick-suite workload at these CP sizes and this memory."""


def plan_digest(result: cpplan.PlanResult) -> str:
    """A short hash of the plan's waves (items, layout, split, every rank's owned tokens): equal plans,
    equal digests."""
    keys = ("items", "layout", "split", "packed_tokens")
    waves = [
        {**{k: w.get(k) for k in keys}, "ranks": [r["tokens"] for r in w["ranks"]]}
        for w in result.to_dict()["waves"]
    ]
    return hashlib.sha256(json.dumps(waves).encode()).hexdigest()[:16]


def in_process(workload: Workload, cp: int, memory: str, solver: str, repeats: int) -> dict:
    """Median wall and CPU seconds of planning ``workload`` in this process (the planner runs on one
    core, so on a busy machine its CPU seconds are what its wall would be on a quiet one), the plan's
    cost and solver block."""
    walls, cpus, result = [], [], None
    for _ in range(repeats):
        started, cpu = time.perf_counter(), time.process_time()
        result = cpplan.plan(
            workload, topology=Topology(cp=cp), model=MODEL, memory_bytes=memory, solver=solver
        )
        walls.append(time.perf_counter() - started)
        cpus.append(time.process_time() - cpu)
    assert result is not None
    block = result.to_dict()["solver"]
    return {
        "wall_s": statistics.median(walls),
        "cpu_s": statistics.median(cpus),
        "cost_s": result.plan.cost_s,
        "strategy": result.plan.strategy,
        "digest": plan_digest(result),
        "status": block.get("status"),
        "bound_s": block.get("bound_s"),
        "model_gap": block.get("model_gap"),
        "stage_s": block.get("stage_s", {}),
    }


def cli_wall(cp: int, solver: str, repeats: int) -> tuple[float, float]:
    """Median wall and CPU seconds (user and system) of a fresh ``cpplan plan`` process on the README
    workload."""
    walls, cpus = [], []
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(repeats):
            args = ["-c", "from cpplan.cli import run; run()", "plan", str(README_WORKLOAD), "--model", MODEL]
            args += ["--topology", f"cp={cp}", "--memory", "8GiB", "--solver", solver]
            args += ["--output", str(Path(scratch) / "plan.json")]
            started, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run([sys.executable, *args], check=True, capture_output=True, env=os.environ.copy())
            walls.append(time.perf_counter() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def cases(names: set[str]) -> list[tuple[str, Callable[[], Workload], int, str]]:
    """(name, workload builder, CP, memory) of every selected case."""
    from cpplan.bench.suites import sharegpt, sharegpt_available, suite

    chosen = []
    if "readme" in names:
        chosen += [
            (f"readme cp{cp}", lambda: Workload.from_jsonl(README_WORKLOAD), cp, "8GiB")
            for cp in (1, 2, 4, 8)
        ]
    if "sharegpt400" in names and sharegpt_available():
        chosen += [
            (f"sharegpt400 cp{cp} {mem}", lambda: sharegpt(num_conversations=400), cp, mem)
            for cp, mem in ((1, "20GiB"), (2, "8GiB"))
        ]
    if "suite" in names:
        chosen += [
            (f"{case.name} cp{cp} {SUITE_MEMORY}", case.build, cp, SUITE_MEMORY)
            for case in suite(quick=True)
            for cp in SUITE_CPS
        ]
    return chosen


def compare(rows: list[dict], old_path: Path) -> list[str]:
    """One line per case whose plan cost differs from the old run's (``old_path``), and a count."""
    old = {row["case"]: row for row in json.loads(old_path.read_text())["rows"]}
    lines, common = [], [row for row in rows if row["case"] in old]
    for row in common:
        before, after = old[row["case"]]["cost_s"], row["cost_s"]
        if after != before:
            word = "COSTLIER" if after > before else "cheaper"
            change = (after - before) / before
            lines.append(f"{row['case']:<28} {before:.6f} -> {after:.6f} s ({change:+.4%}) {word}")
    costlier = sum("COSTLIER" in line for line in lines)
    lines.append(f"{len(lines)} of {len(common)} cases moved, {costlier} costlier")
    return lines


def main() -> None:
    """Run the selected cases, print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="readme,sharegpt400,suite")
    parser.add_argument("--solver", default="deterministic")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--output", type=Path, default=Path("cpplan-bench/bench_default_profile.json"))
    parser.add_argument("--compare", type=Path, default=None, help="an old run's JSON to compare costs with")
    args = parser.parse_args()
    load_before = os.getloadavg()
    cpplan.plan(Workload.from_jsonl(README_WORKLOAD), model=MODEL, memory_bytes="8GiB", solver=args.solver)
    rows, workloads = [], {}
    header = f"{'case':<28} {'wall s':>7} {'cpu s':>6} {'cli wall/cpu':>11} {'cost s':>12}"
    print(f"{header} {'strategy':>9} {'status':>9} digest")
    for name, build, cp, memory in cases(set(args.cases.split(","))):
        key = name.split(" cp")[0]
        if key not in workloads:
            workloads[key] = build()
        workload = workloads[key]
        row = {
            "case": name,
            "cp": cp,
            "memory": memory,
            **in_process(workload, cp, memory, args.solver, args.repeats),
        }
        if name.startswith("readme"):
            row["cli_wall_s"], row["cli_cpu_s"] = cli_wall(cp, args.solver, args.repeats)
        rows.append(row)
        cli = f"{row['cli_wall_s']:.2f} {row['cli_cpu_s']:.2f}" if "cli_wall_s" in row else "- -"
        print(
            f"{name:<28} {row['wall_s']:>7.2f} {row['cpu_s']:>6.2f} {cli:>11} {row['cost_s']:>12.6f} "
            f"{row['strategy']:>9} {row['status']:>9} {row['digest']}",
            flush=True,
        )
    load_after = os.getloadavg()
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (1 min)")
    if args.compare is not None:
        print("\n".join(compare(rows, args.compare)))
    report = {
        "benchmark": "default_profile",
        "solver": args.solver,
        "cpplan": str(Path(cpplan.__file__).parent),
        "cpus": os.cpu_count(),
        "load_average": {"before": load_before, "after": load_after},
        "rows": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
