"""The prefix tree (radix tree) of a set of requests, built with vectorized span comparisons."""

from __future__ import annotations

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
        # Big-endian 32-bit bytes compare like the (non-negative, int32) token ids they encode, so a
        # C-level sort of byte strings orders the requests lexicographically; prefixes sort first.
        keys = [s.astype(">u4").tobytes() for s in self.sequences]
        order = sorted(range(len(keys)), key=keys.__getitem__)
        parent, start, length, src = [-1], [0], [0], [0]
        leaf = np.zeros(len(self.sequences), dtype=np.int64)
        stack = [0]
        previous: np.ndarray | None = None
        for r in order:
            tokens = self.sequences[r]
            common = 0 if previous is None else _common_prefix(previous, tokens)
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
            previous = tokens
        self.node_parent = _ro(np.array(parent, dtype=np.int64))
        self.node_start = _ro(np.array(start, dtype=np.int64))
        self.node_length = _ro(np.array(length, dtype=np.int64))
        self.node_src = _ro(np.array(src, dtype=np.int64))
        self.request_leaf = _ro(leaf)
        self._build_paths()

    def _build_paths(self) -> None:
        paths: list[list[int]] = []
        for leaf in self.request_leaf.tolist():
            path = []
            node = leaf
            while node > 0:
                path.append(node)
                node = int(self.node_parent[node])
            paths.append(path[::-1])
        lengths = np.array([len(p) for p in paths], dtype=np.int64)
        self.path_ptr = _ro(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
        self.path_nodes = _ro(np.array([v for p in paths for v in p], dtype=np.int64))
        self._paths = tuple(tuple(p) for p in paths)
        depth = np.zeros(self.num_nodes, dtype=np.int64)
        for p in paths:
            depth[list(p)] = np.arange(1, len(p) + 1)
        self.node_depth = _ro(depth)

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


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two token arrays (one vectorized comparison)."""
    span = min(a.size, b.size)
    mismatch = np.flatnonzero(a[:span] != b[:span])
    return int(mismatch[0]) if mismatch.size else span


def _ro(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array
