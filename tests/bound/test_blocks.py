"""The blocks the partition bounds enumerate (:mod:`cpplan.bound.blocks`): items where they are few,
else the prefix units they form below the prefix every request passes."""

from __future__ import annotations

import numpy as np
import pytest

from cpplan import Item, Request, Topology, Workload
from cpplan.api import build_problem
from cpplan.bound import blocks as blocks_module
from cpplan.bound import plan_bound
from cpplan.bound.blocks import item_blocks, prefix_units
from cpplan.bound.node_floors import common_nodes
from cpplan.bound.partitions import block_split_copies_s, copy_node_seconds
from cpplan.planners.portfolio import solve
from cpplan.spec.profile import load_solver
from tests.support.grpo_arrivals import rollouts

MODEL = "qwen3.6-35b-a3b"


def _problem(workload: Workload, topology: str = "cp=2", memory: str = "40GiB"):
    return build_problem(workload, topology=Topology.parse(topology), model=MODEL, memory_bytes=memory)


@pytest.mark.parametrize("system_tokens", [256, 0])
def test_prefix_units_are_the_groups_below_the_common_prefix(system_tokens):
    """Rollouts of three prompts, one item each, form three units of four items, with or without a
    system prompt every request passes (the shared prefix joins nothing)."""
    problem = _problem(rollouts(3, 4, system_tokens=system_tokens))
    assert problem.num_items == 12
    units = prefix_units(problem)
    assert sorted(len(u) for u in units) == [4, 4, 4]
    assert sorted(i for u in units for i in u) == list(range(12))
    for unit in units:  # every unit's requests pass one node below the common prefix
        requests = problem.item_requests(list(unit))
        everyone = np.arange(problem.tree.num_requests, dtype=np.int64)
        assert common_nodes(problem, requests).size > common_nodes(problem, everyone).size


def test_unrelated_requests_and_requests_ending_in_the_prefix_stay_alone():
    """An item whose requests share no node below the prefix every request passes, and one that ends
    where that prefix does, are units of their own; an item reaching two groups joins them."""
    base = [tuple(int(t) for t in item.requests[0].tokens) for item in rollouts(2, 2).items]
    system = base[0][:256]
    items = [Item(id=f"r{k}", requests=(Request(tokens=list(tokens)),)) for k, tokens in enumerate(base)]
    items.append(Item(id="prefix", requests=(Request(tokens=list(system)),)))
    items.append(Item(id="other", requests=(Request(tokens=list(system) + [7] * 50),)))
    problem = _problem(Workload(items=tuple(items)))
    by_item = {item: unit for unit in prefix_units(problem) for item in unit}
    assert by_item[4] == (4,) and by_item[5] == (5,)
    assert by_item[0] == by_item[1] != by_item[2] == by_item[3]
    bridge = Item(id="bridge", requests=(Request(tokens=list(base[0])), Request(tokens=list(base[2]))))
    joined = _problem(Workload(items=(*items[:4], bridge)))
    assert prefix_units(joined) == ((0, 1, 2, 3, 4),)


def test_blocks_are_items_where_few_units_where_many():
    """At most ``limit`` items, each its own block; more items in few units, the units; more units than
    the limit, no blocks."""
    few = _problem(rollouts(2, 3))
    assert item_blocks(few, 8) == tuple((i,) for i in range(6))
    many = _problem(rollouts(3, 4))
    assert item_blocks(many, 8) == prefix_units(many)
    assert item_blocks(many, 2) is None


def test_a_split_unit_copies_the_nodes_all_its_requests_pass():
    """Holding a unit's rollouts in two waves stores its system prompt and prompt once more: its split
    copy is their seconds; a single-request item cannot be split."""
    problem = _problem(rollouts(3, 4))
    units = prefix_units(problem)
    node_s = copy_node_seconds(problem)
    found = block_split_copies_s(problem, units)
    for unit, seconds in zip(units, found, strict=True):
        common = common_nodes(problem, problem.item_requests(list(unit)))
        assert seconds == pytest.approx(float(node_s[common].sum())) and seconds > 0
    singles = tuple((i,) for i in range(problem.num_items))
    assert all(s == np.inf for s in block_split_copies_s(problem, singles))


def test_a_pool_bound_enumerates_prefix_units(monkeypatch):
    """Twelve rollouts of three prompts on two CP2 groups: assigning whole units to the groups (or
    paying a prompt's copy where one is split) lifts the pool's bound above the summed share, and it
    stays at most the deterministic profile's makespan; with items as the only blocks (too many to
    enumerate) the lift is gone."""
    workload = rollouts(3, 4)
    problem = _problem(workload, "dp=2,cp=2")
    bound = plan_bound(problem)
    assert bound.terms_s["enumerated_groups"] > bound.terms_s["summed_waves_over_groups"] * (1 + 1e-3)
    assert bound.bound_s <= solve(problem, load_solver("deterministic")).cost_s * (1 + 1e-12)
    monkeypatch.setattr(blocks_module, "prefix_units", lambda p: tuple((i,) for i in range(p.num_items)))
    without = plan_bound(_problem(workload, "dp=2,cp=2"))
    assert "enumerated_groups" not in without.terms_s
    assert without.bound_s < bound.bound_s * (1 - 1e-3)


def test_a_single_group_bound_enumerates_items_only():
    """On one CP group the partition bound enumerates items alone: twelve single-rollout items (more
    than it enumerates) get no enumerated term, whatever their units."""
    bound = plan_bound(_problem(rollouts(3, 4)))
    assert "enumerated_partitions" not in bound.terms_s
