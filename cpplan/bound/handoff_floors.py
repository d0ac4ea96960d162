"""Floors on what one wave pays beyond its rank average: its GDN hand-off plus its ranks' imbalance,
whatever its layout, ownership and the order of its packed requests, in each hand-off mode the card
prices. A wave on ``cp > 1`` ranks runs in one of three ways:

- *head-parallel* (where the card offers it): it pays the all-to-alls' latency, at least the rows a
  perfectly balanced ownership moves (``P (cp - 1) / cp²`` per all-to-all, ``P`` its packed tokens)
  and ``(levels - 1)`` times the level cost. A layout with fewer levels unshares prefix-tree nodes,
  and every extra copy of a node adds its tokens and attended pairs to the ranks' sum and its rows to
  the all-to-alls: :func:`level_floor_s` finds, by a dynamic program over the wave's prefix tree, the
  least of levels and copies together (:func:`head_parallel_floor_s`);
- *rounds or parallel passing* with some state crossing ranks: at least one extra round and one
  handed-over state (:func:`crossing_floor_s`), and, given the wave's rank average, the runs, waits,
  reruns and imbalance a crossing forces
  (:func:`~cpplan.bound.passing_floors.passing_floor_s`);
- *no crossing*: every request's whole path sits on one rank, so the busiest rank holds whole
  requests, an integral bin packing of them onto ``cp`` ranks (:func:`whole_requests_floor_s`), its
  remote tokens included.

The wave pays at least the least of the three (:func:`one_wave_floor_s`). Every floor is a lower
bound computed in floats; the caller rounds the sum down.
"""

from __future__ import annotations

import math

import numpy as np

from cpplan.bound.aligned_units import MAX_UNITS, aligned_units_floor_s
from cpplan.bound.makespan import makespan_floor
from cpplan.bound.node_floors import (
    RATIO_SLACK,
    common_node,
    one_rank_bytes,
    per_copy_amounts,
    unsplit_rank_floor_s,
)
from cpplan.bound.passing_floors import in_wave_branches, passing_floor_s, unshared_copies_s
from cpplan.pricing.layout import path_counts
from cpplan.pricing.problem import Problem
from cpplan.spec.card import HandoffSeconds
from cpplan.spec.quantities import QUANTITY_INDEX, REMOTE_COLUMNS, SEGMENT_COLUMNS

_TOKENS = QUANTITY_INDEX["tokens"]
_SEGMENT_COLUMNS = list(SEGMENT_COLUMNS)
_REMOTE_COLUMNS = list(REMOTE_COLUMNS)

LEVEL_CAP = 24
"""Levels the dynamic program of :func:`level_floor_s` tells apart: a layout of more levels is counted
as this many (a smaller level cost, and no copies: still a floor)."""


def crossing_floor_s(seconds: HandoffSeconds) -> float:
    """The least hand-off of a wave whose GDN states cross ranks in rounds (one extra round, one state)
    or in parallel (one exchange, two states): ``round_s + state_s``."""
    return seconds.round_s + seconds.state_s


def rows_floor_s(seconds: HandoffSeconds, packed_tokens: float, cp: int) -> float:
    """Head-parallel's latency and the rows an even split of ``packed_tokens`` moves: at least what any
    ownership's busiest rank moves (:func:`~cpplan.pricing.head_parallel.moved_rows`)."""
    return seconds.head_collective_s + packed_tokens * (cp - 1) / cp**2 * seconds.head_s_per_token


def copy_seconds(problem: Problem) -> np.ndarray:
    """Per prefix-tree node, the seconds one more copy of it adds at least to a wave on the average rank
    (its per-copy amounts over the barriers, divided by ``cp``; a rank's remote tokens grow by the
    copy's tokens on every other rank) and, under head-parallel, to the rows each all-to-all moves."""
    cp = problem.topology.cp
    barriers = np.asarray(problem.card.constants.barrier_coefficients, dtype=np.float64).sum(axis=0)
    amounts = per_copy_amounts(problem).copy()
    for column in _REMOTE_COLUMNS:
        amounts[:, column] = (cp - 1) * amounts[:, _TOKENS]
    rows = amounts[:, _TOKENS] * (cp - 1) / cp**2 * problem.card.handoff.head_s_per_token
    return amounts @ barriers / cp + rows


def level_floor_s(problem: Problem, requests: np.ndarray, copy_s: np.ndarray) -> float:
    """The least ``(levels - 1) · head_level_s`` plus extra copies' seconds (``copy_s``, per node) of any
    layout of ``requests`` in one wave. A layout shares some nodes through which two or more of the
    requests pass; a request's segments are the shared nodes on its path, and one more unless it ends
    at a shared node. A node left unshared is stored once per shared node just below it on some path,
    and once per request through it that meets none: at least its in-wave children plus the requests
    ending at it. ``f_v(d)``, the least copies' seconds under ``v`` with every request through ``v``
    in at most ``d`` segments from ``v`` down, is the cheaper of sharing ``v`` (children in ``d - 1``)
    and not (children in ``d``, the copies paid), by a dynamic program bottom up."""
    level_s = problem.card.handoff.head_level_s
    tree = problem.tree
    counts = path_counts(tree, np.asarray(requests, dtype=np.int64))
    if level_s <= 0 or not (counts[1:] >= 2).any():
        return 0.0
    depth = LEVEL_CAP
    parent = tree.node_parent
    present = np.flatnonzero(counts > 0)
    present = present[present > 0]
    children, ends = in_wave_branches(problem, requests, counts)
    private = np.zeros(depth + 1)
    private[0] = math.inf  # a request keeps at least one segment
    tails = np.bincount(parent[present[counts[present] == 1]], minlength=tree.num_nodes)
    below = {}  # per node: its shared children's summed f, at each depth
    shared = present[counts[present] >= 2]
    for v in shared[np.argsort(-tree.node_depth[shared], kind="stable")].tolist():
        kids = below.pop(v, np.zeros(depth + 1)) + _tails(int(tails[v]), private)
        share = np.concatenate([[math.inf], kids[:-1]])
        share[depth] = kids[depth]  # beyond the cap: counted as the cap
        unshare = kids + (int(children[v]) + int(ends[v]) - 1) * float(copy_s[v])
        unshare[0] = math.inf
        u = int(parent[v])
        below[u] = below.get(u, np.zeros(depth + 1)) + np.minimum(share, unshare)
    root = below.get(0, np.zeros(depth + 1)) + _tails(int(tails[0]), private)
    levels = np.arange(depth + 1, dtype=np.float64)
    return float(np.min((levels[1:] - 1) * level_s + root[1:]))


def _tails(count: int, private: np.ndarray) -> np.ndarray:
    """``count`` private tails' summed ``f`` (each needs a segment, costs no copy); zeros for none."""
    return count * private if count else np.zeros_like(private)


def head_parallel_floor_s(problem: Problem, requests: np.ndarray, copy_s: np.ndarray) -> float:
    """The least head-parallel hand-off of one wave of ``requests`` beyond its rank average under full
    sharing: :func:`rows_floor_s` of its full-sharing packed tokens plus :func:`level_floor_s` (infinity
    where the card does not offer the mode)."""
    seconds, cp = problem.card.handoff, problem.topology.cp
    if not seconds.head_parallel_priced:
        return math.inf
    counts = path_counts(problem.tree, np.asarray(requests, dtype=np.int64))
    packed = float(problem.tree.node_length[counts > 0].sum())
    return rows_floor_s(seconds, packed, cp) + level_floor_s(problem, requests, copy_s)


def whole_requests_floor_s(problem: Problem, requests: np.ndarray) -> float | None:
    """A floor of the busiest rank's seconds (summed over the barriers) in one wave of ``requests``
    whose GDN states never cross ranks, so every request's whole path sits on one rank: that rank
    holds the union of its requests' paths (each node at least once, one piece) and its remote tokens
    are at least the wave's nodes off that union. With ``w_v`` a node's seconds on a rank less its
    remote-token price, a rank holding requests ``S`` costs at least ``base + Σ_{v ∈ ∪ paths(S)} w_v``
    (``base``: the whole wave's tokens as remote, and a piece). Whole requests are indivisible: the
    busiest rank holds the costliest request; among the ``cp + 1`` costliest, some rank holds two
    (:func:`pair_sums`: the cheapest pair); every rank that runs the wave holds the nodes common to all
    its requests (:func:`common_nodes_floor`); among any ``k cp + 1``, some rank holds ``k + 1``, their
    private nodes (passed by no other request of the wave) disjoint; and, barrier by barrier, the least
    makespan of the requests packed whole (:func:`barrier_packing_floor_s`), where larger. ``None`` where
    some ``w_v < 0`` (a union may then cost less than a path in it); infinity where memory forbids it
    (:func:`pairs_overflow`)."""
    tree, cp = problem.tree, problem.topology.cp
    requests = np.asarray(requests, dtype=np.int64)
    if pairs_overflow(problem, requests):
        return math.inf
    counts = path_counts(tree, requests)
    per_barrier, barrier_base = barrier_weights(problem, counts)
    weight, base = per_barrier.sum(axis=1), float(barrier_base.sum())
    if (weight < 0).any():
        return None
    sums = _PathSums(problem, requests, counts, weight[:, None])
    path_w = sums.path[tree.request_leaf[requests], 0]
    best = float(path_w.max())
    if requests.size > cp:
        top = requests[np.argsort(-path_w, kind="stable")[: cp + 1]]
        best = max(best, min(float(sums.pair(a, b, 0.0)[0]) for a, b in _pairs(top)))
    best = max(best, common_nodes_floor(weight, counts, requests.size, cp))
    single = np.where(counts == 1, weight, 0.0)
    private = np.sort([single[list(tree.path(int(r)))].sum() for r in requests.tolist()])[::-1]
    for k in range(1, (requests.size - 1) // cp + 1):
        most = k * cp + 1
        best = max(best, float(private[most - k - 1 : most].sum()))
    packed = barrier_packing_floor_s(problem, requests, counts, per_barrier, barrier_base)
    return max(base + best, packed)


def barrier_packing_floor_s(
    problem: Problem, requests: np.ndarray, counts: np.ndarray, weight: np.ndarray, base: np.ndarray
) -> float:
    """A floor of the wave's compute seconds, ``Σ_b max_r``, where every request of ``requests`` sits
    whole on one rank: per barrier ``b``, the slowest rank holds at least the wave's tokens as remote and
    one piece (:func:`barrier_weights`), the nodes every request passes (on every rank that runs the
    wave) and the private nodes of the requests it holds (passed by no other request of the wave), so at
    least the least makespan of those private seconds packed onto ``cp`` ranks
    (:func:`~cpplan.bound.makespan.makespan_floor`). Each barrier has its own slowest rank: a rank heavy
    in attention need not be the one heavy in per-token work. ``weight``, ``base``: the wave's
    :func:`barrier_weights`; 0 where some ``w_{v,b} < 0``."""
    if (weight < 0).any():
        return 0.0
    common = counts == requests.size
    common[0] = False
    private = np.where(((counts == 1) & ~common)[:, None], weight, 0.0)
    sums = _PathSums(problem, requests, counts, private)
    per_request = sums.path[problem.tree.request_leaf[requests]]  # (requests, barriers)
    return _packed_per_barrier(base + weight[common].sum(axis=0), per_request, problem.topology.cp)


def barrier_weights(problem: Problem, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per node of a wave (``counts``: the wave's requests through each) and barrier ``b``, ``w_{v,b}``:
    its seconds in ``b`` on a rank less its remote-token price (zero off the wave, shape ``(nodes,
    barriers)``), and per barrier ``base_b``: the whole wave's tokens as remote and one piece; a rank
    holding the nodes ``U`` costs at least ``base_b + Σ_{v ∈ U} w_{v,b}`` in ``b``."""
    tree = problem.tree
    barriers = np.asarray(problem.card.constants.barrier_coefficients, dtype=np.float64)
    remote_s = barriers[:, _REMOTE_COLUMNS].sum(axis=1)
    weight = per_copy_amounts(problem) @ barriers.T - tree.node_length[:, None] * remote_s[None, :]
    weight[counts == 0] = 0.0
    base = remote_s * float(tree.node_length[counts > 0].sum()) + barriers[:, _SEGMENT_COLUMNS].sum(axis=1)
    return weight, base


def _packed_per_barrier(floor: np.ndarray, units: np.ndarray, cp: int) -> float:
    """``Σ_b (floor_b + makespan of units' seconds in b on cp ranks)``: per barrier its slowest rank,
    which holds ``floor_b`` and whole units (``units``: shape ``(units, barriers)``)."""
    return math.fsum(float(floor[b]) + makespan_floor(units[:, b], cp) for b in range(floor.size))


def whole_or_copied_floor_s(problem: Problem, requests: np.ndarray, average_s: float) -> float:
    """The larger of the two integral floors of the busiest rank's seconds in a wave of ``requests``
    whose GDN states never cross ranks (:func:`whole_requests_floor_s`, :func:`shared_or_copied_floor_s`
    with the bound's rank average ``average_s``); 0 where neither applies."""
    whole = whole_requests_floor_s(problem, requests)
    copied = shared_or_copied_floor_s(problem, requests, average_s)
    return max((f for f in (whole, copied) if f is not None), default=0.0)


def rank_weights(problem: Problem, counts: np.ndarray) -> tuple[np.ndarray, float] | None:
    """:func:`barrier_weights` summed over the barriers: per node ``w_v`` and the ``base``; a rank holding
    the nodes ``U`` costs at least ``base + Σ_{v ∈ U} w_v``. ``None`` where some ``w_v < 0``."""
    weight, base = barrier_weights(problem, counts)
    summed = weight.sum(axis=1)
    return None if (summed < 0).any() else (summed, float(base.sum()))


def shared_or_copied_floor_s(problem: Problem, requests: np.ndarray, average_s: float) -> float | None:
    """A floor of the busiest rank's seconds (summed over the barriers) in one wave of ``requests``
    whose GDN states never cross ranks. Every segment then sits on the rank of its parent's, so a node
    through which two requests or more pass is either shared (one copy: every request through it sits
    whole on the rank holding it) or not (stored once per in-wave child and request end: each extra
    copy on the average rank, :func:`~cpplan.bound.passing_floors.unshared_copies_s`, less the piece
    the bound's branch term may hold; ``average_s``: the bound's rank average, summed over the
    barriers). Below the nodes every request passes, the nodes shared by two requests or
    more split the requests into disjoint groups. A version then shares some common node (the whole
    wave on one rank), or leaves them all unshared and either leaves some group's node unshared too
    (their copies) or holds every group whole on one rank (:func:`group_packing_floor`, and per barrier
    :func:`_groups_per_barrier`); the busiest rank costs at least the least of the three.
    ``average_s`` where there are no such groups; ``None`` where some ``w_v < 0``."""
    requests = np.asarray(requests, dtype=np.int64)
    counts = path_counts(problem.tree, requests)
    per_barrier, barrier_base = barrier_weights(problem, counts)
    if (per_barrier.sum(axis=1) < 0).any():
        return None
    base = float(barrier_base.sum())
    nodes = np.flatnonzero(counts >= 2)
    nodes = nodes[nodes > 0]
    common = counts[nodes] == requests.size  # the nodes every request of the wave passes
    deepest = nodes[common][np.argmax(problem.tree.node_depth[nodes[common]])] if common.any() else 0
    groups = (problem.tree.node_parent[nodes] == deepest) & ~common  # disjoint groups of requests
    if not groups.any():
        return average_s
    sums = _PathSums(problem, requests, counts, per_barrier)
    together = base + (sums.path[nodes] + sums.below[nodes]).sum(axis=1)  # a node's requests on one rank
    copies = unshared_copies_s(problem, requests, counts)[nodes]
    spread = average_s + float(copies[common].sum())  # no common node shared: each stored per child
    whole = float(together[common].min()) if common.any() else math.inf
    grouped = group_packing_floor(together[groups], base, problem.topology.cp)
    if (per_barrier >= 0).all():
        grouped = max(grouped, _groups_per_barrier(sums, barrier_base, nodes[groups], deepest, problem))
    grouped = max(grouped, _aligned_units_s(problem, requests, counts, sums, barrier_base, deepest))
    return min(whole, spread + float(copies[groups].min()), max(spread, grouped))


def _aligned_units_s(
    problem: Problem,
    requests: np.ndarray,
    counts: np.ndarray,
    sums: _PathSums,
    base: np.ndarray,
    deepest: int,
) -> float:
    """The busiest ranks' seconds of a wave whose units (the subtrees below ``deepest``, the deepest node
    every request passes) sit whole on ranks, each with its own copy of the common prefix, its chunks
    aligned (:func:`~cpplan.bound.aligned_units.aligned_units_floor_s`); 0 where that is not exact: more
    than :data:`~cpplan.bound.aligned_units.MAX_UNITS` units, a request ending at or above ``deepest``,
    or a node two requests pass inside a unit below its top."""
    tree = problem.tree
    present = np.flatnonzero(counts > 0)
    present = present[present > 0]
    tops = present[tree.node_parent[present] == deepest]
    above = np.asarray(tree.path(int(requests[0])), dtype=np.int64)
    above = above[tree.node_depth[above] <= tree.node_depth[deepest]] if deepest else above[:0]
    inner = present[(counts[present] >= 2) & (counts[present] < requests.size)]
    if not 1 <= tops.size <= MAX_UNITS or sums.own_end[above].any():
        return 0.0
    if (tree.node_parent[inner] != deepest).any():
        return 0.0
    lengths = _PathSums(problem, requests, counts, tree.node_length[:, None].astype(np.float64))
    common_s = sums.path[deepest] if deepest else np.zeros_like(base)
    common_tokens = int(lengths.path[deepest, 0]) if deepest else 0
    unit_s = sums.path[tops] - common_s[None, :] + sums.below[tops]
    unit_tokens = (lengths.path[tops, 0] - common_tokens + lengths.below[tops, 0]).astype(np.int64)
    return aligned_units_floor_s(
        unit_s, unit_tokens, common_s, common_tokens, base, problem.topology.cp, problem.chunk_tokens
    )


def _groups_per_barrier(
    sums: _PathSums, base: np.ndarray, groups: np.ndarray, deepest: int, problem: Problem
) -> float:
    """Per barrier, the slowest rank of a wave whose disjoint groups of requests (below the nodes
    ``groups``, children of ``deepest``, the deepest node every request passes) each sit whole on one
    rank: ``base`` (per barrier, :func:`barrier_weights`), a copy of the path to ``deepest`` and the
    least makespan of the groups' own seconds (:func:`_packed_per_barrier`; ``sums``: the wave's
    per-barrier weights summed along its tree, every ``w_{v,b} >= 0``)."""
    own = sums.path[groups] - sums.path[deepest] + sums.below[groups]  # (groups, barriers)
    return _packed_per_barrier(base + sums.path[deepest], own, problem.topology.cp)


def group_packing_floor(together: np.ndarray, base: float, cp: int) -> float:
    """A floor of the busiest rank's seconds where each of some disjoint groups of requests sits whole on
    one rank (``together``: per group, ``base`` plus its nodes' weights, :func:`rank_weights`): among
    any ``k cp + 1`` groups some rank holds ``k + 1``, so it costs at least ``base`` plus the weights of
    the ``k + 1`` lightest of the ``k cp + 1`` heaviest."""
    weights = np.sort(np.asarray(together, dtype=np.float64) - base)[::-1]
    best = float(weights[0]) if weights.size else 0.0
    for k in range(1, (weights.size - 1) // cp + 1):
        most = k * cp + 1
        best = max(best, float(weights[most - k - 1 : most].sum()))
    return base + best


def common_nodes_floor(weight: np.ndarray, counts: np.ndarray, num_requests: int, cp: int) -> float:
    """A floor of the busiest rank's ``Σ w_v`` over the paths it holds, in a wave of ``num_requests``
    requests (``counts``: per node, the wave's requests through it; ``weight``: ``w_v >= 0``) whose
    states never cross: each of the ``m <= cp`` ranks holding anything holds a whole request, so every
    node common to all the wave's requests (weight ``C``); the ranks' sums add to at least ``m C`` plus
    every other node once (``W - C``), and the busiest is at least their mean, ``C + (W - C) / m >= C
    + (W - C) / cp``: a prefix shared by the whole wave is stored on every rank that runs it."""
    common = counts == num_requests
    common[0] = False  # the root holds no tokens
    shared = float(weight[common].sum())
    return shared + (float(weight.sum()) - shared) / cp


def pairs_overflow(problem: Problem, requests: np.ndarray) -> bool:
    """Whether ``requests`` cannot sit whole on ``cp`` ranks within the budget: more than ``cp`` of them,
    and every pair among the ``cp + 1`` largest (by their path's bytes on one rank) over some
    envelope's capacity on one rank (:meth:`_PathSums.pair`, with a piece per distinct end, and the
    wave's nodes off the pair's union as remote tokens where every node's own bytes outweigh its remote
    bytes), beyond a relative margin (float error never separates a pair that fits): some rank would
    hold a pair."""
    tree, cp = problem.tree, problem.topology.cp
    if requests.size <= cp:
        return False
    copy_bytes, _, piece_bytes, capacity = one_rank_bytes(problem)
    counts = path_counts(tree, requests)
    remote = problem.card.envelope_coefficients()[:, _REMOTE_COLUMNS].sum(axis=1)  # bytes per token
    held = copy_bytes - tree.node_length[:, None] * remote[None, :]
    if (held[counts > 0] >= 0).all():  # remote tokens: the wave's nodes off the rank's union
        copy_bytes, piece_bytes = held, piece_bytes + remote * float(tree.node_length[counts > 0].sum())
    sums = _PathSums(problem, requests, counts, copy_bytes)
    own = sums.path[tree.request_leaf[requests]] + piece_bytes
    top = requests[np.argsort(-(own / capacity).max(axis=1), kind="stable")[: cp + 1]]
    margin = capacity * (1 + RATIO_SLACK) + RATIO_SLACK
    return all((sums.pair(a, b, piece_bytes) > margin).any() for a, b in _pairs(top))


def _pairs(requests: np.ndarray):
    """Every unordered pair of ``requests``."""
    listed = requests.tolist()
    return [(a, b) for i, a in enumerate(listed) for b in listed[i + 1 :]]


class _PathSums:
    """Sums of a per-node amount (``amount``, shape ``(nodes, k)``) over the prefix tree of one wave of
    ``requests`` (nodes with ``counts > 0``): per node, over it and its ancestors (``path``) and over
    every wave node in its subtree (``below``, itself excluded); the distinct request ends of the wave
    at or below each node (``ends``) and whether one is at the node itself (``own_end``)."""

    def __init__(
        self, problem: Problem, requests: np.ndarray, counts: np.ndarray, amount: np.ndarray
    ) -> None:
        tree = problem.tree
        self.tree = tree
        amount = np.where((counts > 0)[:, None], amount, 0.0)
        parent, depth = tree.node_parent, tree.node_depth
        levels = [np.flatnonzero(depth == d) for d in range(1, int(depth.max()) + 1)]
        self.path = amount.copy()
        for nodes in levels:  # parents before children
            self.path[nodes] += self.path[parent[nodes]]
        self.below = np.zeros_like(amount)
        self.own_end = np.zeros(tree.num_nodes, dtype=bool)
        self.own_end[tree.request_leaf[requests]] = True
        self.ends = self.own_end.astype(np.float64)
        for nodes in reversed(levels):  # children before parents
            np.add.at(self.below, parent[nodes], self.below[nodes] + amount[nodes])
            np.add.at(self.ends, parent[nodes], self.ends[nodes])

    def pair(self, a: int, b: int, piece):
        """The least amount on one rank holding requests ``a`` and ``b`` whole with no state crossing
        ranks (plus ``piece`` per distinct end): where their deepest common node is shared, every
        request through it sits on that rank too (the node's subtree, its path once, and a piece per
        distinct end below it and for the node's own segment where none ends there); where it is not,
        each holds its own copy of their common path (both paths)."""
        tree = self.tree
        leaf_a, leaf_b = int(tree.request_leaf[a]), int(tree.request_leaf[b])
        common = common_node(tree.path(a), tree.path(b))
        ends = 1 if leaf_a == leaf_b else 2
        apart = self.path[leaf_a] + self.path[leaf_b] + ends * np.asarray(piece)
        if not common:
            return apart
        pieces = self.ends[common] + (0 if self.own_end[common] else 1)  # its own segment, shared
        together = self.path[common] + self.below[common] + pieces * np.asarray(piece)
        return np.minimum(apart, together)


def one_wave_floor_s(problem: Problem, average_s: np.ndarray, copy_s: np.ndarray | None = None) -> float:
    """What one wave of every request on ``cp > 1`` ranks pays beyond ``average_s`` (the bound's rank
    average of it, per barrier): the least of :func:`head_parallel_floor_s`, the rounds and parallel
    floor (:func:`~cpplan.bound.passing_floors.passing_floor_s`) and, with no crossing, the busiest
    rank's floor (:func:`whole_requests_floor_s`, or the fractional
    :func:`~cpplan.bound.node_floors.unsplit_rank_floor_s` where larger) over the summed average; 0
    where the card prices no hand-off."""
    seconds = problem.card.handoff
    if not seconds.priced:
        return 0.0
    requests = np.arange(problem.tree.num_requests, dtype=np.int64)
    copy_s = copy_seconds(problem) if copy_s is None else copy_s
    barriers = np.asarray(problem.card.constants.barrier_coefficients, dtype=np.float64)
    unsplit = unsplit_rank_floor_s(problem, per_copy_amounts(problem) @ barriers.sum(axis=0))
    average_s = np.asarray(average_s, dtype=np.float64)
    busiest = max(unsplit, whole_or_copied_floor_s(problem, requests, float(average_s.sum())))
    return min(
        head_parallel_floor_s(problem, requests, copy_s),
        passing_floor_s(problem, requests, average_s),
        max(0.0, busiest - float(average_s.sum())),
    )


def item_level_floor_s(problem: Problem, copy_s: np.ndarray) -> float:
    """The least :func:`level_floor_s` of one item alone: every wave holds a whole item, and a wave's
    floor is at least that of any of its parts (a layout of the wave, restricted to the part, has no
    more levels and no more copies)."""
    lengths = np.diff(problem.item_ptr)
    if (lengths < 2).any():
        return 0.0
    return min(level_floor_s(problem, problem.item_requests([i]), copy_s) for i in range(problem.num_items))
