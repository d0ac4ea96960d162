"""The decision space of the CP-SAT model, precomputed from the prefix tree (plain Python, no solver).

**Cross** nodes are passed through by requests of two or more items: their sharing and copies are
per-wave model variables. **Local decision** nodes are passed through by two or more requests of one
item only, so their sharing is the item's own: each item gets a short list of candidate *local layouts*
(every mask when it has at most :data:`MAX_ENUMERATED_NODES` such nodes, :data:`NAMED_SPECS` otherwise)
with the constants each implies, Pareto-dominated ones dropped. **Single** nodes carry one request: one
copy. Copies and segment starts follow :func:`cpplan.pricing.layout.pack` (:mod:`cpplan.cpsat.sharing`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from cpplan.cpsat.scaling import SCALING, Scaling
from cpplan.pricing.amounts import span_amounts
from cpplan.pricing.loss_positions import set_node_loss
from cpplan.pricing.problem import Problem
from cpplan.spec.quantities import ADDITIVE, COUNTS, QUANTITIES, QUANTITY_INDEX, check_rules

MAX_ENUMERATED_NODES = 6
NAMED_SPECS = ("full", "none", *(f"min_span:{4**k}" for k in range(3, 8)), *(f"depth:{d}" for d in (1, 2, 3)))
"""The local layouts an item with more decision nodes than :data:`MAX_ENUMERATED_NODES` tries: full and
no sharing, shared spans of at least 64 to 16,384 tokens (powers of four), shared depths 1 to 3."""


@dataclass(frozen=True, kw_only=True)
class LocalLayout:
    """One candidate sharing mask over an item's local decision nodes, and the constants it implies.

    ``amounts`` sums every additive quantity (registry order, other entries zero) over the item's local
    node copies; ``root_copies[k]`` is the number of copies of the item's k-th local root (see
    :attr:`ItemSpace.roots`).
    """

    shared: tuple[bool, ...]
    amounts: tuple[int, ...]
    time_units: int
    fixed_starts: int
    root_copies: tuple[int, ...]

    def key(self) -> tuple[int, ...]:
        """Everything the model reads from this candidate (lower is better in every entry)."""
        additive = (self.amounts[QUANTITY_INDEX[q.name]] for q in ADDITIVE)
        return (*additive, self.time_units, self.fixed_starts, *self.root_copies)


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
    """A node shared by requests of several items: its span, counts and per-copy constants
    (``amounts``: every additive quantity of one copy, in registry order; ``time_units``: one copy's
    time summed over ranks)."""

    node: int
    parent: int
    items: tuple[int, ...]
    max_copies: int
    amounts: tuple[int, ...]
    time_units: int


@dataclass(frozen=True, kw_only=True, eq=False)
class LayoutSpace:
    """Cross nodes (parents before children), every item's local space, and which request flags
    (``"grad"``, ``"loss"``) every request of the workload has (``"loss"``: needs logits at every
    token, so never with loss masks)."""

    cross: tuple[CrossNode, ...]
    items: tuple[ItemSpace, ...]
    all_flagged: dict[str, bool]
    segment_time_units: int
    scaling: Scaling

    @property
    def cross_index(self) -> dict[int, int]:
        """Position of each cross node in :attr:`cross`."""
        return {c.node: k for k, c in enumerate(self.cross)}


@dataclass(frozen=True, kw_only=True)
class _TreeFacts:
    """Per tree node: parent, children, requests through it, items through it, requests of each item
    ending there, one copy's additive amounts and its seconds summed over ranks. With loss masks a
    node's loss amounts count the positions any request through it needs: an upper bound for every
    copy of the node in any wave."""

    parent: list[int]
    children: list[list[int]]
    counts: list[int]
    items: list[set[int]]
    ends: dict[tuple[int, int], int]
    amounts: np.ndarray
    seconds: list[float]

    def is_cross(self, v: int) -> bool:
        """Whether requests of two or more items pass through node ``v``."""
        return v > 0 and len(self.items[v]) >= 2


def build_space(problem: Problem, extra_specs: tuple[str, ...] = ()) -> LayoutSpace:
    """Classify the tree's nodes and enumerate each item's candidate local layouts."""
    facts = _tree_facts(problem)
    order = sorted(range(1, problem.tree.num_nodes), key=lambda v: int(problem.tree.node_depth[v]))
    cross = tuple(_cross_node(facts, v) for v in order if facts.is_cross(v))
    local_nodes: list[list[int]] = [[] for _ in range(problem.num_items)]
    for v in order:
        if not facts.is_cross(v):
            (i,) = facts.items[v]
            local_nodes[i].append(v)
    masks = [problem.share_mask(spec) for spec in (*NAMED_SPECS, *extra_specs)]
    items = tuple(_item_space(facts, i, local_nodes[i], masks) for i in range(problem.num_items))
    coef = problem.card.time_coefficients()
    return LayoutSpace(
        cross=cross,
        items=items,
        all_flagged={
            "grad": bool(problem.request_grad.all()),
            "loss": problem.loss_positions is None and bool(problem.request_loss.all()),
        },
        segment_time_units=SCALING.time(float(coef[QUANTITY_INDEX["segments"]])),
        scaling=SCALING,
    )


def _tree_facts(problem: Problem) -> _TreeFacts:
    tree = problem.tree
    num_nodes = tree.num_nodes
    parent = tree.node_parent.tolist()
    node_items: list[set[int]] = [set() for _ in range(num_nodes)]
    flags = {"grad": [False] * num_nodes, "loss": [False] * num_nodes}
    request_flags = {"grad": problem.request_grad.tolist(), "loss": problem.request_loss.tolist()}
    ends: dict[tuple[int, int], int] = {}
    req_item = problem.request_item.tolist()
    for r in range(tree.num_requests):
        i = req_item[r]
        path = tree.path(r)
        for v in path:
            node_items[v].add(i)
            for name, flag in flags.items():
                flag[v] = flag[v] or request_flags[name][r]
        leaf = path[-1] if path else 0
        ends[(leaf, i)] = ends.get((leaf, i), 0) + 1
    children: list[list[int]] = [[] for _ in range(num_nodes)]
    for v in range(1, num_nodes):
        children[parent[v]].append(v)
    amounts = span_amounts(tree.node_length, tree.node_start, {k: np.array(f) for k, f in flags.items()})
    if problem.loss_positions is not None:
        set_node_loss(amounts, tree, problem.loss_positions)
    return _TreeFacts(
        parent=parent,
        children=children,
        counts=tree.request_counts.tolist(),
        items=node_items,
        ends=ends,
        amounts=amounts,
        seconds=copy_seconds(amounts, problem.card.time_coefficients(), problem.topology.cp).tolist(),
    )


_COPY_TIME = {
    "token": lambda amounts, tokens, cp: amounts,
    "pair": lambda amounts, tokens, cp: amounts,
    "remote": lambda amounts, tokens, cp: (cp - 1) * tokens,
    "segment": lambda amounts, tokens, cp: 0 * tokens,
}
check_rules("cpsat.space.copy_seconds", _COPY_TIME, COUNTS)


def copy_seconds(amounts: np.ndarray, time_coef: np.ndarray, cp: int) -> np.ndarray:
    """Seconds of one copy of each span (rows of additive ``amounts``) summed over the CP ranks: its own
    quantities where they are owned, and its tokens as remote tokens on each of the other ``cp - 1``
    ranks. Segments are charged per segment start, not per copy."""
    tokens = amounts[:, QUANTITY_INDEX["tokens"]]
    seconds = np.zeros(amounts.shape[0])
    for q in QUANTITIES:
        i = QUANTITY_INDEX[q.name]
        seconds = seconds + _COPY_TIME[q.count](amounts[:, i], tokens, cp) * time_coef[i]
    return seconds


def _cross_node(facts: _TreeFacts, v: int) -> CrossNode:
    return CrossNode(
        node=v,
        parent=facts.parent[v],
        items=tuple(sorted(facts.items[v])),
        max_copies=facts.counts[v],
        amounts=tuple(int(a) for a in facts.amounts[v]),
        time_units=SCALING.time(facts.seconds[v]),
    )


def _item_space(facts: _TreeFacts, i: int, nodes: list[int], masks: list[np.ndarray]) -> ItemSpace:
    decision = tuple(v for v in nodes if facts.counts[v] >= 2)
    roots = tuple(
        (v, facts.parent[v]) for v in nodes if facts.parent[v] > 0 and facts.is_cross(facts.parent[v])
    )
    if len(decision) <= MAX_ENUMERATED_NODES:
        candidates = list(itertools.product((False, True), repeat=len(decision)))
    else:
        candidates = list(dict.fromkeys(tuple(bool(m[v]) for v in decision) for m in masks))
    layouts = [_local_layout(facts, i, nodes, decision, shared) for shared in candidates]
    kept, cover = pareto(layouts)
    return ItemSpace(
        item=i,
        decision_nodes=decision,
        roots=roots,
        root_max_copies=tuple(facts.counts[u] for u, _ in roots),
        ends=tuple(sorted((v, n) for (v, j), n in facts.ends.items() if j == i and facts.is_cross(v))),
        layouts=tuple(kept),
        cover=dict(zip(candidates, cover, strict=True)),
    )


def local_copies(facts: _TreeFacts, item: int, nodes: list[int], shared: dict[int, bool]) -> dict[int, int]:
    """Copies of each local node of ``item`` under a local mask (``nodes`` ordered parents first)."""
    copies: dict[int, int] = {}
    for v in reversed(nodes):
        if facts.counts[v] < 2 or shared[v]:
            copies[v] = 1
        else:
            copies[v] = sum(copies[c] for c in facts.children[v]) + facts.ends.get((v, item), 0)
    return copies


def _local_layout(facts, item, nodes, decision, shared) -> LocalLayout:
    is_shared = dict(zip(decision, shared, strict=True))
    copies = local_copies(facts, item, nodes, is_shared)
    starts = 0
    seconds = 0.0
    root_copies = []
    for v in nodes:
        n, p = copies[v], facts.parent[v]
        if p == 0 or is_shared.get(p, False):
            starts += n
        elif p not in copies:
            root_copies.append(n)
        seconds += facts.seconds[v] * n
    counts = np.array([copies[v] for v in nodes], dtype=np.int64)
    amounts = counts @ facts.amounts[nodes] if nodes else np.zeros(facts.amounts.shape[1], np.int64)
    return LocalLayout(
        shared=tuple(shared),
        amounts=tuple(int(a) for a in amounts),
        time_units=SCALING.time(seconds),
        fixed_starts=starts,
        root_copies=tuple(root_copies),
    )


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
