"""Greedy planner and prefix-tree timings.

``python benchmarks/bench_greedy.py [--repeats N]`` prints a table and writes
``benchmarks/results/greedy.json``: median and p90 wall time of the greedy exact planner (problem
build included) on DESIGN.md's 16-request GRPO wave and on 200K unique tokens at CP4, the tree build
at growing sizes (time per token shows the scaling), and the bundled example's packed/logical tokens.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

import cpplan
from cpplan.bench.synthetic import grpo, long_tail
from cpplan.planners.greedy import greedy_plan
from cpplan.pricing.problem import Problem
from cpplan.pricing.tree import PrefixTree
from cpplan.spec.settings import Settings

RESULTS = Path(__file__).parent / "results"
LAYOUTS = ("full", "none", "min_span:512")


def timed(fn, repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    card = cpplan.load_model("qwen3.6-35b-a3b")
    rows = []
    grpo16 = grpo(num_prompts=2, group_size=8, system_tokens=2048, prompt_tokens=8192, completion_tokens=512)
    unique = long_tail(num_items=64, median_tokens=3000, max_tokens=16000, seed=5)
    scale = 200_000 / unique.num_tokens
    unique = cpplan.Workload.from_items(
        cpplan.Item(
            id=i.id,
            requests=(
                cpplan.Request(tokens=np.resize(i.requests[0].tokens, max(16, int(i.num_tokens * scale)))),
            ),
        )
        for i in unique.items
    )
    for name, wl, cp in (("grpo 2x8 (16 requests)", grpo16, 4), ("200K unique tokens", unique, 4)):
        problem = Problem.build(
            wl, Settings(topology=cpplan.Topology(cp=cp), model=card, memory_bytes=80 * 2**30)
        )
        plan = greedy_plan(problem, LAYOUTS)
        # A fresh problem each run: priced waves and plans are cached per problem object.
        samples = timed(
            lambda w=wl, c=cp: greedy_plan(
                Problem.build(
                    w, Settings(topology=cpplan.Topology(cp=c), model=card, memory_bytes=80 * 2**30)
                ),
                LAYOUTS,
            ),
            args.repeats,
        )
        build = timed(
            lambda w=wl, c=cp: Problem.build(
                w, Settings(topology=cpplan.Topology(cp=c), model=card, memory_bytes=80 * 2**30)
            ),
            args.repeats,
        )
        rows.append(
            {
                "case": name,
                "cp": cp,
                "items": wl.num_items,
                "logical_tokens": wl.num_tokens,
                "packed_tokens": plan.packed_tokens,
                "waves": plan.num_waves,
                "greedy_median_ms": 1e3 * statistics.median(samples),
                "greedy_p90_ms": 1e3 * float(np.percentile(samples, 90)),
                "problem_build_median_ms": 1e3 * statistics.median(build),
            }
        )
    tree_rows = []
    rng = np.random.default_rng(0)
    for total in (50_000, 200_000, 800_000):
        base = rng.integers(0, 150_000, 4096)
        seqs = [
            np.concatenate([base[: rng.integers(256, 4096)], rng.integers(0, 150_000, 1024)])
            for _ in range(total // 3000)
        ]
        tokens = sum(s.size for s in seqs)
        samples = timed(lambda s=seqs: PrefixTree(s), 5)
        tree_rows.append(
            {
                "tokens": tokens,
                "requests": len(seqs),
                "median_ms": 1e3 * statistics.median(samples),
                "ns_per_token": 1e9 * statistics.median(samples) / tokens,
            }
        )
    example = cpplan.Workload.from_jsonl(Path(__file__).parent.parent / "examples" / "grpo.jsonl")
    result = cpplan.plan(example, topology=cpplan.Topology(cp=2), model=card, memory_bytes="12GiB")
    bundled = {
        "logical_tokens": result.plan.logical_tokens,
        "packed_tokens": result.plan.packed_tokens,
        "ratio": result.plan.packed_tokens / result.plan.logical_tokens,
        "waves": result.plan.num_waves,
    }
    print(
        f"{'case':26} {'cp':>3} {'items':>6} {'logical':>9} {'packed':>9} {'waves':>5} "
        f"{'greedy med ms':>13} {'p90 ms':>8} {'build ms':>9}"
    )
    for r in rows:
        print(
            f"{r['case']:26} {r['cp']:>3} {r['items']:>6} {r['logical_tokens']:>9,} {r['packed_tokens']:>9,} "
            f"{r['waves']:>5} {r['greedy_median_ms']:>13.2f} {r['greedy_p90_ms']:>8.2f} "
            f"{r['problem_build_median_ms']:>9.2f}"
        )
    print(f"\n{'tree tokens':>12} {'requests':>9} {'median ms':>10} {'ns/token':>9}")
    for r in tree_rows:
        print(f"{r['tokens']:>12,} {r['requests']:>9} {r['median_ms']:>10.2f} {r['ns_per_token']:>9.1f}")
    print(
        f"\nbundled example: {bundled['packed_tokens']:,} packed of {bundled['logical_tokens']:,} logical "
        f"({bundled['ratio']:.1%}), {bundled['waves']} waves at cp=2, 12 GiB"
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "greedy.json").write_text(
        json.dumps({"greedy": rows, "tree": tree_rows, "bundled": bundled}, indent=1) + "\n"
    )


if __name__ == "__main__":
    main()
