"""The verifier's reading of a wave's ownership: the CP ranks listed once each, and their owned ranges
covering every packed token exactly once, on chunk boundaries."""

from __future__ import annotations

from typing import Any

import numpy as np


def read_owners(
    w: int, ranks: list[dict[str, Any]], packed: int, chunk: int, cp: int, violations: list[str]
) -> np.ndarray:
    """Every packed token's owning rank from the ranks' ``ranges`` (-1 where no range covers it)."""
    owner = np.full(packed, -1, dtype=np.int64)
    if sorted(int(r["rank"]) for r in ranks) != list(range(cp)):
        violations.append(f"wave {w}: ranks listed are not exactly 0..{cp - 1}")
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
            if (owner[start:end] != -1).any():
                violations.append(f"wave {w} rank {rank}: range [{start}, {end}) overlaps another owner")
            owner[start:end] = rank
    if (owner == -1).any():
        violations.append(f"wave {w}: {int((owner == -1).sum())} packed tokens have no owner")
    return owner
