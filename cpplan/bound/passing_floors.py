"""A floor on what one wave pays beyond its rank average when its GDN states cross ranks in rounds or in
parallel (:mod:`cpplan.pricing.handoff`), whatever its layout, ownership and order of packed requests.

The argument is parametric in ``M``, the busiest rank's owned tokens (at least ``P / cp``, ``P`` the
wave's full-sharing packed tokens):

- *imbalance*: per barrier the slowest rank costs at least the rank owning ``M`` tokens, each token at
  least the barrier's least per-token seconds ``w_b`` (its token and, where every request through the
  node takes gradients, gradient-token coefficient) and every token it does not own at the remote
  price ``ρ_b``: ``(w_b - ρ_b) M + ρ_b P``; beyond the bound's average ``A_b`` of that barrier, the
  positive part (:func:`imbalance_s`);
- *runs*: along a request's path, the pieces on one rank between two crossings hold at most ``M``
  tokens, so the longest request (``L`` tokens) runs on at least ``⌈L / M⌉`` ranks in turn: at least
  that many rounds less one, and as many handed-over states;
- *rounds*: the waiting tokens are ``Σ_k max_r W[r, k] - M``, and in every round the longest request's
  tokens of that round sit on one rank, so ``Σ_k max_r W[r, k] >= L``: at least ``L - M`` wait;
- *parallel*: the waiting tokens are ``max_r before_r + max_r after_r - M``, at least the two means:
  every token runs before the exchange (from zero) or after it (rerun), and the tokens ``N_s`` of pieces
  with a source and a successor run twice before it and once after, so ``(P + 2 N_s) / cp - M``. A token
  at position ``p >= M`` is in no root segment's first piece (that piece starts at position 0 and holds
  at most ``M`` tokens), and a token at ``p < L_v - M`` (``L_v`` the longest request through its node)
  has a successor on that request's path (its piece, at most ``M`` tokens, ends before the request
  does). Every node is stored at least once, so ``N_s`` is at least the node tokens with ``M <= p <
  L_v - M`` (:func:`twice_run_tokens`); a shared inner node's tokens all run twice, or the node is
  copied (:func:`segment_twice_s`);
- *two-round tops* (rounds): the tokens a tree keeps before its first crossing, and the ranks holding no
  root segment (:mod:`cpplan.bound.round_tops`).

Every term is non-increasing in ``M`` but the imbalance, which is non-decreasing, so over an interval
``[M_j, M_{j+1}]`` the floor is at least the imbalance at ``M_j`` plus the rest at ``M_{j+1}``; each mode's
floor is the least of these over a grid from ``P / cp`` to ``P`` (beyond ``P``, copies: one crossing, the
imbalance at ``P``) (:func:`mode_floors_s`), and the wave's the smaller of the two
(:func:`passing_floor_s`). Rounding goes toward a smaller floor (the caller rounds the sum down)."""

from __future__ import annotations

import math

import numpy as np

from cpplan.bound.node_floors import per_copy_amounts
from cpplan.bound.round_tops import two_round_extra_s
from cpplan.pricing.layout import path_counts
from cpplan.pricing.problem import Problem
from cpplan.spec.quantities import QUANTITY_INDEX, REMOTE_COLUMNS, SEGMENT_COLUMNS

_TOKENS = QUANTITY_INDEX["tokens"]
_GRAD = QUANTITY_INDEX["grad_tokens"]
_REMOTE_COLUMNS = list(REMOTE_COLUMNS)
_SEGMENT_COLUMNS = list(SEGMENT_COLUMNS)

GRID_POINTS = 96
"""Geometric grid points between ``P / cp`` and ``L`` (beside every ``L / k``) the floor is taken over."""
BISECTION_STEPS = 20
"""Halvings of the bracket round the least wait of :func:`sliding_wait_tokens` (its lower end is kept)."""
EXACT_WINDOW_NODES = 64
"""Up to this many nodes longer than the busiest rank's tokens, :func:`sliding_wait_tokens` finds the
least window over every breakpoint; above, each node's least (a smaller count, still a floor)."""
CEIL_SLACK = 1e-9
"""Relative margin taken off a ratio before it is rounded up: float error never adds a run."""


def passing_floor_s(problem: Problem, requests: np.ndarray, average_s: np.ndarray | None) -> float:
    """The least a wave of ``requests`` on ``cp > 1`` ranks pays beyond ``average_s`` (per barrier, a
    floor of its rank average; ``None``: unknown, no imbalance counted) when some GDN state crosses
    ranks, in rounds or in parallel: the smaller of the two modes' floors (see the module docstring and
    :func:`mode_floors_s`), at least ``round_s + state_s``."""
    requests = np.asarray(requests, dtype=np.int64)
    counts = path_counts(problem.tree, requests)
    packed = float(problem.tree.node_length[counts > 0].sum())
    found = min(_mode_floors_s(problem, requests, counts, packed, average_s))
    return max(found, common_prefix_floor_s(problem, requests, counts, packed, average_s))


def mode_floors_s(
    problem: Problem, requests: np.ndarray, average_s: np.ndarray | None
) -> tuple[float, float]:
    """What a wave of ``requests`` whose GDN states cross pays at least beyond ``average_s`` in rounds
    and in parallel, each the least over the busiest rank's tokens ``M`` (a grid from ``P / cp`` to
    ``P``, the imbalance at each interval's lower end, the rest at its upper end): the runs, waits and
    reruns of the module docstring, the two-round tops of :mod:`cpplan.bound.round_tops` and the
    shared segments' twice-run tokens (:func:`segment_twice_s`)."""
    requests = np.asarray(requests, dtype=np.int64)
    counts = path_counts(problem.tree, requests)
    packed = float(problem.tree.node_length[counts > 0].sum())
    return _mode_floors_s(problem, requests, counts, packed, average_s)


def _mode_floors_s(
    problem: Problem, requests: np.ndarray, counts: np.ndarray, packed: float, average_s: np.ndarray | None
) -> tuple[float, float]:
    """:func:`mode_floors_s` of the wave's ``counts`` and full-sharing ``packed`` tokens."""
    seconds = problem.card.handoff
    base = seconds.round_s + seconds.state_s
    longest = float(problem.request_tokens[requests].max())
    cp = problem.topology.cp
    grid = _grid(packed / cp, max(longest, packed / cp), packed)
    lo, hi = grid[:-1], grid[1:]
    imbalance = imbalance_s(problem, counts, packed, average_s, lo)
    runs = np.maximum(2.0, np.ceil(longest / hi * (1 - CEIL_SLACK)))
    rounds = (runs - 1) * base + seconds.wait_s_per_token * np.maximum(0.0, longest - hi)
    copies = unshared_copies_s(problem, requests, counts)
    tops = two_round_extra_s(problem, counts, copies, packed, hi)
    rounds = np.maximum(rounds, np.minimum(base + np.maximum(0.0, tops - imbalance), 2 * base))
    tail_wait = seconds.wait_s_per_token * np.maximum(0.0, longest - hi)
    branch = branch_waits_s(problem, requests, counts, copies, hi, tail_wait)
    rounds = np.maximum(rounds, np.minimum(base + branch, 2 * base + tail_wait))
    twice = twice_run_tokens(problem, requests, counts, hi)
    waits = seconds.wait_s_per_token * ((packed + 2 * twice) / cp - hi)
    passing = seconds.round_s + 2 * (runs - 1) * seconds.state_s
    parallel = passing + np.maximum(0.0, waits)
    if average_s is not None:
        shared = shared_prefix_s(problem, requests, counts, lo, hi)
        parallel = np.maximum(parallel, passing + np.maximum(0.0, waits + shared) - imbalance)
    segments = segment_twice_s(problem, requests, counts, copies, hi)
    parallel = np.maximum(parallel, passing + np.maximum(0.0, waits - imbalance + segments))
    sliding = sliding_wait_tokens(problem, requests, counts, packed, hi)
    parallel = np.maximum(parallel, passing + seconds.wait_s_per_token * sliding)
    # a busiest rank beyond P (copies): one crossing, the imbalance at P
    beyond = float(imbalance_s(problem, counts, packed, average_s, np.array([packed]))[0])
    rounds_s = min(float((imbalance + rounds).min()), beyond + base)
    parallel_s = min(float((imbalance + parallel).min()), beyond + seconds.round_s + 2 * seconds.state_s)
    return rounds_s, parallel_s


def branch_waits_s(
    problem: Problem,
    requests: np.ndarray,
    counts: np.ndarray,
    copies: np.ndarray,
    busiest: np.ndarray,
    tail_wait: np.ndarray,
) -> np.ndarray:
    """Per value of ``busiest`` (``M``), what a two-round wave of ``requests`` waits at least where some
    node ``v`` ends further than ``M`` tokens into its requests (``ℓ_v``) and has ``D_v > 0`` tokens of
    the wave below it. Its path then crosses once: the part before the crossing is in round 0 on one
    rank, the rest of the path and, shared, everything below ``v`` in round 1 on another (a second
    crossing would start a third round), so ``Σ_k max_r W[r, k] - M >= ℓ_v + D_v - M`` tokens wait.
    Unshared, ``v`` is stored once more per in-wave child and end (``copies``, seconds on the average
    rank) beside the wait of the longest request (``tail_wait``). The largest over the nodes, at least
    ``tail_wait``."""
    tree = problem.tree
    present = counts > 0
    present[0] = False
    below = np.zeros(tree.num_nodes)
    length = np.where(present, tree.node_length, 0).astype(np.float64)
    for depth in range(int(tree.node_depth.max()), 0, -1):  # children before parents
        nodes = np.flatnonzero(tree.node_depth == depth)
        np.add.at(below, tree.node_parent[nodes], below[nodes] + length[nodes])
    nodes = np.flatnonzero(present & (below > 0))
    found = np.asarray(tail_wait, dtype=np.float64).copy()
    if nodes.size == 0:
        return found
    reach = (tree.node_start[nodes] + tree.node_length[nodes]).astype(np.float64)[:, None]
    m = np.asarray(busiest, dtype=np.float64)[None, :]
    shared = problem.card.handoff.wait_s_per_token * (reach + below[nodes][:, None] - m)
    each = np.minimum(shared, copies[nodes][:, None] + found[None, :])
    each = np.where(reach > m, each, 0.0)  # a path within one rank's tokens need not cross
    return np.maximum(found, each.max(axis=0))


def common_prefix_floor_s(
    problem: Problem, requests: np.ndarray, counts: np.ndarray, packed: float, average_s: np.ndarray | None
) -> float:
    """A floor of what a crossing wave pays beyond ``average_s`` where every request passes a node with
    two in-wave children or request ends or more. Left unshared, such a node is stored once per child
    and end (:func:`unshared_copies_s`), beside at least one round and one state. With every such node
    shared, every path runs through one chain of copies, so the wave has one root segment, and with
    ``T_r`` the ranks' owned tokens and ``M`` the busiest's:

    - *rounds*: in a wave of two rounds every path starts on the rank ``R`` of that segment's first
      piece and crosses at most once, so ``R``'s tokens are all in round 0 and every other rank's in
      round 1, and ``min(T_R, max_{r≠R} T_r)`` tokens wait: at least ``(P - M) / (cp - 1)`` where ``R``
      is the busiest, else at least ``P - (cp - 1) M``; a wave of three rounds or more pays two extra
      rounds and two states. On two ranks a crossing always changes rank, so a piece's round is even on
      ``R`` and odd on the other: every round holds one rank's tokens, ``Σ_k max_r W[r, k]`` is every
      token, and ``P - M`` wait however many rounds there are;
    - *parallel*: only the root segment's first piece runs from a zero state, so every token runs once
      before the exchange or after it, and a node with in-wave children and two of them or request
      ends or more that not every request passes either ends its segment (shared: each of its pieces
      has a successor and runs twice before) or is stored once more per child (unshared): the ranks' runs
      add up to at least ``P + I`` (``I``: those nodes' tokens, each at most twice), and at least
      ``(P + I) / cp - M`` tokens wait.

    Each beside the imbalance at ``M``, least over ``M`` from ``P / cp`` to ``P`` (the grid of
    :func:`passing_floor_s`); 0 without such a node."""
    tree, cp = problem.tree, problem.topology.cp
    nodes = np.flatnonzero((counts == requests.size) & (np.arange(tree.num_nodes) > 0))
    children, ends = in_wave_branches(problem, requests, counts)
    branching = nodes[children[nodes] + ends[nodes] >= 2]
    if branching.size == 0:
        return 0.0
    seconds = problem.card.handoff
    base = seconds.round_s + seconds.state_s
    unshared = base + float(unshared_copies_s(problem, requests, counts)[branching].min())
    present = np.flatnonzero(counts > 0)
    stored = children + ends
    inner = present[(present > 0) & (counts[present] < requests.size) & (stored[present] >= 2)]
    inner = inner[children[inner] > 0]  # shared, its last piece has its children as successors
    twice = float((tree.node_length[inner] * np.minimum(2, stored[inner] - 1)).sum())
    grid = _grid(packed / cp, packed)
    lo, hi = grid[:-1], grid[1:]
    imbalance = imbalance_s(problem, counts, packed, average_s, lo)
    waits = np.minimum((packed - hi) / (cp - 1), packed - (cp - 1) * hi)
    two_rounds = base + seconds.wait_s_per_token * np.maximum(0.0, waits)
    rounds = two_rounds if cp == 2 else np.minimum(two_rounds, 2 * base)  # two ranks: see the docstring
    parallel = seconds.round_s + 2 * seconds.state_s
    parallel = parallel + seconds.wait_s_per_token * np.maximum(0.0, (packed + twice) / cp - hi)
    shared = float((imbalance + np.minimum(rounds, parallel)).min())
    return min(unshared, shared)


def _grid(low: float, high: float, beyond: float | None = None) -> np.ndarray:
    """Points from ``low`` to ``high``: a geometric grid and every ``high / k`` between; with ``beyond``,
    a geometric grid on from ``high`` to it too."""
    ks = np.arange(1, math.floor(high / low) + 1, dtype=np.float64)
    points = np.concatenate([np.geomspace(low, high, GRID_POINTS), high / ks, [low, high]])
    points = points[(points >= low) & (points <= high)]
    if beyond is not None and beyond > high:
        points = np.concatenate([points, np.geomspace(high, beyond, GRID_POINTS // 2)])
    return np.unique(points)


def imbalance_s(
    problem: Problem, counts: np.ndarray, packed: float, average_s: np.ndarray | None, busiest: np.ndarray
) -> np.ndarray:
    """Per value of ``busiest`` (the busiest rank's owned tokens ``M``), what the slowest ranks pay at
    least beyond ``average_s`` summed over the barriers: ``Σ_b max(0, (w_b - ρ_b) M + ρ_b P - A_b)``
    (``w_b``: the barrier's least seconds per owned token over the wave's nodes, ``ρ_b``: per remote
    token, ``P``: ``packed``); zeros where ``average_s`` is ``None``."""
    busiest = np.asarray(busiest, dtype=np.float64)
    if average_s is None:
        return np.zeros_like(busiest)
    barriers = np.asarray(problem.card.constants.barrier_coefficients, dtype=np.float64)
    amounts = per_copy_amounts(problem)
    present = np.flatnonzero(counts > 0)
    present = present[present > 0]
    all_grad = amounts[present, _GRAD] >= amounts[present, _TOKENS]
    per_token = barriers[:, [_TOKENS]] + barriers[:, [_GRAD]] * all_grad[None, :]  # (barriers, nodes)
    least = per_token.min(axis=1)
    remote = barriers[:, _REMOTE_COLUMNS].sum(axis=1)
    slope = least - remote
    found = np.zeros_like(busiest)
    for b in np.flatnonzero(slope > 0).tolist():
        found += np.maximum(0.0, slope[b] * busiest + remote[b] * packed - float(average_s[b]))
    return found


def twice_run_tokens(
    problem: Problem, requests: np.ndarray, counts: np.ndarray, busiest: np.ndarray
) -> np.ndarray:
    """Per value of ``busiest`` (``M``), the wave's node tokens at positions ``p`` with ``M <= p < L_v -
    M`` (``L_v``: the longest of ``requests`` through the node): under parallel passing each runs in a
    piece that neither starts from a zero state nor ends its request, so twice before the exchange."""
    tree = problem.tree
    longest = _longest_through(problem, requests)
    present = np.flatnonzero(counts > 0)
    present = present[present > 0]
    start = tree.node_start[present].astype(np.float64)
    end = start + tree.node_length[present]
    m = np.asarray(busiest, dtype=np.float64)[:, None]
    span = np.minimum(end[None, :], longest[present][None, :] - m) - np.maximum(start[None, :], m)
    return np.maximum(span, 0.0).sum(axis=1)


def sliding_wait_tokens(
    problem: Problem, requests: np.ndarray, counts: np.ndarray, packed: float, busiest: np.ndarray
) -> np.ndarray:
    """Per value of ``busiest`` (``M``), a floor of the tokens that wait under parallel passing, from the
    pieces' own caps rather than ``M``'s. With ``B = max_r before_r`` and ``A = max_r after_r`` the wait
    is ``w = B + A - M``. A request's first piece runs from zero, so it holds at most ``min(B, M)``
    tokens; its last, rerun, at most ``min(A, M)`` (a request in one piece has no tokens between). So a
    node token at position ``p`` with ``B' <= p < L_v - A'`` (``B' = min(B, M)``, ``A' = min(A, M)``,
    ``B' + A' <= M + w``) runs in a piece with a successor that does not start from zero: twice before
    the exchange. With ``N(B', A')`` those tokens (one copy of each node, the one on the longest request
    through it), the means give ``w >= (P + 2 N) / cp - M``, and ``N`` is least, for a window of
    ``L_v - M - w`` tokens sliding with ``B'`` from ``w`` to ``M``, at a breakpoint
    (:func:`_least_window_tokens`). The least ``w`` meeting that (the right side falls as ``w`` grows) is
    bracketed by bisection and its lower end kept. Ten requests on eight ranks, four of them of 24,000
    tokens among 167,019: at ``M = P / cp`` each of the four holds ``L - M - w`` middle tokens, and
    about 1,560 wait where the window ``[M, L_v - M)`` of :func:`twice_run_tokens` holds none."""
    tree, cp = problem.tree, problem.topology.cp
    longest = _longest_through(problem, requests)
    present = np.flatnonzero(counts > 0)
    present = present[present > 0]
    start = tree.node_start[present].astype(np.float64)
    end = start + tree.node_length[present]
    reach = longest[present]
    found = np.zeros(np.asarray(busiest).shape)
    for k, m in enumerate(np.asarray(busiest, dtype=np.float64).tolist()):
        keep = reach > m
        if not keep.any():
            continue
        nodes = (start[keep], end[keep], reach[keep])

        def excess(w: float, m: float = m, nodes: tuple = nodes) -> float:
            return (packed + 2 * _least_window_tokens(*nodes, m, w)) / cp - m

        low, high = 0.0, excess(0.0)
        if high <= 0:
            continue
        for _ in range(BISECTION_STEPS):
            middle = (low + high) / 2
            low, high = (low, middle) if middle >= excess(middle) else (middle, high)
        found[k] = low
    return found


def _least_window_tokens(
    start: np.ndarray, end: np.ndarray, reach: np.ndarray, busiest: float, wait: float
) -> float:
    """The least over ``B`` from ``wait`` to ``busiest`` of the node tokens in ``[B, L_v - M - w + B)``
    (nodes ``[start, end)``, ``L_v`` = ``reach``): each node's count is piecewise linear in ``B``, so the
    least is at a breakpoint of some node or an end; above :data:`EXACT_WINDOW_NODES` nodes, each
    node's own least, summed (no more)."""
    width = reach - busiest - wait
    low, high = wait, busiest
    if start.size > EXACT_WINDOW_NODES:
        shift = np.stack(
            [start, end, start - width, end - width, np.full_like(start, low), np.full_like(start, high)]
        )
        shift = np.clip(shift, low, high)
        span = np.minimum(end, width + shift) - np.maximum(start, shift)
        return float(np.maximum(span, 0.0).min(axis=0).sum())
    points = np.concatenate([start, end, start - width, end - width, [low, high]])
    points = np.clip(points, low, high)[:, None]
    span = np.minimum(end, width + points) - np.maximum(start, points)
    return float(np.maximum(span, 0.0).sum(axis=1).min())


def shared_prefix_s(
    problem: Problem, requests: np.ndarray, counts: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> np.ndarray:
    """Per interval ``[lo, hi]`` of the busiest rank's tokens ``M``, what the tokens below position ``M``
    add at least under parallel passing, beside :func:`twice_run_tokens`: a node below a node ``u``
    through which two or more of ``requests`` pass lies in no root segment where ``u`` is shared, so its
    tokens at ``p < L_v - M`` run twice there too; left unshared, ``u`` is stored once per in-wave child
    and request end, each extra copy on the average rank (less one piece, which the bound's branch term
    may have counted). Per deepest such ``u``, the cheaper: ``Σ_u min(copies_u, 2 wait_s low_u / cp)``,
    the tokens at ``p < min(lo, L_v - hi)``."""
    tree, cp = problem.tree, problem.topology.cp
    parent = tree.node_parent
    present = np.flatnonzero(counts > 0)
    present = present[present > 0]
    above = np.zeros(tree.num_nodes, dtype=np.int64)  # the deepest proper ancestor two requests pass
    for v in present[np.argsort(tree.node_depth[present], kind="stable")].tolist():
        u = int(parent[v])
        above[v] = u if u > 0 and counts[u] >= 2 else above[u]
    under = present[above[present] > 0]
    if under.size == 0:
        return np.zeros_like(lo)
    longest = _longest_through(problem, requests)
    start = tree.node_start[under].astype(np.float64)
    end = start + tree.node_length[under]
    stop = np.minimum(lo[:, None], longest[under][None, :] - hi[:, None])
    low = np.maximum(0.0, np.minimum(end[None, :], stop) - start[None, :])  # (intervals, nodes)
    grouped = np.zeros((tree.num_nodes, lo.size))
    np.add.at(grouped, above[under], low.T)
    groups = np.unique(above[under])
    copies = unshared_copies_s(problem, requests, counts)[groups]
    twice_s = 2 * problem.card.handoff.wait_s_per_token * grouped[groups] / cp
    return np.minimum(copies[:, None], twice_s).sum(axis=0)


def segment_twice_s(
    problem: Problem, requests: np.ndarray, counts: np.ndarray, copies_s: np.ndarray, busiest: np.ndarray
) -> np.ndarray:
    """Per value of ``busiest`` (``M``), what a node's own segment adds at least under parallel passing,
    beside :func:`twice_run_tokens`: a node two or more requests pass that has in-wave children, left
    shared, is a segment of its own whose every piece has a successor (its next piece, or its children),
    and none of its pieces starts from a zero state unless it is a root (then only its first, the tokens
    below ``M``), so all those tokens run twice before the exchange, not only those at ``M <= p < L_v -
    M``; left unshared, it adds its copies (``copies_s``). Per node the cheaper, summed:
    ``Σ_v min(2 wait_s extra_v / cp, copies_v)``."""
    tree, cp = problem.tree, problem.topology.cp
    children, _ = in_wave_branches(problem, requests, counts)
    nodes = np.flatnonzero((counts >= 2) & (children > 0) & (np.arange(tree.num_nodes) > 0))
    if nodes.size == 0:
        return np.zeros_like(np.asarray(busiest, dtype=np.float64))
    m = np.asarray(busiest, dtype=np.float64)[:, None]
    start = tree.node_start[nodes].astype(np.float64)[None, :]
    end = start + tree.node_length[nodes][None, :]
    first = np.where(tree.node_parent[nodes] == 0, np.maximum(start, m), start)
    longest = _longest_through(problem, requests)[nodes][None, :]
    whole = np.maximum(0.0, end - first)
    middle = np.maximum(0.0, np.minimum(end, longest - m) - np.maximum(start, m))
    extra = np.maximum(0.0, whole - middle)
    twice_s = 2 * problem.card.handoff.wait_s_per_token * extra / cp
    return np.minimum(twice_s, copies_s[nodes][None, :]).sum(axis=1)


def _longest_through(problem: Problem, requests: np.ndarray) -> np.ndarray:
    """Per node, the longest of ``requests`` through it (0 where none passes)."""
    tree = problem.tree
    steps = np.diff(tree.path_ptr)
    in_wave = np.zeros(tree.num_requests, dtype=bool)
    in_wave[np.asarray(requests, dtype=np.int64)] = True
    along = np.repeat(in_wave, steps)
    longest = np.zeros(tree.num_nodes)
    lengths = np.repeat(problem.request_tokens.astype(np.float64), steps)
    np.maximum.at(longest, tree.path_nodes[along], lengths[along])
    return longest


def unshared_copies_s(problem: Problem, requests: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Per node, what leaving it unshared in a wave of ``requests`` adds at least to the average rank:
    one copy per in-wave child and request end beyond the first (per-copy amounts over the barriers,
    remote tokens on the other ranks), less one piece's seconds; never below zero."""
    cp = problem.topology.cp
    barriers = np.asarray(problem.card.constants.barrier_coefficients, dtype=np.float64).sum(axis=0)
    amounts = per_copy_amounts(problem).copy()
    amounts[:, _REMOTE_COLUMNS] = (cp - 1) * amounts[:, [_TOKENS]]
    children, ends = in_wave_branches(problem, requests, counts)
    extra = np.maximum(children + ends - 1, 0)
    piece = float(barriers[_SEGMENT_COLUMNS].sum())
    return np.maximum(0.0, extra * (amounts @ barriers) / cp - piece)


def in_wave_branches(
    problem: Problem, requests: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per node, its children that some of ``requests`` pass (``counts``: per node, how many do) and
    the requests of them that end at it."""
    tree = problem.tree
    present = np.flatnonzero(counts > 0)
    children = np.bincount(tree.node_parent[present[present > 0]], minlength=tree.num_nodes)
    ends = np.bincount(tree.request_leaf[np.asarray(requests, dtype=np.int64)], minlength=tree.num_nodes)
    return children, ends
