"""Group sizes for a dynamic-CP pool chosen by its makespan: small groups first, then a larger group on
their union.

Under dynamic CP a wave of group size ``g`` runs on an aligned block of ``g`` GPUs, so a block's GPUs can
each run small-group waves and then, together, a wave of the block's size. With every item priced alone
at every size it fits (its wave's seconds), a block's finish time is its own waves' seconds after the
latest of the blocks of the next smaller size inside it (:func:`block_makespan`). Six agent trees on
two CP2 groups under dynamic CP finish in 4.08 s when every tree takes one size; four trees alone on one
GPU each, then the other two on the two pairs, in 3.87 s. :func:`makespan_sizes` searches such
placements: from every uniform size and from every item at its smallest fit, longest first onto the
block that finishes soonest, then items moved and swapped between blocks while the makespan falls
(and, at equal makespan, the GPU-seconds), then a depth-first search over every block of every item
cut where a partial placement reaches the best makespan found. Only each item's size is kept: the plans
are made and priced exactly by :func:`~cpplan.planners.dynamic_cp.sized_plans`. Every step is
deterministic; the search takes 5 ms on six items and about 0.3 s on 64 here.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

MAX_ITEMS = 64
"""The most items :func:`~cpplan.planners.dynamic_cp.item_sizes` places this way (each priced alone at
every size): mixing sizes pays where items are few and coarse against the pool."""
MAX_NODES = 20_000
"""Partial placements :func:`makespan_sizes`' depth-first search visits at most: every placement of six
items on the seven blocks of four GPUs (the quick suite's agent trees) within it; beyond, the best
found so far."""
MAX_TRIALS = 20_000
"""Placements :func:`makespan_sizes`' local search prices at most, per start: on 64 items and seven
blocks one pass of moves and swaps is about 2,500."""


@dataclass(frozen=True, kw_only=True)
class Blocks:
    """The aligned blocks of a pool of ``pool`` GPUs at group ``sizes`` (ascending powers of two): block
    ``b`` has ``size[b]`` GPUs, and ``children[b]`` are the blocks of the next smaller size inside it
    (none at the smallest size); ``top`` are the blocks of the largest size."""

    size: np.ndarray
    children: tuple[tuple[int, ...], ...]
    top: tuple[int, ...]

    @staticmethod
    def of(pool: int, sizes: Sequence[int]) -> Blocks:
        """The blocks of ``pool`` GPUs at ``sizes``, smallest size first, each size's blocks in order."""
        sizes = sorted(sizes)
        assert all(pool % g == 0 for g in sizes), "every group size divides the pool"
        size, children, first = [], [], {}
        for k, g in enumerate(sizes):
            first[g] = len(size)
            for j in range(pool // g):
                size.append(g)
                if k == 0:
                    children.append(())
                else:
                    s = sizes[k - 1]
                    children.append(tuple(first[s] + j * (g // s) + c for c in range(g // s)))
        top = tuple(range(first[sizes[-1]], len(size)))
        return Blocks(size=np.array(size, dtype=np.int64), children=tuple(children), top=top)

    @property
    def num_blocks(self) -> int:
        """How many blocks there are, over every size."""
        return int(self.size.size)


def block_makespan(blocks: Blocks, load_s: np.ndarray) -> float:
    """When the last block finishes: a block runs its own waves (``load_s[b]`` seconds) after the last of
    its children has finished; the makespan is the latest block of the largest size."""
    finish = np.zeros(blocks.num_blocks)
    for b in range(blocks.num_blocks):  # children come before their parents
        below = max((finish[c] for c in blocks.children[b]), default=0.0)
        finish[b] = load_s[b] + below
    return float(max(finish[b] for b in blocks.top))


def makespan_sizes(seconds: np.ndarray, sizes: Sequence[int], pool: int) -> list[int] | None:
    """Each item's group size in :func:`makespan_placement`'s placement; ``None`` where some item fits
    no size."""
    found = makespan_placement(seconds, sizes, pool)
    if found is None:
        return None
    blocks, placed = found
    return [int(blocks.size[b]) for b in placed.tolist()]


def makespan_placement(
    seconds: np.ndarray, sizes: Sequence[int], pool: int
) -> tuple[Blocks, np.ndarray] | None:
    """The pool's blocks and each item's block in the least-makespan placement found (see the module
    docstring); ``seconds[i, k]``: item ``i`` alone in one wave at ``sizes[k]`` (``inf`` where it does
    not fit). ``None`` where some item fits no size."""
    seconds = np.asarray(seconds, dtype=np.float64)
    if not np.isfinite(seconds).any(axis=1).all():
        return None
    blocks = Blocks.of(pool, sizes)
    column = {g: k for k, g in enumerate(sizes)}
    cost = seconds[:, [column[int(g)] for g in blocks.size]]  # per item and block
    starts = [_improved(cost, blocks, start) for start in _starts(cost, blocks)]
    incumbent = min(starts, key=lambda placed: _key(cost, blocks, placed))
    return blocks, _searched(cost, blocks, incumbent)


def _key(cost: np.ndarray, blocks: Blocks, placed: np.ndarray) -> tuple[float, float]:
    """A placement's makespan, then its GPU-seconds (each item's seconds times its block's GPUs)."""
    items = np.arange(placed.size)
    load = np.bincount(placed, weights=cost[items, placed], minlength=blocks.num_blocks)
    return block_makespan(blocks, load), float((cost[items, placed] * blocks.size[placed]).sum())


def _starts(cost: np.ndarray, blocks: Blocks) -> list[np.ndarray]:
    """Placements to improve: every item at each uniform size where all fit, and every item at its
    smallest fit; each longest first onto the block of that size that then finishes soonest."""
    sizes = sorted(set(blocks.size.tolist()))
    columns = {g: np.flatnonzero(blocks.size == g) for g in sizes}
    wanted = [np.full(cost.shape[0], g) for g in sizes if np.isfinite(cost[:, columns[g]]).all()]
    smallest = np.array([blocks.size[np.flatnonzero(np.isfinite(row))[0]] for row in cost])
    if not any(np.array_equal(smallest, w) for w in wanted):
        wanted.append(smallest)
    return [_longest_first(cost, blocks, w) for w in wanted]


def _longest_first(cost: np.ndarray, blocks: Blocks, wanted: np.ndarray) -> np.ndarray:
    """Items longest first (their seconds at the wanted size; the lower index on ties), each onto the
    block of its wanted size after which the makespan is least (the lower block on ties)."""
    placed = np.full(cost.shape[0], -1, dtype=np.int64)
    load = np.zeros(blocks.num_blocks)
    own = cost[np.arange(cost.shape[0]), [np.flatnonzero(blocks.size == g)[0] for g in wanted]]
    for i in np.argsort(-own, kind="stable").tolist():
        options = np.flatnonzero(blocks.size == wanted[i]).tolist()
        spans = []
        for b in options:
            load[b] += cost[i, b]
            spans.append(block_makespan(blocks, load))
            load[b] -= cost[i, b]
        b = options[int(np.argmin(spans))]
        placed[i], load[b] = b, load[b] + cost[i, b]
    return placed


def _improved(cost: np.ndarray, blocks: Blocks, placed: np.ndarray) -> np.ndarray:
    """``placed`` after passes over the items, each item moved to another block and swapped with every
    later item on another block where the makespan (then the GPU-seconds) falls, until a pass changes
    nothing or :data:`MAX_TRIALS` placements are priced."""
    placed = placed.copy()
    key = _key(cost, blocks, placed)
    trials = 0
    improved = True
    while improved and trials < MAX_TRIALS:
        improved = False
        for i in range(placed.size):
            for trial in _neighbours(cost, blocks, placed, i):
                trials += 1
                found = _key(cost, blocks, trial)
                if found < key:
                    placed, key, improved = trial, found, True
    return placed


def _neighbours(cost: np.ndarray, blocks: Blocks, placed: np.ndarray, i: int) -> Iterator[np.ndarray]:
    """The placements one move of item ``i`` (to another block where it fits) or one swap of it with a
    later item on another block (each fitting the other's) from ``placed``, as ``placed`` is when each
    is drawn."""
    for b in range(blocks.num_blocks):
        if b != placed[i] and not math.isinf(cost[i, b]):
            trial = placed.copy()
            trial[i] = b
            yield trial
    for k in range(i + 1, placed.size):
        a, b = placed[i], placed[k]
        if a != b and not math.isinf(cost[i, b]) and not math.isinf(cost[k, a]):
            trial = placed.copy()
            trial[i], trial[k] = b, a
            yield trial


def _searched(cost: np.ndarray, blocks: Blocks, incumbent: np.ndarray) -> np.ndarray:
    """The least-makespan placement (then GPU-seconds) found by a depth-first search over every block
    of every item (longest first), cut where a partial placement's makespan already reaches the best
    found, from ``incumbent``, within :data:`MAX_NODES` partial placements."""
    num_items = cost.shape[0]
    order = np.argsort(-np.where(np.isfinite(cost), cost, -np.inf).max(axis=1), kind="stable").tolist()
    best = {"key": _key(cost, blocks, incumbent), "placed": incumbent.copy()}
    placed = np.full(num_items, -1, dtype=np.int64)
    load = np.zeros(blocks.num_blocks)
    nodes = 0

    def visit(depth: int) -> None:
        nonlocal nodes
        if depth == num_items:
            key = _key(cost, blocks, placed)
            if key < best["key"]:
                best["key"], best["placed"] = key, placed.copy()
            return
        i = order[depth]
        for b in np.flatnonzero(np.isfinite(cost[i])).tolist():
            if nodes >= MAX_NODES:
                return
            nodes += 1
            load[b] += cost[i, b]
            if block_makespan(blocks, load) < best["key"][0]:
                placed[i] = b
                visit(depth + 1)
                placed[i] = -1
            load[b] -= cost[i, b]

    visit(0)
    return best["placed"]
