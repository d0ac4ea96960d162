"""CP scaling efficiency of the time model: one sequence, its parts, and held-out workloads.

- ``single``: one request of 4K, 32K and 128K tokens at CP 2, 4 and 8, the wave priced as the planner
  prices it (each mode at the cheapest of the planner's ownership candidates) plus the step terms, with
  the GDN layers in each mode
  ``cpplan.hf`` executes: the hand-off in rounds, in parallel state passing, and
  head-parallel (two all-to-alls per GDN layer and pass, no hand-off).
- ``components``: the parts the published figures measure, from the same card: one attention layer
  (attention pairs forward and backward, the key/value all-gather bytes and latency) at 8K tokens per
  GPU on 8 GPUs, split evenly by tokens (contiguous, as the all-gather scheme runs) and zigzag, against
  ring-flash-attention's 0.58 (all-gather) and 0.76-0.90 (zigzag); one GDN layer's recurrence and
  hand-off (or head-parallel all-to-alls) at 32K tokens on 4 GPUs against fla's CP, 0.68.
- ``cards``: 128K at CP8 and 32K at CP4 for every shipped card that supports CP, in the chosen mode.
- ``held_out``: for each held-out workload (other seeds and records than the bench suite's) and CP size
  at 40 GiB per rank, the greedy planner's step seconds (dp = 1).

The efficiency is T(1) / (c * T(c)): 1.0 means c ranks finish c times faster. Usage:
``python benchmarks/cp_scaling.py OUT.json [--single-only]`` (a few minutes on two cores).
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from cpplan.bench import synthetic
from cpplan.bench.suites import sharegpt, sharegpt_available
from cpplan.errors import InputError
from cpplan.planners.greedy import greedy_plan
from cpplan.pricing.handoff import (
    HANDOFF_MODES,
    chunk_pieces,
    handoff_modes,
    parallel_handoff,
    rounds_handoff,
)
from cpplan.pricing.head_parallel import moved_rows
from cpplan.pricing.ownership import chunk_stats
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import ownership_candidates, price_wave
from cpplan.spec.card import HandoffSeconds, available_models, load_model
from cpplan.spec.settings import Settings
from cpplan.spec.topology import Topology
from cpplan.spec.workload import Item, Request, Workload

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


SINGLE_TOKENS = (4096, 32768, 131072)
PUBLISHED = {
    "attention_allgather_cp8": 0.58,
    "attention_zigzag_cp8": (0.76, 0.90),
    "gdn_fla_cp4_32k": 0.68,
}
"""Published CP efficiencies (ring-flash-attention's README, 8 x H800, 8K tokens per GPU; fla's CP for
GDN)."""


def single_wave(tokens: int, cp: int, model: str = "qwen3.6-35b-a3b") -> dict:
    """One request of ``tokens`` at CP ``cp``: the priced wave's seconds in each hand-off mode, plus the
    step terms (budget far above any peak: this prices time, not fit)."""
    workload = Workload(items=(Item(id="a", requests=(Request(tokens=np.arange(tokens) % 997),)),))
    settings = Settings(topology=Topology(cp=cp), model=load_model(model), memory_bytes=2**50)
    problem = Problem.build(workload, settings)
    layout = problem.pack([0], "full")
    wave = price_wave(problem, [0], layout, "full")
    stats = chunk_stats(layout, problem.chunk_tokens)
    owners = [wave.owner, *ownership_candidates(problem, layout, stats)]
    return _cheapest_per_mode(problem, layout, owners) | {
        "chosen": wave.gdn_handoff,
        "rounds_count": wave.handoff.rounds,
        "barrier_s": wave.prices.barrier_s.max(axis=0).tolist(),
        "slowest_rank_total_s": float(wave.prices.time_s.max()),
    }


def _cheapest_per_mode(problem: Problem, layout, owners: list[np.ndarray]) -> dict[str, float]:
    """Each hand-off mode's least step seconds over ``owners`` (each mode at the ownership that suits it:
    rounds and parallel passing at a contiguous split, head-parallel at the balanced one)."""
    best: dict[str, float] = {}
    for owner in owners:
        wave = price_wave(problem, [0], layout, "full", owner)
        base = wave.cost_s - wave.handoff.seconds + problem.card.step_s
        cp = problem.topology.cp
        for mode, handoff in handoff_modes(
            layout, owner, problem.chunk_tokens, cp, problem.card.handoff
        ).items():
            best[mode] = min(best.get(mode, float("inf")), base + handoff.seconds)
    return best


def single() -> dict:
    """Efficiency of one sequence at every size and CP size, in each hand-off mode."""
    table: dict = {}
    for tokens in SINGLE_TOKENS:
        alone = single_wave(tokens, 1)["rounds"]
        table[str(tokens)] = {"1": {"step_s": alone}}
        for cp in CPS[1:]:
            found = single_wave(tokens, cp)
            modes = [mode for mode in HANDOFF_MODES if mode in found]
            table[str(tokens)][str(cp)] = {
                "step_s": {mode: found[mode] for mode in modes},
                "efficiency": {mode: alone / (cp * found[mode]) for mode in modes},
                "rounds": found["rounds_count"],
                "chosen": found["chosen"],
            }
        print(tokens, {cp: v.get("efficiency") for cp, v in table[str(tokens)].items()}, flush=True)
    return table


CARD_CASES = ((131072, 8), (32768, 4))
"""The cases every shipped card that supports CP is checked at (128K at CP8, 32K at CP4)."""


def every_card() -> dict:
    """Efficiency of one request alone in the planner's chosen mode for every shipped card that supports
    CP: ``{card: {"TOKENS@cp": efficiency}}``."""
    table: dict = {}
    for name in available_models():
        try:
            load_model(name).resolve(Topology(cp=8))
        except InputError:
            continue
        row = {}
        for tokens, cp in CARD_CASES:
            alone = single_wave(tokens, 1, name)["rounds"]
            found = single_wave(tokens, cp, name)
            row[f"{tokens}@{cp}"] = {
                "efficiency": alone / (cp * found[found["chosen"]]),
                "chosen": found["chosen"],
            }
        table[name] = row
        print(name, {k: round(v["efficiency"], 3) for k, v in row.items()}, flush=True)
    return table


def _card_seconds(card, name: str) -> float:
    return float(card.cost_seconds[card.cost_names.index(name)]) if name in card.cost_names else 0.0


def attention_component(cp: int, tokens_per_gpu: int, layout: str) -> float:
    """One attention layer's forward + backward efficiency on one sequence of ``cp * tokens_per_gpu``
    tokens, the card's per-pair prices at CP ``cp`` and at CP1 (forward, backward without the recompute,
    as the kernels are benchmarked; under CP at the card's ``cp_compute_efficiency``) and the key/value
    all-gather (bytes at the bus bandwidth, ring latency, forward and backward), against the same layer
    alone."""
    model = load_model("qwen3.6-35b-a3b")
    card, alone = (model.resolve(Topology(cp=c), num_layers=4) for c in (cp, 1))
    per_pair, per_pair_one = (
        _card_seconds(c, "attention") + _card_seconds(c, "attention_backward") * 10 / 14
        for c in (card, alone)
    )
    total = cp * tokens_per_gpu
    chunk = 128
    chunks = total // chunk
    starts = np.arange(chunks) * chunk
    pairs = chunk * starts + chunk * (chunk + 1) / 2
    if layout == "zigzag":
        owner = np.array([min(c % (2 * cp), 2 * cp - 1 - c % (2 * cp)) for c in range(chunks)])
    else:
        owner = np.repeat(np.arange(cp), chunks // cp)
    busiest = np.bincount(owner, weights=pairs, minlength=cp).max()
    exchange = _card_seconds(card, "cp_exchange") * 2 / 3 * (total - tokens_per_gpu)
    latency = 2 * (card.topology.cp > 1) * (8.4e-6 + (cp - 1) * 3.4e-6)
    t_cp = busiest * per_pair + exchange + latency
    t_one = pairs.sum() * per_pair_one
    return t_one / (cp * t_cp)


def gdn_component(cp: int, tokens: int, mode: str) -> float:
    """One GDN layer's recurrence (forward + backward) and its hand-off in ``mode`` over ``cp`` ranks
    splitting one sequence of ``tokens`` evenly and contiguously, priced by the planner's hand-off
    functions, against the layer alone (the card's per-layer prices at CP ``cp`` and at CP1: 30 GDN
    layers' prices divided by 30)."""
    model = load_model("qwen3.6-35b-a3b")
    card, alone = (model.resolve(Topology(cp=c)) for c in (cp, 1))
    layers = 30
    per_token, per_token_one = (
        (_card_seconds(c, "gdn_recurrence") + _card_seconds(c, "gdn_recurrence_backward")) / layers
        for c in (card, alone)
    )
    local = tokens / cp
    h = card.handoff
    # the card's hand-off terms count three passes of every GDN layer; here forward + backward of one
    per_layer = HandoffSeconds(
        round_s=h.round_s * 2 / 3 / layers, state_s=h.state_s * 2 / 3 / layers, wait_s_per_token=per_token
    )
    pieces = chunk_pieces(np.array([0]), np.array([tokens]), np.array([-1]), np.arange(cp), int(tokens // cp))
    if mode == "rounds":
        handoff = rounds_handoff(pieces, cp, per_layer).seconds
    elif mode == "parallel":
        handoff = parallel_handoff(pieces, np.array([0]), np.array([-1]), cp, per_layer).seconds
    else:  # head-parallel: the whole sequence at 1 / cp of the heads (= local tokens), two all-to-alls
        rows = moved_rows(np.full(cp, tokens // cp))
        handoff = (h.head_collective_s + rows * h.head_s_per_token) * 2 / 3 / layers
    t_one = tokens * per_token_one
    return t_one / (cp * (local * per_token + handoff))


def components() -> dict:
    """The published comparisons, component by component."""
    found = {
        "attention_allgather_cp8_8k_per_gpu": attention_component(8, 8192, "contiguous"),
        "attention_zigzag_cp8_8k_per_gpu": attention_component(8, 8192, "zigzag"),
        "gdn_rounds_cp4_32k": gdn_component(4, 32768, "rounds"),
        "gdn_parallel_cp4_32k": gdn_component(4, 32768, "parallel"),
        "gdn_head_parallel_cp4_32k": gdn_component(4, 32768, "head_parallel"),
    }
    print({k: round(v, 3) for k, v in found.items()}, flush=True)
    return found


def main(out: str, single_only: bool = False) -> None:
    """Write the single-sequence table, the components, the published figures and (unless
    ``single_only``) ``{workload: {cp: {"step_s", "efficiency"}}}`` of the held-out workloads."""
    started = time.perf_counter()
    result: dict = {"single": single(), "components": components(), "published": PUBLISHED}
    result |= {"cards": every_card(), "held_out": {}, "load_average_before": list(os.getloadavg())}
    if not single_only:
        for name, workload in held_out().items():
            seconds = {cp: step_seconds(workload, cp) for cp in CPS}
            result["held_out"][name] = {
                str(cp): {"step_s": s, "efficiency": seconds[1] / (cp * s)} for cp, s in seconds.items()
            }
            print(
                name,
                {cp: round(v["efficiency"], 4) for cp, v in result["held_out"][name].items()},
                flush=True,
            )
    result["wall_s"] = time.perf_counter() - started
    result["load_average_after"] = list(os.getloadavg())
    with open(out, "w") as handle:
        json.dump(result, handle, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], single_only="--single-only" in sys.argv[2:])


def markdown(result: dict) -> str:
    """The single-sequence and component tables of ``result`` as docs/time_model.md shows them."""
    heads = "rounds / parallel / head-parallel (chosen)"
    lines = [f"| tokens | T(1) | CP2 {heads} | CP4 {heads} | CP8 {heads} |"]
    lines.append("| --- | --- | --- | --- | --- |")
    for tokens, row in result["single"].items():
        cells = [
            " / ".join(f"{v:.2f}" for v in row[c]["efficiency"].values()) + f" ({row[c]['chosen']})"
            for c in ("2", "4", "8")
        ]
        lines.append(f"| {int(tokens):,} | {row['1']['step_s']:.3f} s | {' | '.join(cells)} |")
    found, published = result["components"], result["published"]
    lines += [
        "",
        "| part | predicted | published |",
        "| --- | --- | --- |",
        f"| attention, all-gather, CP8, 8K tokens per GPU (contiguous, even tokens) | "
        f"{found['attention_allgather_cp8_8k_per_gpu']:.2f} | {published['attention_allgather_cp8']} |",
        f"| attention, zigzag, CP8, 8K tokens per GPU | {found['attention_zigzag_cp8_8k_per_gpu']:.2f} | "
        f"{published['attention_zigzag_cp8'][0]}–{published['attention_zigzag_cp8'][1]} |",
        f"| GDN layer, CP4, 32K tokens, rounds | {found['gdn_rounds_cp4_32k']:.2f} | "
        f"{published['gdn_fla_cp4_32k']} (fla CP, parallel) |",
        f"| GDN layer, CP4, 32K tokens, parallel state passing | {found['gdn_parallel_cp4_32k']:.2f} | "
        f"{published['gdn_fla_cp4_32k']} (fla CP, parallel) |",
        f"| GDN layer, CP4, 32K tokens, head-parallel | {found['gdn_head_parallel_cp4_32k']:.2f} | "
        f"{published['gdn_fla_cp4_32k']} (fla CP, parallel) |",
    ]
    lines += ["", "| card | 128K at CP8 | 32K at CP4 |", "| --- | --- | --- |"]
    for name, row in result.get("cards", {}).items():
        cells = [f"{row[k]['efficiency']:.2f} ({row[k]['chosen']})" for k in ("131072@8", "32768@4")]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    return "\n".join(lines)
