"""The prefix tree (radix tree) of a set of requests, built with vectorized span comparisons."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

import networkx as nx
import numpy as np


class PrefixTree:
    """Radix tree over token sequences. Node 0 is the root (an empty span).

    Every other node is a maximal span of tokens shared by the same set of requests: it holds tokens
    ``[start, start + length)`` of request ``src`` (positions are depths on the path, so they are the
    same for every request through the node). A request's path is the nodes from the root (excluded)
    to the node where it ends. Building walks each request down the tree once and compares whole spans
    with numpy, so it runs in time linear in the total number of tokens.
    """

    def __init__(self, sequences: Sequence[np.ndarray]) -> None:
        self.sequences = tuple(np.asarray(s, dtype=np.int64) for s in sequences)
        parent, start, length, src = [-1], [0], [0], [0]
        children: list[dict[int, int]] = [{}]
        leaf = np.zeros(len(self.sequences), dtype=np.int64)
        for r, tokens in enumerate(self.sequences):
            node, pos, end = 0, 0, tokens.size
            while pos < end:
                child = children[node].get(int(tokens[pos]))
                if child is None:
                    child = len(parent)
                    parent.append(node), start.append(pos), length.append(end - pos), src.append(r)
                    children.append({})
                    children[node][int(tokens[pos])] = child
                    node, pos = child, end
                    break
                span = min(length[child], end - pos)
                theirs = self.sequences[src[child]][start[child] : start[child] + span]
                mismatch = np.flatnonzero(theirs != tokens[pos : pos + span])
                common = int(mismatch[0]) if mismatch.size else span
                if common < length[child]:
                    middle = len(parent)
                    parent.append(node), start.append(start[child]), length.append(common)
                    src.append(src[child])
                    children.append({int(self.sequences[src[child]][start[child] + common]): child})
                    children[node][int(tokens[pos])] = middle
                    parent[child] = middle
                    start[child] += common
                    length[child] -= common
                    child = middle
                node, pos = child, pos + common
            leaf[r] = node
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


def _ro(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array
