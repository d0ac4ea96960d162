"""Reference forms of the replica partition's prefix sampling, one item or request at a time."""

from __future__ import annotations

import numpy as np

from cpplan.planners.replica_partition import PREFIX_STRIDE, StepRequests, _multipliers
from cpplan.spec.workload import Workload


def prefix_hashes(tokens: np.ndarray, levels) -> dict[int, int]:
    """The prefix hash from its definition, one item at a time: for every level ``L`` that ``tokens``
    reaches, the sum of every :data:`PREFIX_STRIDE`-th token of ``tokens[:L]`` times the multiplier of
    its place, modulo ``2**64``."""
    sampled = tokens[: max(levels) : PREFIX_STRIDE].astype(np.uint64)
    sums = np.cumsum(sampled * _multipliers()[: sampled.size], dtype=np.uint64)
    return {level: int(sums[level // PREFIX_STRIDE - 1]) for level in levels if level <= tokens.size}


def sampled_prefixes(workload: Workload) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every request but each item's first: its item, its length and the prefix it shares with its
    item's first request, as the partition samples it."""
    step = StepRequests.of(workload)
    wanted = np.flatnonzero(step.request_index > 0)
    owner = step.request_item[wanted]
    return owner, step.lengths[wanted], step.common_prefixes(owner, step.request_index[wanted])
