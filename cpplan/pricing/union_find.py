"""Disjoint sets over ``0..n-1`` (union by the smaller index, path halving): how the planners and the
bound join items, requests or segments that must stay together."""

from __future__ import annotations


class UnionFind:
    """Disjoint sets over ``0..n-1``, the smaller index a set's representative."""

    def __init__(self, n: int) -> None:
        self.up = list(range(n))

    def find(self, a: int) -> int:
        """The representative of ``a``'s set."""
        up = self.up
        while up[a] != a:
            up[a] = up[up[a]]
            a = up[a]
        return a

    def union(self, a: int, b: int) -> None:
        """Join the sets of ``a`` and ``b``."""
        a, b = self.find(a), self.find(b)
        if a != b:
            self.up[max(a, b)] = min(a, b)
