"""cpplan beside ART's TrainerRank layout selection (OpenPipe/ART, ``src/art/trainer_rank/``) on the same
trees: ART's layout choice per wave tree beside cpplan's, both priced by both time models (cpplan's card,
ART's fitted ``prefix_tree_layout_score``), Kendall's tau between the two rankings of each tree's
candidate layouts, ART's CP1 GDN pending-save floor beside cpplan's card, and planning time side by side.

ART is not a dependency and none of its code is in cpplan: the benchmark loads ART's planning modules
from a source checkout (``--art-src DIR``, or ``CPPLAN_ART_SRC``, or an installed ``art`` package that
has ``trainer_rank``) without running ART's package ``__init__`` files (``art.trainer_rank``'s imports
``torch.distributed`` and ``art.megatron``), and skips with a message naming the commit and the
install line when they are absent. ``_micro_batch_planner.py`` and ``_memory.py`` are not run: they
are ``TrainerRank`` method bodies that import ``art.trainer_rank._impl`` and read a live Megatron model
and CUDA memory.

    python benchmarks/bench_seed_peer.py --art-src /path/to/ART/src
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import json
import os
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import cpplan  # noqa: E402
from cpplan.api import build_problem  # noqa: E402
from cpplan.bench import seed_peer as sp  # noqa: E402
from cpplan.bench.suites import suite  # noqa: E402
from cpplan.pricing.wave import price_wave  # noqa: E402

ART_REPO = "OpenPipe/ART"
ART_MODULES = {
    "_prefix_tree_planner": "bc60696e86836985f432dfc0cb38592b21036062",
    "_prefix_tree_performance_search": "625209a24c70db47c1648864df54d0bdcdc667b5",
    "_planner_cost": "23cf101260de11312dffc109998c889d2115aa46",
    "_gdn_memory": "05e9b3d07207ef3f065f9f18197cbbc68fc9030c",
}
"""The ART modules the benchmark runs, each with the commit its measured copy was read at."""
ART_COMMIT = ART_MODULES["_planner_cost"]
"""The commit to install: the fitted cost model (``COEFFICIENT_VERSION = 2``) the results depend on; at
the planner's commit above, ``_planner_cost.py`` still holds the hand-set version 1."""
INSTALL_LINE = (
    f'pip install "git+https://github.com/{ART_REPO}@{ART_COMMIT}" (then no --art-src), or '
    f"git clone https://github.com/{ART_REPO} && git -C ART checkout {ART_COMMIT} && "
    "python benchmarks/bench_seed_peer.py --art-src ART/src"
)
REFINEMENT_BUDGET = 2_000
"""ART's ``refinement_work_budget``: the value its sealed search gate and calibration harness use."""
DEFAULT_OUTPUT = ROOT / "benchmarks" / "results" / "bench_seed_peer.json"
MEMORY = "40GiB"
MODEL = "qwen3.6-35b-a3b"


def art_source(explicit: str | None) -> Path | None:
    """The directory holding ART's ``art`` package: ``explicit``, ``CPPLAN_ART_SRC``, or the installed
    package's parent (found without importing it)."""
    chosen = explicit or os.environ.get("CPPLAN_ART_SRC")
    if chosen:
        return Path(chosen)
    spec = importlib.util.find_spec("art")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).parent


def missing_modules(src: Path | None) -> list[str]:
    """The ART modules the benchmark needs that ``src`` lacks (all of them when there is no ``src``)."""
    folder = None if src is None else src / "art" / "trainer_rank"
    return [name for name in ART_MODULES if folder is None or not (folder / f"{name}.py").is_file()]


def skip_message(src: Path | None, missing: list[str]) -> str:
    """Why the benchmark skips, with the commit and the install line."""
    where = "no ART source found" if src is None else f"{src} lacks art/trainer_rank/{missing[0]}.py"
    return (
        f"bench_seed_peer: skipped: ART's TrainerRank planner is not available ({where}; the "
        f"openpipe-art wheels do not ship trainer_rank). Needs {ART_REPO} at commit {ART_COMMIT}: "
        f"{INSTALL_LINE}"
    )


def load_art(src: Path) -> types.SimpleNamespace:
    """ART's planning modules from ``src``, imported under placeholder ``art`` / ``art.trainer_rank``
    packages so that neither package's ``__init__`` runs."""
    for name, folder in (("art", src / "art"), ("art.trainer_rank", src / "art" / "trainer_rank")):
        package = types.ModuleType(name)
        package.__path__ = [str(folder)]
        sys.modules[name] = package
    modules = {name: importlib.import_module(f"art.trainer_rank.{name}") for name in ART_MODULES}
    digests = {
        name: hashlib.sha256(Path(module.__file__).read_bytes()).hexdigest()
        for name, module in modules.items()
    }
    return types.SimpleNamespace(
        planner=modules["_prefix_tree_planner"],
        cost=modules["_planner_cost"],
        gdn=modules["_gdn_memory"],
        sha256=digests,
        src=str(src),
    )


def art_facts(problem) -> dict[str, Any]:
    """The topology and model facts ART's selection takes, from cpplan's card."""
    counts = problem.model.geometry.layer_counts(
        problem.settings.num_layers or problem.model.geometry.num_layers
    )
    return {
        "cp_size": problem.topology.cp,
        "tp_size": problem.topology.tp,
        "layers": counts["layers"],
        "gdn_layers": counts["gdn_layers"],
        "uses_gdn": counts["gdn_layers"] > 0,
    }


def art_price(art, view, facts) -> tuple[tuple[int, ...], dict[str, float]]:
    """ART's score tuple of a layout and its nonzero terms in microseconds."""
    score = art.cost.prefix_tree_layout_score(view, **facts)
    features = art.cost.layout_features(view)
    scoring = art.cost.ScoringFacts(
        cp_size=facts["cp_size"],
        tp_size=facts["tp_size"],
        layers=facts["layers"],
        gdn_layers=facts["gdn_layers"],
    )
    scale = art.cost.WORK_PER_US * art.cost.COEFFICIENT_SCALE_PER_US
    terms = {
        name: value * art.cost.COEFFICIENTS_MILLI_US[name] / scale
        for name, value in art.cost.term_values(features, scoring).items()
        if art.cost.COEFFICIENTS_MILLI_US[name] and value
    }
    return tuple(score), terms


def candidate_views(art, problem, wave, tree, requests, facts) -> dict:
    """Every candidate layout of one wave tree, keyed by its packing: ART's mandatory family and its
    selection, cpplan's profile layouts and its chosen layout, each with its cpplan node mask."""
    items = wave.items
    found: dict = {}

    def add(label: str, packed, decisions: frozenset[int] | None = None) -> None:
        view = sp.layout_view(packed, decisions or frozenset())
        entry = found.setdefault(view.signature, {"view": view, "labels": [], "packed": packed})
        entry["labels"].append(label)

    selected = art.planner.select_prefix_tree_layout(tree, refinement_work_budget=REFINEMENT_BUDGET, **facts)
    for candidate in art.planner.prefix_tree_layout_candidates(tree):
        decisions = candidate.layout.selected_decisions
        mask = sp.decisions_mask(problem, requests, tree.segments, decisions)
        add("art:" + candidate.labels[0], problem.pack(items, mask), decisions)
    decisions = selected.layout.selected_decisions
    mask = sp.decisions_mask(problem, requests, tree.segments, decisions)
    add("art:selected", problem.pack(items, mask), decisions)
    for spec in problem_layouts():
        add(f"cpplan:{spec}", problem.pack(items, spec))
    add(f"cpplan:chosen({wave.layout_name})", wave.layout)
    return found


def problem_layouts() -> tuple[str, ...]:
    """The layouts cpplan's runtime profile tries per wave."""
    return tuple(cpplan.load_solver("runtime").greedy.layouts)


def price_candidates(art, problem, wave, tree, found, facts) -> list[dict]:
    """Each candidate priced by cpplan's wave pricing and by ART's score, with the mapping checks."""
    rows = []
    for entry in found.values():
        view = entry["view"]
        priced = price_wave(problem, wave.items, entry["packed"], entry["labels"][0])
        decisions = sp.decisions_of(view, tree.segments)
        art_layout = None if decisions is None else art.planner.plan_prefix_tree_layout(tree, decisions)
        score, art_terms = art_price(art, view, facts)
        rows.append(
            {
                "labels": entry["labels"],
                "packed_tokens": view.packed_tokens,
                "segments": len(view.segments),
                "depth": view.maximum_depth,
                "art_decisions": None if decisions is None else sorted(decisions),
                "mapping_exact": art_layout is None
                or (art_layout.packed_tokens, len(art_layout.segments), art_layout.maximum_depth)
                == (view.packed_tokens, len(view.segments), view.maximum_depth),
                "cpplan_cost_s": priced.cost_s,
                "fits": priced.fits(problem.memory_bytes),
                "art_score": list(score),
                "art_us": score[0] / (art.cost.WORK_PER_US * art.cost.COEFFICIENT_SCALE_PER_US),
                "_art_terms": art_terms,
                "_cpplan_terms": sp.cpplan_terms(problem, priced),
                "_priced": priced,
            }
        )
    return rows


def picks(rows: list[dict]) -> tuple[int, int, int]:
    """Indices of ART's selection, cpplan's chosen layout and cpplan's cheapest fitting candidate."""
    art = next(k for k, r in enumerate(rows) if "art:selected" in r["labels"])
    chosen = next(k for k, r in enumerate(rows) if any(x.startswith("cpplan:chosen") for x in r["labels"]))
    fitting = [k for k, r in enumerate(rows) if r["fits"]] or list(range(len(rows)))
    return art, chosen, min(fitting, key=lambda k: rows[k]["cpplan_cost_s"])


def art_family_cheapest(rows: list[dict]) -> int:
    """The candidate of ART's family (mandatory or selected) that cpplan's card prices cheapest among
    those that fit (among all of them when none fits)."""
    family = [k for k, r in enumerate(rows) if any(x.startswith("art:") for x in r["labels"])]
    fitting = [k for k in family if rows[k]["fits"]] or family
    return min(fitting, key=lambda k: rows[k]["cpplan_cost_s"])


def disagreement(rows: list[dict], first: int, second: int) -> dict:
    """The terms that differ between two candidates under each time model (second minus first)."""
    return {
        "from": rows[first]["labels"],
        "to": rows[second]["labels"],
        "art_us": sp.term_differences(rows[first]["_art_terms"], rows[second]["_art_terms"], floor=1.0),
        "cpplan_ms": {
            name: 1e3 * delta
            for name, delta in sp.term_differences(
                rows[first]["_cpplan_terms"], rows[second]["_cpplan_terms"], floor=1e-4
            ).items()
        },
    }


def gdn_memory(art, problem, rows: list[dict], index: int) -> dict | None:
    """ART's CP1 GDN floor parts for one candidate beside cpplan's card: ART's checkpoint retention
    (rows x layers x hidden x 2 B) and one GDN layer's pending saves (FLA q/k/v, gates, states per
    bucket), and cpplan's predicted peak and its checkpoint and GDN-state terms on rank 0."""
    geometry, facts = problem.model.geometry, art_facts(problem)
    if problem.topology.cp != 1 or not facts["gdn_layers"]:
        return None
    view, priced = rows[index]["_view"], rows[index]["_priced"]
    shape = art.gdn.Shape(
        geometry.gdn_key_heads,
        geometry.gdn_value_heads,
        geometry.gdn_head_dim,
        geometry.gdn_head_dim,
        geometry.gdn_conv_kernel,
        0,
        0,
    )
    buckets = art.gdn.cp1_buckets(view.segments)
    breakdown = priced.prices.breakdown(problem.card, 0)
    return {
        "art_retained_bytes": view.packed_tokens * facts["layers"] * geometry.hidden * geometry.dtype_bytes,
        "art_gdn_pending_layer_bytes": shape.pending(view.packed_tokens, buckets),
        "art_buckets": len(buckets),
        "cpplan_peak_bytes": int(priced.peak_bytes),
        "cpplan_checkpointed_inputs_bytes": sum(
            v for k, v in breakdown.items() if k.startswith("checkpointed")
        ),
        "cpplan_gdn_pending_state_bytes": sum(v for k, v in breakdown.items() if k.startswith("gdn_pending")),
    }


def compare_tree(art, problem, wave, facts) -> dict:
    """One wave tree: both picks, every candidate under both prices, the rank agreement."""
    requests, sequences = sp.wave_sequences(problem, wave.items)
    tree = art.planner.build_canonical_prefix_tree(as_rows(sequences))
    found = candidate_views(art, problem, wave, tree, requests, facts)
    rows = price_candidates(art, problem, wave, tree, found, facts)
    for row, entry in zip(rows, found.values(), strict=True):
        row["_view"] = entry["view"]
    art_pick, chosen, cheapest = picks(rows)
    art_keys = sp.dense_ranks([tuple(r["art_score"]) for r in rows])
    costs = [r["cpplan_cost_s"] for r in rows]
    pairs = sp.discordant_pairs(art_keys, costs)
    art_best = min(range(len(rows)), key=lambda k: art_keys[k])
    record = {
        "num_sequences": len(sequences),
        "logical_tokens": int(sum(s.size for s in sequences)),
        "num_decisions": len(tree.decision_indices),
        "num_candidates": len(rows),
        "art_pick": art_pick,
        "art_score_best": art_best,
        "cpplan_chosen": chosen,
        "cpplan_cheapest": cheapest,
        "same_layout": art_pick == chosen,
        "art_pick_cpplan_cost_s": rows[art_pick]["cpplan_cost_s"],
        "chosen_cpplan_cost_s": rows[chosen]["cpplan_cost_s"],
        "chosen_plan_cost_s": wave.cost_s,
        "art_pick_art_us": rows[art_pick]["art_us"],
        "chosen_art_us": rows[chosen]["art_us"],
        "art_family_cheapest": art_family_cheapest(rows),
        "kendall_tau": sp.kendall_tau(art_keys, costs),
        "discordant_pairs": len(pairs),
        "mapping_exact": all(r["mapping_exact"] for r in rows),
        "disagreement": None if art_best == cheapest else disagreement(rows, cheapest, art_best),
        "gdn_memory": {
            "art_pick": gdn_memory(art, problem, rows, art_pick),
            "cpplan_chosen": gdn_memory(art, problem, rows, chosen),
        },
        "candidates": [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows],
    }
    return record


def as_rows(sequences) -> list[torch.Tensor]:
    """Token rows as ART's trainer hands them to its tree build: int64 tensors (a plain sequence would
    take its slower per-token path)."""
    return [torch.from_numpy(s.astype(np.int64, copy=False)) for s in sequences]


def time_side_by_side(art, workload, problem, facts, repeats: int) -> dict:
    """ART's tree build and layout selection over every wave of cpplan's plan, and cpplan's runtime call
    on the whole step, taking turns (the order alternates), ``repeats`` times each."""
    waves = plan_step(workload, problem).plan.waves
    trees = [as_rows(sp.wave_sequences(problem, w.items)[1]) for w in waves]
    art_s, build_s, cpplan_s = [], [], []

    def run_art() -> None:
        started = time.perf_counter()
        built = [art.planner.build_canonical_prefix_tree(sequences) for sequences in trees]
        build_s.append(time.perf_counter() - started)
        for tree in built:
            art.planner.select_prefix_tree_layout(tree, refinement_work_budget=REFINEMENT_BUDGET, **facts)
        art_s.append(time.perf_counter() - started)

    def run_cpplan() -> None:
        started = time.perf_counter()
        plan_step(workload, problem)
        cpplan_s.append(time.perf_counter() - started)

    for k in range(repeats):
        for step in (run_art, run_cpplan) if k % 2 == 0 else (run_cpplan, run_art):
            step()
    return {
        "art_select_ms": 1e3 * statistics.median(art_s),
        "art_tree_build_ms": 1e3 * statistics.median(build_s),
        "cpplan_runtime_ms": 1e3 * statistics.median(cpplan_s),
        "art_samples_ms": [1e3 * s for s in art_s],
        "cpplan_samples_ms": [1e3 * s for s in cpplan_s],
        "load_average": list(os.getloadavg()),
    }


def plan_step(workload, problem):
    """cpplan's runtime call on the step (what a trainer makes once per step)."""
    return cpplan.plan(
        workload,
        topology=problem.topology,
        model=problem.model,
        memory_bytes=problem.memory_bytes,
        solver="runtime",
    )


def run_case(art, case, cp: int, repeats: int) -> dict:
    """Every wave tree of one step at one CP size, and the timing."""
    workload = case.build()
    problem = build_problem(workload, topology=cpplan.Topology(cp=cp), model=MODEL, memory_bytes=MEMORY)
    facts = art_facts(problem)
    result = plan_step(workload, problem)
    trees = [
        compare_tree(art, problem, wave, facts) | {"wave": k} for k, wave in enumerate(result.plan.waves)
    ]
    return {
        "case": case.name,
        "family": case.family,
        "cp": cp,
        "facts": facts,
        "cpplan_strategy": result.plan.strategy,
        "trees": trees,
        "timing": time_side_by_side(art, workload, problem, facts, repeats),
    }


def summary_row(run: dict) -> dict:
    """The table row of one case at one CP size."""
    trees = run["trees"]
    taus = [t["kendall_tau"] for t in trees if t["kendall_tau"] is not None]
    art_cost = sum(t["art_pick_cpplan_cost_s"] for t in trees)
    chosen_cost = sum(t["chosen_cpplan_cost_s"] for t in trees)
    art_us = sum(t["art_pick_art_us"] for t in trees)
    chosen_us = sum(t["chosen_art_us"] for t in trees)
    family_better = sum(
        t["candidates"][t["art_family_cheapest"]]["cpplan_cost_s"] < 0.999 * t["chosen_cpplan_cost_s"]
        for t in trees
    )
    return {
        "case": run["case"],
        "cp": run["cp"],
        "trees": len(trees),
        "same": sum(t["same_layout"] for t in trees),
        "art_pick_s": art_cost,
        "cpplan_pick_s": chosen_cost,
        "art_over_cpplan": art_cost / chosen_cost,
        "cpplan_over_art_by_art": chosen_us / art_us,
        "art_family_better": family_better,
        "median_tau": statistics.median(taus) if taus else None,
        "disagree": sum(t["disagreement"] is not None for t in trees),
        "art_ms": run["timing"]["art_select_ms"],
        "cpplan_ms": run["timing"]["cpplan_runtime_ms"],
    }


def print_table(rows: list[dict]) -> None:
    """The side-by-side table on standard output."""
    header = (
        f"{'case':<27}{'cp':>3}{'trees':>6}{'same':>5}{'ART pick s':>11}{'cpplan s':>9}{'ratio':>7}"
        f"{'by ART':>7}{'fam<':>5}{'tau':>6}{'disagree':>9}{'ART ms':>8}{'cpplan ms':>10}"
    )
    print(header)
    for r in rows:
        tau = "n/a" if r["median_tau"] is None else f"{r['median_tau']:.2f}"
        print(
            f"{r['case']:<27}{r['cp']:>3}{r['trees']:>6}{r['same']:>5}{r['art_pick_s']:>11.3f}"
            f"{r['cpplan_pick_s']:>9.3f}{r['art_over_cpplan']:>7.3f}{r['cpplan_over_art_by_art']:>7.3f}"
            f"{r['art_family_better']:>5}{tau:>6}{r['disagree']:>9}{r['art_ms']:>8.0f}{r['cpplan_ms']:>10.0f}"
        )


def print_totals(runs: list[dict]) -> None:
    """Agreement over every tree, at each CP size and in all."""
    for cp in [*sorted({r["cp"] for r in runs}), None]:
        trees = [t for r in runs if cp is None or r["cp"] == cp for t in r["trees"]]
        taus = [t["kendall_tau"] for t in trees if t["kendall_tau"] is not None]
        family = sum(
            t["candidates"][t["art_family_cheapest"]]["cpplan_cost_s"] < 0.999 * t["chosen_cpplan_cost_s"]
            for t in trees
        )
        own = sum(own_cheaper(t) for t in trees)
        label = "all" if cp is None else f"cp={cp}"
        print(
            f"{label}: {len(trees)} trees, {sum(t['same_layout'] for t in trees)} same layout, "
            f"{sum(t['disagreement'] is not None for t in trees)} with different best layouts, "
            f"Kendall tau median {statistics.median(taus):.2f}, mean {statistics.mean(taus):.2f} over "
            f"{len(taus)} trees with 2+ candidates ({sum(x == 1 for x in taus)} at 1, "
            f"{sum(x < 0 for x in taus)} negative), ART's family holds a layout cpplan's card prices "
            f">0.1% below cpplan's pick in {family} (in {own} of them cpplan's own profile layouts hold "
            f"one too), mapping exact in "
            f"{sum(t['mapping_exact'] for t in trees)}"
        )


def own_cheaper(tree: dict) -> bool:
    """Whether one of cpplan's profile layouts (not its chosen one) prices >0.1% below its pick."""
    own = [
        c["cpplan_cost_s"]
        for c in tree["candidates"]
        if c["fits"] and any(x.startswith("cpplan:") and "chosen" not in x for x in c["labels"])
    ]
    return bool(own) and min(own) < 0.999 * tree["chosen_cpplan_cost_s"]


def print_disagreements(runs: list[dict], *, top: int = 3) -> None:
    """Each tree whose best layout differs, with the terms that differ most under each model."""
    print("trees whose best layouts differ (ART's best minus cpplan's best; ms):")
    for run in runs:
        for t in run["trees"]:
            d = t["disagreement"]
            if d is None:
                continue
            art = sorted(d["art_us"].items(), key=lambda kv: -abs(kv[1]))[:top]
            card = sorted(d["cpplan_ms"].items(), key=lambda kv: -abs(kv[1]))[:top]
            print(
                f"  {run['case']} cp={run['cp']} wave {t['wave']}: ART "
                + ", ".join(f"{k} {v / 1e3:+.1f}" for k, v in art)
                + " | cpplan "
                + ", ".join(f"{k} {v:+.1f}" for k, v in card)
            )


def print_gdn_memory(runs: list[dict]) -> None:
    """ART's CP1 GDN floor parts beside cpplan's card, for ART's pick of each CP1 tree (GB)."""
    print(
        "CP1, ART's pick (GB): ART retained / cpplan checkpointed inputs; "
        "ART pending (1 layer) / cpplan GDN states; cpplan peak"
    )
    for run in runs:
        for t in run["trees"]:
            m = t["gdn_memory"]["art_pick"]
            if m is None:
                continue
            gb = {k: v / 1e9 for k, v in m.items() if k.endswith("bytes")}
            print(
                f"  {run['case']} wave {t['wave']}: {gb['art_retained_bytes']:.2f} / "
                f"{gb['cpplan_checkpointed_inputs_bytes']:.2f}; {gb['art_gdn_pending_layer_bytes']:.2f} / "
                f"{gb['cpplan_gdn_pending_state_bytes']:.2f}; {gb['cpplan_peak_bytes']:.2f}"
            )


def report(result: dict) -> None:
    """Everything the docs quote, from a results JSON."""
    print_table(result["table"])
    print_totals(result["runs"])
    print_disagreements(result["runs"])
    print_gdn_memory(result["runs"])
    timing = [r["timing"] for r in result["runs"]]
    build = statistics.median(t["art_tree_build_ms"] / t["art_select_ms"] for t in timing)
    art = statistics.median(t["art_select_ms"] for t in timing)
    card = statistics.median(t["cpplan_runtime_ms"] for t in timing)
    print(
        f"planning time per step, median over the rows: ART {art:.0f} ms (its tree build {100 * build:.0f}% "
        f"of it), cpplan's runtime call {card:.0f} ms"
    )
    loads = [r["timing"]["load_average"][0] for r in result["runs"]]
    print(
        f"load average (1 min) while timing: median {statistics.median(loads):.2f}, "
        f"range {min(loads):.2f}-{max(loads):.2f}; ART {result['art']['commit']}, cost model version "
        f"{result['art']['coefficient_version']}"
    )


def selected_cases(names: list[str] | None) -> list:
    """The bench suite's cases and the held-out steps, or those named."""
    cases = suite() + sp.held_out_cases()
    if names:
        unknown = sorted(set(names) - {c.name for c in cases})
        if unknown:
            raise SystemExit(f"bench_seed_peer: unknown case(s) {unknown}; known: {[c.name for c in cases]}")
        cases = [c for c in cases if c.name in names]
    return cases


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--art-src", help="directory holding ART's art/ package (a checkout's src/)")
    parser.add_argument("--cps", default="1,4", help="CP sizes, comma-separated (default 1,4)")
    parser.add_argument("--cases", nargs="*", help="case names (default: the suite and the held-out steps)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each planner per step")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="results JSON")
    parser.add_argument(
        "--report", type=Path, help="print the tables of a results JSON (no ART needed) and stop"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the comparison, print the table, write the JSON; skip (exit 0) when ART is absent."""
    args = parse_args(argv)
    if args.report:
        report(json.loads(args.report.read_text()))
        return 0
    src = art_source(args.art_src)
    missing = missing_modules(src)
    if missing:
        print(skip_message(src, missing))
        return 0
    art = load_art(src)
    started = time.perf_counter()
    runs = []
    for case in selected_cases(args.cases):
        for cp in (int(c) for c in args.cps.split(",")):
            runs.append(run_case(art, case, cp, args.repeats))
            print(f"  {case.name} cp={cp} done", file=sys.stderr)
    rows = [summary_row(r) for r in runs]
    result = {
        "art": {
            "repo": ART_REPO,
            "commit": ART_COMMIT,
            "modules": ART_MODULES,
            "sha256": art.sha256,
            "coefficient_version": art.cost.COEFFICIENT_VERSION,
        },
        "settings": {
            "model": MODEL,
            "memory": MEMORY,
            "solver": "runtime",
            "refinement_work_budget": REFINEMENT_BUDGET,
        },
        "load_average_end": list(os.getloadavg()),
        "cpus": os.cpu_count(),
        "wall_s": time.perf_counter() - started,
        "table": rows,
        "runs": runs,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    report(result)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
