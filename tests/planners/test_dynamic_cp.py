"""Dynamic CP and makespan plans: group sizes per wave, placement on the pool, the schedule in the
plan JSON and its independent replay."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

import cpplan
from cpplan.bench import synthetic
from cpplan.errors import NoFitError, UnsupportedTopologyError
from cpplan.planners import dynamic_cp
from cpplan.planners.dynamic_cp import dynamic_greedy_plan, group_problem, sized_plans
from cpplan.planners.greedy import cached_greedy_plan
from cpplan.plans.plan import balanced
from cpplan.plans.plan_writer import dumps, plan_to_dict, strip_timing
from cpplan.plans.pool_schedule import block, replay
from cpplan.pricing.problem import Problem
from cpplan.runtime.pool import materialize_pool, pool_waves
from cpplan.spec.card import ModelCard
from cpplan.spec.settings import Settings
from cpplan.spec.workload import Item, Request, Workload
from cpplan.verifier import verify_plan
from tests.support.grpo_arrivals import grouped_and_shuffled

LAYOUTS = ("full", "none", "min_span:512")


@pytest.fixture(scope="module")
def mixed() -> Workload:
    """Two 40,000-token requests among sixteen of 1,000-2,000 tokens."""
    rng = np.random.default_rng(1)
    items = [
        Item(id=f"long{i}", requests=(Request(tokens=rng.integers(0, 150_000, 40_000)),)) for i in range(2)
    ]
    items += [
        Item(id=f"s{i}", requests=(Request(tokens=rng.integers(0, 150_000, int(rng.integers(1000, 2000)))),))
        for i in range(16)
    ]
    return Workload(items=tuple(items))


@pytest.fixture(scope="module")
def sized(mixed, qwen36):
    """The dynamic problem of ``mixed`` and its plan with the long requests at group size 8 and the
    short ones at 1 (the cheapest of the token caps)."""
    problem = _problem(mixed, cpplan.Topology(dp=2, cp=4, dynamic_cp=True), qwen36)
    sizes = [8 if item.num_tokens > 10_000 else 1 for item in mixed.items]
    return problem, min(sized_plans(problem, sizes, LAYOUTS), key=lambda p: p.cost_s)


def _problem(workload: Workload, topology: cpplan.Topology, model, memory: str = "8GiB") -> Problem:
    settings = Settings.from_user(topology=topology, model=model, memory_bytes=memory, num_layers=8)
    return Problem.build(workload, settings)


def _verify(problem: Problem, plan):
    return verify_plan(plan_to_dict(problem, plan), problem.workload, problem.card, problem.memory_bytes)


def test_dynamic_portfolio_never_costs_more_than_any_fixed_cp(mixed, qwen36):
    """On a pool of 8 GPUs the dynamic plan's makespan is at most every fixed CP size's (the fixed
    plans a size admits at all), its waves take only group sizes of the pool, it verifies, and the
    deterministic profile gives the same plan JSON byte for byte on a second run."""
    profile = cpplan.load_solver("deterministic")
    dynamic = cpplan.solve(_problem(mixed, cpplan.Topology(dp=2, cp=4, dynamic_cp=True), qwen36), profile)
    assert {w.cp for w in dynamic.plan.waves} <= {1, 2, 4, 8}
    fixed_costs = []
    for cp in (1, 2, 4, 8):
        try:
            fixed_costs.append(
                cpplan.solve(_problem(mixed, cpplan.Topology(cp=cp, dp=8 // cp), qwen36), profile)
            )
        except NoFitError:
            continue
    assert len(fixed_costs) >= 2
    assert all(dynamic.cost_s <= f.cost_s * (1 + 1e-9) for f in fixed_costs)
    assert _verify(dynamic.problem, dynamic.plan).valid
    again = cpplan.solve(_problem(mixed, cpplan.Topology(dp=2, cp=4, dynamic_cp=True), qwen36), profile)
    assert dumps(strip_timing(again.to_dict())) == dumps(strip_timing(dynamic.to_dict()))


def test_waves_of_several_sizes_share_the_pool(sized):
    """Long requests at group size 8 and short ones at 1: every wave sits on an aligned block of its
    size, the plan JSON states each wave's ``cp``, ``gpus`` and ``start_s`` (its replay start), its
    ``cost_s`` is the makespan, below the sum of the waves, and the verifier agrees."""
    problem, plan = sized
    data = plan_to_dict(problem, plan)
    assert {w["cp"] for w in data["waves"]} == {1, 8}
    for wave in data["waves"]:
        assert wave["gpus"] == list(block(wave["cp"], wave["gpus"][0] // wave["cp"]))
    starts, makespan = replay([w["cost_s"] for w in data["waves"]], [w["gpus"] for w in data["waves"]], 8)
    assert [w["start_s"] for w in data["waves"]] == starts
    assert data["cost_s"] == makespan < sum(w["cost_s"] for w in data["waves"])
    assert verify_plan(data, problem.workload, problem.card, problem.memory_bytes).valid


def test_dynamic_greedy_is_at_most_each_uniform_size(mixed, qwen36):
    """The greedy dynamic plan is no costlier than every wave at any one group size that fits all
    items (the fixed-CP plans it always holds as candidates)."""
    problem = _problem(mixed, cpplan.Topology(dp=2, cp=4, dynamic_cp=True), qwen36)
    plan = dynamic_greedy_plan(problem, LAYOUTS)
    for size in (4, 8):
        uniform = min(sized_plans(problem, [size] * problem.num_items, LAYOUTS), key=lambda p: p.cost_s)
        assert plan.cost_s <= uniform.cost_s


def test_dynamic_greedy_holds_the_regrouped_fixed_greedy_of_each_size(qwen36):
    """On GRPO groups arriving shuffled, fixed-CP greedy regroups the items by shared prefix; the
    dynamic greedy plan holds that plan of every group size as a candidate, so it is no costlier than
    any of them (balanced over the pool), and it verifies."""
    _, shuffled = grouped_and_shuffled()
    problem = _problem(shuffled, cpplan.Topology(dp=1, cp=2, dynamic_cp=True), qwen36, memory="6GiB")
    plan = dynamic_greedy_plan(problem, LAYOUTS)
    for size in (1, 2):
        fixed = cached_greedy_plan(group_problem(problem, size), LAYOUTS)
        assert fixed.notes == ("items regrouped by shared prefix",)
        assert plan.cost_s <= balanced(fixed, problem.topology.pool).cost_s
    assert _verify(problem, plan).valid


def test_fixed_cp_under_dp_balances_the_replicas(mixed, qwen36):
    """Under fixed CP with dp = 2 the waves are placed for balance: the makespan is at most the
    round-robin deal of the same waves, every wave runs on one replica's block, and the verifier
    replays the same makespan."""
    problem = _problem(mixed, cpplan.Topology(cp=4, dp=2), qwen36)
    result = cpplan.solve(problem, cpplan.load_solver("deterministic"))
    plan = result.plan
    assert plan.schedule is not None and {g[0] for g in plan.schedule.gpus} <= {0, 4}
    costs = [w.cost_s for w in plan.waves]
    _, round_robin = replay(costs, [block(4, w % 2) for w in range(len(costs))], 8)
    assert plan.cost_s <= round_robin + 1e-12
    data = plan_to_dict(problem, plan)
    assert all(w["dp_rank"] == w["gpus"][0] // 4 for w in data["waves"])
    verdict = verify_plan(data, problem.workload, problem.card, problem.memory_bytes)
    assert verdict.valid and verdict.cost_s == pytest.approx(plan.cost_s, rel=1e-12)


@pytest.mark.parametrize(
    ("edit", "violation"),
    [
        (lambda d: d["waves"][1].update(start_s=d["waves"][1]["start_s"] + 0.5), "start_s"),
        (
            lambda d: d["waves"][0].update(gpus=[d["waves"][0]["gpus"][0] + 1] * d["waves"][0]["cp"]),
            "aligned",
        ),
        (lambda d: d["waves"][0].update(cp=3), "not a group size"),
        (lambda d: d.update(cost_s=sum(w["cost_s"] for w in d["waves"])), "cost_s"),
    ],
)
def test_verifier_replays_the_schedule(sized, edit, violation):
    """A claimed start the replay does not give, a group off its aligned block, a group size the pool
    does not allow, or a plan cost that is not the makespan are violations."""
    problem, plan = sized
    data = copy.deepcopy(plan_to_dict(problem, plan))
    edit(data)
    verdict = verify_plan(data, problem.workload, problem.card, problem.memory_bytes)
    assert not verdict.valid and any(violation in v for v in verdict.violations)


def test_each_pool_rank_gets_its_waves_in_schedule_order(mixed, sized):
    """Every (wave, wave rank) of a dynamic plan goes to exactly one pool rank, ``gpus[rank]``, and each
    pool rank's list is in order of start, then its padding waves (``None``), every list as long as
    every other (equal waves, on by default); the batches are that rank's share of each wave."""
    problem, plan = sized
    data = plan_to_dict(problem, plan)
    seen, lengths = [], set()
    for pool_rank in range(8):
        entries = pool_waves(data, pool_rank)
        assert entries == pool_waves(plan, pool_rank)
        mine = [e for e in entries if e is not None]
        assert entries[len(mine) :] == [None] * (len(entries) - len(mine))
        lengths.add(len(entries))
        starts = [data["waves"][w]["start_s"] for w, _ in mine]
        assert starts == sorted(starts)
        assert all(data["waves"][w]["gpus"][r] == pool_rank for w, r in mine)
        seen.extend(mine)
    assert sorted(seen) == sorted((w, r) for w, wave in enumerate(data["waves"]) for r in range(wave["cp"]))
    assert len(lengths) == 1
    batches = materialize_pool(data, mixed, pool_rank=0)
    expected = [None if e is None else data["waves"][e[0]]["cp"] for e in pool_waves(data, 0)]
    assert [None if b is None else b.num_ranks for b in batches] == expected


def test_an_item_too_large_for_the_pool_names_the_bytes_at_the_largest_group(qwen36):
    """A request that fits no group, not even all 8 GPUs, is refused naming the item, the request and
    the bytes it needs at group size 8."""
    workload = Workload(items=(Item(id="huge", requests=(Request(tokens=np.arange(200_000) % 997),)),))
    problem = _problem(workload, cpplan.Topology(dp=2, cp=4, dynamic_cp=True), qwen36, memory="4GiB")
    with pytest.raises(NoFitError, match="item 'huge'") as exc:
        cpplan.solve(problem, cpplan.load_solver("deterministic"))
    at_pool = group_problem(problem, 8)
    wave = at_pool.pack([0], "full")
    from cpplan.pricing.wave import price_wave

    assert exc.value.needed_bytes == price_wave(at_pool, [0], wave, "full").peak_bytes


def test_a_group_size_the_card_cannot_price_is_bad_input(qwen36):
    """A card that cannot price some group size of the pool is refused when the settings are made,
    naming the group size."""
    limited = ModelCard.model_validate({**qwen36.model_dump(), "supports": "pp == 1 and cp <= 4"})
    with pytest.raises(UnsupportedTopologyError, match="group size 8"):
        cpplan.Planner(model=limited, topology="dp=2,cp=4,dynamic_cp=1", memory_bytes="8GiB")


def test_pool_greedy_cuts_one_wave_per_group_without_a_remainder(qwen36):
    """With memory for every item in one wave, greedy over a pool of four CP groups runs one wave per
    group, each within one item of a quarter of the tokens: it cuts the items into one run per group
    of about equal tokens, where a token cap filled in order leaves a small fifth wave that one group
    runs after a full one (why ShareGPT at 80 GiB planned costlier than at 40 GiB)."""
    rng = np.random.default_rng(3)
    lengths = rng.integers(300, 1500, 26)
    workload = Workload.from_items(
        Item(id=f"c{i}", requests=(Request(tokens=rng.integers(0, 30000, int(n))),))
        for i, n in enumerate(lengths)
    )
    topology = cpplan.Topology(cp=2, dp=4)
    settings = Settings(topology=topology, model=qwen36, memory_bytes=80 * 2**30, num_layers=8)
    plan = dynamic_greedy_plan(Problem.build(workload, settings), ("full", "none", "min_span:512"))
    assert plan.num_waves == 4
    tokens = [w.logical_tokens for w in plan.waves]
    assert max(tokens) - min(tokens) <= 2 * lengths.max()


def test_the_schedule_model_reports_its_own_gap():
    """Where the schedule model decides (``dp > 1``, the deterministic profile), the plan JSON's solver
    block gives its gap over its own bound as ``model_gap``, as for every other model; ``gap`` is over
    the bound over all plans of the pool."""
    workload = Workload.from_jsonl(Path(__file__).resolve().parents[2] / "examples" / "grpo.jsonl")
    kwargs = dict(topology=cpplan.Topology(dp=2, cp=2), model="qwen3.6-35b-a3b", memory_bytes="8GiB")
    result = cpplan.plan(workload, solver="deterministic", **kwargs)
    solver = result.to_dict()["solver"]
    assert result.solver.deciding.model == "schedule" and result.solver.deciding.status.answered
    assert solver["model_gap"] == pytest.approx(result.solver.deciding.gap)
    assert solver["bound_scope"] == "all plans" and solver["gap"] is not None


def test_dynamic_greedy_runs_trees_alone_then_on_pairs_where_that_ends_sooner(qwen36, monkeypatch):
    """Six agent trees on four GPUs: the greedy dynamic plan holds the makespan-minded group sizes
    (some trees alone on one GPU, the others on pairs after them), which end sooner than every other
    assignment it tries (those with the makespan-minded one left out), and it verifies."""
    trees = synthetic.agent_trees(num_trees=6, depth=2, branching=2, turn_tokens=(2048, 8192), seed=7)
    topology = cpplan.Topology(dp=2, cp=2, dynamic_cp=True)
    plan = dynamic_greedy_plan(_problem(trees, topology, qwen36, memory="40GiB"), LAYOUTS)
    monkeypatch.setattr(dynamic_cp, "makespan_sizes", lambda *_: None)
    without = dynamic_greedy_plan(_problem(trees, topology, qwen36, memory="40GiB"), LAYOUTS)
    assert {w.cp for w in plan.waves} == {1, 2}
    assert plan.cost_s < without.cost_s * (1 - 0.005)
    assert _verify(_problem(trees, topology, qwen36, memory="40GiB"), plan).valid
