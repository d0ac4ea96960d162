"""The bound over every partition of a few items into waves (:mod:`cpplan.bound.partitions`): each set
of items priced as one wave by its floors, the least sum over the partitions."""

from __future__ import annotations

import math

import numpy as np
import pytest

import cpplan
from cpplan.bound import partitions, plan_bound
from cpplan.bound.handoff_floors import copy_seconds
from cpplan.bound.node_floors import per_copy_amounts, whole_on_one_rank
from cpplan.bound.partitions import partition_bound_s, split_copies_s, wave_floor_s
from tests.bound.enumerated import cheapest_version, optimum, tiny_problem
from tests.bound.test_all_plans_bound import CHUNKED

MODEL = "qwen3.6-35b-a3b"


def _floors(problem):
    barriers = np.asarray(problem.card.constants.barrier_coefficients, dtype=np.float64).sum(axis=0)
    return copy_seconds(problem), whole_on_one_rank(problem), per_copy_amounts(problem) @ barriers


@pytest.mark.parametrize("room", [0.7, 0.85])
def test_each_wave_floor_at_most_its_cheapest_version(room):
    """Every set of items, priced as one wave by its floors, costs at most the cheapest version of that
    wave that fits (every sharing subset and chunk ownership, the cheapest hand-off mode), and is
    infinite only where no version fits."""
    problem = tiny_problem(CHUNKED, cp=2, chunk_tokens=128, room=room, model=MODEL)
    copy_s, whole, node_s = _floors(problem)
    n = problem.num_items
    for mask in range(1, 1 << n):
        items = tuple(i for i in range(n) if mask >> i & 1)
        floor = wave_floor_s(problem, items, copy_s, whole, node_s)
        best = cheapest_version(problem, items)
        if best is None:
            continue
        assert floor <= best.cost_s * (1 + 1e-12)
    assert not math.isinf(wave_floor_s(problem, (0,), copy_s, whole, node_s))


def test_partitions_lift_a_two_wave_bound():
    """On two ranks where the optimum runs two waves, every partition's waves priced by their floors
    (overhead, full-sharing average, the least hand-off or imbalance of each) lift the bound above the
    node floors' by a term of its own, within 16% of the optimum (23% without it), never above it."""
    problem = tiny_problem(CHUNKED, cp=2, chunk_tokens=128, room=0.7, model=MODEL)
    bound = plan_bound(problem)
    best, waves = optimum(problem)
    assert len(waves) == 2 and bound.terms_s["enumerated_partitions"] > 0
    assert bound.bound_s == pytest.approx(partition_bound_s(problem), rel=1e-8)
    assert 0.84 * best <= bound.bound_s <= best


def test_split_plans_stay_above_the_bound():
    """A plan that splits an item over two waves (the split path, for an item no wave holds whole) is
    bounded too:
    a run of waves tied by a split item pays two overheads and the item's common nodes again, so the
    partition term stays at most the price of the planner's split plan; an item of one request cannot
    be split, and an item whose requests share nodes pays them again."""
    from tests.planners.test_split import CARD, PAIR_A, TOPOLOGY, WHOLE, WORKLOAD

    result = cpplan.plan(
        WORKLOAD, topology=TOPOLOGY, model=CARD, memory_bytes=(PAIR_A + WHOLE) // 2, num_layers=4
    )
    assert any(w.split for w in result.plan.waves)
    bound = plan_bound(result.problem)
    assert bound.bound_s <= result.cost_s
    split = split_copies_s(result.problem)
    sizes = np.diff(result.problem.item_ptr)
    assert all(math.isinf(s) for s, k in zip(split, sizes, strict=True) if k == 1)


def test_split_runs_pay_an_overhead_per_wave_their_memory_needs():
    """On the README example at CP2 and 8 GiB (six GRPO items, no two waves' worth of them fits in one),
    a run of waves tied by a split item holding many items pays an overhead for every wave its memory
    adds up to, not two: the partition term then lifts the bound above the node floors' (without the
    count, runs of all six items in "two" waves undercut it), and the deterministic plan stays above."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    result = cpplan.plan(
        cpplan.Workload.from_jsonl(root / "examples/grpo.jsonl"),
        topology=cpplan.Topology(cp=2),
        model=MODEL,
        memory_bytes="8GiB",
    )
    bound = plan_bound(result.problem)
    assert bound.terms_s["enumerated_partitions"] > 0.02
    assert bound.bound_s <= result.cost_s


def test_an_item_some_wave_holds_whole_is_priced_whole(monkeypatch):
    """The split path is only for an item no wave holds whole, so the bound prices such an item whole:
    the split item of the split-path workload has a split copy where it fits no wave and none where a
    full-sharing wave holds it; on agent trees at CP4 and 20 GiB (each tree fits a wave) this lifts the
    bound by over 3%, which pricing every item as splittable loses."""
    from cpplan.bench import synthetic
    from cpplan.pricing.problem import Problem
    from cpplan.spec.settings import Settings
    from tests.planners.test_split import PAIR_A, WHOLE, _problem

    assert math.isfinite(split_copies_s(_problem((PAIR_A + WHOLE) // 2))[1])
    assert split_copies_s(_problem(WHOLE))[1] == math.inf
    trees = synthetic.agent_trees(num_trees=4, depth=3, branching=3, turn_tokens=(1024, 4096), seed=7)
    settings = Settings(
        topology=cpplan.Topology(cp=4), model=cpplan.load_model(MODEL), memory_bytes=20 * 2**30
    )
    priced_whole = plan_bound(Problem.build(trees, settings)).bound_s
    monkeypatch.setattr(partitions, "splittable_items", lambda problem, groups=(): [True] * problem.num_items)
    priced_split = plan_bound(Problem.build(trees, settings)).bound_s
    assert priced_whole > 1.03 * priced_split
