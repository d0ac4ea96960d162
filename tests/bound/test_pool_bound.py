"""The bound of a pool's makespan (:mod:`cpplan.bound.pool_makespan`): ``dp`` CP groups of one size, each
running its waves one after another. Never above a valid pool plan's makespan; each of its two floors
binds somewhere."""

from __future__ import annotations

import dataclasses
import math

import pytest

from cpplan import Problem, Topology, Workload
from cpplan.api import build_problem
from cpplan.bound import ALL_PLANS, plan_bound
from cpplan.bound.all_plans import waves_bound
from cpplan.bound.pool_makespan import dynamic_pool_bound, item_floor_s
from cpplan.planners.dynamic_cp import group_problem
from cpplan.planners.greedy import cached_greedy_plan
from cpplan.planners.portfolio import solve
from cpplan.spec.profile import load_solver
from tests.bound.enumerated import optimum, tiny_problem
from tests.bound.test_all_plans_bound import CHUNKED

EXAMPLE = "examples/grpo.jsonl"


def _pooled(problem, dp: int):
    topology = Topology(cp=problem.topology.cp, dp=dp)
    return dataclasses.replace(problem, settings=dataclasses.replace(problem.settings, topology=topology))


@pytest.mark.parametrize("dp, cp", [(2, 2), (4, 1)])
def test_pool_plan_never_below_the_bound(dp, cp):
    """On the README example (24 requests, 8 GiB per rank), the deterministic profile's pool plan
    (a makespan over ``dp`` groups) costs at least the bound, which holds over all plans and is the
    larger of the summed waves' bound over ``dp`` and the costliest item's own wave."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    problem = build_problem(
        Workload.from_jsonl(root / EXAMPLE),
        topology=Topology(cp=cp, dp=dp),
        model="qwen3.6-35b-a3b",
        memory_bytes="8GiB",
    )
    result = solve(problem, load_solver("deterministic"))
    bound = plan_bound(problem)
    assert bound.scope == ALL_PLANS
    assert bound.bound_s <= result.cost_s
    assert result.solver.bound_scope == ALL_PLANS and result.solver.bound_s == bound.bound_s
    summed = waves_bound(problem, None, ())
    assert bound.bound_s >= summed.bound_s / dp
    assert bound.bound_s >= 0.75 * result.cost_s  # measured: 78% at dp2 x cp2, 84% at dp4 x cp1


def test_costliest_item_bounds_a_wide_pool():
    """With more groups than waves' worth of work, the summed share falls below the costliest item's
    own wave, which then binds: the enumerated optimum of one group is at least it, and the pool
    bound is at most the optimum of one group (a plan of the pool runs that item's wave somewhere)."""
    problem = tiny_problem(CHUNKED, cp=1, chunk_tokens=128, room=1.0)
    wide = _pooled(problem, 8)
    bound = plan_bound(wide)
    costliest = max(item_floor_s(wide, i) for i in range(wide.num_items))
    assert bound.bound_s == pytest.approx(costliest, rel=1e-6)
    assert bound.terms_s["costliest_item_wave"] > bound.terms_s["summed_waves_over_groups"]
    best, waves = optimum(problem)
    assert bound.bound_s <= min(w.cost_s for w in waves if any(i in w.items for i in range(wide.num_items)))
    assert bound.bound_s <= best


def test_summed_share_bounds_a_narrow_pool():
    """With two groups and many waves, the summed waves' bound over two binds, above the costliest
    item, and greedy's plan placed greedily on the two groups costs no less."""
    problem = tiny_problem(CHUNKED, cp=1, chunk_tokens=128, room=0.65)
    pooled = _pooled(problem, 2)
    bound = plan_bound(pooled)
    assert bound.terms_s["summed_waves_over_groups"] > bound.terms_s["costliest_item_wave"]
    plan = cached_greedy_plan(problem, load_solver("deterministic").greedy.layouts)
    loads = [0.0, 0.0]
    for wave in sorted(plan.waves, key=lambda w: -w.cost_s):
        loads[loads.index(min(loads))] += wave.cost_s
    assert bound.bound_s <= max(loads)


@pytest.mark.parametrize("topology", ["dp=2,cp=2,dynamic_cp=1", "dp=4,cp=2,dynamic_cp=1"])
def test_dynamic_cp_pool_plan_never_below_the_bound(topology):
    """Under dynamic CP (waves of any group size on one pool) the bound holds over all plans: the
    deterministic profile's plan of the README example (its makespan) costs at least it, and the CLI's
    stats carry it; the pool's summed GPU-seconds over the pool binds there (a bound that forgot to
    share the GPU-seconds over the pool would exceed the plan)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    problem = build_problem(
        Workload.from_jsonl(root / EXAMPLE),
        topology=Topology.parse(topology),
        model="qwen3.6-35b-a3b",
        memory_bytes="8GiB",
    )
    result = solve(problem, load_solver("deterministic"))
    bound = plan_bound(problem)
    assert bound.scope == ALL_PLANS
    assert 0 < bound.bound_s <= result.cost_s
    assert bound.terms_s["gpu_seconds_over_pool"] > bound.terms_s["costliest_item_wave"]
    assert result.solver.bound_scope == ALL_PLANS and result.solver.bound_s == bound.bound_s


def test_dynamic_cp_costliest_item_at_its_cheapest_group_size():
    """On a pool wider than the work, the costliest item's wave binds, priced at its cheapest group
    size, and stays at most the enumerated optimum of one GPU (a plan of the pool may run every wave on
    one GPU, so its makespan's floor is no more than that plan's waves)."""
    problem = tiny_problem(CHUNKED, cp=1, chunk_tokens=128, room=1.0)
    pool = dataclasses.replace(
        problem,
        settings=dataclasses.replace(problem.settings, topology=Topology(cp=1, dp=8, dynamic_cp=True)),
    )
    bound, terms = dynamic_pool_bound(pool)
    sizes = pool.topology.group_sizes()
    cheapest = max(min(item_floor_s(group_problem(pool, c), i) for c in sizes) for i in range(pool.num_items))
    assert terms["costliest_item_wave"] == pytest.approx(cheapest, rel=1e-6)
    assert bound == pytest.approx(max(terms.values()), rel=1e-6)
    _, waves = optimum(problem)
    assert bound <= max(w.cost_s for w in waves)
    assert plan_bound(pool).scope == ALL_PLANS


def test_assignments_of_few_items_to_groups_bound_the_pool():
    """For a few items every assignment of them to the groups is priced by the partition floors: on two
    CP1 groups the floor binds above the summed share and the costliest item, and stays at most the best
    makespan of plans that give each group a set of items and run it optimally (every partition,
    layout and ownership enumerated per set)."""

    problem = tiny_problem(CHUNKED, cp=1, chunk_tokens=128, room=0.65)
    pooled = _pooled(problem, 2)
    bound = plan_bound(pooled)
    terms = bound.terms_s
    assert terms["enumerated_groups"] > max(terms["summed_waves_over_groups"], terms["costliest_item_wave"])
    assert bound.bound_s == pytest.approx(terms["enumerated_groups"], rel=1e-6)
    makespans = two_group_makespans(problem)
    assert bound.bound_s <= min(makespans) * (1 + 1e-12)


def _grpo_dynamic_pool():
    """The bench's held-out GRPO step (two groups of eight behind a 10k-token prefix) on a pool of four
    GPUs under dynamic CP, 20 GiB each."""
    from cpplan.bench.held_out import grpo_step

    return build_problem(
        grpo_step(),
        topology=Topology.parse("dp=2,cp=2,dynamic_cp=1"),
        model="qwen3.6-35b-a3b",
        memory_bytes="20GiB",
    )


def test_dynamic_cp_runs_of_few_items_bound_the_pool():
    """Under dynamic CP, for a few items every partition into runs (one wave at some group size, or
    waves tied by a split item at any sizes) is priced: on the GRPO step of two items on four GPUs the
    floor binds above the summed GPU-seconds (which lets both items run on single GPUs with the other
    two idle) and the costliest item, and is what the bound reports."""
    problem = _grpo_dynamic_pool()
    bound = plan_bound(problem)
    terms = bound.terms_s
    assert terms["enumerated_runs"] > 1.15 * max(terms["gpu_seconds_over_pool"], terms["costliest_item_wave"])
    assert bound.bound_s == pytest.approx(terms["enumerated_runs"], rel=1e-6)


def test_dynamic_cp_split_runs_search_finds_the_least_threshold():
    """The binary search over the ``solo`` thresholds gives ``min_T max(T, D(T) / pool)`` exactly as
    trying every threshold does (``D(T)``: the least summed GPU-seconds of the partitions with a split
    run whose one-wave runs each hold one GPU at most ``T``), on made-up ways where splitting pays."""
    import numpy as np

    from cpplan.bound.partitions import partitions_marked_s
    from cpplan.bound.pool_makespan import split_runs_bound_s

    rng = np.random.default_rng(3)
    solo = np.concatenate([rng.uniform(0.5, 2.0, (8, 3)), np.zeros((8, 1))], axis=1)
    gpu = np.concatenate([solo[:, :3] * [1, 2, 4], rng.uniform(1.0, 3.0, (8, 1))], axis=1)
    solo[0], gpu[0] = 0.0, 0.0
    every = []
    for limit in np.unique(solo).tolist():
        one = np.where(solo[:, :-1] <= limit, gpu[:, :-1], math.inf).min(axis=1)
        every.append(max(limit, partitions_marked_s(one, gpu[:, -1])[-1] / 4))
    assert split_runs_bound_s(solo, gpu, 4) == pytest.approx(min(every), rel=1e-12)
    gpu[:, -1] = math.inf
    assert split_runs_bound_s(solo, gpu, 4) == math.inf


def test_dynamic_cp_whole_runs_bound_the_busiest_gpu():
    """Where every run is one wave, each holds its GPUs for its whole price: three items costing 1.0 s on
    one GPU or 0.9 s on both of a two-GPU pool end no sooner than 1.9 s (two on one GPU each, the third
    on both), though their least GPU-seconds over the pool are only 1.5 s."""
    import numpy as np

    from cpplan.bound.pool_makespan import whole_runs_bound_s

    solo = np.full((8, 2), math.inf)
    for mask in range(1, 8):
        solo[mask] = [1.0, 0.9] if mask.bit_count() == 1 else [math.inf, math.inf]
    assert whole_runs_bound_s(solo, [1, 2], 2) == pytest.approx(1.9)
    solo[0b011] = [1.5, math.inf]  # two items as one wave, 1.5 s on one GPU
    assert whole_runs_bound_s(solo, [1, 2], 2) == pytest.approx(1.5)


def test_dynamic_cp_whole_runs_prove_agent_trees_optimal():
    """On four agent trees on four GPUs at 40 GiB (each tree fits one wave at every size, so none is
    split), a tree on two GPUs or more leaves a GPU two waves, so the deterministic plan (each tree on one
    GPU) is proven optimal: the bound equals its makespan."""
    from cpplan.bench import synthetic

    trees = synthetic.agent_trees(num_trees=4, depth=3, branching=3, turn_tokens=(1024, 4096), seed=7)
    problem = build_problem(
        trees,
        topology=Topology.parse("dp=2,cp=2,dynamic_cp=1"),
        model="qwen3.6-35b-a3b",
        memory_bytes="40GiB",
    )
    plan = solve(problem, load_solver("deterministic"))
    bound = plan_bound(problem)
    assert bound.terms_s["enumerated_runs"] > 1.05 * bound.terms_s["gpu_seconds_over_pool"]
    assert bound.bound_s == pytest.approx(plan.cost_s, rel=1e-6)


@pytest.mark.parametrize("model", ["qwen3-8b", "qwen3.6-35b-a3b"])
def test_dynamic_cp_runs_floor_at_most_enumerated_pool_plans(model):
    """On a tiny problem on two GPUs under dynamic CP, the bound (its enumerated runs included) is at
    most the makespan of every plan that gives each GPU a set of items run optimally alone (every
    partition, layout and ownership enumerated per set), of the optimum of every wave on both GPUs
    (group size 2), and of the deterministic profile's plan."""

    problem = tiny_problem(CHUNKED, cp=1, chunk_tokens=128, room=0.65, model=model)
    pool = dataclasses.replace(
        problem,
        settings=dataclasses.replace(problem.settings, topology=Topology(cp=1, dp=2, dynamic_cp=True)),
    )
    bound = plan_bound(pool)
    assert "enumerated_runs" in bound.terms_s
    makespans = two_group_makespans(problem)
    wide = optimum(dataclasses.replace(group_problem(pool, 2), chunk_tokens=problem.chunk_tokens))
    makespans += [wide[0]] if wide is not None else []
    makespans.append(solve(pool, load_solver("deterministic")).cost_s)
    assert bound.bound_s <= min(makespans) * (1 + 1e-12)


def two_group_makespans(problem: Problem) -> list[float]:
    """Per split of ``problem``'s items between two groups, the larger of the two groups' optima (by
    enumeration, infinite where a group's items have no plan)."""
    n = problem.num_items

    def best(mask: int) -> float:
        if mask == 0:
            return 0.0
        items = tuple(problem.workload.items[i] for i in range(n) if mask >> i & 1)
        sub = Problem.build(Workload(items=items), problem.settings)
        found = optimum(dataclasses.replace(sub, chunk_tokens=problem.chunk_tokens))
        return math.inf if found is None else found[0]

    return [max(best(mask), best((1 << n) - 1 ^ mask)) for mask in range(1 << n)]


def _equal_requests(num_items: int, topology: str) -> Problem:
    """``num_items`` unrelated requests of 4,096 tokens each (nothing shared), one per item, on the
    Qwen3.6 card at 40 GiB per rank."""
    import numpy as np

    from cpplan import Item, Request

    rng = np.random.default_rng(5)
    items = tuple(
        Item(id=f"r{i}", requests=(Request(tokens=rng.integers(0, 100_000, 4096).tolist()),))
        for i in range(num_items)
    )
    return build_problem(
        Workload(items=items),
        topology=Topology.parse(topology),
        model="qwen3.6-35b-a3b",
        memory_bytes="40GiB",
    )


def test_dynamic_cp_every_used_gpu_pays_an_overhead():
    """Under dynamic CP every GPU a plan uses is held by at least one wave's overhead, so the makespan is
    at least the least overhead plus the GPU-seconds of the work over the pool: eight equal unrelated
    requests on four GPUs (two per GPU, one wave each, is optimal) get a bound equal to that plan's
    makespan, which a bound sharing one overhead over the pool falls short of by three quarters of it."""
    problem = _equal_requests(8, "dp=2,cp=2,dynamic_cp=1")
    result = solve(problem, load_solver("deterministic"))
    bound = plan_bound(problem)
    overhead = problem.card.group_card(1).wave_overhead_s
    assert bound.bound_s <= result.cost_s
    assert bound.bound_s == pytest.approx(result.cost_s, rel=1e-6)
    assert bound.terms_s["gpu_seconds_over_pool"] - 0.75 * overhead > 0.0
    assert result.cost_s - 0.75 * overhead < bound.bound_s * (1 - 1e-3)


def test_each_used_group_runs_a_wave():
    """A pool plan that uses ``k`` groups has at least ``k`` waves, each paying an overhead: twelve equal
    unrelated requests (too many to enumerate their assignments) that fit one wave, on four CP1 groups
    free to run unequal numbers of waves, get a bound equal to the deterministic plan's makespan (three
    requests per group, one wave each), where a quarter of the summed bound (which counts one wave for
    all twelve) and the costliest request's own wave fall short."""
    problem = _equal_requests(12, "dp=4,cp=1,equal_waves=0")
    summed = waves_bound(problem, None, ())
    assert summed.num_waves == 1
    result = solve(problem, load_solver("deterministic"))
    bound = plan_bound(problem)
    assert bound.bound_s <= result.cost_s
    assert bound.bound_s == pytest.approx(result.cost_s, rel=1e-6)
    others = max(summed.bound_s / 4, bound.terms_s["costliest_item_wave"])
    assert bound.terms_s["summed_waves_over_groups"] > others * (1 + 1e-3)


def test_padding_is_not_added_to_waves_the_summed_bound_already_counts():
    """Two items on a pool of two GPUs whose budget fits each alone: the node floors count one wave, the
    item partitions two (one a GPU, no padding). The padding of a one-wave plan is not added on top of
    the partitions' second overhead, so the bound stays at the two-wave plan's makespan (it was an
    overhead above it)."""
    from cpplan import Item, Request
    from tests.bound.test_all_plans_bound import _widened

    workload = Workload(
        items=(
            Item(id="i0", requests=(*[Request(tokens=[0])] * 3, Request(tokens=[0], output="none"))),
            Item(id="i1", requests=(Request(tokens=[1]),)),
        )
    )
    problem = tiny_problem(_widened(workload, 32), cp=1, chunk_tokens=128, room=0.984375, model="qwen3-8b")
    pooled = _pooled(problem, 2)
    summed = waves_bound(problem, None, ())
    assert summed.num_waves == 1 and "enumerated_partitions" in summed.terms_s
    plan = solve(pooled, load_solver("runtime")).plan
    assert plan.num_waves == 2
    assert plan_bound(pooled).bound_s <= plan.cost_s * (1 + 1e-12)


def test_rounded_terms_never_lift_a_pool_bound():
    """Two one-wave items on a pool of two GPUs (found by hypothesis): the pool bound reads the summed
    bound's rank-average terms, which are stated to 9 decimals; rounded to nearest they lifted the bound
    1.7e-10 s above the plan. Stated rounded down, the bound is at most the plan's makespan."""
    import numpy as np

    from cpplan import Item, Request
    from tests.bound.test_all_plans_bound import _widened

    items = tuple(Item(id=f"i{k}", requests=(Request(tokens=np.array([0, k])),)) for k in range(2))
    problem = tiny_problem(
        _widened(Workload(items=items), 32), cp=1, chunk_tokens=128, room=0.75, model="qwen3-8b"
    )
    pooled = _pooled(problem, 2)
    bound = plan_bound(pooled)
    assert bound.scope == ALL_PLANS
    assert bound.bound_s <= solve(pooled, load_solver("runtime")).cost_s


def test_dynamic_cp_runs_price_items_that_fit_whole_as_one_wave(monkeypatch):
    """Under dynamic CP an item is split only where some group size holds it in no wave whole: on four
    agent trees on four GPUs at 40 GiB (each tree fits one wave at every size) no run splits a tree, so
    the enumerated runs bound the makespan by the largest tree's cheapest whole wave, over 4% above the
    GPU-seconds (what pricing every tree as splittable gives)."""
    from cpplan.bench import synthetic
    from cpplan.bound import partitions

    trees = synthetic.agent_trees(num_trees=4, depth=3, branching=3, turn_tokens=(1024, 4096), seed=7)

    def bound():
        problem = build_problem(
            trees,
            topology=Topology.parse("dp=2,cp=2,dynamic_cp=1"),
            model="qwen3.6-35b-a3b",
            memory_bytes="40GiB",
        )
        return plan_bound(problem).terms_s

    whole = bound()
    assert whole["enumerated_runs"] > 1.04 * whole["gpu_seconds_over_pool"]
    monkeypatch.setattr(partitions, "splittable_items", lambda problem, groups=(): [True] * problem.num_items)
    assert bound()["enumerated_runs"] < 1.001 * whole["gpu_seconds_over_pool"]


@pytest.mark.parametrize("topology", ["dp=2,cp=2", "dp=2,cp=2,equal_waves=0"])
def test_every_wave_on_a_pool_pays_the_shared_prefix_floor(topology):
    """Ten prompts behind a system prompt every request passes (ten units: nothing enumerated), on two
    CP2 groups: each group runs a wave, and each wave crosses, copies the system prompt or idles a
    rank, so the summed share counts each wave's floor ``e`` (``PlanBound.wave_floor_s``) beside its
    overhead, above the share without it, and stays at most the deterministic plan's makespan."""
    from cpplan.bound.pool_makespan import used_groups_share_s
    from tests.support.grpo_arrivals import rollouts

    workload = rollouts(10, 1, system_tokens=1024, seed=4)
    problem = build_problem(
        workload, topology=Topology.parse(topology), model="qwen3.6-35b-a3b", memory_bytes="40GiB"
    )
    summed = waves_bound(problem, None, ())
    assert summed.wave_floor_s > 0
    share = used_groups_share_s(problem, summed)
    assert share > used_groups_share_s(problem, dataclasses.replace(summed, wave_floor_s=0.0)) * (1 + 1e-3)
    bound = plan_bound(problem)
    assert "enumerated_groups" not in bound.terms_s
    assert bound.bound_s >= share * (1 - 1e-9)
    assert bound.bound_s <= solve(problem, load_solver("deterministic")).cost_s * (1 + 1e-12)
