"""Prefix Grouper: each group's shared prompt stored once per wave, its completions after it.

From Prefix Grouper's description: the samples of one GRPO group share a prompt; instead of repeating
the prompt in every sample, the group is laid out as the prompt once followed by every completion, and
the completions attend to it. It shares exactly one level: the group's common prefix. Nothing is shared
between groups (a system prompt common to all groups is repeated once per group), and nothing deeper
inside a group is shared (two turns of an agent rollout that branch later are stored twice).

Groups come from the prefix tree: requests whose longest prefix shared with another request ends at the
same node belong together, as do the requests of one item; a group's prompt is the longest prefix common
to all of its requests. Groups are packed first-fit-decreasing to the card's token capacity by their
grouped size, and each wave is split into CP contiguous shards of equal tokens. Where two groups'
prompts overlap (nested groups, not GRPO), the overlap is stored once per wave rather than once per
group, which can only help this baseline.
"""

from __future__ import annotations

import numpy as np

from cpplan.baselines.base import Baseline, build_plan, in_workload_order
from cpplan.baselines.binpack import first_fit_decreasing
from cpplan.baselines.capacity import token_capacity
from cpplan.baselines.shard_rules import even_tokens
from cpplan.plans.plan import Plan
from cpplan.pricing.problem import Problem
from cpplan.pricing.union_find import UnionFind

NAME = "prefix_grouper"


def groups(problem: Problem) -> tuple[list[list[int]], np.ndarray]:
    """Item groups (each sorted, in order of their first item) and the share mask of their prompts."""
    tree = problem.tree
    counts = tree.request_counts
    joined = UnionFind(tree.num_requests)
    by_prompt: dict[int, int] = {}
    for r in range(tree.num_requests):
        shared = [v for v in tree.path(r) if counts[v] >= 2]
        if shared:
            first = by_prompt.setdefault(shared[-1], r)
            joined.union(first, r)
    for i in range(problem.num_items):
        lo, hi = int(problem.item_ptr[i]), int(problem.item_ptr[i + 1])
        for r in range(lo + 1, hi):
            joined.union(lo, r)
    members: dict[int, list[int]] = {}
    for r in range(tree.num_requests):
        members.setdefault(joined.find(r), []).append(r)
    mask = np.zeros(tree.num_nodes, dtype=bool)
    item_groups = []
    for requests in members.values():
        if len(requests) > 1:
            prompt = _common_prefix([tree.path(r) for r in requests])
            if prompt:
                mask[prompt[-1]] = True
        item_groups.append(sorted({int(problem.request_item[r]) for r in requests}))
    item_groups.sort(key=lambda g: g[0])
    return item_groups, mask


def _common_prefix(paths: list[tuple[int, ...]]) -> tuple[int, ...]:
    first = paths[0]
    n = min(len(p) for p in paths)
    for p in paths[1:]:
        k = 0
        while k < n and p[k] == first[k]:
            k += 1
        n = k
    return first[:n]


def plan(problem: Problem) -> Plan:
    """First-fit-decreasing waves of whole groups, each prompt stored once per group."""
    item_groups, mask = groups(problem)
    sizes = [problem.pack(g, mask).packed_tokens for g in item_groups]
    bins = first_fit_decreasing(sizes, token_capacity(problem))
    waves = in_workload_order([[i for g in b for i in item_groups[g]] for b in bins])
    return build_plan(problem, NAME, waves, layout=mask, ownership=even_tokens, layout_name="prefix_grouped")


BASELINE = Baseline(
    name=NAME,
    origin="Prefix Grouper",
    summary="each group's prompt once per wave, completions after it; FFD by grouped size; even CP shards",
    plan=plan,
)
