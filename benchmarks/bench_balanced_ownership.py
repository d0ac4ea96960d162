"""Balanced ownership free of ranges against contiguous splits, wave by wave, on the ownership issue's steps.

Each step is planned under the ``deterministic`` profile (Qwen3.6-35B-A3B card); every wave of the plan
is then priced exactly (``price_wave``) two ways: *contiguous*, the cheapest fitting of the contiguous
splits the proposers priced before the balanced split came (balanced by total seconds, by tokens, and
by five mixes of the two costliest barriers' normalized seconds, with the memory edge's repair), and
*balanced*, the split free of ranges (:func:`cpplan.pricing.wave.balanced_ownership`: chunks longest
first by predicted seconds to the least-loaded rank within the memory floors); *priced* is what the
proposers' pricing now gives (the cheapest of the contiguous time- and token-balanced splits, the
balanced one and the repair), and *plan* the planned wave's own cost. The table gives, per step and
wave, the packed tokens, the hand-off mode and seconds of each, and the change from contiguous to
priced.

The steps: one GRPO wave (2 prompts x 8 completions, 2,048-token system prompt, 8,192-token prompts,
512-token completions) at CP8 and CP2, 20 GiB; agent trees (4 trees, depth 3, branching 3, turns of
1-4K tokens) at CP8 40 GiB and CP4 20 GiB; ten long unique sequences (log-normal, median 16K, at
most 24K tokens; the issue's "seed-like" wave: too few requests to give every rank whole ones) at CP8
40 GiB; a long tail of 24 sequences (median 4K, at most 32K) at CP4 40 GiB.

Usage: ``python benchmarks/bench_balanced_ownership.py [--output PATH]`` (prints a table, writes JSON,
default ``./cpplan-bench/bench_balanced_ownership.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import cpplan
from cpplan.bench import synthetic
from cpplan.bench.outputs import QUICK_FOLDER
from cpplan.pricing.ownership import contiguous_split
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import WavePlan, balanced_ownership, edge_ownership, price_wave

DEFAULT_OUTPUT = QUICK_FOLDER / "bench_balanced_ownership.json"
MODEL = "qwen3.6-35b-a3b"
PROFILE = "deterministic"


def _grpo() -> cpplan.Workload:
    return synthetic.grpo(
        num_prompts=2, group_size=8, system_tokens=2048, prompt_tokens=8192, completion_tokens=512
    )


def _agent() -> cpplan.Workload:
    return synthetic.agent_trees(num_trees=4, depth=3, branching=3, turn_tokens=(1024, 4096), seed=0)


def _ten_long() -> cpplan.Workload:
    return synthetic.long_tail(num_items=10, median_tokens=16384, max_tokens=24576, seed=3)


def _long_tail() -> cpplan.Workload:
    return synthetic.long_tail(num_items=24, median_tokens=4096, max_tokens=32768, seed=2)


STEPS: tuple[tuple[str, Callable[[], cpplan.Workload], int, str], ...] = (
    ("grpo", _grpo, 8, "20GiB"),
    ("agent_trees", _agent, 8, "40GiB"),
    ("agent_trees", _agent, 4, "20GiB"),
    ("ten_long", _ten_long, 8, "40GiB"),
    ("grpo", _grpo, 2, "20GiB"),
    ("long_tail", _long_tail, 4, "40GiB"),
)
"""(name, workload, CP size, memory per rank) of each step."""


def contiguous_splits(problem: Problem, wave: WavePlan) -> list[np.ndarray]:
    """The contiguous splits the proposers priced before the balanced split: by total seconds, by
    tokens, and by mixes ``k / 4`` of the two costliest barriers' seconds, each normalized to its wave
    total."""
    cp, constants = problem.topology.cp, problem.card.constants
    matrix = wave.stats.quantity_matrix()
    splits = [
        contiguous_split(matrix @ constants.time_coefficients, cp),
        contiguous_split(wave.stats.tokens.astype(np.float64), cp),
    ]
    per_barrier = matrix @ constants.barrier_coefficients.T
    totals = per_barrier.sum(axis=0)
    largest = np.argsort(-totals, kind="stable")[:2]
    if largest.size == 2 and totals[largest[1]] > 0:
        normalized = per_barrier[:, largest] / totals[largest]
        splits += [contiguous_split(normalized @ np.array([k / 4, 1 - k / 4]), cp) for k in range(5)]
    repaired = edge_ownership(problem, wave.stats, splits[0])
    return splits if repaired is None else [*splits, repaired]


def _cheapest(waves: list[WavePlan], memory_bytes: int) -> WavePlan:
    fitting = [w for w in waves if w.fits(memory_bytes)]
    return min(fitting, key=lambda w: w.cost_s) if fitting else min(waves, key=lambda w: w.peak_bytes)


def _priced(problem: Problem, wave: WavePlan, owner: np.ndarray | None) -> WavePlan:
    return price_wave(problem, wave.items, wave.layout, wave.layout_name, owner=owner, split=wave.split)


def _version(wave: WavePlan, memory_bytes: int) -> dict:
    return {
        "cost_s": wave.cost_s,
        "fits": wave.fits(memory_bytes),
        "contiguous": bool((np.diff(wave.owner) >= 0).all()),
        "gdn_handoff": wave.gdn_handoff,
        "handoff_s": wave.handoff.seconds,
        "rank_s_spread": float(wave.prices.time_s.max() - wave.prices.time_s.min()),
    }


def step_rows(name: str, build: Callable[[], cpplan.Workload], cp: int, memory: str) -> list[dict]:
    """One row per wave of the step's plan."""
    planner = cpplan.Planner(model=MODEL, topology=f"cp={cp}", memory_bytes=memory, solver=PROFILE)
    workload = build()
    started = time.perf_counter()
    result = planner.plan(workload)
    plan_s = time.perf_counter() - started
    problem = Problem.build(workload, planner.settings)
    rows = []
    for index, wave in enumerate(result.plan.waves):
        contiguous = _cheapest(
            [_priced(problem, wave, o) for o in contiguous_splits(problem, wave)], problem.memory_bytes
        )
        owner = balanced_ownership(problem, wave.stats)
        versions = {
            "plan": wave,
            "contiguous": contiguous,
            "priced": _priced(problem, wave, None),
            **({} if owner is None else {"balanced": _priced(problem, wave, owner)}),
        }
        rows.append(
            {
                "step": name,
                "cp": cp,
                "memory": memory,
                "wave": index,
                "num_waves": result.plan.num_waves,
                "packed_tokens": wave.packed_tokens,
                "layout": wave.layout_name,
                "plan_cost_s": result.plan.cost_s,
                "plan_s": plan_s,
                **{key: _version(w, problem.memory_bytes) for key, w in versions.items()},
                "change": versions["priced"].cost_s / contiguous.cost_s - 1,
                "loadavg": os.getloadavg(),
            }
        )
    return rows


HEADER = (
    f"{'step':<12} {'cp':>2} {'memory':>6} {'wave':>4} {'tokens':>8} {'contiguous s':>14} {'balanced s':>14} "
    f"{'priced s':>14} {'change':>7} {'plan s':>8} load"
)


def _cell(version: dict | None) -> str:
    if version is None:
        return f"{'-':>14}"
    mode = {"rounds": "r", "parallel": "p", "head_parallel": "h"}[version["gdn_handoff"]]
    fits = "" if version["fits"] else "!"
    return f"{version['cost_s']:>10.4f}{fits} {mode}{'' if version['contiguous'] else '*'}".rjust(14)


def print_row(r: dict) -> None:
    """One table line: each version's seconds, ``!`` where it does not fit, its hand-off mode (r, p, h)
    and ``*`` where it is not contiguous."""
    print(
        f"{r['step']:<12} {r['cp']:>2} {r['memory']:>6} {r['wave']:>4} {r['packed_tokens']:>8,} "
        f"{_cell(r['contiguous'])} {_cell(r.get('balanced'))} {_cell(r['priced'])} "
        f"{100 * r['change']:>6.2f}% "
        f"{r['plan']['cost_s']:>8.4f} {r['loadavg'][0]:.2f}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    """Run every step, print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help=f"default ./{DEFAULT_OUTPUT}")
    args = parser.parse_args(argv)
    print(HEADER)
    rows = []
    for step in STEPS:
        for row in step_rows(*step):
            print_row(row)
            rows.append(row)
    data = {"model": MODEL, "profile": PROFILE, "cpplan": cpplan.__file__, "rows": rows}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
