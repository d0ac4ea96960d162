"""Reference forms of the prefix digest's sampling, one item or request at a time."""

from __future__ import annotations

import numpy as np

from cpplan.spec.prefix_digest import MULTIPLIERS, PREFIX_STRIDE, sampled_shared_prefix
from cpplan.spec.workload import Workload


def prefix_hashes(tokens: np.ndarray, levels) -> dict[int, int]:
    """The prefix hash from its definition, one item at a time: for every level ``L`` that ``tokens``
    reaches, the sum of every :data:`PREFIX_STRIDE`-th token of ``tokens[:L]`` times the multiplier of
    its place, modulo ``2**64``."""
    sampled = tokens[: max(levels) : PREFIX_STRIDE].astype(np.uint64)
    sums = np.cumsum(sampled * MULTIPLIERS[: sampled.size], dtype=np.uint64)
    return {level: int(sums[level // PREFIX_STRIDE - 1]) for level in levels if level <= tokens.size}


def sampled_prefixes(workload: Workload) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every request but each item's first: its item, its length and the prefix it shares with its
    item's first request, as the digest samples it."""
    rows = [
        (i, later.tokens.size, sampled_shared_prefix(item.requests[0].tokens, later.tokens))
        for i, item in enumerate(workload.items)
        for later in item.requests[1:]
    ]
    return tuple(np.array(column, dtype=np.int64) for column in zip(*rows, strict=True))
