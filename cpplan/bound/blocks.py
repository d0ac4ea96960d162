"""The blocks a partition bound enumerates (:mod:`cpplan.bound.partitions`): sets of items that partition
them, each block's floors priced for every set of blocks.

Where the items are few, each is a block of its own. Where they are many but share prefixes in few
groups, the blocks are *prefix units*: items joined wherever their requests pass a common node below
the prefix every request passes (GRPO rollouts of one prompt below a system prompt all share, the
turns of one agent tree). A plan may hold a unit's requests in several waves; those waves then each
store the nodes every request of the unit passes, one copy more than the unit's full-sharing totals
count (:func:`~cpplan.bound.partitions.block_split_copies_s`), which is what the partition bounds
charge a run of waves tied together by a split block.
"""

from __future__ import annotations

import numpy as np

from cpplan.bound.node_floors import common_nodes
from cpplan.pricing.problem import Problem
from cpplan.pricing.union_find import UnionFind

Blocks = tuple[tuple[int, ...], ...]
"""Sets of item indices, disjoint, covering every item, in order of their first item."""


def item_blocks(problem: Problem, limit: int) -> Blocks | None:
    """The blocks of ``problem``: each item alone where there are at most ``limit`` items, else its
    :func:`prefix_units` where they are at most ``limit``; ``None`` otherwise."""
    if problem.num_items <= limit:
        return tuple((item,) for item in range(problem.num_items))
    units = prefix_units(problem)
    return units if len(units) <= limit else None


def prefix_units(problem: Problem) -> Blocks:
    """The items joined wherever two of them have requests through one node below the nodes every
    request passes (a request that ends among those nodes joins nothing), in order of their first
    item."""
    tree = problem.tree
    num_common = common_nodes(problem, np.arange(tree.num_requests, dtype=np.int64)).size
    joined = UnionFind(problem.num_items)
    first_item: dict[int, int] = {}
    for request, item in enumerate(problem.request_item.tolist()):
        path = tree.path(request)
        if len(path) <= num_common:
            continue
        joined.union(first_item.setdefault(path[num_common], item), item)
    units: dict[int, list[int]] = {}
    for item in range(problem.num_items):
        units.setdefault(joined.find(item), []).append(item)
    return tuple(tuple(members) for members in units.values())


def block_items(blocks: Blocks, mask: int) -> list[int]:
    """The items of the blocks in ``mask`` (bit ``k``: block ``k``), in order."""
    return sorted(item for k, block in enumerate(blocks) if mask >> k & 1 for item in block)
