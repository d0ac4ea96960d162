"""The per-layer barrier: a wave costs, per barrier (layer kind), its slowest rank, summed over barriers;
the evaluator, the verifier and the CP-SAT objective price it alike."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cpplan import Item, Request, Topology, Workload
from cpplan.bench.synthetic import grpo
from cpplan.cpsat import build_space, compile_model
from cpplan.cpsat.scaling import SCALING
from cpplan.planners.cpsat_strategy import greedy_values, plan_columns
from cpplan.planners.greedy import greedy_plan
from cpplan.plans.plan import Plan
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.pricing.ownership import contiguous_split
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import price_wave
from cpplan.spec.settings import Settings
from cpplan.verifier import verify_plan


def _problem(qwen36, workload, cp: int, memory_bytes: int = 2**40, layers: int | None = None) -> Problem:
    settings = Settings(topology=Topology(cp=cp), model=qwen36, memory_bytes=memory_bytes, num_layers=layers)
    return Problem.build(workload, settings)


def _by_hand(card, quantities: np.ndarray) -> float:
    """Per barrier the slowest rank's sum of the card's terms in it, summed: term by term, in Python."""
    barriers = sorted(set(card.cost_barrier.tolist()))
    total = 0.0
    for barrier in barriers:
        per_rank = [
            math.fsum(
                float(card.cost_seconds[c]) * float(q[int(card.cost_quantity[c])])
                for c in range(len(card.cost_names))
                if int(card.cost_barrier[c]) == barrier
            )
            for q in quantities
        ]
        total += max(per_rank)
    return total


def test_ranks_balanced_in_total_but_not_per_layer_kind_cost_more(qwen36):
    """One 64K-token request at CP2, split so the two ranks' total seconds are equal to within a chunk:
    the first rank holds more tokens (GDN and MoE work), the second more attended pairs, so each is the
    slowest in one barrier and the wave costs more than the slowest rank's total, by more than 10% of
    its compute, exactly as the barriers summed by hand."""
    workload = Workload(items=(Item(id="a", requests=(Request(tokens=np.arange(65536) % 997),)),))
    problem = _problem(qwen36, workload, 2)
    layout = problem.pack([0], "full")
    probe = price_wave(problem, [0], layout, "full")
    owner = contiguous_split(probe.stats.quantity_matrix() @ problem.card.time_coefficients(), 2)
    wave = price_wave(problem, [0], layout, "full", owner=owner)
    totals = wave.prices.time_s
    assert abs(totals[0] - totals[1]) < 0.01 * totals.max()
    slowest = wave.prices.barrier_s.argmax(axis=0)
    names = problem.card.barrier_names
    assert slowest[names.index("gdn")] == 0 and slowest[names.index("attention")] == 1
    assert wave.prices.compute_s > 1.1 * totals.max()
    assert wave.prices.compute_s == pytest.approx(_by_hand(problem.card, wave.quantities), rel=1e-12)
    assert wave.cost_s == pytest.approx(
        wave.prices.compute_s + problem.card.wave_overhead_s + wave.handoff.seconds, rel=1e-12
    )


@pytest.mark.parametrize("seed", range(4))
def test_evaluator_and_verifier_agree_on_random_ownerships(qwen36, seed):
    """Random GRPO waves at CP 2 and 4 under random contiguous and zigzag chunk ownerships: the
    verifier's own arithmetic prices every wave's barriers, overhead and hand-off at the evaluator's
    cost, which is never below the slowest rank's total."""
    rng = np.random.default_rng(seed)
    workload = grpo(
        num_prompts=2,
        group_size=3,
        system_tokens=200,
        prompt_tokens=(500, 3000),
        completion_tokens=(100, 2000),
        seed=seed,
        items_per_prompt=False,
    )
    cp = (2, 4)[seed % 2]
    problem = _problem(qwen36, workload, cp, layers=8)
    items = list(range(problem.num_items))
    layout = problem.pack(items, "full")
    chunks = -(-layout.packed_tokens // problem.chunk_tokens)
    cuts = np.sort(rng.choice(np.arange(1, chunks), size=cp - 1, replace=False))
    contiguous = np.searchsorted(cuts, np.arange(chunks), side="right")
    zigzag = np.array([min(c % (2 * cp), 2 * cp - 1 - c % (2 * cp)) for c in range(chunks)])
    for owner in (contiguous, zigzag):
        wave = price_wave(problem, items, layout, "full", owner=owner)
        data = plan_to_dict(problem, Plan(strategy="greedy", waves=(wave,)))
        verdict = verify_plan(data, problem.workload, problem.card, problem.memory_bytes)
        assert verdict.valid, verdict.violations
        assert verdict.cost_s == pytest.approx(wave.cost_s, rel=1e-12)
        assert wave.prices.compute_s >= wave.prices.time_s.max()


def _time_balanced(problem: Problem, wave):
    """``wave`` owned by the contiguous split balancing each rank's total seconds."""
    weights = wave.stats.quantity_matrix() @ problem.card.time_coefficients()
    owner = contiguous_split(weights, problem.topology.cp)
    return price_wave(problem, wave.items, wave.layout, wave.layout_name, owner=owner, split=wave.split)


def test_cpsat_objective_prices_the_barrier(qwen36):
    """The CP-SAT objective of the greedy plan taken as exact columns is the evaluator's cost (barriers
    and hand-off included), rounded up by at most a time unit per wave and term; the same waves as
    modelled waves (per layer kind a max variable over its rank average and the items' floors, all
    lower bounds) are priced at most at that cost."""
    long = Item(id="long", requests=(Request(tokens=np.arange(40000) % 997),))
    short = tuple(
        Item(id=f"s{k}", requests=(Request(tokens=np.arange(3000 + 500 * k) % 991),)) for k in range(3)
    )
    problem = _problem(qwen36, Workload(items=(long, *short)), 4, memory_bytes=24 * 2**30, layers=8)
    found = greedy_plan(problem, ("full", "none"))
    # greedy's waves, owned by the time-balanced contiguous split: slowest in different barriers on
    # different ranks (under the balanced split free of ranges greedy prices them with, they are not)
    greedy = Plan(strategy="greedy", waves=tuple(_time_balanced(problem, wave) for wave in found.waves))
    space = build_space(problem, extra_specs=("full", "none"))
    columns = plan_columns(problem, space, greedy.num_waves, greedy)
    compiled = compile_model(problem, space, greedy.num_waves, columns)
    values = greedy_values(compiled, space, greedy)
    assert all(g is not None for g in values.columns)
    exact = sum(w.cost_s for w in greedy.waves)
    assert exact <= SCALING.seconds(values.objective) <= exact + 2 * greedy.num_waves * SCALING.seconds(1)
    assert any(w.prices.compute_s > w.prices.time_s.max() for w in greedy.waves)
    modelled = compiled.evaluate(values.assignment, set(values.shared))
    assert SCALING.seconds(modelled.objective) <= exact + 2 * greedy.num_waves * SCALING.seconds(1)
