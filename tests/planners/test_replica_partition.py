"""Partition first: items split over DP replicas before packing, each replica planned as a dp=1 problem,
the step's plan assembled with equal-collectives padding."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cpplan
from cpplan.bench.synthetic import grpo
from cpplan.planners.replica_partition import partition_items, prefix_groups
from cpplan.plans.plan_writer import plan_to_dict, strip_timing
from cpplan.spec.prefix_digest import PREFIX_LEVELS, PREFIX_STRIDE
from cpplan.spec.profile import load_solver
from cpplan.spec.workload import Workload
from cpplan.verifier import verify_plan
from tests.support.prefix_samples import prefix_hashes, sampled_prefixes

MODEL = "qwen3.6-35b-a3b"
ROOT = Path(__file__).resolve().parents[2]
GREEDY = load_solver("deterministic").model_copy(update={"strategies": ("greedy",)})
"""Greedy alone, on no clock: plans that depend on their inputs only."""


def step(num_prompts: int = 24, *, per_completion: bool = False, seed: int = 0) -> Workload:
    """A small GRPO step: prompts of 300-1,500 tokens x 4 completions of 50-400 tokens."""
    return grpo(
        num_prompts=num_prompts,
        group_size=4,
        system_tokens=64,
        prompt_tokens=(300, 1500),
        completion_tokens=(50, 400),
        items_per_prompt=not per_completion,
        seed=seed,
    )


def planner(dp: int = 4, cp: int = 2, memory: str = "3.5GiB", solver=GREEDY) -> cpplan.Planner:
    """A planner of 4 layers of the Qwen3.6 card (quick to price) over ``dp`` replicas of CP ``cp``."""
    topology = cpplan.Topology(dp=dp, cp=cp)
    return cpplan.Planner(model=MODEL, topology=topology, memory_bytes=memory, solver=solver, num_layers=4)


def by_id(workload: Workload, replica_of: tuple[int, ...]) -> dict[str, int]:
    """The partition as item id -> replica."""
    return {item.id: r for item, r in zip(workload.items, replica_of, strict=True)}


PARTITION_SCRIPT = """
import json, sys
import cpplan
from cpplan.bench.synthetic import grpo
wl = grpo(num_prompts=24, group_size=4, system_tokens=64, prompt_tokens=(300, 1500),
          completion_tokens=(50, 400), items_per_prompt=False, seed=3)
p = cpplan.Planner(model="qwen3.6-35b-a3b", topology=cpplan.Topology(dp=4, cp=2), memory_bytes="3.5GiB",
                   num_layers=4, solver="deterministic")
print(json.dumps(list(p.partition(wl).replica_of_item)))
"""


@pytest.mark.slow
def test_two_processes_compute_the_same_partition():
    """Two fresh processes (each with its own string-hash seed) partition one step identically, as
    every DP rank must: the split depends on the workload and settings alone."""
    found = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", PARTITION_SCRIPT],
            capture_output=True,
            text=True,
            check=True,
            env=env,
            cwd=ROOT,
        )
        found.append(json.loads(done.stdout))
    wl = step(per_completion=True, seed=3)
    here = planner().partition(wl).replica_of_item
    assert found[0] == found[1] == list(here)
    assert len(set(here)) == 4


def test_partition_does_not_depend_on_arrival_order():
    """The same items arriving shuffled go to the same replicas (by id): ranks that receive the step in
    different orders still agree on every replica's share."""
    wl = step(per_completion=True, seed=5)
    order = np.random.default_rng(0).permutation(wl.num_items)
    shuffled = Workload(items=tuple(wl.items[i] for i in order.tolist()))
    p = planner()
    first = by_id(wl, p.partition(wl).replica_of_item)
    second = by_id(shuffled, p.partition(shuffled).replica_of_item)
    assert first == second


def test_prompt_groups_stay_in_one_replica_and_replicas_balance():
    """Per-completion items of one prompt share its prefix: they land in one replica (the system prompt
    every item shares does not glue them all together), and the replicas' quick prices are within 25%
    of each other."""
    wl = step(num_prompts=32, per_completion=True, seed=1)
    part = planner().partition(wl)
    prompt_of = [item.id.split("c")[0] for item in wl.items]
    for prompt in set(prompt_of):
        replicas = {part.replica_of_item[i] for i, p in enumerate(prompt_of) if p == prompt}
        assert len(replicas) == 1, prompt
    assert part.num_groups == 32
    prices = part.replica_price_s
    assert max(prices) <= 1.25 * min(prices)


def test_a_group_too_large_for_a_share_is_split():
    """Items sharing one long prefix whose total price is above half a replica's share are not kept
    together: every replica gets some of them."""
    rng = np.random.default_rng(0)
    prefix = rng.integers(0, 1000, 4096)
    seqs = [np.concatenate([prefix, rng.integers(0, 1000, 300)]) for _ in range(16)]
    wl = Workload.from_items(
        cpplan.Item(id=f"i{k}", requests=(cpplan.Request(tokens=s),)) for k, s in enumerate(seqs)
    )
    p = planner()
    prices = np.ones(16)
    assert len(prefix_groups(wl, prices, cap_s=100.0)) == 1  # one group when the cap allows it
    assert set(p.partition(wl).replica_of_item) == {0, 1, 2, 3}


def shuffled_rollouts(seed: int = 8) -> tuple[Workload, list[int]]:
    """8 prompts of 2-6K tokens x 8 rollouts of 200-800, one item per rollout, in shuffled order; and
    each item's prompt."""
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(0, 1000, int(n)) for n in rng.integers(2000, 6000, 8)]
    rows = [
        (p, np.concatenate([prompts[p], rng.integers(0, 1000, int(rng.integers(200, 800)))]))
        for p in range(8)
        for _ in range(8)
    ]
    order = rng.permutation(len(rows)).tolist()
    items = (cpplan.Item(id=f"r{k}", requests=(cpplan.Request(tokens=rows[k][1]),)) for k in order)
    return Workload(items=tuple(items)), [rows[k][0] for k in order]


def test_rollouts_of_one_prompt_stay_together_when_their_prompt_is_stored_once():
    """One item per rollout, 8 prompts x 8 rollouts arriving shuffled, at dp 4: a prompt's rollouts
    priced each with its own copy of the prompt make more than half a replica's share (and are
    scattered), but stored once they do not, so every prompt's rollouts stay on one replica (two
    prompts per replica)."""
    wl, prompt_of = shuffled_rollouts()
    p = planner(dp=4, cp=1)
    part = p.partition(wl)
    apart = partition_items(wl, p.card, p.settings.topology, prefix_once=False)  # a copy per member

    def replicas(partition) -> dict[int, set[int]]:
        return {
            q: {r for r, pq in zip(partition.replica_of_item, prompt_of, strict=True) if pq == q}
            for q in range(8)
        }

    assert any(len(r) > 1 for r in replicas(apart).values())
    assert all(len(r) == 1 for r in replicas(part).values()), replicas(part)
    assert sorted(sum(k in r for r in replicas(part).values()) for k in range(4)) == [2, 2, 2, 2]


def test_a_pool_plans_the_partition_both_ways_and_keeps_the_cheaper():
    """A pool's greedy plan costs what the cheaper of the step's two partitions (a group's prefix priced
    once, or once per member), each share planned by greedy, costs: on the shuffled rollouts at dp 4 x
    cp 1 the first wins, on the suite's shuffled GRPO step at dp 2 x cp 2 the second does."""
    from cpplan.bench.suites import suite
    from cpplan.planners.replica_partition import planned_partition

    suite_step = next(c for c in suite(quick=True) if c.name == "grpo_g8_shuffled").build()
    winners = []
    for wl, dp, cp in ((shuffled_rollouts()[0], 4, 1), (suite_step, 2, 2)):
        result = planner(dp=dp, cp=cp, memory="40GiB").plan(wl)
        p = result.problem
        once, per_member = (
            planned_partition(
                p, partition_items(p.workload, p.card, p.topology, prefix_once=v), GREEDY.greedy.layouts
            ).cost_s
            for v in (True, False)
        )
        assert result.cost_s == pytest.approx(min(once, per_member), rel=1e-12)
        winners.append(once < per_member)
    assert winners == [True, False]


def merged_by_level(
    workload: Workload, prices: np.ndarray, cap_s: float, level_s: np.ndarray
) -> list[list[int]]:
    """The prefix groups from their definition, one level and one shared hash at a time: items (in id
    order) with one prefix hash at a level merge their groups when the groups' prices summed, less the
    level's price for every group beyond the first, are at most ``cap_s``; groups listed by smallest id."""
    ids = [item.id for item in workload.items]
    by_id = sorted(range(len(ids)), key=ids.__getitem__)
    hashes = [prefix_hashes(item.requests[0].tokens, PREFIX_LEVELS) for item in workload.items]
    root, price = list(range(len(ids))), [float(p) for p in prices]

    def find(i: int) -> int:
        return i if root[i] == i else find(root[i])

    for column, level in enumerate(PREFIX_LEVELS):
        buckets: dict[int, list[int]] = {}
        for i in by_id:
            if level in hashes[i]:
                buckets.setdefault(hashes[i][level], []).append(i)
        for members in buckets.values():
            roots = sorted({find(i) for i in members}, key=ids.__getitem__)
            merged = math.fsum(price[r] for r in roots) - (len(roots) - 1) * level_s[column]
            if len(roots) > 1 and merged <= cap_s:
                for r in roots[1:]:
                    root[r] = roots[0]
                price[roots[0]] = merged
    groups: dict[int, list[int]] = {}
    for i in by_id:
        groups.setdefault(find(i), []).append(i)
    return sorted(groups.values(), key=lambda g: ids[g[0]])


def test_prefix_groups_merge_level_by_level_as_defined():
    """On items whose first requests share prefixes at several levels (a long shared document, shorter
    shared prompts, none), with ids not in arrival order and caps from nothing to everything, the
    groups are the ones merging level by level, longest first, gives."""
    rng = np.random.default_rng(4)
    document = rng.integers(0, 1000, 20_000)
    prompts = [rng.integers(0, 1000, n) for n in (300, 700, 2500, 5000)]
    firsts = []
    for k in range(40):
        head = document[: rng.integers(0, 20_000)] if k % 3 else prompts[k % 4]
        firsts.append(np.concatenate([head, rng.integers(0, 1000, rng.integers(1, 3000))]))
    ids = [f"x{v}" for v in rng.permutation(1000)[:40].tolist()]
    wl = Workload(
        items=tuple(
            cpplan.Item(id=i, requests=(cpplan.Request(tokens=t),)) for i, t in zip(ids, firsts, strict=True)
        )
    )
    prices = rng.uniform(0.5, 2.0, 40)
    merged = 0
    none = np.zeros(len(PREFIX_LEVELS))
    for cap_s in (0.0, 2.0, 4.0, 9.0, 25.0, 1e9):
        groups = prefix_groups(wl, prices, cap_s)
        assert groups == merged_by_level(wl, prices, cap_s, none), cap_s
        merged += len(groups) < 40
    assert merged >= 4 and len(prefix_groups(wl, prices, 1e9)) < 10
    shared = np.array(PREFIX_LEVELS, dtype=float) / 20_000  # a prefix costs as much as its tokens
    discounted = 0
    for cap_s in (2.0, 4.0, 9.0, 25.0):
        groups = prefix_groups(wl, prices, cap_s, shared)
        assert groups == merged_by_level(wl, prices, cap_s, shared), cap_s
        discounted += len(groups) < len(prefix_groups(wl, prices, cap_s))
    assert discounted >= 1  # stored once, a shared prefix lets larger groups stay whole


def test_sampled_prefixes_are_within_half_a_stride():
    """Where a request stops following its item's first request is found within half a stride (on and
    off the sampled positions), exactly when one is a prefix of the other, and 0 when they differ at
    the first token."""
    rng = np.random.default_rng(0)
    first = rng.integers(0, 1000, 5000)
    parts = (0, 1, 63, 64, 65, 127, 128, 129, 1000, 4998, 4999)
    requests = [np.concatenate([first[:at], rng.integers(1000, 2000, 300)]) for at in parts]
    requests += [first[:3000], first[:3001], np.concatenate([first, [1, 2]])]
    item = cpplan.Item(id="x", requests=tuple(cpplan.Request(tokens=t) for t in [first, *requests]))
    other = cpplan.Item(id="y", requests=(cpplan.Request(tokens=first[:10]),))
    owners, lengths, common = sampled_prefixes(Workload(items=(other, item)))
    assert owners.tolist() == [1] * len(requests)
    assert lengths.tolist() == [t.size for t in requests]
    for at, found in zip(parts, common.tolist(), strict=False):
        assert abs(found - at) <= PREFIX_STRIDE // 2, (at, found)
    assert common.tolist()[0] == 0
    assert common.tolist()[-3:] == [3000, 3001, 5000]


def test_a_replica_share_is_what_the_whole_step_plans_for_it():
    """``plan(replica=k)`` gives, byte for byte, the waves the whole-step ``plan(replica="all")`` runs on
    replica k's block; the assembled step plan passes the independent verifier, and every wave holds only
    that replica's items."""
    wl = step(seed=2)
    p = planner()
    whole = p.plan(wl, replica="all")
    part = p.partition(wl)
    data = plan_to_dict(whole.problem, whole.plan)
    verdict = verify_plan(data, wl, whole.problem.card, whole.problem.memory_bytes)
    assert verdict.valid, verdict.violations
    assert verdict.cost_s == pytest.approx(whole.cost_s)
    for k in range(4):
        alone = p.plan(wl, replica=k)
        mine = [w for w in data["waves"] if w["gpus"][0] == 2 * k]
        want = strip_timing(alone.to_dict())["waves"]
        assert [w["items"] for w in mine] == [w["items"] for w in want]
        assert [w["cost_s"] for w in mine] == [w["cost_s"] for w in want]
        assert [w["ranks"] for w in mine] == [w["ranks"] for w in want]
        ids = {wl.items[i].id for i in part.items(k)}
        assert {i for w in mine for i in w["items"]} == ids


def test_no_replica_idles_while_another_has_waves_to_spare():
    """With more items than replicas, no replica's plan is empty while another runs two or more waves
    more than it (the padding the whole pool would pay)."""
    wl = step(num_prompts=40, seed=4)
    p = planner(memory="3.3GiB")
    whole = p.plan(wl, replica="all")
    counts = [0] * 4
    for gpus in whole.plan.schedule.gpus:
        counts[gpus[0] // 2] += 1
    assert min(counts) >= 1
    assert max(counts) - min(counts) <= 1
    assert max(counts) >= 2, "the step needs several waves per replica for the check to mean something"
    padding = whole.plan.schedule.padding
    assert padding is not None and max(padding) <= 1
    per_gpu = [list(cpplan.pool_waves(whole, g)) for g in range(8)]
    assert len({len(waves) for waves in per_gpu}) == 1, "every GPU runs as many forwards (FSDP)"


def test_partitioned_step_is_cheaper_than_the_joint_greedy_on_a_wide_pool():
    """On a step of many small items over 8 replicas, the partitioned plan costs no more than the joint
    greedy plan of the whole step (which packs wide waves and leaves replicas idle)."""
    wl = step(num_prompts=16, seed=6)
    p = planner(dp=8, cp=1, memory="6GiB")
    joint = p.plan(wl)
    parted = p.plan(wl, replica="all")
    assert parted.cost_s <= joint.cost_s * 1.0001


def test_greedy_that_fits_the_budget_is_not_replaced_by_the_fallback():
    """A replica's greedy plan that finishes well inside the runtime budget is the plan returned: no
    item is packed in a hurry with full sharing, and it costs what greedy alone (no deadline) costs."""
    wl = step(num_prompts=8, seed=7)
    runtime = planner(solver="runtime")
    alone = planner()
    for k in range(4):
        result = runtime.plan(wl, 5.0, replica=k)
        assert not any("deadline reached" in n for n in result.plan.notes)
        assert result.strategy != "full_sharing"
        assert result.cost_s <= alone.plan(wl, replica=k).cost_s * (1 + 1e-9)


def test_bad_replica_and_budget_are_input_errors():
    """A replica outside dp, a non-integer replica and a budget <= 0 are InputErrors naming the field,
    from plan and from plan_async alike."""
    wl = step(num_prompts=4)
    p = planner()
    for bad in (4, -1, 1.5, True):
        with pytest.raises(cpplan.InputError, match="replica"):
            p.plan(wl, replica=bad)
        with pytest.raises(cpplan.InputError, match="replica"):
            p.plan_async(wl, replica=bad)
    for budget in (0, -0.1):
        with pytest.raises(cpplan.InputError, match="time_budget"):
            p.plan(wl, budget, replica=0)
        with pytest.raises(cpplan.InputError, match="time_budget"):
            p.plan_async(wl, budget, replica=0)
    with pytest.raises(cpplan.InputError, match="no items"):
        planner(dp=8).plan(step(num_prompts=2), replica=7)


def test_partition_at_dp1_keeps_every_item():
    """At dp = 1 the one replica holds every item, in order."""
    wl = step(num_prompts=4)
    p = cpplan.Planner(model=MODEL, topology="cp=2", memory_bytes="3GiB", num_layers=4, solver=GREEDY)
    part = partition_items(wl, p.card, p.settings.topology)
    assert part.items(0) == tuple(range(wl.num_items))


def test_pool_greedy_keeps_shuffled_prefix_groups_whole(qwen36):
    """Eight GRPO groups of 8 completions, one item per completion, arriving shuffled, on two CP2 groups
    (deterministic profile): greedy's plan on the pool gives every prompt group to one CP group (the
    step partitioned by replica), and costs less than greedy's arrival-order plan balanced over the
    pool, which splits prompt groups between waves."""
    from cpplan.planners import PLANNERS
    from cpplan.planners.deadline import Deadline
    from cpplan.planners.dynamic_cp import pool_padding_s
    from cpplan.planners.greedy import cached_greedy_plan
    from cpplan.plans.plan import balanced
    from cpplan.pricing.problem import Problem, group_problem
    from cpplan.spec.settings import Settings

    workload = grpo(
        num_prompts=8,
        group_size=8,
        system_tokens=0,
        prompt_tokens=(1500, 3000),
        completion_tokens=(100, 600),
        items_per_prompt=False,
        seed=4,
    )
    order = np.random.default_rng(4).permutation(workload.num_items)
    workload = Workload(items=tuple(workload.items[i] for i in order))
    topology = cpplan.Topology(dp=2, cp=2)
    problem = Problem.build(workload, Settings(topology=topology, model=qwen36, memory_bytes=40 * 2**30))
    profile = load_solver("deterministic")
    plan, _ = PLANNERS["greedy"](problem, profile, Deadline.of_profile(profile))
    prompt = [item.requests[0].tokens[:64].tobytes() for item in workload.items]
    gpus_of = {}
    for wave in plan.waves:
        for i in wave.items:
            gpus_of.setdefault(prompt[i], set()).add(plan.schedule.gpus[plan.waves.index(wave)])
    assert all(len(gpus) == 1 for gpus in gpus_of.values())
    in_order = cached_greedy_plan(group_problem(problem, 2), profile.greedy.layouts)
    arrival = balanced(in_order, problem.topology.pool, pool_padding_s(problem))
    assert plan.cost_s < arrival.cost_s
