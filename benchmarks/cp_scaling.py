"""CP scaling efficiency of the time model on held-out workloads (not the bench suite's seeds).

For each workload and CP size c at 40 GiB per rank, the greedy planner's predicted step seconds T(c)
(dp = 1, so the sum of the waves); the efficiency is T(1) / (c * T(c)): 1.0 means c ranks finish c
times faster. Usage: ``python benchmarks/cp_scaling.py OUT.json`` (about a minute on two cores).
"""

from __future__ import annotations

import json
import sys
import time

from cpplan.bench import synthetic
from cpplan.bench.suites import sharegpt, sharegpt_available
from cpplan.planners.greedy import greedy_plan
from cpplan.pricing.problem import Problem
from cpplan.spec.card import load_model
from cpplan.spec.settings import Settings
from cpplan.spec.topology import Topology
from cpplan.spec.workload import Workload

LAYOUTS = ("full", "none", "min_span:512")
CPS = (1, 2, 4, 8)
MEMORY = 40 * 2**30


def held_out() -> dict[str, Workload]:
    """Workloads drawn with other seeds (or other records) than the bench suite's."""
    workloads = {
        "long_tail": synthetic.long_tail(num_items=64, median_tokens=4096, max_tokens=32768, seed=7),
        "agent_trees": synthetic.agent_trees(
            num_trees=6, depth=3, branching=3, turn_tokens=(1024, 4096), seed=7
        ),
    }
    if sharegpt_available():
        records = sharegpt(num_conversations=256).items[128:]
        workloads["sharegpt"] = Workload(items=records)
    return workloads


def step_seconds(workload: Workload, cp: int) -> float:
    """The greedy plan's predicted seconds at CP ``cp``."""
    settings = Settings(topology=Topology(cp=cp), model=load_model("qwen3.6-35b-a3b"), memory_bytes=MEMORY)
    return greedy_plan(Problem.build(workload, settings), LAYOUTS).cost_s


def main(out: str) -> None:
    """Write ``{workload: {cp: {"step_s", "efficiency"}}}`` to ``out`` and print it."""
    started = time.perf_counter()
    result: dict = {}
    for name, workload in held_out().items():
        seconds = {cp: step_seconds(workload, cp) for cp in CPS}
        result[name] = {
            str(cp): {"step_s": s, "efficiency": seconds[1] / (cp * s)} for cp, s in seconds.items()
        }
        print(name, {cp: round(v["efficiency"], 4) for cp, v in result[name].items()}, flush=True)
    result["wall_s"] = time.perf_counter() - started
    with open(out, "w") as handle:
        json.dump(result, handle, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
