"""Layouts (which sharing decisions are taken) and the packed segments they produce.

A layout marks prefix-tree nodes as shared. A request's copy of node ``v`` is the copy of the nearest
shared node at or below ``v`` on its path (or its own copy when there is none), so an unshared node is
stored once per group of requests below it. Consecutive copies with the same request set form one
segment (radix compression within the wave). Segments are laid out parents before children.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from cpplan.pricing.tree import PrefixTree
from cpplan.spec.layout_specs import parse_layout


def share_mask(tree: PrefixTree, spec: str) -> np.ndarray:
    """Boolean mask over tree nodes: which decisions a layout spec shares."""
    kind, value = parse_layout(spec)
    if kind == "full":
        mask = np.ones(tree.num_nodes, dtype=bool)
    elif kind == "none":
        mask = np.zeros(tree.num_nodes, dtype=bool)
    elif kind == "depth":
        mask = tree.node_depth <= value
    else:
        mask = tree.node_length >= value
    mask = mask.copy()
    mask[0] = False
    return mask


@dataclass(frozen=True, kw_only=True, eq=False)
class LossSpans:
    """Disjoint runs of packed tokens whose logits are needed, ascending, each inside one segment: span
    ``i`` is ``length[i]`` tokens from packed position ``start[i]``, at request positions from
    ``position[i]``, in segment ``segment[i]``."""

    start: np.ndarray
    length: np.ndarray
    position: np.ndarray
    segment: np.ndarray

    @property
    def num_tokens(self) -> int:
        """Tokens in the spans."""
        return int(self.length.sum())


@dataclass(frozen=True, kw_only=True, eq=False)
class PackedLayout:
    """The segments of one wave under one layout (no token arrays; see :meth:`token_metadata`).

    Segment arrays are indexed by segment, in packed order. ``request_ids`` are tree request indices;
    ``request_segments[request_ptr[k]:request_ptr[k + 1]]`` is request k's segment chain, root first.
    ``seg_loss``: some request through the segment needs logits. ``loss_spans``: the runs of packed
    tokens whose logits are needed; set only when some request has a loss mask
    (:mod:`cpplan.pricing.loss_positions`), otherwise ``seg_loss`` says it exactly.
    """

    request_ids: np.ndarray
    seg_parent: np.ndarray
    seg_position: np.ndarray
    seg_length: np.ndarray
    seg_offset: np.ndarray
    seg_src: np.ndarray
    seg_grad: np.ndarray
    seg_loss: np.ndarray
    seg_count: np.ndarray
    request_ptr: np.ndarray
    request_segments: np.ndarray
    loss_spans: LossSpans | None = None

    @property
    def num_segments(self) -> int:
        """Packed segments."""
        return int(self.seg_length.size)

    @cached_property
    def packed_tokens(self) -> int:
        """Tokens in the packed sequence."""
        return int(self.seg_length.sum())

    @cached_property
    def links(self) -> SegmentLinks:
        """How the segments hang together (kept: every ownership of the wave reads them)."""
        return SegmentLinks.of(self.seg_offset, self.seg_length, self.seg_parent)

    def chain(self, k: int) -> np.ndarray:
        """Segment chain of the wave's k-th request."""
        return self.request_segments[self.request_ptr[k] : self.request_ptr[k + 1]]

    def token_metadata(self, tree: PrefixTree) -> dict[str, np.ndarray]:
        """Per packed token: ``input_ids``, ``position_ids``, ``segment_ids``, ``parent_ids`` (int64)."""
        lengths = self.seg_length
        segment_ids = np.repeat(np.arange(self.num_segments, dtype=np.int64), lengths)
        within = np.arange(self.packed_tokens, dtype=np.int64) - np.repeat(self.seg_offset, lengths)
        position_ids = np.repeat(self.seg_position, lengths) + within
        input_ids = np.empty(self.packed_tokens, dtype=np.int64)
        for s in range(self.num_segments):
            lo = int(self.seg_offset[s])
            pos = int(self.seg_position[s])
            input_ids[lo : lo + int(lengths[s])] = tree.sequences[int(self.seg_src[s])][
                pos : pos + int(lengths[s])
            ]
        return {
            "input_ids": input_ids,
            "position_ids": position_ids,
            "segment_ids": segment_ids,
            "parent_ids": np.repeat(self.seg_parent, lengths),
        }

    def readback(self, k: int) -> np.ndarray:
        """Packed indices that read the wave's k-th request back, in token order."""
        return chain_positions(self.seg_offset, self.seg_length, self.chain(k))


@dataclass(frozen=True, kw_only=True, eq=False)
class SegmentLinks:
    """How a packed layout's segments (in packed order, each parent before its children) hang together:
    what the GDN hand-off (:mod:`cpplan.pricing.handoff`) reads under every ownership of a wave. Build
    it with :meth:`of`.

    ``parent_last``: per segment, the packed position of its parent's last token (-1 for a root).
    ``parent_or_end``: per segment, its parent, or ``num_segments`` for a root (an index past the
    segments, where a per-segment array extended by one zero reads nothing). ``ancestor_jumps``: pointer
    doubling up the segment tree, per step ``k`` each segment's ancestor ``2^k`` levels up
    (``num_segments`` where there is none), while some segment has one (:meth:`down_sums`).
    ``levels``: levels of the segment tree (1 for roots only, 0 for no segment)."""

    seg_offset: np.ndarray
    packed_tokens: int
    is_root: np.ndarray
    is_parent: np.ndarray
    parent_last: np.ndarray
    parent_or_end: np.ndarray
    ancestor_jumps: tuple[np.ndarray, ...]
    levels: int

    @classmethod
    def of(cls, seg_offset: np.ndarray, seg_length: np.ndarray, seg_parent: np.ndarray) -> SegmentLinks:
        """The links of segments at ``seg_offset`` of ``seg_length`` tokens with parents ``seg_parent``
        (-1 for a root)."""
        seg_offset = np.asarray(seg_offset, dtype=np.int64)
        seg_length = np.asarray(seg_length, dtype=np.int64)
        seg_parent = np.asarray(seg_parent, dtype=np.int64)
        num_segments = seg_parent.size
        is_root = seg_parent < 0
        parent = np.where(is_root, 0, seg_parent)
        parent_or_end = np.where(is_root, num_segments, seg_parent)
        jumps, up = [], parent_or_end
        while (up < num_segments).any():
            jumps.append(up)
            up = np.append(up, num_segments)[up]
        return cls(
            seg_offset=seg_offset,
            packed_tokens=int(seg_offset[-1] + seg_length[-1]) if num_segments else 0,
            is_root=is_root,
            is_parent=parent_segments(seg_parent),
            parent_last=np.where(is_root, -1, seg_offset[parent] + seg_length[parent] - 1),
            parent_or_end=parent_or_end,
            ancestor_jumps=tuple(jumps),
            levels=int(_down_sums(jumps, ~is_root).max()) + 1 if num_segments else 0,
        )

    @property
    def num_segments(self) -> int:
        """Segments."""
        return int(self.is_root.size)

    def down_sums(self, values: np.ndarray) -> np.ndarray:
        """Per segment, ``values`` summed over it and all its ancestors, with one zero appended (at
        ``num_segments``: what a root's parent reads)."""
        return _down_sums(self.ancestor_jumps, values)


def _down_sums(ancestor_jumps: Sequence[np.ndarray], values: np.ndarray) -> np.ndarray:
    """:meth:`SegmentLinks.down_sums` by pointer doubling: after step ``k`` each segment holds the sum
    over itself and its ``2^(k+1) - 1`` nearest ancestors."""
    total = np.zeros(values.size + 1, dtype=np.int64)
    total[:-1] = values
    for up in ancestor_jumps:
        total[:-1] += total[up]
    return total


def parent_segments(seg_parent: np.ndarray) -> np.ndarray:
    """Per segment, whether some segment is its child (``seg_parent``: each segment's parent, -1 for a
    root)."""
    seg_parent = np.asarray(seg_parent)
    parents = np.zeros(seg_parent.size, dtype=bool)
    parents[seg_parent[seg_parent >= 0]] = True
    return parents


def chain_positions(seg_offset: np.ndarray, seg_length: np.ndarray, segments: np.ndarray) -> np.ndarray:
    """The packed positions of ``segments``' tokens, segment after segment (a request's read-back
    indices when ``segments`` is its chain; every request's, concatenated, for all chains)."""
    lengths = seg_length[segments]
    run_start = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return np.repeat(seg_offset[segments] - run_start, lengths) + np.arange(
        int(lengths.sum()), dtype=np.int64
    )


def pack(
    tree: PrefixTree,
    requests: Sequence[int] | np.ndarray,
    shared: np.ndarray,
    grad: np.ndarray,
    loss: np.ndarray,
) -> PackedLayout:
    """Pack ``requests`` (tree request indices) under the share mask ``shared``.

    ``grad`` and ``loss`` are per-tree-request flags; a segment takes gradients (or outputs) when any
    of its requests does.
    """
    requests = np.asarray(requests, dtype=np.int64)
    counts = path_counts(tree, requests)
    out = _Segments(
        tree,
        counts=counts.tolist(),
        take=(shared & (counts >= 2)).tolist(),
        grad=np.asarray(grad, dtype=bool).tolist(),
        loss=np.asarray(loss, dtype=bool).tolist(),
    )
    for r in requests.tolist():
        out.add(r)
    return out.layout(requests)


def layout_share_mask(tree: PrefixTree, layout: PackedLayout) -> np.ndarray:
    """A node mask under which :func:`pack` lays ``layout``'s requests out as ``layout`` does: a node
    through which two of its requests or more pass is shared where every one of them reads it from the
    same segment (for a layout known only by its segments, such as the joint model's)."""
    requests = np.asarray(layout.request_ids, dtype=np.int64)
    starts, ends = tree.path_ptr[requests], tree.path_ptr[requests + 1]
    entry = np.repeat(starts - np.concatenate([[0], np.cumsum(ends - starts)[:-1]]), ends - starts)
    nodes = tree.path_nodes[entry + np.arange(entry.size)]
    request = np.repeat(np.arange(requests.size), ends - starts)
    span = int(tree.node_start.max() + tree.node_length.max()) + 1
    chain_request = np.repeat(np.arange(requests.size), np.diff(layout.request_ptr))
    chain_keys = chain_request * span + layout.seg_position[layout.request_segments]
    found = np.searchsorted(chain_keys, request * span + tree.node_start[nodes], side="right") - 1
    segment = layout.request_segments[found]
    low = np.full(tree.num_nodes, np.iinfo(np.int64).max)
    high = np.full(tree.num_nodes, -1)
    np.minimum.at(low, nodes, segment)
    np.maximum.at(high, nodes, segment)
    mask = (low == high) & (path_counts(tree, requests) >= 2)
    mask[0] = False
    return mask


def path_counts(tree: PrefixTree, requests: np.ndarray) -> np.ndarray:
    """How many of ``requests`` (tree request indices) pass through each node: one count over their
    concatenated root-to-leaf paths (the numbers of ``PrefixTree.node_counts``, vectorized)."""
    starts, ends = tree.path_ptr[requests], tree.path_ptr[requests + 1]
    lengths = ends - starts
    offsets = np.cumsum(lengths) - lengths
    entries = np.repeat(starts - offsets, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)
    return np.bincount(tree.path_nodes[entries], minlength=tree.num_nodes).astype(np.int64)


def _copy_keys(path: tuple[int, ...], take: list[bool], request: int) -> list[int]:
    """For each node of a request's path, the copy it uses: the nearest shared node at or below it on
    the path, or the request's own copy (``-1 - request``) when there is none."""
    keys = [0] * len(path)
    key = -1 - request
    for j in range(len(path) - 1, -1, -1):
        if take[path[j]]:
            key = path[j]
        keys[j] = key
    return keys


class _Segments:
    """The packed segments of a wave while :func:`pack` lays them out, request after request: a segment
    per run of a request's path whose nodes use copies shared by the same number of requests, made by
    the first request through it (which extends it while the run lasts), joined by the later ones."""

    def __init__(
        self, tree: PrefixTree, *, counts: list[int], take: list[bool], grad: list[bool], loss: list[bool]
    ) -> None:
        self.tree, self.counts, self.take, self.request_grad, self.request_loss = (
            tree,
            counts,
            take,
            grad,
            loss,
        )
        self.node_start = tree.node_start.tolist()
        self.node_length = tree.node_length.tolist()
        self.index: dict[tuple[int, int], int] = {}
        """The segment of each (node, copy) that opened one."""
        self.parent: list[int] = []
        self.position: list[int] = []
        self.length: list[int] = []
        self.src: list[int] = []
        self.grad: list[bool] = []
        self.loss: list[bool] = []
        self.count: list[int] = []
        self.chains: list[int] = []
        self.ptr = [0]

    def add(self, r: int) -> None:
        """Request ``r``'s chain: its path's runs, each a segment opened here or joined."""
        path = self.tree.path(r)
        counts, index, length, node_length = self.counts, self.index, self.length, self.node_length
        grad, loss = self.request_grad[r], self.request_loss[r]
        current, current_count, created = -1, -1, False
        for v, key in zip(path, _copy_keys(path, self.take, r), strict=True):
            count = counts[key] if key >= 0 else 1
            if count != current_count:
                segment = index.get((v, key))
                created = segment is None
                if segment is None:
                    segment = index[(v, key)] = len(length)
                    self.parent.append(current), self.position.append(self.node_start[v])
                    length.append(node_length[v]), self.src.append(r), self.count.append(count)
                    self.grad.append(grad), self.loss.append(loss)
                else:
                    self.grad[segment] = self.grad[segment] or grad
                    self.loss[segment] = self.loss[segment] or loss
                self.chains.append(segment)
                current, current_count = segment, count
            elif created:
                length[current] += node_length[v]
        self.ptr.append(len(self.chains))

    def layout(self, requests: np.ndarray) -> PackedLayout:
        """The finished layout."""
        lengths = np.array(self.length, dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if lengths.size else lengths
        return PackedLayout(
            request_ids=requests,
            seg_parent=np.array(self.parent, dtype=np.int64),
            seg_position=np.array(self.position, dtype=np.int64),
            seg_length=lengths,
            seg_offset=offsets,
            seg_src=np.array(self.src, dtype=np.int64),
            seg_grad=np.array(self.grad, dtype=bool),
            seg_loss=np.array(self.loss, dtype=bool),
            seg_count=np.array(self.count, dtype=np.int64),
            request_ptr=np.array(self.ptr, dtype=np.int64),
            request_segments=np.array(self.chains, dtype=np.int64),
        )
