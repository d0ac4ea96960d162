"""Floors that hold for every plan of a problem: how many waves hold a prefix-tree node, and the
quantities every plan's waves sum to at least.

Requests are the units here, not items: a plan keeps each item in one wave (the split path apart, which
splits an item into its requests), so a floor over every placement of the requests holds for every plan.

*Waves through a node.* Let ``R_v`` be the requests through node ``v`` and ``W_v`` the number of waves
holding one of them in some plan. Each such wave ``w`` holds node ``v`` and all of ``v``'s ancestors,
and, under any layout and ownership, fits the budget on every rank, so on the average rank:
``static_e + coef_e · Q_w / cp <= B / safety`` for every envelope ``e`` (a peak is at most the budget
only if the safety factor times its envelope is; ``coef_e >= 0``; ``Q_w`` the wave's totals over its
ranks). Summing over those waves, with ``Σ_w Q_w >= L_v(W_v)`` (below):
``W_v · (B / safety - static_e) >= coef_e · L_v(W_v) / cp``, a linear inequality in ``W_v`` that
:func:`waves_needed` solves for the least integer (rounding down: a ratio a hair above an integer
from float error gives that integer).

*Copies of a node.* In any layout a wave stores each node it holds at least once (full sharing stores
it exactly once) and every copy's tokens sit at the same positions, so attend the same keys: over a
plan, node ``u`` contributes its tokens and attended pairs at least ``W_u`` times. Gradient and
loss tokens count per copy when every request through ``u`` takes gradients (needs logits, and no
request has a loss mask): every copy then carries the flag; otherwise once, in the one copy of a single
full-sharing wave of everything (``Q_once``). So ``L_v(W) = D_v + A_v · W`` with ``A_v`` the amounts of
``v`` and its ancestors (and one piece: a wave's ranks own at least one piece) and ``D_v`` the amounts
strictly below ``v``, each node counted ``W_u`` times. A rank's pieces sum, over the ranks, to at least
the wave's segments, which are at least its distinct request ends (a segment ends where its request
set changes, so two requests that end at different tokens end in different segments).

Over the whole workload (the root, ``W = W_0`` waves): every plan's waves sum to at least
``Q_once + Σ_u (W_u - 1) · amounts_u`` of each per-copy quantity, ``max(W_0, distinct ends)`` pieces,
and ``(cp - 1)`` remote tokens per packed token (a rank's remote tokens are the packed tokens it does
not own).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cpplan.pricing.amounts import span_amounts
from cpplan.pricing.layout import path_counts
from cpplan.pricing.memo import memoized
from cpplan.pricing.ownership import chunk_stats
from cpplan.pricing.problem import Problem
from cpplan.spec.quantities import NUM_QUANTITIES, QUANTITY_INDEX, REMOTE_COLUMNS, SEGMENT_COLUMNS

_TOKENS = QUANTITY_INDEX["tokens"]
_SEGMENT_COLUMNS = list(SEGMENT_COLUMNS)
_REMOTE_COLUMNS = list(REMOTE_COLUMNS)

RATIO_SLACK = 1e-9
"""Relative slack taken off a wave-count ratio before rounding it up: float error never adds a wave."""


@dataclass(frozen=True, kw_only=True, eq=False)
class NodeFloors:
    """Per prefix-tree node the least number of waves that hold it (``waves[0]``: the whole workload's),
    and the totals every plan's waves sum to at least (``totals``, one entry per quantity), or, when
    some request alone cannot fit the average rank, ``fits = False`` (no plan exists: nothing bounded)."""

    waves: np.ndarray
    totals: np.ndarray
    fits: bool
    pairs: tuple[tuple[int, int], ...] = ()
    """Where :func:`paired_waves` counted the waves, its matching of requests (a plan to try)."""


def with_wave_counts(
    problem: Problem, requests: np.ndarray, totals: np.ndarray, *, remote_ranks: int
) -> np.ndarray:
    """``totals`` (a wave's additive amounts, changed in place and returned) with its segment columns
    the wave's distinct request ends (the fewest pieces any ownership holds) and its remote columns
    ``remote_ranks`` per packed token."""
    totals[_SEGMENT_COLUMNS] = float(np.unique(problem.tree.request_leaf[requests]).size)
    totals[_REMOTE_COLUMNS] = remote_ranks * totals[_TOKENS]
    return totals


def cached_per_problem(problem: Problem, name: str, make):
    """``make()`` for ``problem``, computed once per problem and name (in the problem's memo, under
    ``("bound", name)``: a pure function of the problem); arrays returned read-only."""

    def read_only():
        value = make()
        for array in value if isinstance(value, tuple) else (value,):
            array.setflags(write=False)
        return value

    return memoized(problem.memo.planned, ("bound", name), read_only)


def common_nodes(problem: Problem, requests: np.ndarray) -> np.ndarray:
    """The nodes besides the root that every one of ``requests`` (tree request indices) passes: the
    prefix they all share."""
    common = np.flatnonzero(path_counts(problem.tree, requests) == requests.size)
    return common[common > 0]


def per_copy_amounts(problem: Problem) -> np.ndarray:
    """Per node, shape ``(nodes, quantities)``: what every copy of the node carries in any layout (its
    tokens and attended pairs; its gradient and loss amounts when every request through it has the
    flag, loss only without loss masks; zero elsewhere, and for the root); read-only, computed once per
    problem."""
    return cached_per_problem(problem, "per_copy_amounts", lambda: _per_copy_amounts(problem))


def _per_copy_amounts(problem: Problem) -> np.ndarray:
    """:func:`per_copy_amounts`, computed."""
    tree = problem.tree
    everyone = np.bincount(tree.path_nodes, minlength=tree.num_nodes)
    flagged = {}
    for name, flags in (("grad", problem.request_grad), ("loss", problem.request_loss)):
        per_request = np.repeat(flags, np.diff(tree.path_ptr))
        flagged[name] = np.bincount(tree.path_nodes, weights=per_request, minlength=tree.num_nodes)
    all_flags = {name: (everyone > 0) & (count == everyone) for name, count in flagged.items()}
    if problem.loss_positions is not None:
        all_flags["loss"] = np.zeros(tree.num_nodes, dtype=bool)
    amounts = span_amounts(tree.node_length, tree.node_start, all_flags).astype(np.float64)
    amounts[0] = 0.0
    return amounts


def once_amounts(problem: Problem) -> np.ndarray:
    """The totals of one wave of every request under full sharing (each node once, every flag of any
    request through it): what the waves of every plan hold at least once."""
    layout = problem.pack_requests(np.arange(problem.tree.num_requests, dtype=np.int64), "full")
    return chunk_stats(layout, problem.chunk_tokens).amounts.sum(axis=0).astype(np.float64)


def waves_needed(fixed: np.ndarray, per_wave: np.ndarray, capacity: np.ndarray) -> int | None:
    """The least ``W >= 1`` with ``W · capacity_e >= fixed_e + per_wave_e · W`` for every envelope
    (all arguments per envelope, in bytes), rounded down against float error; ``None`` when some
    envelope's ``per_wave`` alone reaches its capacity (not even one wave fits)."""
    room = capacity - per_wave
    if (room <= 0).any():
        return None
    ratio = float((fixed / room).max())
    return max(1, math.ceil(ratio * (1 - RATIO_SLACK) - RATIO_SLACK))


def node_floors(problem: Problem) -> NodeFloors:
    """:class:`NodeFloors` of ``problem`` (see the module docstring), children before parents."""
    tree, card, cp = problem.tree, problem.card, problem.topology.cp
    coefficients = card.envelope_coefficients()  # (envelopes, quantities), bytes per unit
    capacity = problem.memory_bytes / card.safety - np.asarray(card.envelope_static_bytes, dtype=np.float64)
    amounts = per_copy_amounts(problem)
    with_remote = amounts.copy()
    for column in _REMOTE_COLUMNS:
        with_remote[:, column] = (cp - 1) * amounts[:, _TOKENS]
    bytes_per_copy = with_remote @ coefficients.T / cp  # (nodes, envelopes): one copy on the average rank
    piece = np.zeros(NUM_QUANTITIES)
    piece[_SEGMENT_COLUMNS] = 1.0
    piece_bytes = coefficients @ piece / cp
    parent = tree.node_parent
    path_bytes = np.zeros_like(bytes_per_copy)  # v and its ancestors, one copy each
    for v in np.argsort(tree.node_depth, kind="stable").tolist():
        if v:
            path_bytes[v] = bytes_per_copy[v] + path_bytes[parent[v]]
    ends = np.zeros(tree.num_nodes)
    np.add.at(ends, np.unique(tree.request_leaf), 1.0)
    below = np.zeros_like(bytes_per_copy)  # strictly below v, each node times its waves
    ends_below = ends.copy()  # distinct request ends at or below v
    apart = apart_requests(problem, path_bytes, piece_bytes, capacity)
    children = np.bincount(parent[1:], minlength=tree.num_nodes)

    waves = np.zeros(tree.num_nodes, dtype=np.int64)
    for r in apart.tolist():  # no two of them share a wave: a node holding k of them is in k waves
        np.add.at(waves, np.asarray(tree.path(r), dtype=np.int64), 1)
    paired, pairs = paired_waves(problem, path_bytes, piece_bytes, capacity)
    waves[0] = max(apart.size, paired)
    for v in np.argsort(-tree.node_depth, kind="stable").tolist():
        if v == 0 or (tree.request_counts[v] == 0):
            continue
        by_pieces = waves_needed(below[v], path_bytes[v] + piece_bytes, capacity)
        by_ends = waves_needed(below[v] + ends_below[v] * piece_bytes, path_bytes[v], capacity)
        if by_pieces is None or by_ends is None:
            return NodeFloors(waves=waves, totals=np.zeros(NUM_QUANTITIES), fits=False)
        count = max(by_pieces, by_ends, int(waves[v]))
        split = branch_bytes(int(children[v]), bytes_per_copy[v], piece_bytes) if not ends[v] else None
        if split is not None:
            most = int(tree.request_counts[v])
            count = _with_branch(
                split,
                count,
                most,
                below[v],
                ends_below[v] * piece_bytes,
                path_bytes[v],
                piece_bytes,
                capacity,
            )
            if count is None:
                return NodeFloors(waves=waves, totals=np.zeros(NUM_QUANTITIES), fits=False)
        waves[v] = count
        u = int(parent[v])
        below[u] += below[v] + waves[v] * bytes_per_copy[v] + (split(count) if split else 0.0)
        ends_below[u] += ends_below[v]
        waves[u] = max(waves[u], waves[v])  # a superset of requests needs at least as many waves
    root = waves_needed(below[0], piece_bytes, capacity)
    root_ends = waves_needed(below[0] + ends_below[0] * piece_bytes, np.zeros_like(piece_bytes), capacity)
    if root is None or root_ends is None:
        return NodeFloors(waves=waves, totals=np.zeros(NUM_QUANTITIES), fits=False)
    waves[0] = max(root, root_ends, int(waves[0]), 1)
    extra = np.maximum(waves - 1, 0).astype(np.float64)
    extra[0] = 0.0
    totals = once_amounts(problem) + extra @ amounts
    for column in _SEGMENT_COLUMNS:
        totals[column] = max(float(waves[0]), float(ends_below[0]))
    for column in _REMOTE_COLUMNS:
        totals[column] = (cp - 1) * totals[_TOKENS]
    return NodeFloors(waves=waves, totals=totals, fits=True, pairs=pairs)


def branch_bytes(num_children: int, copy_bytes: np.ndarray, piece_bytes: np.ndarray):
    """For a node that no request ends at and with ``num_children`` children: the bytes (per envelope,
    on the average rank) its branching adds over a plan of ``W`` waves through it, as a function of
    ``W``; ``None`` for a node that does not branch. In a wave holding ``m >= 2`` of its branches the
    node is either shared (its copy ends a segment that no request end accounts for: one more piece)
    or not (stored at least ``m`` times: ``m - 1`` more copies); the cheaper of the two is concave in
    ``m - 1`` and zero at zero, so over the waves it sums to at least its value at
    ``num_children - W``, the branches beyond one per wave. The callers add it beside the node's
    ``W`` copies at the same ``W``, their lower count: ``W · copy + extra(W)`` grows with ``W`` (each
    more wave adds a copy and takes at most one copy's bytes off ``extra``), so it stays at most the
    sum at the plan's true count."""
    if num_children < 2:
        return None

    def extra(num_waves: int) -> np.ndarray:
        return np.minimum(piece_bytes, max(num_children - num_waves, 0) * copy_bytes)

    return extra


def _with_branch(split, count, most, fixed, ends_bytes, path, piece_bytes, capacity) -> int | None:
    """The least wave count from ``count`` up to ``most`` (each request its own wave) that both memory
    sums of :func:`node_floors` admit with a node's branch bytes ``split(W)`` added, or ``None``: the
    sums grow slower in ``W`` than the capacity, so the first count admitted is the least."""
    for w in range(count, max(count, most) + 1):
        fixed_w = fixed + split(w) - RATIO_SLACK * w * capacity
        by_pieces = w * capacity >= fixed_w + w * (path + piece_bytes)
        by_ends = w * capacity >= fixed_w + ends_bytes + w * path
        if by_pieces.all() and by_ends.all():
            return w
    return None


APART_CANDIDATES = 64
"""The largest requests :func:`apart_requests` looks at (pairwise checks grow with its square)."""


def apart_requests(
    problem: Problem, path_bytes: np.ndarray, piece_bytes: np.ndarray, capacity: np.ndarray
) -> np.ndarray:
    """Requests no two of which fit one wave, chosen greedily among the :data:`APART_CANDIDATES`
    largest (by their path's bytes on the average rank): two requests in one wave put every node of
    both paths there (their common prefix at least once) and, ending at different tokens, at least two
    pieces; a pair is apart when that exceeds some envelope's capacity, with a relative margin so float
    error never separates a pair that fits. A plan needs at least as many waves as the set has members
    (and a node at least as many as hold it)."""
    tree = problem.tree
    leaves = tree.request_leaf
    own = path_bytes[leaves] + piece_bytes  # (requests, envelopes)
    order = np.argsort(-(own / capacity).max(axis=1), kind="stable")[:APART_CANDIDATES]
    chosen: list[int] = []
    margin = capacity * (1 + RATIO_SLACK) + RATIO_SLACK
    for r in order.tolist():
        path_r = tree.path(r)
        fits_with = False
        for q in chosen:
            if leaves[q] == leaves[r]:
                fits_with = True
                break
            common = common_node(path_r, tree.path(q))
            shared = path_bytes[common] if common else 0.0
            both = path_bytes[leaves[r]] + path_bytes[leaves[q]] - shared + 2 * piece_bytes
            if not (both > margin).any():
                fits_with = True
                break
        if not fits_with:
            chosen.append(r)
    return np.array(chosen, dtype=np.int64)


MATCHING_REQUESTS = 96
"""The most requests :func:`paired_waves` looks at (its triple check grows with their cube)."""


def paired_waves(
    problem: Problem, path_bytes: np.ndarray, piece_bytes: np.ndarray, capacity: np.ndarray
) -> int:
    """Where no three requests fit one wave, the least number of waves is the requests less a maximum
    matching of the pairs that may share one (bin packing with at most two per bin), and that matching
    (request pairs, ascending); 0 and none where some three might fit, or beyond
    :data:`MATCHING_REQUESTS` requests. Bytes on the average rank: a pair holds
    both paths (their common prefix once) and a piece per distinct end; a third request adds at least
    its path beyond its longer common prefix with the two, and a piece where it ends elsewhere. A pair
    is apart, and a triple too large, only beyond a relative margin (float error never separates
    requests that fit)."""
    tree = problem.tree
    n = tree.num_requests
    if n < 3 or n > MATCHING_REQUESTS:
        return 0, ()
    leaves = tree.request_leaf
    paths = [tree.path(r) for r in range(n)]
    common = np.zeros((n, n, capacity.size))
    for a in range(n):
        for b in range(a, n):
            node = common_node(paths[a], paths[b])
            common[a, b] = common[b, a] = path_bytes[node] if node else 0.0
    own = path_bytes[leaves]  # (n, envelopes)
    distinct = leaves[:, None] != leaves[None, :]
    pair = own[:, None, :] + own[None, :, :] - common + (1 + distinct)[:, :, None] * piece_bytes
    margin = capacity * (1 + RATIO_SLACK) + RATIO_SLACK
    fits = ~(pair > margin).any(axis=2)
    third = own[None, None, :, :] - np.maximum(
        common.transpose(1, 0, 2)[None, :, :, :], common[:, None, :, :]
    )
    new_end = distinct[:, None, :] & distinct[None, :, :]  # c ends where neither a nor b does
    triple = pair[:, :, None, :] + third + new_end[:, :, :, None] * piece_bytes
    over = (triple > margin).any(axis=3)
    a, b, c = np.ogrid[:n, :n, :n]
    over |= (a == b) | (b == c) | (a == c)
    if not over.all():
        return 0, ()
    import networkx as nx  # only here: a maximum matching of the pairs that fit

    graph = nx.Graph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from((i, j) for i in range(n) for j in range(i + 1, n) if fits[i, j])
    matching = tuple(
        sorted(tuple(sorted(pair)) for pair in nx.max_weight_matching(graph, maxcardinality=True))
    )
    return n - len(matching), matching


def common_node(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """The deepest node two root-to-leaf paths share (0, the root, for none)."""
    common = 0
    for u, v in zip(a, b, strict=False):
        if u != v:
            break
        common = u
    return common


SPREAD_STEPS = 20
"""Bisection steps of :func:`unsplit_rank_floor_s`."""


def unsplit_rank_floor_s(
    problem: Problem, node_seconds: np.ndarray, requests: np.ndarray | None = None
) -> float:
    """A floor of the busiest rank's seconds in one wave of every request whose GDN states never cross
    ranks, so that every request's whole path is on one rank (``node_seconds``: per node, one copy's
    seconds summed over the barriers, a lower bound of any rank's). The same argument as the waves
    through a node, with ranks for waves and the busiest rank's seconds ``M`` for the capacity: the
    requests through node ``v`` need at least ``k_v(M)`` ranks, each holding a copy of ``v``, and the
    copies sum to at most ``cp · M``; and each rank's memory holds its requests' paths, so ``k_v`` is
    also at least :func:`memory_ranks`' count. The least ``M`` that admits ``k_0(M) <= cp`` is
    bisected; its lower end (a value refused) is returned, and infinity where the memory alone needs
    more than ``cp`` ranks. With ``requests``, the wave of those requests only (its nodes, and no
    memory count: :func:`memory_ranks` counts every request)."""
    tree = problem.tree
    cp = problem.topology.cp
    parent = tree.node_parent.tolist()
    in_wave = np.ones(tree.num_nodes, dtype=bool)
    if requests is not None:
        in_wave = path_counts(tree, np.asarray(requests, dtype=np.int64)) > 0
    seconds = np.where(in_wave, node_seconds, 0.0).tolist()
    bottom_up = [v for v in np.argsort(-tree.node_depth, kind="stable").tolist() if v and in_wave[v]]
    path = [0.0] * tree.num_nodes
    for v in reversed(bottom_up):
        path[v] = seconds[v] + path[parent[v]]

    memory = memory_ranks(problem) if requests is None else [1] * tree.num_nodes
    if memory is None or memory[0] > cp:
        return math.inf  # the budget alone keeps the requests on more ranks than there are

    def ranks_needed(capacity: float) -> float:
        below = [0.0] * tree.num_nodes
        ranks = list(memory)
        for v in bottom_up:
            room = capacity - path[v]
            if room <= 0:
                return math.inf
            ranks[v] = max(ranks[v], math.ceil(below[v] / room * (1 - RATIO_SLACK) - RATIO_SLACK))
            u = parent[v]
            below[u] += below[v] + ranks[v] * seconds[v]
            ranks[u] = max(ranks[u], ranks[v])
        return max(ranks[0], math.ceil(below[0] / capacity * (1 - RATIO_SLACK) - RATIO_SLACK))

    low, high = max(path) * (1 - RATIO_SLACK), sum(seconds) + 1.0
    if high <= 0:
        return 0.0
    for _ in range(SPREAD_STEPS):
        middle = (low + high) / 2
        if ranks_needed(middle) <= cp:
            high = middle
        else:
            low = middle
    return low


def memory_ranks(problem: Problem) -> list[int] | None:
    """Per node, the least number of ranks that hold the requests through it when every request's path
    is whole on one rank: each such rank holds a copy of the node and its ancestors and one piece (and
    together the ranks hold a piece per distinct request end, and the branch pieces of
    :func:`branch_bytes`), and its own envelopes (its owned
    quantities, remote tokens left out) stay within the budget; ``None`` where one request's path
    alone does not fit a rank."""
    tree = problem.tree
    copy_bytes, path, piece_bytes, capacity = one_rank_bytes(problem)
    parent = tree.node_parent
    ends = np.zeros(tree.num_nodes)
    np.add.at(ends, np.unique(tree.request_leaf), 1.0)
    own_ends = ends  # distinct ends at or below each node, accumulated upwards below
    ends = ends.copy()  # whether a request ends at the node itself
    children = np.bincount(parent[1:], minlength=tree.num_nodes)
    below = np.zeros_like(copy_bytes)
    ranks = [1] * tree.num_nodes
    for v in np.argsort(-tree.node_depth, kind="stable").tolist():
        top = path[v] if v else np.zeros_like(piece_bytes)
        by_pieces = waves_needed(below[v], top + piece_bytes, capacity)
        by_ends = waves_needed(below[v] + own_ends[v] * piece_bytes, top, capacity)
        if by_pieces is None or by_ends is None:
            return None
        count = max(ranks[v], by_pieces, by_ends)
        split = branch_bytes(int(children[v]), copy_bytes[v], piece_bytes) if v and not ends[v] else None
        if split is not None:
            most = int(tree.request_counts[v])
            count = _with_branch(
                split, count, most, below[v], own_ends[v] * piece_bytes, top, piece_bytes, capacity
            )
            if count is None:
                return None
        ranks[v] = count
        if v:
            u = int(parent[v])
            below[u] += below[v] + ranks[v] * copy_bytes[v] + (split(count) if split else 0.0)
            ranks[u] = max(ranks[u], ranks[v])
            own_ends[u] += own_ends[v]
    return ranks


def one_rank_bytes(problem: Problem) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """On one rank (not the average): per node a copy's bytes and its path's (the node and its
    ancestors, one copy each), per envelope; a piece's bytes; and the capacity ``B / safety - static``
    (read-only, computed once per problem)."""
    return cached_per_problem(problem, "one_rank_bytes", lambda: _one_rank_bytes(problem))


def _one_rank_bytes(problem: Problem) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`one_rank_bytes`, computed."""
    tree, card = problem.tree, problem.card
    coefficients = card.envelope_coefficients()
    capacity = problem.memory_bytes / card.safety - np.asarray(card.envelope_static_bytes, dtype=np.float64)
    copy_bytes = per_copy_amounts(problem) @ coefficients.T
    piece = np.zeros(NUM_QUANTITIES)
    piece[_SEGMENT_COLUMNS] = 1.0
    path = np.zeros_like(copy_bytes)
    parent = tree.node_parent
    for v in np.argsort(tree.node_depth, kind="stable").tolist():
        if v:
            path[v] = copy_bytes[v] + path[parent[v]]
    return copy_bytes, path, coefficients @ piece, capacity


def whole_on_one_rank(problem: Problem) -> np.ndarray:
    """Per request, whether its whole path (one copy of each node, one piece) can fit one rank's
    budget; where it cannot, every wave holding the request hands a GDN state across ranks (a
    request's path all on one rank is what a wave without crossings needs)."""
    _, path, piece_bytes, capacity = one_rank_bytes(problem)
    need = path[problem.tree.request_leaf] + piece_bytes
    return ~(need > capacity * (1 + RATIO_SLACK) + RATIO_SLACK).any(axis=1)
