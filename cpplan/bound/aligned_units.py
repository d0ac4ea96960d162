"""The busiest ranks of a wave whose prefix units sit whole on ranks, chunk alignment included.

In a wave whose GDN states never cross ranks every tree of its layout (a root segment and what hangs
below it) sits on one rank, and a chunk holding tokens of two trees puts both on its owner. Every chunk
but the packed layout's last holds ``chunk_tokens`` tokens, so every rank but one holds a whole number
of chunks (an idle rank holds none).

Take the wave's *units*: the subtrees below the deepest node every request of the wave passes (a
common prefix, or the root). Where no unit holds a node two requests pass except its top, and every
request continues below that deepest node, a version that leaves the common prefix unshared and holds
every unit whole on one rank with its top shared (the ``grouped`` case of
:func:`~cpplan.bound.handoff_floors.shared_or_copied_floor_s`) stores each unit as one tree: its own
copy of the common prefix and its subtree, full sharing. Its ranks' tokens and seconds are then exact
sums over their units, and :func:`aligned_units_floor_s` finds the least compute seconds (per barrier
the slowest rank, summed) over every assignment of the units to ranks (every set partition into at
most ``cp`` blocks) that leaves at most one rank off a chunk boundary. Behind a shared system prompt
the copies and the alignment together can cost more than one crossing (eight GRPO prompt groups on two
ranks: a crossing costs at least 0.067 s beyond the rank average, the best aligned split 0.083 s).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

MAX_UNITS = 8
"""The most units :func:`aligned_units_floor_s` assigns in every way (4,140 set partitions at 8)."""


def aligned_units_floor_s(
    unit_s: np.ndarray,
    unit_tokens: np.ndarray,
    common_s: np.ndarray,
    common_tokens: int,
    base_s: np.ndarray,
    num_ranks: int,
    chunk_tokens: int,
) -> float:
    """The least ``Σ_b max_r`` over the assignments of whole units to ``num_ranks`` ranks whose ranks,
    all but at most one, hold a whole number of ``chunk_tokens``: a rank costs ``base_s`` (per barrier)
    plus, per unit it holds, ``common_s`` (its copy of the common prefix, ``common_tokens`` tokens) and
    the unit's ``unit_s`` (shape ``(units, barriers)``; tokens ``unit_tokens``); infinity where no
    assignment aligns."""
    num_units = unit_tokens.size
    assert 0 < num_units <= MAX_UNITS
    blocks = _partitions(num_units, min(num_units, num_ranks))  # (partitions, units): each unit's block
    one_hot = blocks[:, :, None] == np.arange(blocks.max() + 1)[None, None, :]  # (partitions, units, blocks)
    held = one_hot.sum(axis=1)  # units per block
    tokens = np.einsum("pub,u->pb", one_hot, unit_tokens + common_tokens)
    off_chunk = ((tokens % chunk_tokens != 0) & (held > 0)).sum(axis=1)
    load = np.einsum("pub,uk->pbk", one_hot, unit_s + common_s[None, :]) + base_s[None, None, :]
    load = np.where((held > 0)[:, :, None], load, base_s[None, None, :])
    seconds = load.max(axis=1).sum(axis=1)
    seconds = np.where(off_chunk <= 1, seconds, math.inf)
    return float(seconds.min())


@lru_cache(maxsize=8)
def _partitions(num_units: int, most_blocks: int) -> np.ndarray:
    """Every set partition of ``num_units`` units into at most ``most_blocks`` blocks, as each unit's
    block (restricted growth strings: unit 0 in block 0, each next unit in a used block or the next
    new one), read-only, shape ``(partitions, units)``."""
    found: list[list[int]] = []

    def grow(prefix: list[int], used: int) -> None:
        if len(prefix) == num_units:
            found.append(list(prefix))
            return
        for block in range(min(used + 1, most_blocks)):
            prefix.append(block)
            grow(prefix, max(used, block + 1))
            prefix.pop()

    grow([], 0)
    rows = np.array(found, dtype=np.int64)
    rows.flags.writeable = False
    return rows
