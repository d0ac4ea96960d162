"""Scale benchmark: planning time against the number of items and requests.

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
table; writes JSON (default ``benchmarks/results/bench_scale.json``; with ``--quick``,
``./cpplan-bench/bench_scale_quick.json``, so a quick run never overwrites the committed results).

``--cluster`` instead plans a real cluster's GRPO step as a trainer would: P prompts of 1K-8K
tokens x 8 completions of 256-4K tokens (one item per prompt), Qwen3.6-35B-A3B, 80 GiB per rank, a kept
``cpplan.Planner`` with the runtime profile and a 0.1 s budget, for each size of ``--sizes`` (completions)
and each ``dp x cp`` of ``--topologies``. Per size and topology, interleaved and repeated ``--repeats``
times: each sampled DP rank's call ``plan(step, 0.1, replica=k)`` (partition included; p50/p95 of the
wall), the step's plan assembled from every replica's share (``replica="all"``), the joint runtime call of
the whole step (``plan(step, 0.1)``: the path before partitioning) and, up to ``--reference-max``
completions, the deterministic profile's whole-step plan (the reference the runtime plan's seconds are
divided by). Load average beside every row. Writes JSON (``bench_scale_cluster.json``) and a log-log
plot of per-rank wall against completions with each topology's fitted growth exponent
(``docs/scale_wall.png``).

``--cluster --fixed-share [--busy N]`` keeps every replica's share the same (``--share-rows``:
completions x dp x cp, 128 completions per replica at cp 8) and adds one-node steps (``--node-rows``):
sampled DP ranks' calls ``plan(step, 0.1, replica=k)`` on a fresh step object each, the default call
``plan(step, 0.1)`` (the partitioned step) beside them, the deterministic plan as the reference, and
the fitted growth exponent of the replica call's wall; ``--busy N`` runs it all beside ``N`` processes
spinning a core each (:mod:`cpplan.bench.load`).

``--cluster --build-times`` prints the CP-SAT stages' build times beside the runtime profile's
``[timing]`` estimates (``joint_needs_s``, ``ownership_needs_s``) on the ``--fixed-share`` rows: how the
estimates the stages decide by were measured.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import cpplan
from cpplan.bench.load import busy_processes
from cpplan.bench.outputs import ResultFiles
from cpplan.bench.synthetic import agent_rollouts, grpo, to_jsonl
from cpplan.planners.greedy import greedy_plan
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.pricing.problem import Problem
from cpplan.spec.workload import Item, Request, Workload
from cpplan.verifier import verify_plan

RESULTS = Path(__file__).parent / "results" / "bench_scale.json"
CLUSTER_RESULTS = Path(__file__).parent / "results" / "bench_scale_cluster.json"
QUICK_RESULTS = Path("cpplan-bench") / "bench_scale_quick.json"
"""Where ``--quick`` writes by default: relative to the current directory, away from :data:`RESULTS`."""
CLUSTER_PLOT = Path(__file__).parent.parent / "docs" / "scale_wall.png"
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


def cluster_step(num_completions: int, seed: int = 0) -> Workload:
    """The cluster GRPO step: ``num_completions / 8`` prompts of 1K-8K tokens x 8 completions of
    256-4K tokens, one item per prompt."""
    return grpo(
        num_prompts=num_completions // 8,
        group_size=8,
        system_tokens=0,
        prompt_tokens=(1024, 8192),
        completion_tokens=(256, 4096),
        seed=seed,
    )


def agent_step(seed: int) -> Workload:
    """The runtime benchmark's agent step: 6 tasks x 4 rollouts of three turns, one item per rollout."""
    return agent_rollouts(
        num_tasks=6,
        rollouts_per_task=4,
        num_turns=(3, 3),
        task_tokens=(1000, 2000),
        turn_tokens=(400, 1400),
        seed=seed,
    )


def cluster_row(num_completions: int, dp: int, cp: int, repeats: int, ranks: int, reference_max: int) -> dict:
    """One size and topology of ``--cluster``: per-rank calls of sampled replicas, the assembled step,
    the joint runtime call and (small enough) the deterministic reference, interleaved ``repeats`` times."""
    workload = cluster_step(num_completions)
    topology = cpplan.Topology(dp=dp, cp=cp)
    planner = cpplan.Planner(model=MODEL_CLUSTER, topology=topology, memory_bytes="80GiB", solver="runtime")
    sampled = sorted({round(k * (dp - 1) / max(ranks - 1, 1)) for k in range(min(ranks, dp))})
    rank_walls, rank_loads, step_costs, joint_walls, joint_costs, waves, cpsat_share = (
        [],
        [],
        [],
        [],
        [],
        [],
        [],
    )
    notes: set[str] = set()
    greedy_done: list[float] = []
    hurried: list[bool] = []
    for _ in range(repeats):
        for k in sampled:
            fresh = workload.model_copy()  # a new step object: the partition is computed again, as on a rank
            t0 = time.perf_counter()
            result = planner.plan(fresh, 0.1, replica=k)
            wall = time.perf_counter() - t0
            rank_walls.append(wall)
            rank_loads.append(os.getloadavg()[0])
            later = math.fsum(c.wall_s for c in result.candidates if c.strategy != "greedy")
            greedy_done.append(wall - later)  # greedy runs first: the call until its plan was verified
            hurried.append(any("deadline reached" in c.reason for c in result.candidates))
            cpsat_share.append(result.strategy == "cpsat")
            notes.update(n for n in result.plan.notes if "deadline" in n)
        whole = planner.plan(workload.model_copy(), 0.1, replica="all")
        step_costs.append(whole.cost_s)
        waves.append(whole.plan.num_waves)
        t0 = time.perf_counter()
        joint = planner.plan(workload, 0.1)
        joint_walls.append(time.perf_counter() - t0)
        joint_costs.append(joint.cost_s)
    reference_s = reference_wall = None
    if num_completions <= reference_max:
        exact = cpplan.Planner(
            model=MODEL_CLUSTER, topology=topology, memory_bytes="80GiB", solver="deterministic"
        )
        t0 = time.perf_counter()
        reference_s = exact.plan(workload).cost_s
        reference_wall = time.perf_counter() - t0
    part = planner.partition(workload)
    return {
        "completions": num_completions,
        "items": workload.num_items,
        "dp": dp,
        "cp": cp,
        "sampled_replicas": sampled,
        "rank_wall_p50_s": float(np.percentile(rank_walls, 50)),
        "rank_wall_p95_s": float(np.percentile(rank_walls, 95)),
        "rank_walls_s": rank_walls,
        "rank_load_avg": rank_loads,
        "rank_cpsat_share": float(np.mean(cpsat_share)),
        "rank_greedy_done_p50_s": float(np.percentile(greedy_done, 50)),
        "rank_greedy_done_p95_s": float(np.percentile(greedy_done, 95)),
        "rank_greedy_hurried_share": float(np.mean(hurried)),
        "rank_deadline_notes": sorted(notes),
        "step_cost_s": float(np.median(step_costs)),
        "step_waves": int(np.median(waves)),
        "joint_wall_p50_s": float(np.percentile(joint_walls, 50)),
        "joint_cost_s": float(np.median(joint_costs)),
        "reference_cost_s": reference_s,
        "reference_wall_s": reference_wall,
        "step_over_reference": None if reference_s is None else float(np.median(step_costs)) / reference_s,
        "joint_over_reference": None if reference_s is None else float(np.median(joint_costs)) / reference_s,
        "replica_price_spread": max(part.replica_price_s) / max(min(part.replica_price_s), 1e-12),
        "load_avg": os.getloadavg(),
    }


MODEL_CLUSTER = "qwen3.6-35b-a3b"
SHARE_ROWS = "1024x8x8,1024x16x4,2048x16x8,4096x32x8,8192x64x8,16384x128x8"
"""``--fixed-share`` rows (completions x dp x cp): at cp 8 every replica plans 128 completions."""
NODE_ROWS = "64x4,64x8,256x4,256x8,agentx4,agentx8"
"""``--fixed-share`` one-node rows (dp = 1): completions (or the agent step) x cp."""


def print_cluster(rows: list[dict]) -> None:
    """The cluster table: per-rank wall p50/p95, the step's plan over the deterministic one, the joint
    call beside it."""
    print(
        f"{'compl':>6} {'dp x cp':>7} {'rank p50 ms':>11} {'rank p95 ms':>11} {'greedy p95':>10} "
        f"{'hurried':>7} {'step s':>7} {'waves':>5} "
        f"{'det s':>7} {'step/det':>8} {'joint ms':>8} {'joint s':>7} {'joint/det':>9} {'load':>5}"
    )
    for r in rows:
        det = "-" if r["reference_cost_s"] is None else f"{r['reference_cost_s']:.3f}"
        ratio = "-" if r["step_over_reference"] is None else f"{r['step_over_reference']:.3f}"
        joint_ratio = "-" if r["joint_over_reference"] is None else f"{r['joint_over_reference']:.3f}"
        print(
            f"{r['completions']:>6,} {r['dp']:>3} x {r['cp']:<2} {1e3 * r['rank_wall_p50_s']:>11.1f} "
            f"{1e3 * r['rank_wall_p95_s']:>11.1f} {1e3 * r['rank_greedy_done_p95_s']:>10.1f} "
            f"{r['rank_greedy_hurried_share']:>7.0%} {r['step_cost_s']:>7.3f} {r['step_waves']:>5} {det:>7} "
            f"{ratio:>8} {1e3 * r['joint_wall_p50_s']:>8.0f} {r['joint_cost_s']:>7.3f} {joint_ratio:>9} "
            f"{r['load_avg'][0]:>5.2f}"
        )


def growth_exponents(rows: list[dict], key: str = "rank_wall_p50_s") -> dict[str, float]:
    """Per topology, the slope of log(``key``) against log(completions) (least squares)."""
    found = {}
    for dp, cp in sorted({(r["dp"], r["cp"]) for r in rows}):
        mine = sorted((r["completions"], r[key]) for r in rows if (r["dp"], r["cp"]) == (dp, cp))
        if len(mine) >= 2:
            x, y = np.log([m[0] for m in mine]), np.log([m[1] for m in mine])
            found[f"{dp}x{cp}"] = float(np.polyfit(x, y, 1)[0])
    return found


def plot_cluster(rows: list[dict], path: Path) -> None:
    """Log-log plots against completions, one line per topology with its fitted exponent in the legend:
    the per-rank call's wall (p50, band to p95; the 0.1 s budget drawn) and the time until greedy's
    complete plan was verified (the work itself, which the budget does not flatten)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("rank_wall_p50_s", "rank_wall_p95_s", "per-rank call wall (s), p50 to p95"),
        ("rank_greedy_done_p50_s", "rank_greedy_done_p95_s", "until greedy's plan is verified (s)"),
    )
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, (low, high, label) in zip(axes, panels, strict=True):
        exponents = growth_exponents(rows, low)
        for dp, cp in sorted({(r["dp"], r["cp"]) for r in rows}):
            mine = sorted((r for r in rows if (r["dp"], r["cp"]) == (dp, cp)), key=lambda r: r["completions"])
            x = [r["completions"] for r in mine]
            name = f"dp{dp} x cp{cp}"
            if f"{dp}x{cp}" in exponents:
                name += f" (~ n^{exponents[f'{dp}x{cp}']:.2f})"
            ax.plot(x, [r[low] for r in mine], marker="o", label=name)
            ax.fill_between(x, [r[low] for r in mine], [r[high] for r in mine], alpha=0.2)
        ax.axhline(0.1, color="gray", linestyle="--", linewidth=1, label="budget 0.1 s")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("completions per step")
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
    fig.suptitle("cpplan runtime profile, plan(step, 0.1, replica=k), Qwen3.6-35B-A3B, 80 GiB per rank")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def share_row(name: str, workload: Workload, dp: int, cp: int, args: argparse.Namespace) -> dict:
    """One row of ``--cluster --fixed-share``: a kept runtime ``Planner`` at ``dp x cp``; per round, each
    sampled DP rank's call ``plan(step, 0.1, replica=k)`` on a fresh step object (the partition computed
    again, as on a rank; at dp = 1 the call is ``plan(step, 0.1)``), then, at dp > 1, the default call
    ``plan(step, 0.1)`` (the partitioned step); once, small enough, the deterministic profile's joint
    plan (the reference). The load average is read beside every call."""
    planner = cpplan.Planner(
        model=MODEL_CLUSTER, topology=cpplan.Topology(dp=dp, cp=cp), memory_bytes="80GiB", solver="runtime"
    )
    sampled = sorted({round(k * (dp - 1) / max(args.ranks - 1, 1)) for k in range(min(args.ranks, dp))})
    call = (lambda w, k: planner.plan(w, 0.1, replica=k)) if dp > 1 else (lambda w, k: planner.plan(w, 0.1))
    call(workload.model_copy(), 0)  # warm: the first call of a process pays for imports
    rank, default = CallRecord(), CallRecord()
    for _ in range(args.repeats):
        for k in sampled:
            rank.add(call, workload.model_copy(), k)
        if dp > 1:
            default.add(lambda w, _: planner.plan(w, 0.1), workload.model_copy(), None)
    reference_s = None
    if workload.num_requests <= args.reference_max:
        exact = cpplan.Planner(
            model=MODEL_CLUSTER,
            topology=cpplan.Topology(dp=dp, cp=cp),
            memory_bytes="80GiB",
            solver="deterministic",
        )
        reference_s = exact.plan(workload).cost_s
    return {
        "workload": name,
        "completions": workload.num_requests,
        "items": workload.num_items,
        "dp": dp,
        "cp": cp,
        "budget_s": 0.1,
        "sampled_replicas": sampled,
        "rank": rank.summary(reference_s),
        "default": default.summary(reference_s) if dp > 1 else None,
        "reference_cost_s": reference_s,
        "load_avg": os.getloadavg(),
    }


class CallRecord:
    """Walls, load averages, strategies and costs of repeated planning calls."""

    def __init__(self) -> None:
        self.walls_s: list[float] = []
        self.loads: list[float] = []
        self.cpsat: list[float] = []
        self.hurried: list[bool] = []
        self.costs_s: list[float] = []
        self.cpu_shares: list[float] = []

    def add(self, call, workload: Workload, k: int | None) -> None:
        """Time ``call(workload, k)`` (its wall, and its thread's CPU time over it: the share of a CPU
        it got) and record what it returned."""
        t0, cpu0 = time.perf_counter(), time.thread_time()
        result = call(workload, k)
        self.walls_s.append(time.perf_counter() - t0)
        self.cpu_shares.append((time.thread_time() - cpu0) / self.walls_s[-1])
        self.loads.append(os.getloadavg()[0])
        self.cpsat.append(float(np.mean([c.strategy == "cpsat" for c in _winners(result)])))
        reasons = [c.reason for c in result.candidates] + list(result.plan.notes)
        self.hurried.append(any("deadline" in r for r in reasons))
        self.costs_s.append(result.cost_s)

    def summary(self, reference_s: float | None) -> dict:
        """p50 / p95 / max of the walls, their ratio to the 0.1 s budget, the shares of calls CP-SAT
        answered and greedy hurried, the median cost and its ratio to ``reference_s``."""
        walls = np.array(self.walls_s)
        cost = float(np.median(self.costs_s))
        return {
            "wall_p50_s": float(np.percentile(walls, 50)),
            "wall_p95_s": float(np.percentile(walls, 95)),
            "wall_max_s": float(walls.max()),
            "p95_over_budget": float(np.percentile(walls, 95)) / 0.1,
            "walls_s": self.walls_s,
            "load_avg": self.loads,
            "cpsat_share": float(np.mean(self.cpsat)),
            "hurried_share": float(np.mean(self.hurried)),
            "cost_s": cost,
            "over_reference": None if reference_s is None else cost / reference_s,
            "cpu_share_p50": float(np.median(self.cpu_shares)),
        }


def _winners(result: cpplan.PlanResult) -> list:
    """The candidates that were planned: every replica's winner in a partitioned step, else the result's
    own winner."""
    if all(c.reason.startswith("replica") for c in result.candidates):
        return list(result.candidates)
    return [c for c in result.candidates if c.strategy == result.strategy][:1]


def run_partition(args: argparse.Namespace) -> None:
    """``--cluster --partition``: :func:`~cpplan.planners.replica_partition.partition_items` alone on the
    fixed-share rows, and beside it what validating the step's items adds for their prefix digests
    (:func:`~cpplan.spec.prefix_digest.prefix_digest` of every item, which the partition reads instead
    of the tokens) and the whole validation of the step (its items built anew from their token arrays,
    digests included), medians of ``--repeats`` runs, the load average beside each (printed, and written
    to ``--output`` when given, label ``partition``)."""
    from cpplan.planners.replica_partition import partition_items
    from cpplan.spec.prefix_digest import prefix_digest

    rows = []
    for spec in filter(None, args.share_rows.split(",")):
        n, dp, cp = (int(v) for v in spec.split("x"))
        workload = cluster_step(n)
        planner = cpplan.Planner(
            model=MODEL_CLUSTER, topology=cpplan.Topology(dp=dp, cp=cp), memory_bytes="80GiB"
        )
        tokens = [[r.tokens for r in item.requests] for item in workload.items]
        walls, digests, validations = [], [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            Workload(
                items=tuple(
                    Item(id=item.id, requests=tuple(Request(tokens=t) for t in requests))
                    for item, requests in zip(workload.items, tokens, strict=True)
                )
            )
            validations.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            partition_items(workload, planner.card, planner.settings.topology)
            walls.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for requests in tokens:
                prefix_digest(requests)
            digests.append(time.perf_counter() - t0)
        rows.append(
            {
                "completions": n,
                "dp": dp,
                "cp": cp,
                "median_ms": 1e3 * float(np.median(walls)),
                "digest_median_ms": 1e3 * float(np.median(digests)),
                "validate_median_ms": 1e3 * float(np.median(validations)),
                "load_avg": os.getloadavg()[0],
            }
        )
        print(
            f"partition {n:>6,} completions dp {dp:>3} x cp {cp}: {rows[-1]['median_ms']:.1f} ms; the items' "
            f"digests {rows[-1]['digest_median_ms']:.1f} ms of the step's validation "
            f"{rows[-1]['validate_median_ms']:,.0f} ms (medians of {len(walls)}), load average "
            f"{rows[-1]['load_avg']:.2f}"
        )
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps({"partition": {"rows": rows}}, indent=1) + "\n")


def run_build_times(args: argparse.Namespace) -> None:
    """``--cluster --build-times``: the CP-SAT stages' build times beside the runtime profile's
    ``[timing]`` estimates of them, on replica 0's share of each ``--share-rows`` row and on each
    ``--node-rows`` step: the joint model (decision space, item floors, model and greedy's hint) and the
    ownership model over greedy's waves (its free columns as the runtime profile frees them), medians of
    ``--repeats`` builds, the load average beside each (printed only)."""
    from cpplan.cpsat.owned_model import compile_owned, pool_columns
    from cpplan.planners.cpsat_strategy import compile_for, greedy_values
    from cpplan.planners.deadline import Deadline
    from cpplan.planners.decide import free_chunks
    from cpplan.planners.greedy import best_greedy_plan

    profile = cpplan.load_solver("runtime")
    timing = profile.timing
    for name, problem in _build_problems(args):
        greedy = best_greedy_plan(problem, profile.greedy.layouts, Deadline.after(1.0, deterministic=True))
        joint_s, owned_s = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            space, compiled = compile_for(problem, profile, greedy)
            compiled.add_hint(greedy_values(compiled, space, greedy))
            joint_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            columns = pool_columns(problem, [greedy.waves], max_free=profile.ownership.columns)
            compile_owned(problem, columns, window_chunks=profile.ownership.window_chunks)
            owned_s.append(time.perf_counter() - t0)
        chunks = free_chunks(columns)
        joint_est = timing.joint_needs_s(problem.num_items) - timing.min_search_s
        num_free = sum(c.free for c in columns)
        owned_est = timing.ownership_needs_s(num_free, chunks) - timing.min_search_s
        print(
            f"{name:>16} {problem.num_items:>4} items: joint build {1e3 * float(np.median(joint_s)):6.1f} ms "
            f"(estimate {1e3 * joint_est:5.1f}); {num_free} free columns of {chunks:>5} chunks: "
            "ownership build "
            f"{1e3 * float(np.median(owned_s)):6.1f} ms (estimate {1e3 * owned_est:5.1f}); "
            f"load average {os.getloadavg()[0]:.2f}"
        )


def _build_problems(args: argparse.Namespace):
    """``(name, problem)`` for replica 0's share of each ``--share-rows`` row and each ``--node-rows``
    step, as the planner's calls build them."""
    from cpplan.planners.replica_partition import replica_settings, replica_workload

    for spec in filter(None, args.share_rows.split(",")):
        n, dp, cp = (int(v) for v in spec.split("x"))
        topology = cpplan.Topology(dp=dp, cp=cp)
        planner = cpplan.Planner(model=MODEL_CLUSTER, topology=topology, memory_bytes="80GiB")
        workload = cluster_step(n)
        share = replica_workload(workload, planner.partition(workload).items(0), 0)
        yield f"{n}x{dp}x{cp} share", Problem.build(share, replica_settings(planner.settings))
    for spec in filter(None, args.node_rows.split(",")):
        kind, cp = spec.split("x")
        workload = agent_step(0) if kind == "agent" else cluster_step(int(kind))
        planner = cpplan.Planner(
            model=MODEL_CLUSTER, topology=cpplan.Topology(cp=int(cp)), memory_bytes="80GiB", solver="runtime"
        )
        yield f"{kind} cp {cp}", Problem.build(workload, planner.settings)


def run_fixed_share(args: argparse.Namespace) -> None:
    """``--cluster --fixed-share``: the replica call at a fixed share (``--share-rows``: completions x
    dp x cp) and on one node (``--node-rows``: completions x cp at dp = 1, and the agent step), the
    default call beside it, the fitted growth exponent of the replica call's wall against completions
    at cp 8; the table and the JSON (label ``--label``)."""
    rows = []
    with busy_processes(args.busy):
        for spec in filter(None, args.share_rows.split(",")):
            n, dp, cp = (int(v) for v in spec.split("x"))
            rows.append(share_row("grpo", cluster_step(n), dp, cp, args))
            print_share(rows[-1:])
        for spec in filter(None, args.node_rows.split(",")):
            kind, cp = spec.split("x")
            workload = agent_step(0) if kind == "agent" else cluster_step(int(kind))
            rows.append(share_row("agent6x4" if kind == "agent" else "grpo", workload, 1, int(cp), args))
            print_share(rows[-1:])
    print()
    print_share(rows)
    fixed = [r for r in rows if r["dp"] > 1 and r["cp"] == 8]
    exponents = {}
    for key in ("wall_p50_s", "wall_p95_s"):
        if len(fixed) >= 2:
            x = np.log([r["completions"] for r in fixed])
            exponents[key] = float(np.polyfit(x, np.log([r["rank"][key] for r in fixed]), 1)[0])
    print("fitted growth exponent of the replica call's wall at a fixed share (cp 8):", exponents)
    output = args.output or CLUSTER_RESULTS
    output.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(output.read_text()) if output.exists() else {}
    data[args.label] = {
        "machine": f"{platform.machine()}, {platform.python_version()}, {os.cpu_count()} CPUs",
        "busy_processes": args.busy,
        "rows": rows,
        "growth_exponents": exponents,
    }
    output.write_text(json.dumps(data, indent=1) + "\n")


def print_share(rows: list[dict]) -> None:
    """The fixed-share table: the replica call's p50 / p95 and p95 over the budget, CP-SAT's share of
    calls, the default call's p95 and its plan over the deterministic one, the median share of a CPU the
    replica calls got (their thread's CPU time over their wall), the load average."""
    print(
        f"{'workload':>8} {'compl':>6} {'dp x cp':>8} {'rank p50':>8} {'p95':>6} {'p95/b':>5} {'cpsat':>5} "
        f"{'hurry':>5} {'dflt p50':>8} {'p95':>6} {'dflt/det':>8} {'cpu':>4} {'load':>9}"
    )
    for r in rows:
        a, d = r["rank"], r["default"]
        ratio = "-" if d is None or d["over_reference"] is None else f"{d['over_reference']:.4f}"
        dflt = ("-", "-") if d is None else (f"{1e3 * d['wall_p50_s']:.0f}", f"{1e3 * d['wall_p95_s']:.0f}")
        loads = a["load_avg"] + (d["load_avg"] if d else [])
        print(
            f"{r['workload']:>8} {r['completions']:>6,} {r['dp']:>4}x{r['cp']:<3} "
            f"{1e3 * a['wall_p50_s']:>8.0f} "
            f"{1e3 * a['wall_p95_s']:>6.0f} {a['p95_over_budget']:>5.2f} {a['cpsat_share']:>5.0%} "
            f"{a['hurried_share']:>5.0%} {dflt[0]:>8} {dflt[1]:>6} {ratio:>8} "
            f"{a.get('cpu_share_p50', 0.0):>4.2f} {min(loads):>4.1f}-{max(loads):<4.1f}"
        )


def run_cluster(args: argparse.Namespace) -> None:
    """``--cluster``: every size x topology, the table, the JSON and the plot (``--replot``: the table
    and plot of the JSON's ``--label`` run, nothing measured)."""
    quick_output = QUICK_RESULTS.with_name("bench_scale_cluster_quick.json")
    output = args.output or (quick_output if args.quick else CLUSTER_RESULTS)
    data = json.loads(output.read_text()) if output.exists() else {}
    if args.replot:
        rows = data[args.label]["rows"]
    else:
        topologies = [tuple(int(v) for v in t.split("x")) for t in args.topologies.split(",")]
        rows = []
        for n in [int(v) for v in args.sizes.split(",")]:
            for dp, cp in topologies:
                if n // 8 < dp:
                    continue  # fewer prompts than replicas: some replica has nothing to plan
                rows.append(cluster_row(n, dp, cp, args.repeats, args.ranks, args.reference_max))
                print_cluster(rows[-1:])
        print()
    print_cluster(rows)
    exponents = growth_exponents(rows)
    greedy = growth_exponents(rows, "rank_greedy_done_p50_s")
    print("fitted growth exponent of per-rank p50 wall:", {k: round(v, 3) for k, v in exponents.items()})
    print("... of the time until greedy's plan is verified:", {k: round(v, 3) for k, v in greedy.items()})
    if not args.replot:
        output.parent.mkdir(parents=True, exist_ok=True)
        data[args.label] = {
            "machine": f"{platform.machine()}, {platform.python_version()}, {os.cpu_count()} CPUs",
            "rows": rows,
        }
    data[args.label]["growth_exponents"] = exponents
    data[args.label]["greedy_growth_exponents"] = greedy
    output.write_text(json.dumps(data, indent=1) + "\n")
    if args.plot:
        plot_cluster(rows, CLUSTER_PLOT)


FILES = ResultFiles(results=RESULTS, quick=QUICK_RESULTS)
output_path = FILES.path


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and write its JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="up to 10,000 items, no 100K or tiny runs")
    parser.add_argument("--pack", action="store_true", help="also time cpplan pack of 20,000 items")
    parser.add_argument("--max-items", type=int, default=100_000, help="skip larger workloads")
    parser.add_argument("--label", default="after")
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help=f"default {RESULTS.name} in results/; with --quick, ./{QUICK_RESULTS}",
    )
    parser.add_argument("--cluster", action="store_true", help="the GRPO cluster step instead")
    parser.add_argument("--sizes", default="128,256,512,1024,2048,4096,8192", help="--cluster completions")
    parser.add_argument("--topologies", default="8x8,16x4,32x8", help="--cluster dp x cp list")
    parser.add_argument("--repeats", type=int, default=3, help="--cluster rounds per size and topology")
    parser.add_argument("--ranks", type=int, default=4, help="--cluster DP ranks sampled per round")
    parser.add_argument("--reference-max", type=int, default=1024, help="--cluster deterministic up to")
    parser.add_argument("--plot", action="store_true", help="--cluster: write docs/scale_wall.png")
    parser.add_argument("--replot", action="store_true", help="--cluster: table and plot of the JSON's run")
    parser.add_argument(
        "--fixed-share", action="store_true", help="--cluster: the replica call at a fixed share"
    )
    parser.add_argument("--share-rows", default=SHARE_ROWS, help="--fixed-share: completions x dp x cp list")
    parser.add_argument("--node-rows", default=NODE_ROWS, help="--fixed-share: completions (or agent) x cp")
    parser.add_argument("--partition", action="store_true", help="--cluster: time the partition alone")
    parser.add_argument("--busy", type=int, default=0, help="--fixed-share: busy processes beside the run")
    parser.add_argument(
        "--build-times", action="store_true", help="--cluster: CP-SAT build times beside their estimates"
    )
    args = parser.parse_args(argv)
    if args.cluster and args.build_times:
        run_build_times(args)
        return
    if args.cluster and args.partition:
        run_partition(args)
        return
    if args.cluster and args.fixed_share:
        if args.label == "after":
            args.label = "fixed_share"
        run_fixed_share(args)
        return
    if args.cluster:
        if args.quick:
            args.sizes, args.repeats = "128,512,1024,2048", min(args.repeats, 2)
        run_cluster(args)
        return
    args.output = output_path(quick=args.quick, output=args.output)
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
