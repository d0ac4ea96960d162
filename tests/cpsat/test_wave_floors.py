"""The items' floors and the joint model's per-barrier maxima: what a request costs any wave it joins at
least, a true lower bound of the exact price, tight enough to lift the model's objective above the
rank average, and priced by the solver as by the plain-Python evaluation."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from cpplan import Item, Request, Topology, Workload, load_solver
from cpplan.cpsat import SCALING, build_space, compile_model, solve
from cpplan.cpsat.path_floor import RunLoad, least_pair_sum, least_threshold
from cpplan.cpsat.wave_floors import item_floors
from cpplan.planners.cpsat_strategy import greedy_values
from cpplan.planners.greedy import greedy_plan
from cpplan.pricing.evaluator import price
from cpplan.pricing.handoff_mode import chosen_handoff
from cpplan.pricing.ownership import contiguous_split, rank_quantities
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import price_wave
from cpplan.spec.settings import Settings

GIB = 2**30


def _problem(card, lengths, cp: int, memory_bytes: int = 2**42, layers: int | None = None) -> Problem:
    items = tuple(
        Item(id=f"r{k}", requests=(Request(tokens=(np.arange(n) * (k + 3)) % 9973),))
        for k, n in enumerate(lengths)
    )
    settings = Settings(topology=Topology(cp=cp), model=card, memory_bytes=memory_bytes, num_layers=layers)
    return Problem.build(Workload(items=items), settings)


def _random_contiguous_owners(num_chunks: int, cp: int, rng, count: int):
    """Contiguous chunk ownerships in rank order over 1 .. cp ranks, the rest left empty."""
    for _ in range(count):
        runs = int(rng.integers(1, cp + 1))
        cuts = np.sort(rng.choice(np.arange(1, num_chunks), runs - 1, replace=False)) if runs > 1 else []
        owner = np.zeros(num_chunks, dtype=np.int64)
        for rank, cut in enumerate(cuts, start=1):
            owner[cut:] = rank
        yield owner


@pytest.mark.parametrize(("length", "cp"), [(6000, 2), (40000, 4), (40000, 8), (131072, 8)])
def test_floors_never_exceed_any_contiguous_split(qwen36_two_modes, length, cp):
    """One request alone: its wave floor is at most the exact barrier cost plus hand-off of every
    contiguous ownership tried (random ones and the pricing's own choice), and each barrier's floor at
    most that barrier's slowest rank; yet the floor lies above the best split's rank average. (The
    floors' least hand-off counts the rounds and parallel passing, so the card here offers those two;
    head-parallel's least price is not in the floors yet.)"""
    qwen36 = qwen36_two_modes
    problem = _problem(qwen36, [length], cp)
    floors = item_floors(problem)
    layout = problem.pack((0,), "full")
    best = price_wave(problem, (0,), layout, "full")
    owners = [
        best.owner,
        *_random_contiguous_owners(best.stats.num_chunks, cp, np.random.default_rng(length), 60),
    ]
    for owner in owners:
        prices = price(problem.card, rank_quantities(best.stats, owner, cp))
        handoff = chosen_handoff(layout, owner, problem.chunk_tokens, cp, problem.card.handoff)
        assert floors.wave_s[0] <= prices.compute_s + handoff.seconds
        assert (floors.barrier_s[0] <= prices.barrier_s.max(axis=0)).all()
    assert floors.wave_s[0] > 1.05 * best.prices.time_s.mean()


def test_a_short_request_on_many_ranks_costs_at_least_its_unsplit_run_or_a_hand_off(qwen36_two_modes):
    """Split over eight ranks, a 4K-token request pays a hand-off that exceeds its split's savings, so
    its floor is far above an eighth of its work (the rank average) and within its exact price (the
    card offering rounds and parallel passing, the modes the floors count)."""
    qwen36 = qwen36_two_modes
    problem = _problem(qwen36, [4096], 8)
    floors = item_floors(problem)
    wave = price_wave(problem, (0,), problem.pack((0,), "full"), "full")
    assert 1.5 * wave.prices.time_s.mean() < floors.wave_s[0] <= wave.prices.compute_s + wave.handoff.seconds


def test_no_floors_at_one_rank(qwen36):
    """At one CP rank the rank average is the exact cost: the items carry no floor."""
    floors = item_floors(_problem(qwen36, [40000, 3000], 1))
    assert not floors.wave_s.any() and not floors.barrier_s.any()


def _discrete_least(token: float, pair: float, length: int, runs: int, second_token: float | None = None):
    """Brute force over every split of ``length`` tokens into at most ``runs`` runs: the least slowest
    run (one group) or the least sum of both groups' slowest runs (token ``i`` attends ``i + 1`` keys)."""
    best = np.inf
    for cuts in itertools.combinations(range(1, length), runs - 1):
        edges = (0, *cuts, length)
        first = [token * (e - s) + pair * sum(range(s + 1, e + 1)) for s, e in itertools.pairwise(edges)]
        cost = max(first) + (
            max(second_token * (e - s) for s, e in itertools.pairwise(edges)) if second_token else 0
        )
        best = min(best, cost)
    return best


@pytest.mark.parametrize(("length", "runs"), [(60, 2), (60, 3), (48, 4)])
def test_path_search_bounds_the_discrete_optimum_closely(length, runs):
    """The continuum searches stay below the exact discrete optimum of every split, within 6% of it
    (the continuum gives each run half a token of pairs less): for one group's slowest run and for the
    sum of two groups' slowest runs."""
    one = RunLoad(token_s=np.array([1.0]), pair_s=np.array([0.5]), offset_s=np.array([0.0]))
    other = RunLoad(token_s=np.array([3.0]), pair_s=np.array([0.0]), offset_s=np.array([0.0]))
    size, count = np.array([float(length)]), np.array([runs])
    single = least_threshold(one, size, count)[0][0]
    exact_single = _discrete_least(1.0, 0.5, length, runs)
    assert 0.94 * exact_single <= single <= exact_single
    coupled = least_pair_sum(one, other, size, count)[0]
    exact_coupled = _discrete_least(1.0, 0.5, length, runs, second_token=3.0)
    assert 0.94 * exact_coupled <= coupled <= exact_coupled
    assert coupled > single + least_threshold(other, size, count)[0][0]  # coupling beats the sum of parts


def _contiguous(problem, wave):
    """``wave`` owned by the contiguous split balancing each rank's total seconds."""
    owner = contiguous_split(
        wave.stats.quantity_matrix() @ problem.card.time_coefficients(), problem.topology.cp
    )
    return price_wave(problem, wave.items, wave.layout, wave.layout_name, owner=owner)


def _long_and_short(qwen36):
    problem = _problem(qwen36, [64000, 2000, 2000], 4, memory_bytes=40 * GIB)
    greedy = greedy_plan(problem, ("full", "none"))
    return problem, greedy


def test_modelled_waves_rise_from_the_rank_average_to_the_floors(qwen36):
    """The greedy plan's waves as modelled waves (no exact columns): with floors the model prices them
    above its rank average, and still at or below the evaluator's exact cost under the time-balanced
    contiguous split (the floors bound contiguous ownerships; greedy's own, free of ranges, may be
    cheaper)."""
    problem, found = _long_and_short(qwen36)
    greedy = dataclasses.replace(found, waves=tuple(_contiguous(problem, wave) for wave in found.waves))
    space = build_space(problem, extra_specs=("full", "none"))
    assert space.has_floors
    compiled = compile_model(problem, space, greedy.num_waves)
    values = greedy_values(compiled, space, greedy)
    modelled = compiled.evaluate(values.assignment, set(values.shared))
    bare = dataclasses.replace(
        space,
        items=tuple(
            dataclasses.replace(item, floor_units=0, barrier_floor_units=(0,) * space.num_barriers)
            for item in space.items
        ),
    )
    average = compile_model(problem, bare, greedy.num_waves).evaluate(values.assignment, set(values.shared))
    exact = sum(w.cost_s for w in greedy.waves)
    assert SCALING.seconds(average.objective) < SCALING.seconds(modelled.objective) <= exact
    assert modelled.objective - average.objective > 0.05 * average.objective


def test_solver_objective_with_floors_equals_the_python_evaluation(qwen36):
    """With floors and barrier maxima in the model, the objective CP-SAT reports for its answer equals
    the plain-Python evaluation of that answer, and the floors bind in it (above the rank average)."""
    problem, greedy = _long_and_short(qwen36)
    space = build_space(problem, extra_specs=("full", "none"))
    compiled = compile_model(problem, space, greedy.num_waves)
    compiled.add_hint(greedy_values(compiled, space, greedy))
    solution, stats = solve(
        compiled, load_solver("deterministic").cpsat, time_limit_s=None, deterministic=True
    )
    assert solution is not None and stats.objective_s is not None
    values = compiled.evaluate(solution.assignment, set(solution.shared))
    assert SCALING.seconds(values.objective) == pytest.approx(stats.objective_s, abs=1e-9)
    averages = [-(-t["time_units"] // 4) for t in values.totals]
    assert any(time > average for time, average in zip(values.time, averages, strict=True))
