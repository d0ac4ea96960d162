"""Scale benchmark (issue 17): planning time against the number of items and requests.

Workloads (qwen3.6-35b-a3b at full depth, CP4, 40 GiB per rank):

- ``small``: GRPO groups of 8 small rollouts, one item per rollout (prompt 32-256 tokens, completion
  16-128, a 64-token system prompt): 2,500 to 100,000 items;
- ``tiny``: the same with prompts of 8-32 and completions of 4-16 tokens;
- ``one_item``: a single item of 10,000 requests (one prompt, 10,000 completions), too large for one
  wave: the split path.

Per workload: building the problem, greedy alone to the end (no deadline), serializing and verifying
its plan, and the whole ``cpplan.plan`` call with the runtime profile (0.1 s budget: past its deadline
greedy packs the rest at once, so the call's time is the floor's, not the search's). With ``--pack``,
also ``cpplan pack`` of 20,000 small items with the offline (default) and deterministic profiles.

Usage: ``python benchmarks/bench_scale.py [--quick] [--pack] [--label NAME] [--output PATH]``. Prints a
table; writes JSON (default ``benchmarks/results/bench_scale.json``).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import cpplan
from cpplan.bench.synthetic import grpo, to_jsonl
from cpplan.planners.greedy import greedy_plan
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.pricing.problem import Problem
from cpplan.spec.workload import Item, Request, Workload
from cpplan.verifier import verify_plan

RESULTS = Path(__file__).parent / "results" / "bench_scale.json"
MODEL = "qwen3.6-35b-a3b"
TOPOLOGY = "cp=4"
MEMORY = "40GiB"


def small(num_items: int, seed: int = 0) -> Workload:
    """GRPO groups of 8 small rollouts, one item per rollout."""
    return grpo(
        num_prompts=num_items // 8,
        group_size=8,
        system_tokens=64,
        prompt_tokens=(32, 256),
        completion_tokens=(16, 128),
        items_per_prompt=False,
        seed=seed,
    )


def tiny(num_items: int, seed: int = 0) -> Workload:
    """GRPO groups of 8 tiny rollouts, one item per rollout."""
    return grpo(
        num_prompts=num_items // 8,
        group_size=8,
        system_tokens=8,
        prompt_tokens=(8, 32),
        completion_tokens=(4, 16),
        items_per_prompt=False,
        seed=seed,
    )


def one_item(num_requests: int, seed: int = 0) -> Workload:
    """One item: a 4,000-token prompt with ``num_requests`` completions of 64-512 tokens."""
    rng = np.random.default_rng(seed)
    prompt = rng.integers(0, 150_000, 4000)
    requests = tuple(
        Request(tokens=np.concatenate([prompt, rng.integers(0, 150_000, int(rng.integers(64, 513)))]))
        for _ in range(num_requests)
    )
    return Workload(items=(Item(id="big", requests=requests),))


def measure(name: str, workload: Workload, planner: cpplan.Planner) -> dict:
    """Build, greedy to the end, serialize and verify, and the whole runtime plan call."""
    t0 = time.perf_counter()
    problem = Problem.build(workload, planner.settings)
    t1 = time.perf_counter()
    plan = greedy_plan(problem, planner.profile.greedy.layouts)
    t2 = time.perf_counter()
    data = plan_to_dict(problem, plan)
    t3 = time.perf_counter()
    verdict = verify_plan(data, workload, problem.card, problem.memory_bytes)
    t4 = time.perf_counter()
    result = planner.plan(workload)
    t5 = time.perf_counter()
    return {
        "workload": name,
        "items": workload.num_items,
        "requests": workload.num_requests,
        "logical_tokens": workload.num_tokens,
        "build_s": t1 - t0,
        "greedy_s": t2 - t1,
        "serialize_s": t3 - t2,
        "verify_s": t4 - t3,
        "valid": verdict.valid,
        "greedy_waves": plan.num_waves,
        "greedy_cost_s": plan.cost_s,
        "plan_call_s": t5 - t4,
        "plan_call_cost_s": result.cost_s,
        "plan_call_waves": result.plan.num_waves,
        "plan_call_note": next((c.reason for c in result.candidates if c.strategy == result.strategy), ""),
    }


def pack_run(profile: str, num_items: int) -> dict:
    """``cpplan pack`` of ``num_items`` small items with ``profile``, in a fresh process."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "small.jsonl"
        path.write_text(to_jsonl(small(num_items)))
        command = [sys.executable, "-c", "from cpplan.cli import run; run()", "pack", str(path)]
        command += ["--model", MODEL, "--topology", TOPOLOGY, "--memory", MEMORY, "--solver", profile]
        command += ["--output", str(Path(tmp) / "out"), "--quiet"]
        t0 = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
    return {"profile": profile, "items": num_items, "wall_s": wall, "exit": done.returncode}


def print_rows(rows: list[dict], packs: list[dict]) -> None:
    """The scale table (and the pack runs)."""
    print(
        f"{'workload':9} {'items':>7} {'requests':>8} {'tokens':>10} {'build s':>8} {'greedy s':>8} "
        f"{'verify s':>8} {'plan() s':>8} {'us/item':>8} {'waves':>5}"
    )
    for r in rows:
        per_item = 1e6 * r["greedy_s"] / max(r["items"], r["requests"])
        print(
            f"{r['workload']:9} {r['items']:>7,} {r['requests']:>8,} {r['logical_tokens']:>10,} "
            f"{r['build_s']:>8.2f} {r['greedy_s']:>8.2f} {r['serialize_s'] + r['verify_s']:>8.2f} "
            f"{r['plan_call_s']:>8.2f} {per_item:>8.0f} {r['greedy_waves']:>5}"
        )
    for p in packs:
        print(
            f"cpplan pack {p['items']:,} small items, {p['profile']}: {p['wall_s']:.1f} s (exit {p['exit']})"
        )


def main() -> None:
    """Run the benchmark and write its JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="up to 10,000 items, no 100K or tiny runs")
    parser.add_argument("--pack", action="store_true", help="also time cpplan pack of 20,000 items")
    parser.add_argument("--max-items", type=int, default=100_000, help="skip larger workloads")
    parser.add_argument("--label", default="after")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    planner = cpplan.Planner(model=MODEL, topology=TOPOLOGY, memory_bytes=MEMORY)
    sizes = (2_500, 5_000, 10_000) if args.quick else (2_500, 5_000, 10_000, 20_000, 50_000, 100_000)
    rows = [measure("small", small(n), planner) for n in sizes if n <= args.max_items]
    if not args.quick:
        if args.max_items >= 100_000:
            rows.append(measure("tiny", tiny(100_000), planner))
        rows.append(measure("one_item", one_item(10_000), planner))
    packs = [pack_run(p, 20_000) for p in ("offline", "deterministic")] if args.pack else []
    print_rows(rows, packs)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(args.output.read_text()) if args.output.exists() else {}
    data[args.label] = {
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "rows": rows,
        "packs": packs,
    }
    args.output.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
