"""The lower bound of every plan (:mod:`cpplan.bound`): never above the price of any valid plan, tight
where memory decides the waves, and every cut it takes needed."""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cpplan import Item, Request, Workload
from cpplan.bound import ALL_PLANS, plan_bound
from cpplan.bound.all_plans import wave_crossing_floor_s
from cpplan.bound.handoff_floors import copy_seconds
from cpplan.bound.node_floors import memory_ranks, node_floors, once_amounts, waves_needed, whole_on_one_rank
from cpplan.errors import NoFitError
from cpplan.planners.greedy import cached_greedy_plan
from cpplan.planners.portfolio import solve
from cpplan.plans.result import bound_text
from cpplan.pricing.wave import best_wave, price_wave
from cpplan.spec.profile import load_solver
from cpplan.spec.quantities import QUANTITY_INDEX
from cpplan.spec.topology import Topology
from tests.bound.enumerated import optimum, tiny_problem
from tests.support.prefix_trees import LAYOUTS, prefix_workloads

TOKENS = QUANTITY_INDEX["tokens"]


def _workload(*sequences: list[int]) -> Workload:
    return Workload(
        items=tuple(Item(id=f"i{k}", requests=(Request(tokens=s),)) for k, s in enumerate(sequences))
    )


SHARED = list(range(10))
SMALL = _workload(
    [*SHARED, 11, 12, 13], [*SHARED, 14, 15, 16, 17, 18], [*SHARED, 20, 21], [30, 31, 32, 33, 34, 35]
)
"""Three requests behind one 10-token prefix and one alone: 4-token chunks make every ownership
enumerable."""
CHUNKED = _workload(
    list(range(200)) + list(range(1000, 1100)),
    list(range(200)) + list(range(2000, 2150)),
    list(range(200)) + list(range(3000, 3060)),
    list(range(4000, 4180)),
)
"""The same shape in 128-token chunks (what the CP-SAT models need)."""


@pytest.mark.parametrize("cp, chunk_tokens", [(1, 4), (2, 8)])
@pytest.mark.parametrize("room", [0.6, 0.7, 0.85, 1.0])
@pytest.mark.parametrize("model", ["qwen3-8b", "qwen3.6-35b-a3b"])
def test_bound_at_most_the_enumerated_optimum(cp, chunk_tokens, room, model):
    """On a problem small enough to price every plan (every wave partition, sharing subset, chunk
    ownership, the hand-off in its cheapest mode), the bound holds for all plans and is at most the
    cheapest plan's price; at one rank, where no hand-off or imbalance is left out, within 1% of it."""
    problem = tiny_problem(SMALL, cp=cp, chunk_tokens=chunk_tokens, room=room, model=model)
    best = optimum(problem)
    bound = plan_bound(problem)
    assert best is not None and bound.scope == ALL_PLANS
    assert bound.bound_s <= best[0]
    assert bound.num_waves <= len(best[1])
    if cp == 1:
        assert bound.bound_s >= 0.99 * best[0]


def test_memory_cut_counts_the_waves():
    """Where memory keeps the requests apart, the bound counts the waves the optimum needs (three), each
    with its overhead; with the cut on waves removed (one wave assumed), it would not."""
    problem = tiny_problem(SMALL, cp=1, chunk_tokens=4, room=0.6)
    best = optimum(problem)
    bound = plan_bound(problem)
    assert len(best[1]) == 3 and bound.num_waves == 3
    assert bound.terms_s["overhead"] >= 3 * problem.card.wave_overhead_s * (1 - 1e-6)


def test_copies_cut_counts_the_shared_prefix_per_wave():
    """The shared prefix sits in every wave that holds a request through it: the token floor counts it
    once per such wave (above the single full-sharing wave's tokens) and stays at most the optimum's
    packed tokens."""
    problem = tiny_problem(SMALL, cp=1, chunk_tokens=4, room=0.6)
    floors = node_floors(problem)
    prefix = int(np.flatnonzero(problem.tree.node_length == len(SHARED))[0])
    assert floors.waves[prefix] >= 2
    once = once_amounts(problem)[TOKENS]
    assert floors.totals[TOKENS] >= once + (floors.waves[prefix] - 1) * len(SHARED)
    assert floors.totals[TOKENS] <= sum(w.packed_tokens for w in optimum(problem)[1])


def test_a_wave_at_the_budget_edge_counts_once():
    """With the budget exactly the peak of one full-sharing wave of everything, that wave fits with
    nothing to spare: the bound counts one wave (rounding never adds one) and stays at most its price."""
    problem = tiny_problem(SMALL, cp=1, chunk_tokens=4, room=1.0)
    best = optimum(problem)
    bound = plan_bound(problem)
    assert len(best[1]) == 1 and bound.num_waves == 1
    assert bound.bound_s <= best[0]


def test_waves_needed_rounds_down_against_float_error():
    """A ratio a float hair above an integer gives that integer; one a real wave above gives the next;
    a wave whose own part fills the capacity fits nowhere."""
    assert waves_needed(np.array([0.1 + 0.2]), np.array([0.0]), np.array([0.3])) == 1
    assert waves_needed(np.array([3.0]), np.array([1.0]), np.array([2.0])) == 3
    assert waves_needed(np.array([3.01]), np.array([1.0]), np.array([2.0])) == 4
    assert waves_needed(np.array([0.0]), np.array([0.0]), np.array([1.0])) == 1
    assert waves_needed(np.array([1.0]), np.array([2.0]), np.array([2.0])) is None


@pytest.mark.parametrize("cp", [1, 2])
def test_bound_below_the_planner_and_the_optimum(cp):
    """In 128-token chunks, where the whole portfolio runs: the plan JSON states the scope, the bound is
    at most the enumerated optimum, and the optimum at most the plan."""
    profile = load_solver("deterministic")
    for room in (0.65, 0.75, 1.0):
        problem = tiny_problem(CHUNKED, cp=cp, chunk_tokens=128, room=room)
        result = solve(problem, profile)
        best = optimum(problem)
        assert result.solver.bound_scope == ALL_PLANS
        assert result.to_dict()["solver"]["bound_scope"] == ALL_PLANS
        assert result.solver.bound_s <= best[0] <= result.cost_s * (1 + 1e-12)
        if result.solver.gap is not None and result.solver.gap <= 1e-9 and result.strategy == "cpsat":
            assert result.cost_s == pytest.approx(best[0], rel=1e-6)  # a zero gap over all plans: optimal


def test_summary_says_how_far_from_the_best_plan():
    """``summary()`` says in plain words how far the plan is from the best possible plan under the cost
    model, and the bound it counts from (rounded down, its lines folded at 80 columns)."""
    problem = tiny_problem(CHUNKED, cp=2, chunk_tokens=128, room=0.75)
    result = solve(problem, load_solver("deterministic"))
    text = " ".join(result.summary().split())
    assert (
        "best possible plan under the cost model" in text or "the best possible under the cost model" in text
    )
    assert f"no valid plan costs less than {bound_text(result.solver.bound_s)} s" in text


@st.composite
def _instances(draw):
    workload = draw(prefix_workloads(max_requests=5, max_tail=40))
    return (
        workload,
        draw(st.sampled_from([1, 2, 4])),
        draw(st.sampled_from(["qwen3-8b", "qwen3.6-35b-a3b"])),
        draw(st.floats(0.5, 1.0)),
        draw(st.lists(st.integers(0, 3), min_size=workload.num_items, max_size=workload.num_items)),
        draw(st.integers(0, 2**16)),
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_instances())
@example(
    instance=(
        Workload(
            items=(
                Item(id="i0", requests=(Request(tokens=np.zeros(8, dtype=np.int64), output="none"),)),
                Item(id="i1", requests=(Request(tokens=np.zeros(13, dtype=np.int64), output="loss"),)),
                Item(id="i2", requests=(Request(tokens=np.array([1] + [0] * 10), output="loss"),)),
            )
        ),
        1,
        "qwen3-8b",
        0.53125,
        [0, 0, 0],
        0,
    ),
).via("discovered failure: an item no wave fits, its partitions' bound infinite")
def test_bound_never_above_a_valid_candidate(instance):
    """Over random prefix-tree workloads, CP sizes, cards and budgets: the bound is at most the price of
    greedy's plan and of every fitting plan made of a random wave partition, each wave under the best
    listed layout or a random chunk ownership."""
    workload, cp, model, room, groups, seed = instance
    distinct = int(sum(len(r.tokens) for _, _, r in workload.requests()))
    problem = tiny_problem(
        workload, cp=min(cp, max(distinct // 4, 1)), chunk_tokens=4, room=room, model=model
    )
    bound = plan_bound(problem)
    if bound.scope != ALL_PLANS:
        return
    prices = []
    with contextlib.suppress(NoFitError):  # a refusal leaves the other candidates
        prices.append(cached_greedy_plan(problem, LAYOUTS).cost_s)
    rng = np.random.default_rng(seed)
    waves = [tuple(i for i, g in enumerate(groups) if g == k) for k in sorted(set(groups))]
    chosen = [best_wave(problem, items, LAYOUTS)[0] for items in waves]
    if all(w is not None for w in chosen):
        prices.append(sum(w.cost_s for w in chosen))
    mixed = []
    for items in waves:
        layout = problem.pack(items, str(rng.choice(LAYOUTS)))
        num_chunks = -(-layout.packed_tokens // problem.chunk_tokens)
        owner = rng.integers(0, problem.topology.cp, num_chunks)
        mixed.append(price_wave(problem, items, layout, "random", owner))
    if all(w.fits(problem.memory_bytes) for w in mixed):
        prices.append(sum(w.cost_s for w in mixed))
    for price in prices:
        assert bound.bound_s <= price


def test_one_wave_pays_a_crossing_or_an_imbalance():
    """A one-wave plan on two ranks either hands a GDN state over or keeps every request whole on one
    rank: the bound adds the cheaper of the two (positive here, where the budget keeps the wave spread)
    and stays at most the enumerated optimum, which pays a hand-off."""
    problem = tiny_problem(CHUNKED, cp=2, chunk_tokens=128, room=1.0, model="qwen3.6-35b-a3b")
    bound = plan_bound(problem)
    best = optimum(problem)
    assert bound.num_waves == 1 and bound.terms_s["handoff_or_imbalance"] > 0
    assert bound.bound_s <= best[0]
    assert best[1][0].handoff.seconds > 0


def test_memory_keeps_whole_requests_on_several_ranks():
    """With the budget at the peak of every request in one wave spread evenly over two ranks, whole
    requests (each path on one rank, its shared prefix copied where needed) need more than two ranks;
    with the budget of one rank holding everything, one rank does."""
    problem = tiny_problem(CHUNKED, cp=2, chunk_tokens=128, room=1.0, model="qwen3.6-35b-a3b")
    ranks = memory_ranks(problem)
    assert ranks is not None and ranks[0] > 2
    roomy = tiny_problem(CHUNKED, cp=1, chunk_tokens=128, room=1.0, model="qwen3.6-35b-a3b")
    assert memory_ranks(roomy)[0] == 1


def test_requests_kept_apart_count_a_wave_each():
    """On the README example at CP1 and 8 GiB, six requests pairwise cannot share a wave: the bound
    counts six waves (averaging memory alone counts five), and stays at most greedy's plan."""
    from pathlib import Path

    from cpplan.api import build_problem

    example = Path(__file__).resolve().parents[2] / "examples" / "grpo.jsonl"
    problem = build_problem(
        Workload.from_jsonl(example), topology=Topology(cp=1), model="qwen3.6-35b-a3b", memory_bytes="8GiB"
    )
    bound = plan_bound(problem)
    greedy = cached_greedy_plan(problem, load_solver("deterministic").greedy.layouts)
    assert bound.num_waves == 6 and greedy.num_waves == 6
    assert bound.bound_s <= greedy.cost_s


def test_requests_too_long_for_one_rank_cross_in_every_wave():
    """Where no request's whole path fits one rank, every wave hands a GDN state across ranks: the
    bound adds one crossing floor per wave (three here), stays at most the enumerated optimum (whose
    three waves each pay a hand-off) and comes within 2% of it."""
    workload = _workload(list(range(300)), list(range(1000, 1300)), list(range(2000, 2280)))
    problem = tiny_problem(workload, cp=2, chunk_tokens=128, room=0.4, model="qwen3.6-35b-a3b")
    assert not whole_on_one_rank(problem).any()
    bound = plan_bound(problem)
    best = optimum(problem)
    each = wave_crossing_floor_s(problem, 280.0)
    assert bound.num_waves == 3 and each > 0
    assert bound.terms_s["handoff_or_imbalance"] == pytest.approx(3 * each, rel=1e-6)
    assert all(w.handoff.seconds >= each for w in best[1])
    assert 0.98 * best[0] <= bound.bound_s <= best[0]


def test_pairs_at_most_per_wave_count_by_matching():
    """Where no three requests fit one wave (GRPO 1:8 at CP1 and 12 GiB), the waves are at least the
    requests less a maximum matching of the pairs that fit: more than the requests kept apart count,
    and never above a valid plan's count or price."""
    from cpplan.api import build_problem
    from cpplan.bench.suites import suite
    from cpplan.bound.node_floors import apart_requests, one_rank_bytes, paired_waves

    case = next(c for c in suite(quick=True) if c.name == "grpo_g8_1to8")
    problem = build_problem(
        case.build(), topology=Topology(cp=1), model="qwen3.6-35b-a3b", memory_bytes="12GiB"
    )
    floors = node_floors(problem)
    bound = plan_bound(problem)
    greedy = cached_greedy_plan(problem, load_solver("deterministic").greedy.layouts)
    assert bound.num_waves == floors.waves[0] <= greedy.num_waves
    assert bound.bound_s <= greedy.cost_s
    _, path, piece, capacity = one_rank_bytes(problem)  # at CP1 the average rank is the rank
    paired, _ = paired_waves(problem, path, piece, capacity)
    assert paired > apart_requests(problem, path, piece, capacity).size
    assert bound.num_waves >= paired


def _grpo_1to8_cp1_12gib():
    from cpplan.api import build_problem
    from cpplan.bench.suites import suite

    case = next(c for c in suite(quick=True) if c.name == "grpo_g8_1to8")
    return build_problem(case.build(), topology=Topology(cp=1), model="qwen3.6-35b-a3b", memory_bytes="12GiB")


def test_the_matching_is_a_plan_cheaper_than_greedy():
    """The bound's matching, each pair a wave under its best layout, is a plan: every wave fits, every
    item is in exactly one wave, and it is cheaper than greedy's (fewer waves, fewer overheads)."""
    problem = _grpo_1to8_cp1_12gib()
    layouts = load_solver("deterministic").greedy.layouts
    bound = plan_bound(problem, layouts=layouts)
    (matched,) = bound.new_plans
    greedy = cached_greedy_plan(problem, layouts)
    assert all(w.fits(problem.memory_bytes) for w in matched.waves)
    assert sorted(i for w in matched.waves for i in w.items) == list(range(problem.num_items))
    assert bound.bound_s <= matched.cost_s < greedy.cost_s
    assert matched.num_waves < greedy.num_waves


@pytest.mark.slow
def test_the_planner_takes_the_matching_columns():
    """The portfolio's deterministic plan uses the bound's columns where they are cheaper: its price is
    at most the matching plan's and below greedy's, and within 2.5% of the bound over every plan."""
    problem = _grpo_1to8_cp1_12gib()
    profile = load_solver("deterministic")
    result = solve(problem, profile)
    (matched,) = plan_bound(problem, layouts=profile.greedy.layouts).new_plans
    greedy = cached_greedy_plan(problem, profile.greedy.layouts)
    assert result.cost_s <= matched.cost_s * (1 + 1e-9) and result.cost_s < greedy.cost_s
    assert result.solver.bound_scope == ALL_PLANS and result.solver.gap <= 0.025


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_instances())
def test_bound_never_above_the_planners_plans(instance):
    """Over random prefix-tree workloads (each token widened to 32, so that 128-token chunks, what the
    CP-SAT models count in, still spread them), CP sizes, cards and budgets: the bound is at most the
    price of the plan ``cpplan.solve`` returns (the runtime profile's whole pipeline) and of greedy's
    plan, on one group, on a pool of two and on that pool under dynamic CP."""
    workload, cp, model, room, _, _ = instance
    workload = _widened(workload, 32)
    distinct = int(sum(len(r.tokens) for _, _, r in workload.requests()))
    problem = tiny_problem(
        workload, cp=min(cp, max(distinct // 128, 1)), chunk_tokens=128, room=room, model=model
    )
    pooled = dataclasses.replace(
        problem,
        settings=dataclasses.replace(problem.settings, topology=Topology(cp=problem.topology.cp, dp=2)),
    )
    dynamic = dataclasses.replace(
        problem,
        settings=dataclasses.replace(
            problem.settings,
            topology=Topology(cp=1 << (problem.topology.cp.bit_length() - 1), dp=2, dynamic_cp=True),
        ),  # a dynamic pool's size is a power of two
    )
    for case in (problem, pooled, dynamic):
        bound = plan_bound(case)
        if bound.scope != ALL_PLANS:
            continue
        prices = []
        with contextlib.suppress(NoFitError):
            prices.append(solve(case, load_solver("runtime")).cost_s)
        with contextlib.suppress(NoFitError):
            prices.append(cached_greedy_plan(case, LAYOUTS).cost_s)
        for price in prices:
            assert bound.bound_s <= price * (1 + 1e-12)


def _widened(workload: Workload, width: int) -> Workload:
    """``workload`` with every token ``t`` replaced by the ``width`` tokens ``t · width + k``: the same
    prefix tree, every node ``width`` times longer."""
    items = []
    for item in workload.items:
        requests = tuple(
            Request(
                tokens=(np.asarray(r.tokens)[:, None] * width + np.arange(width)).ravel(),
                grad=r.grad,
                output=r.output,
            )
            for r in item.requests
        )
        items.append(Item(id=item.id, requests=requests))
    return Workload(items=tuple(items))


SHARED_BY_ALL = _workload(
    [*SHARED, 11, 12, 13], [*SHARED, 14, 15, 16, 17, 18], [*SHARED, 20, 21], [*SHARED, 30, 31, 32, 33, 34, 35]
)
"""Four requests behind one 10-token prefix that all of them pass (a system prompt)."""


def test_every_wave_behind_a_common_prefix_crosses_or_copies(monkeypatch):
    """Where every request passes a common prefix, each wave of a plan of several on two ranks crosses
    (a hand-off) or keeps its requests whole on ranks (the prefix copied, or all on one rank while the
    other waits): the bound counts the least of these per wave, which lifts it, and it stays at most the
    enumerated optimum (every partition, layout and ownership)."""
    from cpplan.bound import all_plans

    problem = tiny_problem(SHARED_BY_ALL, cp=2, chunk_tokens=4, room=0.6, model="qwen3.6-35b-a3b")
    best = optimum(problem)
    bound = plan_bound(problem)
    assert best is not None and len(best[1]) >= 2 and bound.num_waves >= 2
    assert all_plans.every_wave_floor_s(problem, copy_seconds(problem)) > 0
    assert bound.bound_s <= best[0]
    monkeypatch.setattr(all_plans, "every_wave_floor_s", lambda *args: 0.0)
    assert plan_bound(dataclasses.replace(problem)).bound_s < bound.bound_s
