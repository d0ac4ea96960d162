"""The ownership model against the evaluator: does CP-SAT's objective price what runs, and does it decide?

For every instance (the quick bench suite, the README example, and held-out steps generated with other
seeds, at CP 1/2/4/8) ``cpplan.plan`` runs the deterministic profile's whole portfolio. Per instance:
the winning strategy, CP-SAT's model objective, the evaluator's price of CP-SAT's plan, their ratio, the
proven bound over the cheapest valid price, the terms of any difference, greedy's and the best other
candidate's price, and the wall time. Then the winner table and the margins. The bound table: per
instance the chosen plan's price, the bound (:mod:`cpplan.bound`) and its scope, the plan's gap over it
(``(plan - bound) / plan``) beside the ownership model's own gap over its proposed-waves bound, and
per CP size the distribution of both.

Usage: ``python benchmarks/bench_ownership.py [--quick] [--output PATH]`` (prints Markdown, writes JSON,
default ``benchmarks/results/bench_ownership.json``; with ``--quick``,
``./cpplan-bench/bench_ownership_quick.json``, so a quick run never overwrites the committed results).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections import Counter
from pathlib import Path

import numpy as np

import cpplan
from cpplan import Topology
from cpplan.bench import synthetic
from cpplan.bench.outputs import ResultFiles
from cpplan.bench.suites import grpo_ratio, grpo_shuffled, suite
from cpplan.errors import NoFitError

ROOT = Path(__file__).resolve().parents[1]
MODEL = "qwen3.6-35b-a3b"


def instances(quick: bool):
    """(name, held_out, workload, memory) of every instance family."""
    yield "readme", False, cpplan.Workload.from_jsonl(ROOT / "examples" / "grpo.jsonl"), "8GiB"
    for case in suite(quick=True):
        yield case.name, False, case.build(), "40GiB"
    if quick:
        return
    yield "heldout_grpo_shuffled", True, grpo_shuffled(seed=11), "40GiB"
    yield "heldout_grpo_1to1", True, grpo_ratio(group_size=8, ratio=(1, 1), num_prompts=6, seed=3), "40GiB"
    yield (
        "heldout_agent",
        True,
        synthetic.agent_trees(num_trees=3, depth=3, branching=3, turn_tokens=(512, 3072), seed=7),
        "40GiB",
    )
    yield (
        "heldout_long_tail",
        True,
        synthetic.long_tail(num_items=24, median_tokens=6000, max_tokens=32768, seed=5),
        "40GiB",
    )


def run_one(name: str, held_out: bool, workload, memory: str, cp: int) -> dict:
    """One instance: the portfolio's result, reduced to what this benchmark reports."""
    started = time.perf_counter()
    result = cpplan.plan(
        workload, topology=Topology(cp=cp), model=MODEL, memory_bytes=memory, solver="deterministic"
    )
    wall_s = time.perf_counter() - started
    by = {c.strategy: c for c in result.candidates}
    stats = result.solver
    ours = by.get("cpsat")
    others = {s: c.cost_s for s, c in by.items() if s != "cpsat" and c.valid}
    return {
        "case": name,
        "held_out": held_out,
        "cp": cp,
        "memory": memory,
        "winner": result.plan.strategy,
        "cost_s": result.plan.cost_s,
        "cpsat_status": stats.status,
        "objective_s": stats.objective_s,
        "price_s": ours.cost_s if ours is not None and ours.valid else None,
        "bound_s": stats.bound_s,
        "bound_scope": stats.bound_scope,
        "plan_gap": None
        if stats.bound_s is None
        else max(0.0, (result.cost_s - stats.bound_s) / result.cost_s),
        "model_gap": stats.model_gap,
        "bound_wall_s": stats.stage_s.get("bound"),
        "price_terms_s": dict(stats.price_terms_s),
        "greedy_s": others.get("greedy"),
        "best_other_s": min(others.values()) if others else None,
        "best_other": min(others, key=others.get) if others else None,
        "wall_s": wall_s,
    }


def summary(rows: list[dict]) -> dict:
    """Winner counts, objective/price ratios, bound validity and CP-SAT's margins."""
    priced = [r for r in rows if r["price_s"] and r["objective_s"] is not None]
    ratio = np.array([r["objective_s"] / r["price_s"] for r in priced])
    margin = np.array(
        [(r["best_other_s"] - r["price_s"]) / r["best_other_s"] for r in priced if r["best_other_s"]]
    )
    best = [min(x for x in (r["price_s"], r["best_other_s"]) if x is not None) for r in priced]
    bounds = [r["bound_s"] / b for r, b in zip(priced, best, strict=True) if r["bound_s"] is not None]
    return {
        "instances": len(rows),
        "winners": dict(Counter(r["winner"] for r in rows)),
        "cpsat_cheapest_or_tied": sum(
            r["price_s"] is not None and r["price_s"] <= r["cost_s"] * (1 + 1e-12) for r in rows
        ),
        "cpsat_no_costlier_than_greedy": sum(
            r["price_s"] is not None and r["greedy_s"] is not None and r["price_s"] <= r["greedy_s"] + 1e-9
            for r in rows
        ),
        "objective_over_price": {
            "min": float(ratio.min()),
            "median": float(np.median(ratio)),
            "max": float(ratio.max()),
            "within_3pct": int(((ratio >= 0.97) & (ratio <= 1.0 + 1e-9)).sum()),
            "above_price": int((ratio > 1.0 + 1e-9).sum()),
        },
        "cpsat_margin_over_best_other": {
            "median": float(np.median(margin)),
            "max": float(margin.max()),
            "min": float(margin.min()),
            "cheaper": int((margin > 1e-9).sum()),
        },
        "bound_over_best_price": {
            "min": float(min(bounds)),
            "median": float(np.median(bounds)),
            "max": float(max(bounds)),
        },
        "wall_s": {
            "median": float(np.median([r["wall_s"] for r in rows])),
            "max": float(max(r["wall_s"] for r in rows)),
        },
    }


def gap_distribution(rows: list[dict]) -> dict:
    """Per CP size: the plans' gaps over the bound of all plans, and the ownership model's own gaps over
    its bound of the proposed waves (median, 90th percentile, max; percent)."""

    def spread(values: list[float]) -> dict:
        if not values:
            return {}
        v = np.array(values) * 100
        return {
            "n": len(values),
            "median_pct": float(np.median(v)),
            "p90_pct": float(np.percentile(v, 90)),
            "max_pct": float(v.max()),
        }

    out = {}
    for cp in sorted({r["cp"] for r in rows}):
        at = [r for r in rows if r["cp"] == cp]
        out[str(cp)] = {
            "all_plans": spread([r["plan_gap"] for r in at if r["bound_scope"] == "all plans"]),
            "model_proposed_waves": spread([r["model_gap"] for r in at if r["model_gap"] is not None]),
            "scopes": dict(Counter(r["bound_scope"] for r in at)),
        }
    return out


def bound_table(rows: list[dict], distribution: dict) -> str:
    """Per instance plan, bound, scope and gap; then the gap distribution per CP size, as Markdown."""
    lines = [
        "| case | cp | plan s | bound s | scope | gap | model gap (proposed waves) | bound ms |",
        "|" + "---|" * 8,
    ]
    for r in rows:
        bound = "" if r["bound_s"] is None else f"{r['bound_s']:.4f}"
        gap = "" if r["plan_gap"] is None else f"{r['plan_gap'] * 100:.2f}%"
        model = "" if r["model_gap"] is None else f"{r['model_gap'] * 100:.2f}%"
        ms = "" if r["bound_wall_s"] is None else f"{r['bound_wall_s'] * 1e3:.1f}"
        lines.append(
            f"| {r['case']} | {r['cp']} | {r['cost_s']:.4f} | {bound} | {r['bound_scope']} | {gap} "
            f"| {model} | {ms} |"
        )
    lines += [
        "",
        "| cp | n | gap median | gap p90 | gap max | model gap median | model gap max |",
        "|" + "---|" * 7,
    ]

    def pct(d: dict, key: str) -> str:
        return f"{d[key]:.2f}%" if key in d else "-"

    for cp, d in distribution.items():
        a, m = d["all_plans"], d["model_proposed_waves"]
        lines.append(
            f"| {cp} | {a.get('n', 0)} | {pct(a, 'median_pct')} | {pct(a, 'p90_pct')} | {pct(a, 'max_pct')} "
            f"| {pct(m, 'median_pct')} | {pct(m, 'max_pct')} |"
        )
    return "\n".join(lines)


def table(rows: list[dict]) -> str:
    """Per instance, as Markdown."""
    lines = [
        "| case | cp | winner | objective s | price s | obj/price | bound/best | greedy s | best other "
        "| CP-SAT vs best other | wall s |",
        "|" + "---|" * 11,
    ]
    for r in rows:
        obj, price, other = r["objective_s"], r["price_s"], r["best_other_s"]
        if obj is None or price is None or other is None:  # CP-SAT did not answer: its status says why
            lines.append(f"| {r['case']} | {r['cp']} | {r['winner']} | {r['cpsat_status']} |" + " |" * 7)
            continue
        best = min(x for x in (price, other) if x is not None)
        lines.append(
            f"| {r['case']} | {r['cp']} | {r['winner']} | {obj:.4f} | {price:.4f} | {obj / price:.4f} "
            f"| {r['bound_s'] / best:.3f} | {r['greedy_s']:.4f} | {other:.4f} ({r['best_other']}) "
            f"| {(price - other) / other * 100:+.2f}% | {r['wall_s']:.1f} |"
        )
    return "\n".join(lines)


RESULTS = ROOT / "benchmarks" / "results" / "bench_ownership.json"
QUICK_RESULTS = Path("cpplan-bench") / "bench_ownership_quick.json"
"""Where ``--quick`` writes by default: relative to the current directory, away from :data:`RESULTS`."""


FILES = ResultFiles(results=RESULTS, quick=QUICK_RESULTS)
output_path = FILES.path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="The README example and the quick suite only.")
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help=f"default {RESULTS.name} in results/; with --quick, ./{QUICK_RESULTS}",
    )
    parser.add_argument(
        "--memory", help="One budget for every instance (default: 8GiB README, 40GiB others)."
    )
    parser.add_argument("--cp", type=int, nargs="+", default=[1, 2, 4, 8], help="CP sizes (default 1 2 4 8).")
    args = parser.parse_args(argv)
    args.output = output_path(quick=args.quick, output=args.output)
    rows = []
    for name, held_out, workload, memory in instances(args.quick):
        for cp in args.cp:
            try:
                rows.append(run_one(name, held_out, workload, args.memory or memory, cp))
            except NoFitError as exc:  # a budget too small for some request: no plan to bound
                print(f"{name} cp{cp}: no plan ({exc})", flush=True)
                continue
            r = rows[-1]
            print(
                f"{name} cp{cp}: {r['winner']} {r['cost_s']:.4f} s, CP-SAT objective {r['objective_s']} "
                f"price {r['price_s']}, bound {r['bound_s']} ({r['bound_scope']}) gap {r['plan_gap']} "
                f"({r['wall_s']:.1f} s, load {os.getloadavg()[0]:.2f})",
                flush=True,
            )
    distribution = gap_distribution(rows)
    result = {
        "settings": {
            "model": MODEL,
            "profile": "deterministic",
            "memory": args.memory or "8GiB README, 40GiB others",
            "python": platform.python_version(),
        },
        "load_average": os.getloadavg(),
        "summary": summary(rows),
        "gap_distribution": distribution,
        "rows": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    print(table(rows))
    print()
    print(bound_table(rows, distribution))
    print(f"load average {os.getloadavg()}")
    print(json.dumps(result["summary"], indent=1))
    print(f"saved {args.output}")


if __name__ == "__main__":
    main()
