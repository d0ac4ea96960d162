"""Materialization speed: one CP rank's batch, all eight ranks, and the layout's own per-segment loop.

Three ~256K-token waves at CP8 (full sharing): a GRPO shape (few, long shared segments), agent trees
(many short segments, deep chains) and unique long-tail sequences (no sharing). For each, the median
over ``--repeats`` runs of: ``materialize`` for one rank (median over ranks), the eight ``materialize``
calls of a step, ``materialize_wave`` (whole-wave work once, eight ranks cut from it), building one
rank's tree-mask metadata (depths and ancestor table) and its flex_attention BlockMask (128-token
blocks, from segment intervals), and ``PackedLayout.token_metadata`` (the
layout's per-segment Python loop that fills the whole wave's ids and positions) as the baseline.

    python benchmarks/bench_materialize.py [--repeats 5] [--output out/bench_materialize.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from cpplan import Plan, Problem, Topology, load_model, materialize_wave
from cpplan.bench import synthetic
from cpplan.pricing.wave import price_wave
from cpplan.runtime.attention_mask import TreeMask
from cpplan.runtime.materialize import materialize
from cpplan.spec.settings import Settings

CP = 8


def shapes() -> dict[str, object]:
    """The benchmark workloads (deterministic)."""
    return {
        "grpo": synthetic.grpo(
            num_prompts=21, group_size=8, system_tokens=2048, prompt_tokens=8192, completion_tokens=512
        ),
        "agent_trees": synthetic.agent_trees(
            num_trees=10, depth=4, branching=3, turn_tokens=(300, 900), seed=1
        ),
        "long_tail": synthetic.long_tail(num_items=64, median_tokens=3000, max_tokens=16384, seed=2),
    }


def one_wave(workload) -> tuple[Plan, Problem]:
    """All items in one full-sharing wave with the planner's contiguous CP8 ownership."""
    problem = Problem.build(
        workload, Settings(topology=Topology(cp=CP), model=load_model("qwen3-8b"), memory_bytes=2**40)
    )
    items = list(range(problem.num_items))
    wave = price_wave(problem, items, problem.pack(items, "full"), "full")
    return Plan(strategy="bench", waves=(wave,)), problem


def median_s(fn, repeats: int) -> float:
    """Median wall seconds of ``fn()`` over ``repeats`` runs."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(name: str, workload, repeats: int) -> dict:
    """Timings and sizes for one shape."""
    plan, problem = one_wave(workload)
    wave = plan.waves[0]
    per_rank = [median_s(lambda r=r: materialize(plan, workload, wave=0, rank=r), repeats) for r in range(CP)]
    batches = materialize_wave(plan, workload, wave=0)
    return {
        "shape": name,
        "packed_tokens": wave.packed_tokens,
        "logical_tokens": wave.logical_tokens,
        "segments": wave.layout.num_segments,
        "requests": int(wave.layout.request_ids.size),
        "rank_tokens": [b.num_tokens for b in batches],
        "one_rank_s": statistics.median(per_rank),
        "eight_calls_s": sum(per_rank),
        "wave_s": median_s(lambda: materialize_wave(plan, workload, wave=0), repeats),
        "mask_metadata_s": median_s(lambda: TreeMask.for_batch(batches[0]), repeats),
        "block_mask_s": median_s(lambda: TreeMask.for_batch(batches[0]).block_mask(block_size=128), repeats),
        "token_metadata_s": median_s(lambda: wave.layout.token_metadata(problem.tree), repeats),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output", type=Path, default=Path("out/bench_materialize.json"))
    args = parser.parse_args()
    rows = [measure(name, workload, args.repeats) for name, workload in shapes().items()]
    header = (
        f"{'shape':<12} {'packed':>8} {'logical':>9} {'segs':>5} {'one rank':>9} {'8 calls':>8} {'wave':>8} "
        f"{'mask md':>8} {'BlockMask':>9} {'layout loop':>11} {'8 calls/wave':>12} {'loop/wave':>9}"
    )
    print(f"median of {args.repeats} runs, CP{CP}, milliseconds")
    print(header)
    for r in rows:
        print(
            f"{r['shape']:<12} {r['packed_tokens']:>8,} {r['logical_tokens']:>9,} {r['segments']:>5} "
            f"{r['one_rank_s'] * 1e3:>9.1f} {r['eight_calls_s'] * 1e3:>8.1f} {r['wave_s'] * 1e3:>8.1f} "
            f"{r['mask_metadata_s'] * 1e3:>8.1f} {r['block_mask_s'] * 1e3:>9.1f} "
            f"{r['token_metadata_s'] * 1e3:>11.1f} "
            f"{r['eight_calls_s'] / r['wave_s']:>12.2f} {r['token_metadata_s'] / r['wave_s']:>9.2f}"
        )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"cp": CP, "repeats": args.repeats, "rows": rows}, indent=1) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
