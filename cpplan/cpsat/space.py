"""The decision space of the CP-SAT model, precomputed from the prefix tree (plain Python, no solver).

Nodes of the prefix tree fall in three classes:

- **cross** nodes are passed through by requests of two or more items. Their sharing decision and
  their number of copies depend on which items share a wave, so they are per-wave model variables.
- **local decision** nodes are passed through by two or more requests of one item only. An item runs
  in exactly one wave, so their sharing decisions are the item's own: each item gets a short list of
  candidate *local layouts* (every mask over its local decision nodes when there are few, named
  specs otherwise), with the constants each implies, and Pareto-dominated candidates are dropped.
- **single** nodes carry one request: always exactly one copy.

Copies under a share mask (the semantics of :func:`cpplan.pricing.layout.pack`): a shared node present in the
wave has one copy; an unshared node has one copy per child copy plus one per request ending at it.
Segment starts (a conservative count of the packed segments): a node copy starts a segment when its
parent is the root or is shared; a copy under an unshared parent continues its parent's segment.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from cpplan.cpsat.scaling import SCALING, Scaling
from cpplan.pricing.ownership import CHUNK_TOKENS
from cpplan.pricing.problem import Problem
from cpplan.spec.quantities import QUANTITY_INDEX

MAX_ENUMERATED_NODES = 6
NAMED_SPECS = (
    "full",
    "none",
    "min_span:64",
    "min_span:256",
    "min_span:1024",
    "min_span:4096",
    "min_span:16384",
    "depth:1",
    "depth:2",
    "depth:3",
)


@dataclass(frozen=True, kw_only=True)
class LocalLayout:
    """One candidate sharing mask over an item's local decision nodes, and the constants it implies.

    ``root_copies[k]`` is the number of copies of the item's k-th local root (see
    :attr:`ItemSpace.roots`); every other field sums over the item's local nodes.
    """

    shared: tuple[bool, ...]
    tokens: int
    grad_tokens: int
    loss_tokens: int
    attn_pairs: int
    grad_attn_pairs: int
    time_units: int
    fixed_starts: int
    root_copies: tuple[int, ...]

    def key(self) -> tuple[int, ...]:
        """Everything the model reads from this candidate (lower is better in every entry)."""
        return (
            self.tokens,
            self.grad_tokens,
            self.loss_tokens,
            self.attn_pairs,
            self.grad_attn_pairs,
            self.time_units,
            self.fixed_starts,
            *self.root_copies,
        )


@dataclass(frozen=True, kw_only=True)
class ItemSpace:
    """An item's local structure: decision nodes, local roots under cross parents, candidate layouts.

    ``roots`` lists ``(node, parent)`` for each local node whose parent is a cross node (local nodes
    under the root start their segments unconditionally and are counted in ``fixed_starts``);
    ``ends`` lists ``(cross node, requests of this item ending there)``.
    """

    item: int
    decision_nodes: tuple[int, ...]
    roots: tuple[tuple[int, int], ...]
    root_max_copies: tuple[int, ...]
    ends: tuple[tuple[int, int], ...]
    layouts: tuple[LocalLayout, ...]
    cover: dict[tuple[bool, ...], int]

    def layout_of(self, mask: np.ndarray) -> int:
        """Index of a candidate at least as good as the tree-wide share ``mask`` restricted to this item."""
        return self.cover[tuple(bool(mask[v]) for v in self.decision_nodes)]


@dataclass(frozen=True, kw_only=True)
class CrossNode:
    """A node shared by requests of several items: its span, counts and per-copy constants."""

    node: int
    parent: int
    items: tuple[int, ...]
    max_copies: int
    length: int
    grad: bool
    loss: bool
    attn_pairs: int
    time_units: int


@dataclass(frozen=True, kw_only=True, eq=False)
class LayoutSpace:
    """Cross nodes (parents before children) and every item's local space."""

    cross: tuple[CrossNode, ...]
    items: tuple[ItemSpace, ...]
    all_grad: bool
    all_loss: bool
    segment_time_units: int
    max_starts_per_chunk: int
    scaling: Scaling

    @property
    def cross_index(self) -> dict[int, int]:
        """Position of each cross node in :attr:`cross`."""
        return {c.node: k for k, c in enumerate(self.cross)}


def build_space(
    problem: Problem, extra_specs: tuple[str, ...] = (), scaling: Scaling = SCALING
) -> LayoutSpace:
    """Classify the tree's nodes and enumerate each item's candidate local layouts."""
    tree = problem.tree
    num_nodes = tree.num_nodes
    parent = tree.node_parent.tolist()
    length = tree.node_length.tolist()
    counts = tree.request_counts.tolist()
    node_items: list[set[int]] = [set() for _ in range(num_nodes)]
    grad = [False] * num_nodes
    loss = [False] * num_nodes
    ends: dict[tuple[int, int], int] = {}
    req_item = problem.request_item.tolist()
    req_grad = problem.request_grad.tolist()
    req_loss = problem.request_loss.tolist()
    for r in range(tree.num_requests):
        i = req_item[r]
        path = tree.path(r)
        for v in path:
            node_items[v].add(i)
            grad[v] = grad[v] or req_grad[r]
            loss[v] = loss[v] or req_loss[r]
        leaf = path[-1] if path else 0
        ends[(leaf, i)] = ends.get((leaf, i), 0) + 1
    children: list[list[int]] = [[] for _ in range(num_nodes)]
    for v in range(1, num_nodes):
        children[parent[v]].append(v)
    coef = problem.card.time_coefficients()
    cp = problem.topology.cp
    q = QUANTITY_INDEX

    lengths = tree.node_length.astype(np.float64)
    node_pairs = tree.node_length * tree.node_start + tree.node_length * (tree.node_length + 1) // 2
    grad_arr, loss_arr = np.array(grad, dtype=np.float64), np.array(loss, dtype=np.float64)
    node_seconds = (
        lengths * (coef[q["tokens"]] + (cp - 1) * coef[q["remote_tokens"]])
        + lengths * grad_arr * coef[q["grad_tokens"]]
        + lengths * loss_arr * coef[q["loss_tokens"]]
        + node_pairs * (coef[q["attn_pairs"]] + grad_arr * coef[q["grad_attn_pairs"]])
    ).tolist()
    pairs = node_pairs.tolist()

    is_cross = [v > 0 and len(node_items[v]) >= 2 for v in range(num_nodes)]
    order = sorted(range(1, num_nodes), key=lambda v: int(tree.node_depth[v]))
    cross = tuple(
        CrossNode(
            node=v,
            parent=parent[v],
            items=tuple(sorted(node_items[v])),
            max_copies=counts[v],
            length=length[v],
            grad=grad[v],
            loss=loss[v],
            attn_pairs=pairs[v],
            time_units=scaling.time(node_seconds[v]),
        )
        for v in order
        if is_cross[v]
    )
    local_nodes: list[list[int]] = [[] for _ in range(problem.num_items)]
    for v in order:
        if not is_cross[v]:
            (i,) = node_items[v]
            local_nodes[i].append(v)
    tree_facts = _TreeFacts(
        parent=parent,
        children=children,
        counts=counts,
        length=length,
        grad=grad,
        loss=loss,
        ends=ends,
        pairs=pairs,
        seconds=node_seconds,
    )
    masks = [problem.share_mask(spec) for spec in (*NAMED_SPECS, *extra_specs)]
    items = []
    for i in range(problem.num_items):
        nodes = local_nodes[i]
        decision = tuple(v for v in nodes if counts[v] >= 2)
        roots = tuple((v, parent[v]) for v in nodes if parent[v] > 0 and is_cross[parent[v]])
        if len(decision) <= MAX_ENUMERATED_NODES:
            candidates = list(itertools.product((False, True), repeat=len(decision)))
        else:
            candidates = list(dict.fromkeys(tuple(bool(m[v]) for v in decision) for m in masks))
        layouts = [_local_layout(tree_facts, i, nodes, decision, shared, scaling) for shared in candidates]
        kept, cover = pareto(layouts)
        items.append(
            ItemSpace(
                item=i,
                decision_nodes=decision,
                roots=roots,
                root_max_copies=tuple(counts[u] for u, _ in roots),
                ends=tuple(sorted((v, n) for (v, j), n in ends.items() if j == i and is_cross[v])),
                layouts=tuple(kept),
                cover=dict(zip(candidates, cover, strict=True)),
            )
        )
    return LayoutSpace(
        cross=cross,
        items=tuple(items),
        all_grad=bool(problem.request_grad.all()),
        all_loss=bool(problem.request_loss.all()),
        segment_time_units=scaling.time(float(coef[q["segments"]])),
        max_starts_per_chunk=max_starts_per_chunk(tree.node_length[1:], CHUNK_TOKENS),
        scaling=scaling,
    )


@dataclass(frozen=True, kw_only=True)
class _TreeFacts:
    parent: list[int]
    children: list[list[int]]
    counts: list[int]
    length: list[int]
    grad: list[bool]
    loss: list[bool]
    ends: dict[tuple[int, int], int]
    pairs: list[int]
    seconds: list[float]


def local_copies(facts: _TreeFacts, item: int, nodes: list[int], shared: dict[int, bool]) -> dict[int, int]:
    """Copies of each local node of ``item`` under a local mask (``nodes`` ordered parents first)."""
    copies: dict[int, int] = {}
    for v in reversed(nodes):
        if facts.counts[v] < 2 or shared[v]:
            copies[v] = 1
        else:
            copies[v] = sum(copies[c] for c in facts.children[v]) + facts.ends.get((v, item), 0)
    return copies


def _local_layout(facts, item, nodes, decision, shared, scaling) -> LocalLayout:
    is_shared = dict(zip(decision, shared, strict=True))
    copies = local_copies(facts, item, nodes, is_shared)
    starts = tokens = grad_tokens = loss_tokens = pairs = grad_pairs = 0
    seconds = 0.0
    root_copies = []
    for v in nodes:
        n, p = copies[v], facts.parent[v]
        if p == 0 or is_shared.get(p, False):
            starts += n
        elif p not in copies:
            root_copies.append(n)
        tokens += facts.length[v] * n
        pairs += facts.pairs[v] * n
        seconds += facts.seconds[v] * n
        if facts.grad[v]:
            grad_tokens += facts.length[v] * n
            grad_pairs += facts.pairs[v] * n
        if facts.loss[v]:
            loss_tokens += facts.length[v] * n
    return LocalLayout(
        shared=tuple(shared),
        tokens=tokens,
        grad_tokens=grad_tokens,
        loss_tokens=loss_tokens,
        attn_pairs=pairs,
        grad_attn_pairs=grad_pairs,
        time_units=scaling.time(seconds),
        fixed_starts=starts,
        root_copies=tuple(root_copies),
    )


def max_starts_per_chunk(node_lengths: np.ndarray, chunk_tokens: int) -> int:
    """Segment starts one chunk can hold: a segment spans at least one node copy, so starts are at
    least the shortest node apart."""
    shortest = int(node_lengths.min()) if node_lengths.size else chunk_tokens
    return min(chunk_tokens, (chunk_tokens - 1) // max(shortest, 1) + 1)


def pareto(layouts: list[LocalLayout]) -> tuple[list[LocalLayout], list[int]]:
    """The candidates no other candidate matches or beats in every entry of :meth:`LocalLayout.key`
    (the first of equal ones is kept), and for every input the index of a kept one at least as good."""
    keys = [layout.key() for layout in layouts]
    order = sorted(range(len(layouts)), key=lambda k: (keys[k], k))
    kept: list[int] = []
    cover = [0] * len(layouts)
    for k in order:
        for position, j in enumerate(kept):
            if all(a <= b for a, b in zip(keys[j], keys[k], strict=True)):
                cover[k] = position
                break
        else:
            cover[k] = len(kept)
            kept.append(k)
    return [layouts[k] for k in kept], cover
