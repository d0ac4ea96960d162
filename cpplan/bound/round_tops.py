"""A floor on the rounds mode's waiting where a wave's root subtrees are few or must hand over part of
themselves, whatever its layout, ownership and order of packed requests.

In a wave run in two rounds every path crosses ranks at most once. A root subtree of the wave's prefix
tree (a *tree*: a child of the root and what hangs below it) then runs its *top*, the tokens before any
crossing, in round 0 on the rank of its root segment's first piece; every crossing piece starts a
*hanging* part, the rest of its segment and every segment below it, all on the crossing's rank (any
other rank would be a second crossing) in round 1. With ``B`` the most round-1 tokens on a rank, each
hanging part holds at most ``B`` tokens, so where the nodes a tree's top keeps whole are shared, the top
holds at least :func:`least_tops`' ``m_t(B)``: a node whose subtree holds more than ``B`` tokens is cut
inside, at ``S_v - B`` tokens from its start where that is inside it, or kept whole with its children's
tops. With ``A`` the most round-0 tokens on a rank and ``M`` the busiest rank's owned tokens, the
waiting tokens ``Σ_k max_r W[r, k] - M`` are at least ``A + B - M`` (with more rounds too, beside a
further round and state), and:

- ``A >= m_t(B)`` for every tree whose kept nodes are all shared; a tree leaving one of them unshared
  stores it once per in-wave child and request end
  (:func:`~cpplan.bound.passing_floors.unshared_copies_s`), ``u_t(B)`` at least;
- only a rank holding a root segment's first piece has round-0 tokens. With the trees' roots shared
  there are as many root segments as trees, ``n``; where ``n < cp`` the other ranks hold round-1 tokens
  only, at most ``B`` each, so ``P <= n M + (cp - n) B``, ``B >= (P - n M) / (cp - n)`` (``P``: the
  wave's full-sharing tokens); unsharing a root lifts that at the cheapest root's copies.

:func:`two_round_extra_s` takes, per value of ``M``, the least of ``wait_s (θ + B - M)`` plus the copies
of the trees whose top would exceed ``θ``, over ``B`` (from its floor up to ``M``) and ``θ``. Rounding
goes toward a smaller floor: every term is taken at the end of its interval that makes it smaller.
"""

from __future__ import annotations

import math

import numpy as np

from cpplan.pricing.problem import Problem

CAP_POINTS = 48
"""Geometric grid points of ``B`` (beside 0 and the busiest rank's largest share) the tops are taken at."""


def least_tops(
    problem: Problem, counts: np.ndarray, copies_s: np.ndarray, caps: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per tree (a child of the root that some request passes, ``counts``: the wave's requests through
    each node) and cap ``B`` in ``caps``: ``m_t(B)``, the fewest tokens its top holds when every hanging
    part holds at most ``B`` and the nodes it keeps whole are shared, and ``u_t(B)``, the least
    ``copies_s`` (per node, what leaving it unshared adds) of a node whose subtree holds more than ``B``
    tokens (infinity where none can be unshared). Shapes ``(trees, caps)``."""
    tree = problem.tree
    caps = np.asarray(caps, dtype=np.float64)
    parent, length = tree.node_parent, tree.node_length.astype(np.float64)
    present = np.flatnonzero(counts > 0)
    present = present[present > 0]
    deepest_first = present[np.argsort(-tree.node_depth[present], kind="stable")]
    subtree = np.where(counts > 0, length, 0.0)
    for v in deepest_first.tolist():
        subtree[parent[v]] += subtree[v]
    kids_top = {}
    kids_copies = {}
    tops, copies = [], []
    for v in deepest_first.tolist():
        over = subtree[v] > caps
        cut = np.where(subtree[v] - caps < length[v], subtree[v] - caps, math.inf)
        whole = length[v] + kids_top.pop(v, 0.0)
        top = np.where(over, np.minimum(cut, whole), 0.0)
        own = copies_s[v] if counts[v] >= 2 else math.inf
        unshared = np.where(over, np.minimum(own, kids_copies.pop(v, math.inf)), math.inf)
        u = int(parent[v])
        if u == 0:
            tops.append(top)
            copies.append(unshared)
        else:
            kids_top[u] = kids_top.get(u, 0.0) + top
            kids_copies[u] = np.minimum(kids_copies.get(u, math.inf), unshared)
    return np.array(tops).reshape(-1, caps.size), np.array(copies).reshape(-1, caps.size)


def two_round_extra_s(
    problem: Problem, counts: np.ndarray, copies_s: np.ndarray, packed: float, busiest: np.ndarray
) -> np.ndarray:
    """Per value of ``busiest`` (``M``), the least waiting seconds plus copies a crossing wave pays in
    rounds beyond one round and one state, before imbalance: ``min wait_s (θ + B - M) + Σ_{t: m_t(B) >
    θ} u_t(B)`` over ``B`` and ``θ`` (see the module docstring; may be negative). ``copies_s``: per node,
    :func:`~cpplan.bound.passing_floors.unshared_copies_s`."""
    cp = problem.topology.cp
    wait_s = problem.card.handoff.wait_s_per_token
    busiest = np.asarray(busiest, dtype=np.float64)
    top_m = float(busiest.max())
    caps = np.unique(np.concatenate([[0.0], np.geomspace(max(1.0, packed / cp / 64), top_m, CAP_POINTS)]))
    caps = caps[caps <= top_m]
    tops, copies = least_tops(problem, counts, copies_s, caps)
    # per interval [caps[i], caps[i + 1]]: tops at its upper end, copies at its lower end
    paid = _least_tops_or_copies(wait_s, tops[:, 1:], copies[:, :-1])
    low, high = caps[:-1], caps[1:]
    roots = np.flatnonzero((problem.tree.node_parent == 0) & (counts > 0))
    roots = roots[roots > 0]
    found = np.full(busiest.size, math.inf)
    num_roots = min(cp, roots.size)
    options = [(_least_cap(packed, num_roots, cp, busiest), num_roots, 0.0, paid)]
    root_copies = copies_s[roots[counts[roots] >= 2]]
    if roots.size < cp and root_copies.size:
        # a root unshared: its copies, its tree's top free, every rank may hold round-0 tokens
        dropped = _least_tops_or_copies(wait_s, tops[:, 1:], copies[:, :-1], drop_one=True)
        options.append((np.zeros_like(busiest), cp, float(root_copies.min()), dropped))
    for floor, num_top_ranks, fixed_s, interval_s in options:
        start = np.maximum(low[None, :], floor[:, None])  # (busiest, intervals)
        usable = (high[None, :] >= floor[:, None]) & (low[None, :] <= busiest[:, None])
        tops_s = interval_s[None, :] + wait_s * (start - busiest[:, None])
        # the ranks' tokens add up to P: A >= (P - cp B) / (ranks with round-0 tokens), least at B's top
        spread = (packed - cp * high[None, :]) / num_top_ranks + high[None, :] - busiest[:, None]
        cost = fixed_s + np.maximum(tops_s, wait_s * spread)
        found = np.minimum(found, np.where(usable, cost, math.inf).min(axis=1))
    return found


def _least_cap(packed: float, num_roots: int, cp: int, busiest: np.ndarray) -> np.ndarray:
    """Per ``M``, the least ``B`` where only ``num_roots`` ranks hold round-0 tokens: ``(P - n M) / (cp -
    n)`` where ``n < cp``, else 0."""
    if num_roots >= cp:
        return np.zeros_like(busiest)
    return np.maximum(0.0, (packed - num_roots * busiest) / (cp - num_roots))


def _least_tops_or_copies(
    wait_s: float, tops: np.ndarray, copies: np.ndarray, *, drop_one: bool = False
) -> np.ndarray:
    """Per cap interval (columns), ``min_θ wait_s θ + Σ_{t: tops_t > θ} copies_t`` over the trees
    (rows): θ at each tree's top, or 0 (a tie's first index pays only the strictly larger tops).
    ``drop_one``: one tree of those above θ is free (the dearest of their copies is not paid)."""
    num_trees, num_caps = tops.shape
    if num_trees == 0:
        return np.zeros(num_caps)
    order = np.argsort(-tops, axis=0, kind="stable")
    sorted_tops = np.take_along_axis(tops, order, axis=0)
    sorted_copies = np.take_along_axis(copies, order, axis=0)
    infinite = np.isinf(sorted_copies)
    finite = np.where(infinite, 0.0, sorted_copies)
    zero = np.zeros((1, num_caps))
    paid = np.vstack([zero, np.cumsum(finite, axis=0)])
    num_infinite = np.vstack([zero, np.cumsum(infinite, axis=0)])
    if drop_one:
        dearest = np.vstack([zero, np.maximum.accumulate(finite, axis=0)])
        paid = np.where(num_infinite >= 1, paid, paid - dearest)
        paid = np.where(num_infinite >= 2, math.inf, paid)
    else:
        paid = np.where(num_infinite >= 1, math.inf, paid)
    thetas = np.vstack([sorted_tops, zero])
    return (wait_s * thetas + paid).min(axis=0)
