"""The verifier's reading of a wave's ownership: the CP ranks listed once each, and their owned ranges
covering every packed token exactly once, on chunk boundaries.

Ownership is read as *runs*: maximal intervals of packed tokens with one owner (``-1``: none), in
packed order. When no two ranges overlap (every valid plan) the runs come straight from the sorted
ranges, in time proportional to the ranges; otherwise each token's owner is written range by range
(a later range overwrites an earlier one) and compressed back into runs.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, kw_only=True)
class OwnerRuns:
    """Consecutive intervals ``[start[k], end[k])`` covering ``[0, packed)``, each with one owner
    (``-1`` where no range covers it)."""

    start: np.ndarray
    end: np.ndarray
    owner: np.ndarray

    @property
    def packed(self) -> int:
        """Packed tokens covered by the runs."""
        return int(self.end[-1]) if self.end.size else 0


def read_owners(
    w: int, ranks: list[dict[str, Any]], packed: int, chunk: int, cp: int, violations: list[str]
) -> OwnerRuns:
    """Every packed token's owning rank, as runs, from the ranks' ``ranges``."""
    if sorted(int(r["rank"]) for r in ranks) != list(range(cp)):
        violations.append(f"wave {w}: ranks listed are not exactly 0..{cp - 1}")
    ranges: list[tuple[int, int, int]] = []
    for entry in ranks:
        rank = int(entry["rank"])
        for start, end in entry["ranges"]:
            start, end = int(start), int(end)
            if not 0 <= start < end <= packed:
                violations.append(f"wave {w} rank {rank}: range [{start}, {end}) outside [0, {packed})")
                continue
            if start % chunk or (end % chunk and end != packed):
                violations.append(
                    f"wave {w} rank {rank}: range [{start}, {end}) is not on {chunk}-token chunks"
                )
            ranges.append((start, end, rank))
    ordered = sorted(ranges)
    if all(a[1] <= b[0] for a, b in itertools.pairwise(ordered)):
        runs = _disjoint_runs(ordered, packed)
        unowned = packed - sum(end - start for start, end, _ in ordered)
    else:
        runs = _overlapping_runs(w, ranges, packed, violations)
        unowned = int((runs.end - runs.start)[runs.owner == -1].sum())
    if unowned:
        violations.append(f"wave {w}: {unowned} packed tokens have no owner")
    return runs


def _disjoint_runs(ordered: list[tuple[int, int, int]], packed: int) -> OwnerRuns:
    """Runs of non-overlapping ranges sorted by start, with ``-1`` runs for the gaps between them."""
    starts, ends, owners = [], [], []
    position = 0
    for start, end, rank in ordered:
        if start > position:
            starts.append(position), ends.append(start), owners.append(-1)
        starts.append(start), ends.append(end), owners.append(rank)
        position = end
    if position < packed:
        starts.append(position), ends.append(packed), owners.append(-1)
    return OwnerRuns(
        start=np.array(starts, dtype=np.int64),
        end=np.array(ends, dtype=np.int64),
        owner=np.array(owners, dtype=np.int64),
    )


def _overlapping_runs(
    w: int, ranges: list[tuple[int, int, int]], packed: int, violations: list[str]
) -> OwnerRuns:
    """Runs of ranges some of which overlap: written token by token in the order listed (each range
    that meets an earlier one is reported), then compressed."""
    owner = np.full(packed, -1, dtype=np.int64)
    for start, end, rank in ranges:
        if (owner[start:end] != -1).any():
            violations.append(f"wave {w} rank {rank}: range [{start}, {end}) overlaps another owner")
        owner[start:end] = rank
    bounds = np.concatenate([[0], np.flatnonzero(owner[1:] != owner[:-1]) + 1, [packed]]).astype(np.int64)
    return OwnerRuns(start=bounds[:-1], end=bounds[1:], owner=owner[bounds[:-1]])
