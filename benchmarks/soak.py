"""Soak: many random planning calls with the runtime profile in one process.

    python benchmarks/soak.py [--calls 10000] [--seed 0] [--json benchmarks/results/soak.json]

Each call plans a fresh random workload (GRPO groups, agent trees or unique long-tail sequences) for a
random model, topology and budget, the way a trainer calls ``cpplan.plan`` once per step. Budgets are
drawn at or above the largest single request's peak, so every call must return a verified plan (items
that do not fit whole take the split path). Reports failures (must be 0), latency percentiles of the
``cpplan.plan`` call and the process's resident memory over the run (it must stay flat), as a table and
as JSON.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

import cpplan
from cpplan.bench.synthetic import agent_trees, grpo, long_tail
from cpplan.pricing.layout import pack
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import price_wave
from cpplan.spec.settings import Settings

MODELS = ("qwen3-8b", "qwen3.6-35b-a3b")
TOPOLOGIES = ("cp=1", "cp=2", "cp=4", "tp=2,cp=2")
FLAT_LIMIT_MIB = 32.0
RESULTS = Path(__file__).parent / "results"


def rss_mib() -> float:
    """Resident set size of this process in MiB (from /proc; falls back to the peak on other systems)."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10


def random_workload(rng: np.random.Generator) -> tuple[str, cpplan.Workload]:
    """A random per-step workload of one of three shapes."""
    shape = str(rng.choice(["grpo", "agent", "long_tail"]))
    seed = int(rng.integers(2**31))
    if shape == "grpo":
        workload = grpo(
            num_prompts=int(rng.integers(1, 7)),
            group_size=int(rng.integers(2, 9)),
            system_tokens=int(rng.integers(1, 1025)),
            prompt_tokens=(64, 2048),
            completion_tokens=(16, 1024),
            seed=seed,
        )
    elif shape == "agent":
        workload = agent_trees(
            num_trees=int(rng.integers(1, 5)),
            depth=int(rng.integers(1, 4)),
            branching=int(rng.integers(1, 4)),
            turn_tokens=(16, 512),
            seed=seed,
        )
    else:
        workload = long_tail(
            num_items=int(rng.integers(1, 17)), median_tokens=256, max_tokens=4096, seed=seed
        )
    return shape, workload


def safe_budget(workload, topology, card, rng: np.random.Generator) -> int:
    """A budget between 1x and 3x the largest single request's peak (so nothing may be refused)."""
    roomy = Problem.build(workload, Settings(topology=topology, model=card, memory_bytes=2**62))
    mask = roomy.share_mask("full")
    single = max(
        price_wave(
            roomy, (0,), pack(roomy.tree, [r], mask, roomy.request_grad, roomy.request_loss), "full"
        ).peak_bytes
        for r in range(roomy.tree.num_requests)
    )
    return int(single * float(rng.uniform(1.0, 3.0)))


def run(calls: int, seed: int) -> dict:
    """Run the soak and return its figures."""
    rng = np.random.default_rng(seed)
    cards = {name: cpplan.load_model(name) for name in MODELS}
    profile = cpplan.load_solver("runtime")
    latencies = np.zeros(calls)
    failures: list[str] = []
    strategies: Counter[str] = Counter()
    shapes: Counter[str] = Counter()
    num_split = 0
    rss: list[tuple[int, float]] = [(0, rss_mib())]
    sample_every = max(1, calls // 100)
    for call in range(calls):
        shape, workload = random_workload(rng)
        shapes[shape] += 1
        card = cards[MODELS[int(rng.integers(len(MODELS)))]]
        topology = cpplan.Topology.parse(TOPOLOGIES[int(rng.integers(len(TOPOLOGIES)))])
        budget = safe_budget(workload, topology, card, rng)
        started = time.perf_counter()
        try:
            result = cpplan.plan(workload, topology=topology, model=card, memory_bytes=budget, solver=profile)
        except Exception as exc:
            failures.append(f"call {call}: {type(exc).__name__}: {exc}")
            latencies[call] = time.perf_counter() - started
            continue
        latencies[call] = time.perf_counter() - started
        strategies[result.strategy] += 1
        num_split += any(w.split for w in result.plan.waves)
        if call % 10 == 0:
            verdict = cpplan.verify(result, workload, topology=topology, model=card, memory_bytes=budget)
            if not verdict.valid:
                failures.append(f"call {call}: plan does not verify: {verdict.violations[0]}")
        del result
        if (call + 1) % sample_every == 0:
            rss.append((call + 1, rss_mib()))
    gc.collect()
    rss.append((calls, rss_mib()))
    warm_index = max(1, len(rss) // 10)
    warm_calls, warm_rss = rss[warm_index]
    end_rss = rss[-1][1]
    tail = np.array(rss[warm_index:])
    slope = float(np.polyfit(tail[:, 0], tail[:, 1], 1)[0] * 1000) if len(tail) > 2 else 0.0
    return {
        "calls": calls,
        "seed": seed,
        "profile": profile.name,
        "time_budget_s": profile.time_budget_s,
        "strategies_run": [s for s in profile.strategies if s in cpplan.planners.PLANNERS],
        "strategies_missing": [s for s in profile.strategies if s not in cpplan.planners.PLANNERS],
        "failures": len(failures),
        "failure_examples": failures[:10],
        "latency_ms": {
            "p50": float(np.percentile(latencies, 50) * 1e3),
            "p90": float(np.percentile(latencies, 90) * 1e3),
            "p99": float(np.percentile(latencies, 99) * 1e3),
            "max": float(latencies.max() * 1e3),
            "mean": float(latencies.mean() * 1e3),
        },
        "over_time_budget": int((latencies > profile.time_budget_s).sum()),
        "rss_mib": {
            "start": rss[0][1],
            "after_warmup": warm_rss,
            "after_warmup_call": warm_calls,
            "end": end_rss,
            "growth_after_warmup": end_rss - warm_rss,
            "slope_per_1000_calls": slope,
            "samples": rss,
        },
        "memory_flat": end_rss - warm_rss < FLAT_LIMIT_MIB,
        "winners": dict(strategies),
        "shapes": dict(shapes),
        "calls_with_split_waves": num_split,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }


def print_table(figures: dict) -> None:
    """The soak's figures as a small table."""
    lat, mem = figures["latency_ms"], figures["rss_mib"]
    rows = [
        ("calls", f"{figures['calls']:,}"),
        ("failures", f"{figures['failures']}"),
        (
            "latency p50 / p90 / p99 / max (ms)",
            f"{lat['p50']:.1f} / {lat['p90']:.1f} / {lat['p99']:.1f} / {lat['max']:.1f}",
        ),
        (f"calls over the {figures['time_budget_s']:g} s budget", f"{figures['over_time_budget']}"),
        (
            "RSS start / after warm-up / end (MiB)",
            f"{mem['start']:.1f} / {mem['after_warmup']:.1f} / {mem['end']:.1f}",
        ),
        ("RSS growth after warm-up (MiB)", f"{mem['growth_after_warmup']:+.1f} (limit {FLAT_LIMIT_MIB:g})"),
        ("RSS slope (MiB per 1,000 calls)", f"{mem['slope_per_1000_calls']:+.2f}"),
        ("memory flat", "yes" if figures["memory_flat"] else "NO"),
        ("winning strategies", ", ".join(f"{k} {v}" for k, v in sorted(figures["winners"].items()))),
        ("calls with split waves", f"{figures['calls_with_split_waves']}"),
        ("workload shapes", ", ".join(f"{k} {v}" for k, v in sorted(figures["shapes"].items()))),
    ]
    width = max(len(name) for name, _ in rows)
    missing = figures["strategies_missing"]
    note = f" (not registered: {', '.join(missing)})" if missing else ""
    print(f"cpplan soak, profile {figures['profile']}: {', '.join(figures['strategies_run'])}{note}")
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    for failure in figures["failure_examples"]:
        print(f"  failure: {failure}")


def main() -> int:
    """Run, print, write JSON; exit 1 when a call failed or memory grew."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10_000, help="planning calls (default 10,000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=RESULTS / "soak.json", help="where to write the figures")
    args = parser.parse_args()
    if args.calls < 1:
        parser.error("--calls must be at least 1")
    figures = run(args.calls, args.seed)
    print_table(figures)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(figures, indent=1) + "\n")
    print(f"wrote {args.json}")
    return 0 if figures["failures"] == 0 and figures["memory_flat"] else 1


if __name__ == "__main__":
    sys.exit(main())
