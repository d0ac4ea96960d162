"""Which GDN mode the planner chooses per wave on the bench suites (rounds, parallel passing,
head-parallel), and what the plans would cost without the third mode.

For every case of the fixed suite (``--quick``: the quick suite) at CP 2, 4 and 8 and 40 GiB per rank,
Qwen3.6-35B-A3B at 40 layers, the deterministic profile: the plan's waves counted by their
``gdn_handoff``, the plan's predicted step seconds, and the same with the card offering only rounds and
parallel passing (``head_parallel_when = "false"``). Usage: ``python benchmarks/bench_gdn_modes.py OUT.json
[--quick]``; prints a markdown table.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter

import cpplan
from cpplan.bench.suites import suite
from cpplan.pricing.handoff import HANDOFF_MODES

CPS = (2, 4, 8)
MEMORY = 40 * 2**30
CARD = "qwen3.6-35b-a3b"


def planned(workload: cpplan.Workload, cp: int, card: cpplan.ModelCard) -> cpplan.PlanResult:
    """The deterministic profile's plan at CP ``cp``."""
    return cpplan.plan(
        workload,
        topology=cpplan.Topology(cp=cp),
        model=card,
        memory_bytes=MEMORY,
        solver=cpplan.load_solver("deterministic"),
    )


def run(quick: bool) -> dict:
    """``{case: {cp: {"modes": {mode: waves}, "cost_s", "cost_s_two_modes", "strategy"}}}``."""
    card = cpplan.load_model(CARD)
    without = card.without_head_parallel()
    rows: dict = {}
    for case in suite(quick=quick):
        workload = case.build()
        rows[case.name] = {}
        for cp in CPS:
            result = planned(workload, cp, card)
            counts = Counter(w.gdn_handoff for w in result.plan.waves)
            rows[case.name][str(cp)] = {
                "modes": {mode: counts.get(mode, 0) for mode in HANDOFF_MODES},
                "cost_s": result.cost_s,
                "cost_s_two_modes": planned(workload, cp, without).cost_s,
                "strategy": result.plan.strategy,
            }
        print(case.name, rows[case.name], flush=True)
    return rows


def markdown(rows: dict) -> str:
    """Per case and CP size: waves in rounds / parallel / head-parallel, and the step's seconds with the
    third mode against without it."""
    lines = [
        "| case | CP | waves rounds / parallel / head-parallel | step s | without head-parallel | ratio |"
    ]
    lines.append("| --- | --- | --- | --- | --- | --- |")
    for name, by_cp in rows.items():
        for cp, row in by_cp.items():
            counts = " / ".join(str(row["modes"][m]) for m in HANDOFF_MODES)
            ratio = row["cost_s"] / row["cost_s_two_modes"]
            seconds = f"{row['cost_s']:.3f} | {row['cost_s_two_modes']:.3f}"
            lines.append(f"| {name} | {cp} | {counts} | {seconds} | {ratio:.3f} |")
    return "\n".join(lines)


def main(out: str, quick: bool) -> None:
    """Run, print the table and write ``{"quick", "rows", "wall_s"}`` to ``out``."""
    started = time.perf_counter()
    rows = run(quick)
    print(markdown(rows))
    with open(out, "w") as handle:
        json.dump({"quick": quick, "rows": rows, "wall_s": time.perf_counter() - started}, handle, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], quick="--quick" in sys.argv[2:])
