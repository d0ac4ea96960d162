"""The prefix tree (radix tree) of a set of requests, built with vectorized span comparisons."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import networkx as nx


class PrefixTree:
    """Radix tree over token sequences. Node 0 is the root (an empty span).

    Every other node is a maximal span of tokens shared by the same set of requests: it holds tokens
    ``[start, start + length)`` of request ``src`` (positions are depths on the path, so they are the
    same for every request through the node). A request's path is the nodes from the root (excluded)
    to the node where it ends. Building sorts the requests lexicographically (a C-level sort of their
    bytes), takes each adjacent pair's longest common prefix with one vectorized comparison, and builds
    the tree from those prefixes with a stack: time linear in the total number of tokens, plus
    ``O(n log n)`` byte-string comparisons for the sort.
    """

    def __init__(self, sequences: Sequence[np.ndarray]) -> None:
        self.sequences = tuple(np.asarray(s, dtype=np.int64) for s in sequences)
        keys = _sort_keys(self.sequences)
        order = sorted(range(len(keys)), key=keys.__getitem__)
        parent, start, length, src = [-1], [0], [0], [0]
        leaf = np.zeros(len(self.sequences), dtype=np.int64)
        stack = [0]
        # Equal tokens have equal bytes: the prefixes are read from the keys (half the tokens' bytes).
        commons = adjacent_common_prefixes([np.frombuffer(k, dtype=np.uint32) for k in keys], order)
        for r, common in zip(order, commons, strict=True):
            tokens = self.sequences[r]
            while start[stack[-1]] + length[stack[-1]] > common:
                top = stack.pop()
                if start[top] < common:
                    middle = len(parent)
                    parent.append(parent[top]), start.append(start[top]), length.append(common - start[top])
                    src.append(src[top])
                    parent[top] = middle
                    length[top] -= common - start[top]
                    start[top] = common
                    stack.append(middle)
                    break
            if tokens.size == common:
                leaf[r] = stack[-1]
            else:
                node = len(parent)
                parent.append(stack[-1]), start.append(common), length.append(tokens.size - common)
                src.append(r)
                stack.append(node)
                leaf[r] = node
        self.node_parent = _ro(np.array(parent, dtype=np.int64))
        self.node_start = _ro(np.array(start, dtype=np.int64))
        self.node_length = _ro(np.array(length, dtype=np.int64))
        self.node_src = _ro(np.array(src, dtype=np.int64))
        self.request_leaf = _ro(leaf)
        self._build_paths()

    def _build_paths(self) -> None:
        """Every node's depth and every request's path, walking all of them up one level at a time
        (as many numpy steps as the tree is deep)."""
        parent = self.node_parent
        depth = np.zeros(self.num_nodes, dtype=np.int64)
        node = np.arange(self.num_nodes, dtype=np.int64)
        while (alive := node > 0).any():
            depth += alive
            node = np.where(alive, parent[node], 0)
        self.node_depth = _ro(depth)
        steps = depth[self.request_leaf]
        self.path_ptr = _ro(_offsets(steps))
        nodes = np.zeros(int(self.path_ptr[-1]), dtype=np.int64)
        node = self.request_leaf.copy()
        while (alive := steps > 0).any():
            steps -= alive
            nodes[self.path_ptr[:-1][alive] + steps[alive]] = node[alive]
            node = np.where(alive, parent[node], 0)
        self.path_nodes = _ro(nodes)

    @cached_property
    def _paths(self) -> tuple[tuple[int, ...], ...]:
        """Every request's path as a tuple (from :attr:`path_nodes`)."""
        flat = self.path_nodes.tolist()
        return tuple(tuple(flat[a:b]) for a, b in itertools.pairwise(self.path_ptr.tolist()))

    @property
    def num_nodes(self) -> int:
        """Nodes including the root."""
        return int(self.node_parent.size)

    @property
    def num_requests(self) -> int:
        """Requests the tree was built from."""
        return len(self.sequences)

    def path(self, request: int) -> tuple[int, ...]:
        """Nodes from the root (excluded) to where ``request`` ends."""
        return self._paths[request]

    def node_counts(self, requests: np.ndarray) -> np.ndarray:
        """How many of ``requests`` pass through each node."""
        counts = np.zeros(self.num_nodes, dtype=np.int64)
        for r in np.asarray(requests).tolist():
            counts[self.path_nodes[self.path_ptr[r] : self.path_ptr[r + 1]]] += 1
        return counts

    @cached_property
    def request_counts(self) -> np.ndarray:
        """How many requests of the whole tree pass through each node."""
        counts = np.bincount(self.path_nodes, minlength=self.num_nodes)
        counts[0] = self.num_requests
        return _ro(counts)

    def node_tokens(self, node: int) -> np.ndarray:
        """The tokens of ``node``'s span."""
        start = int(self.node_start[node])
        return self.sequences[int(self.node_src[node])][start : start + int(self.node_length[node])]

    def to_networkx(self) -> nx.DiGraph:
        """The tree as a DiGraph (edges parent to child) with node attributes start, length, requests."""
        import networkx as nx  # only where the graph view is asked for

        graph = nx.DiGraph()
        counts = self.request_counts
        for v in range(self.num_nodes):
            graph.add_node(
                v,
                start=int(self.node_start[v]),
                length=int(self.node_length[v]),
                requests=int(counts[v]),
                src=int(self.node_src[v]),
            )
            if v:
                graph.add_edge(int(self.node_parent[v]), v)
        return graph


def _sort_keys(sequences: Sequence[np.ndarray]) -> list[bytes]:
    """Every sequence as big-endian 32-bit bytes: they compare like the (non-negative, int32) token ids
    they encode, so a C-level sort of them orders the sequences lexicographically (prefixes first).
    Converted in one pass into one buffer, then cut."""
    offsets = 4 * _offsets(np.array([s.size for s in sequences], dtype=np.int64))
    buffer = bytearray(int(offsets[-1]))
    if sequences:
        np.concatenate(sequences, out=np.frombuffer(buffer, dtype=">u4"), casting="unsafe")
    view = memoryview(buffer)
    return [bytes(view[a:b]) for a, b in itertools.pairwise(offsets.tolist())]


def adjacent_common_prefixes(sequences: Sequence[np.ndarray], order: Sequence[int]) -> list[int]:
    """For the sequences in ``order``, the length of the longest common prefix of each with the one
    before it (0 for the first): one vectorized comparison per pair, the first mismatch found by
    ``argmax`` (which stops at the first ``True``)."""
    found = [0] * len(order)
    for k in range(1, len(order)):
        a, b = sequences[order[k - 1]], sequences[order[k]]
        span = min(a.size, b.size)
        differ = a[:span] != b[:span]
        at = int(differ.argmax()) if span else 0
        found[k] = at if span and differ[at] else span
    return found


def _offsets(counts: np.ndarray) -> np.ndarray:
    """``[0, c0, c0 + c1, ...]``: where each of ``counts``' runs starts, and the total last."""
    offsets = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets


def _ro(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array
