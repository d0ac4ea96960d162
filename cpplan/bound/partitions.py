"""A bound over every partition of a few items into waves: each set of items priced by its floors,
the least sum over the partitions (a master over every wave column, solved exactly by dynamic
programming over item subsets).

A wave holding exactly the items ``S`` costs at least ``F(S)``: its overhead; per barrier, the average
rank of its full-sharing totals (any layout stores each node of its requests at least once, at the same
positions, with every flag some request through it carries; its ranks' pieces are at least its distinct
request ends; every rank's remote tokens sum to ``(cp - 1)`` times its packed tokens); and, on ``cp >
1`` ranks, the least over the hand-off modes of what it pays beyond that average
(:mod:`cpplan.bound.handoff_floors`). Where the same average rank's memory exceeds some envelope's
capacity, no wave holds ``S`` and ``F(S)`` is infinite. Two waves or more that together hold exactly the
items ``S``, tied by an item split over them, pay at least an overhead per wave their memory needs (two,
or more where ``S``'s average rank over some envelope's capacity adds up to more: each wave fits, and
their totals sum to at least the full-sharing totals of ``S``), the same average and the split item's
common nodes once more (every request of the item passes them, and its requests lie in two waves or
more): at least the least such copy over the items of ``S`` of more than one request
(:func:`split_copies_s`). Only an item no wave holds whole is ever split (:func:`splittable_items`:
the split path's own test), so none of one request and none some wave holds. So with ``G(S)`` the least
of the two, every valid plan, split waves included, costs at least ``min_P Σ_{S ∈ P} G(S)``: group its
waves into the runs an item split over several waves ties together; each run holds a set of whole items,
and the runs partition the items.

On a pool, the sets enumerated may be *blocks* of items instead (:mod:`cpplan.bound.blocks`): where the
items are too many but form few prefix units, each unit is a block, the runs are tied by split units,
and a split unit pays the nodes all its requests pass once more (a unit of several items may be split
between any two of them)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from cpplan.bound.blocks import Blocks, block_items, item_blocks
from cpplan.bound.handoff_floors import (
    copy_seconds,
    head_parallel_floor_s,
    whole_or_copied_floor_s,
)
from cpplan.bound.node_floors import (
    RATIO_SLACK,
    cached_per_problem,
    common_nodes,
    per_copy_amounts,
    unsplit_rank_floor_s,
    whole_on_one_rank,
    with_wave_counts,
)
from cpplan.bound.passing_floors import passing_floor_s
from cpplan.pricing.amounts import span_amounts
from cpplan.pricing.layout import path_counts
from cpplan.pricing.ownership import chunk_stats
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import whole_item_wave
from cpplan.spec.quantities import QUANTITY_INDEX, REMOTE_COLUMNS

_TOKENS = QUANTITY_INDEX["tokens"]
_REMOTE_COLUMNS = list(REMOTE_COLUMNS)

ENUMERATED_ITEMS = 8
"""The most items whose partitions :func:`partition_bound_s` enumerates (its subsets grow as ``2^n``
and the dynamic program as ``3^n``)."""


def wave_floor_parts_s(
    problem: Problem,
    items: tuple[int, ...],
    copy_s: np.ndarray,
    whole: np.ndarray,
    node_s: np.ndarray,
    split_s: float = math.inf,
) -> tuple[float, float]:
    """``F(S)`` and the floor of two waves or more holding exactly the items ``items`` (see the module
    docstring; ``G(S)`` is the smaller; ``copy_s`` from :func:`~cpplan.bound.handoff_floors.copy_seconds`,
    ``whole`` from :func:`~cpplan.bound.node_floors.whole_on_one_rank`, ``node_s`` per node one copy's
    seconds over the barriers; ``split_s``: the least :func:`split_copies_s` of its items). ``F(S)`` is
    infinite where no wave holds them; two waves or more pay at least an overhead per wave their memory
    needs (at least two), the average rank and ``split_s``. Without a crossing, the busiest rank is at
    least both whole-request floors: the integral one and the node argument with copies
    (:func:`~cpplan.bound.node_floors.unsplit_rank_floor_s` of the wave's requests)."""
    card, cp = problem.card, problem.topology.cp
    requests = problem.item_requests(list(items))
    totals = with_wave_counts(problem, requests, full_sharing_totals(problem, requests), remote_ranks=cp - 1)
    capacity = problem.memory_bytes / card.safety - np.asarray(card.envelope_static_bytes, dtype=np.float64)
    barriers = np.asarray(card.constants.barrier_coefficients, dtype=np.float64)
    average = float((barriers @ totals).sum()) / cp
    load = float((card.envelope_coefficients() @ totals / cp / np.maximum(capacity, 1.0)).max())
    runs = max(2, math.ceil(load * (1 - RATIO_SLACK) - RATIO_SLACK))  # the waves' memory adds up to load
    several = runs * card.wave_overhead_s + average + split_s  # two waves or more, some item split
    if (card.envelope_coefficients() @ totals / cp > capacity * (1 + RATIO_SLACK) + RATIO_SLACK).any():
        return math.inf, several
    floor = card.wave_overhead_s + average
    if cp == 1 or not card.handoff.priced:
        return floor, several
    passing = passing_floor_s(problem, requests, barriers @ totals / cp)
    extra = min(passing, head_parallel_floor_s(problem, requests, copy_s))
    if whole[requests].all():
        spread = unsplit_rank_floor_s(problem, node_s, requests)
        busiest = max(spread, whole_or_copied_floor_s(problem, requests, average))
        extra = min(extra, max(0.0, busiest - average))
    return floor + extra, several


def wave_floor_s(
    problem: Problem,
    items: tuple[int, ...],
    copy_s: np.ndarray,
    whole: np.ndarray,
    node_s: np.ndarray,
    split_s: float = math.inf,
) -> float:
    """``G(S)`` of the items ``items``: the smaller of :func:`wave_floor_parts_s`."""
    return min(wave_floor_parts_s(problem, items, copy_s, whole, node_s, split_s))


def split_copies_s(
    problem: Problem, barriers: np.ndarray | None = None, groups: Sequence[Problem] = ()
) -> list[float]:
    """Per item, what splitting it over two waves or more stores again at least: the nodes every one of
    its requests passes through sit in each of those waves, one more copy each (their per-copy amounts
    on the average rank, remote tokens included); infinity for an item no valid plan splits
    (:func:`splittable_items` over ``groups``, default ``problem`` itself). With ``barriers`` (per
    quantity, summed over the barriers): those seconds per unit over all ranks instead, remote tokens
    counted as none (a copy's GPU-seconds under dynamic CP)."""
    seconds = copy_node_seconds(problem, barriers)
    found = []
    for item, splittable in enumerate(splittable_items(problem, groups)):
        if not splittable:
            found.append(math.inf)
            continue
        found.append(float(seconds[common_nodes(problem, problem.item_requests([item]))].sum()))
    return found


def block_split_copies_s(
    problem: Problem, blocks: Blocks, barriers: np.ndarray | None = None, groups: Sequence[Problem] = ()
) -> list[float]:
    """Per block, what holding its requests in two waves or more stores again at least, priced as
    :func:`split_copies_s` prices a copy (``barriers``, ``groups``): a block of one item, that item's
    split copy (infinite where no valid plan splits it); a block of several items, the nodes every one
    of its requests passes, one more copy each (it may be split between any two of its items)."""
    seconds = copy_node_seconds(problem, barriers)
    single = any(len(block) == 1 for block in blocks)
    items = split_copies_s(problem, barriers, groups) if single else []  # prices the items' waves
    return [
        float(items[block[0]])
        if len(block) == 1
        else float(seconds[common_nodes(problem, problem.item_requests(list(block)))].sum())
        for block in blocks
    ]


def copy_node_seconds(problem: Problem, barriers: np.ndarray | None = None) -> np.ndarray:
    """Per node, one more copy's seconds as :func:`split_copies_s` prices it: its per-copy amounts on
    the average rank, remote tokens included; with ``barriers``, those seconds over all ranks, remote
    tokens counted as none."""
    cp = problem.topology.cp
    amounts = per_copy_amounts(problem).copy()
    if barriers is None:
        barriers = np.asarray(problem.card.constants.barrier_coefficients, dtype=np.float64).sum(axis=0)
        amounts[:, _REMOTE_COLUMNS] = (cp - 1) * amounts[:, [_TOKENS]]
        return amounts @ barriers / cp
    amounts[:, _REMOTE_COLUMNS] = 0.0
    return amounts @ barriers


def splittable_items(problem: Problem, groups: Sequence[Problem] = ()) -> list[bool]:
    """Per item, whether a valid plan may split it over waves: it has two requests or more, and some
    problem of ``groups`` (the group sizes its waves may take; default ``problem`` itself) holds it in
    no wave whole (:func:`~cpplan.pricing.wave.whole_item_wave`, the split path's own test)."""
    groups = tuple(groups) or (problem,)
    return [
        problem.item_requests([item]).size > 1
        and any(whole_item_wave(group, item) is None for group in groups)
        for item in range(problem.num_items)
    ]


def full_sharing_totals(problem: Problem, requests: np.ndarray) -> np.ndarray:
    """The totals of one full-sharing wave of ``requests``: each node of their paths once, with every
    flag some request through it carries (summed per node in closed form; packed and counted where
    requests carry loss masks)."""
    if problem.loss_positions is not None:
        layout = problem.pack_requests(requests, "full")
        return chunk_stats(layout, problem.chunk_tokens).amounts.sum(axis=0).astype(np.float64)
    tree = problem.tree
    counts = path_counts(tree, requests)
    present = (counts > 0).astype(np.float64)
    present[0] = 0.0
    plain, with_grad, with_loss = cached_per_problem(problem, "node_amounts", lambda: _node_amounts(problem))
    flagged = {}
    for name, flags in (("grad", problem.request_grad), ("loss", problem.request_loss)):
        weights = np.zeros(tree.num_requests)
        weights[requests] = flags[requests]
        flagged[name] = path_counts_weighted(tree, requests, weights) > 0
    return present @ plain + (present * flagged["grad"]) @ with_grad + (present * flagged["loss"]) @ with_loss


def path_counts_weighted(tree, requests: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per node, the summed ``weights`` (per tree request) of ``requests`` through it."""
    starts, ends = tree.path_ptr[requests], tree.path_ptr[requests + 1]
    lengths = ends - starts
    offsets = np.cumsum(lengths) - lengths
    entries = np.repeat(starts - offsets, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)
    owner = np.repeat(requests, lengths)
    return np.bincount(tree.path_nodes[entries], weights=weights[owner], minlength=tree.num_nodes)


def _node_amounts(problem: Problem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per node, its amounts without flags, and what the gradient flag and the loss flag add."""
    tree = problem.tree
    yes, no = np.ones(tree.num_nodes, dtype=bool), np.zeros(tree.num_nodes, dtype=bool)

    def amounts(grad, loss):
        return span_amounts(tree.node_length, tree.node_start, {"grad": grad, "loss": loss}).astype(
            np.float64
        )

    plain = amounts(no, no)
    return plain, amounts(yes, no) - plain, amounts(no, yes) - plain


def enumerated_blocks(problem: Problem, *, units: bool = False) -> Blocks | None:
    """The blocks the partition bounds enumerate: the items, at most :data:`ENUMERATED_ITEMS`, or with
    ``units`` their prefix units where the items are more (:func:`~cpplan.bound.blocks.item_blocks`);
    ``None`` where there are more blocks. Units are for pools only: their ``2^8`` wave floors take
    about a second on two cores, and a single group's bound gains next to nothing from them (0.06% of
    the plan on the bench suite's GRPO steps)."""
    if units or problem.num_items <= ENUMERATED_ITEMS:
        return item_blocks(problem, ENUMERATED_ITEMS)
    return None


def set_floors_s(problem: Problem, *, units: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
    """Per set of blocks (a bit mask), ``G(S)`` and the floor of two waves or more holding exactly
    them (:func:`wave_floor_parts_s`); ``None`` beyond :data:`ENUMERATED_ITEMS` blocks."""
    parts = set_floor_parts_s(problem, units=units)
    return None if parts is None else (np.minimum(*parts), parts[1])


def set_floor_parts_s(problem: Problem, *, units: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
    """Per set of blocks (a bit mask over :func:`enumerated_blocks`), ``F(S)`` (one wave holding exactly
    their items) and the floor of two waves or more (:func:`wave_floor_parts_s`, split blocks priced by
    :func:`block_split_copies_s`); ``None`` beyond :data:`ENUMERATED_ITEMS`
    blocks. Computed once per problem and kind of blocks."""
    blocks = enumerated_blocks(problem, units=units)
    if blocks is None:
        return None
    name = "set_floors_units" if len(blocks) < problem.num_items else "set_floors"
    return cached_per_problem(problem, name, lambda: _set_floor_parts_s(problem, blocks))


def _set_floor_parts_s(problem: Problem, blocks: Blocks) -> tuple[np.ndarray, np.ndarray]:
    """:func:`set_floor_parts_s`, computed."""
    n = len(blocks)
    copy_s, whole = copy_seconds(problem), whole_on_one_rank(problem)
    barriers = np.asarray(problem.card.constants.barrier_coefficients, dtype=np.float64).sum(axis=0)
    node_s = per_copy_amounts(problem) @ barriers
    split = block_split_copies_s(problem, blocks)
    one, several = np.full(1 << n, math.inf), np.full(1 << n, math.inf)
    one[0] = 0.0
    for mask in range(1, 1 << n):
        least = min(split[k] for k in range(n) if mask >> k & 1)
        one[mask], several[mask] = wave_floor_parts_s(
            problem, tuple(block_items(blocks, mask)), copy_s, whole, node_s, least
        )
    return one, several


def item_subsets(mask: int, low: bool = True):
    """The non-empty subsets of ``mask`` (those holding its lowest item where ``low``)."""
    first = mask & -mask
    sub = mask
    while sub:
        if not low or sub & first:
            yield sub
        sub = (sub - 1) & mask


def partitions_s(least: np.ndarray) -> list[float]:
    """Per set of items, ``min_P Σ_{S ∈ P} least[S]`` over its partitions."""
    best = [0.0] + [math.inf] * (least.size - 1)
    for mask in range(1, least.size):
        best[mask] = min(float(least[sub]) + best[mask ^ sub] for sub in item_subsets(mask))
    return best


def partition_bound_s(problem: Problem) -> float | None:
    """``min_P Σ_{S ∈ P} G(S)`` over every partition ``P`` of the items (``None`` beyond
    :data:`ENUMERATED_ITEMS` items)."""
    floors = set_floors_s(problem)
    return None if floors is None else partitions_s(floors[0])[-1]


def pool_partition_bound_s(problem: Problem) -> float | None:
    """A floor of the makespan of a pool of ``dp`` groups of one CP size over every plan of its few
    items, or of the few prefix units of its many (:func:`enumerated_blocks` with units; ``None`` beyond
    :data:`ENUMERATED_ITEMS` blocks; "items" below reads "blocks"). Group a plan's waves into the
    runs split items tie together: each run holds exactly a set ``S`` of items and costs at least
    ``G(S)``. Where no run spans two groups, every group holds a set of items whose runs partition it,
    and runs at least its partition bound: the makespan is at least the least, over the assignments of
    the items to ``dp`` groups, of the largest group's. Where a run spans two groups it has two waves or
    more, so the plan's waves cost at least the partition bound with some set priced as two waves or
    more, and the busiest group a ``1 / dp`` share of it. The smaller of the two."""
    floors = set_floors_s(problem, units=True)
    if floors is None:
        return None
    least, several = floors
    best = partitions_s(least)
    spread = list(best)  # one group
    for _ in range(min(problem.topology.dp, least.size.bit_length() - 1) - 1):
        spread = [
            min(
                [spread[mask]] + [max(best[sub], spread[mask ^ sub]) for sub in item_subsets(mask, low=False)]
            )
            for mask in range(least.size)
        ]
    return min(spread[-1], partitions_marked_s(least, several)[-1] / problem.topology.dp)


def partitions_marked_s(least: np.ndarray, marked: np.ndarray) -> list[float]:
    """Per set of items, the least ``Σ_{S ∈ P}`` over its partitions ``P`` with at least one part
    priced at ``marked[S]`` (the others at ``least[S]``, or ``marked[S]`` where smaller): the partitions
    with some run of two waves or more, where ``marked`` is that floor."""
    best = partitions_s(np.minimum(least, marked))
    found = [math.inf] * least.size
    for mask in range(1, least.size):
        found[mask] = min(
            min(float(marked[sub]) + best[mask ^ sub], float(least[sub]) + found[mask ^ sub])
            for sub in item_subsets(mask)
        )
    return found


__all__ = [
    "ENUMERATED_ITEMS",
    "block_split_copies_s",
    "copy_node_seconds",
    "enumerated_blocks",
    "item_subsets",
    "partition_bound_s",
    "partitions_marked_s",
    "partitions_s",
    "pool_partition_bound_s",
    "set_floor_parts_s",
    "set_floors_s",
    "split_copies_s",
    "splittable_items",
    "wave_floor_parts_s",
    "wave_floor_s",
]
