"""An item's prefix digest: what the replica partition reads of an item, computed once, when the item is
validated (:class:`~cpplan.spec.items.Item`), so that a DP rank partitions a step by reading one small
record per item instead of every request's tokens in its planning call.

The digest samples every :data:`PREFIX_STRIDE`-th token: the prefix the item's second request shares
with its first (within half a stride), the item's quick packed tokens and attention pairs when every
later request shares as much (at most its own length, as a GRPO group's completions share their
prompt), and a 64-bit hash of the first request's prefix at each of :data:`PREFIX_LEVELS`.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PREFIX_STRIDE = 64
"""Prefixes are compared, and hashed, on every this many-th token (a balance price needs no more)."""

PREFIX_LEVELS = (32768, 16384, 8192, 4096, 2048, 1024, 512, 256, 128)
"""Prefix lengths (tokens, multiples of :data:`PREFIX_STRIDE`) at which items' first requests are
compared, longest first."""

_HASH_SEED = 0x5EED_C0DE
"""Seed of the fixed per-position multipliers of the prefix hash (the same in every process)."""


def _drawn_multipliers() -> np.ndarray:
    """One odd 64-bit multiplier per sampled place up to the longest level, from :data:`_HASH_SEED`."""
    rng = np.random.default_rng(_HASH_SEED)
    size = max(PREFIX_LEVELS) // PREFIX_STRIDE
    drawn = rng.integers(0, 2**63, size, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    drawn.flags.writeable = False
    return drawn


MULTIPLIERS = _drawn_multipliers()
"""The prefix hash's multiplier of each sampled place (a constant, read-only)."""

_SAMPLED = max(PREFIX_LEVELS)
"""The first request's tokens the level hashes read."""

_ENDS = np.array([level // PREFIX_STRIDE - 1 for level in PREFIX_LEVELS], dtype=np.int64)
"""Per level, the place of its last sample."""

_FULL_STRIDES = [-(level // PREFIX_STRIDE) for level in PREFIX_LEVELS]
"""Per level, the whole strides it spans, negated (ascending, for :mod:`bisect`)."""


@dataclass(frozen=True, slots=True)
class PrefixDigest:
    """What the replica partition reads of one item."""

    first_tokens: int
    """The length of the item's first request."""
    quick_tokens: float
    """Packed tokens when every later request shares with the first what the second does."""
    quick_pairs: float
    """Attention pairs of those tokens (a token at position ``p`` attends ``p + 1`` keys)."""
    level_hashes: bytes
    """Per level of :data:`PREFIX_LEVELS`, the 64-bit hash of the first request's prefix of that length
    (``0`` where it is shorter), as ``uint64`` bytes in native order."""


def sampled_shared_prefix(first: np.ndarray, other: np.ndarray) -> int:
    """The prefix ``other`` shares with ``first``, found on every :data:`PREFIX_STRIDE`-th token: where
    the samples part at place ``k``, ``k`` strides less half a stride (within half a stride of the exact
    length), else the shorter length."""
    span = min(first.size, other.size)
    parted = other[:span:PREFIX_STRIDE] != first[:span:PREFIX_STRIDE]
    k = int(parted.argmax())
    if not parted[k]:
        return span
    return min(max(0, k * PREFIX_STRIDE - PREFIX_STRIDE // 2), span)


def prefix_digest(requests: Sequence[np.ndarray]) -> PrefixDigest:
    """The digest of an item whose requests' tokens are ``requests`` (in item order, at least one).
    Tokens and pairs are whole numbers far below ``2**53``, so they are summed exactly as integers."""
    first = requests[0]
    sizes = [later.size for later in requests[1:]]
    shared = sampled_shared_prefix(first, requests[1]) if sizes else 0
    common = [min(shared, n) for n in sizes]
    tokens = first.size + sum(sizes) - sum(common)
    pairs = first.size * (first.size + 1) + sum(n * (n + 1) for n in sizes) - sum(c * (c + 1) for c in common)
    return PrefixDigest(
        first_tokens=int(first.size),
        quick_tokens=float(tokens),
        quick_pairs=float(pairs // 2),
        level_hashes=level_hashes(first).tobytes(),
    )


def level_hashes(tokens: np.ndarray) -> np.ndarray:
    """Per level of :data:`PREFIX_LEVELS`, the sum of every :data:`PREFIX_STRIDE`-th token of
    ``tokens[:level]`` times its place's multiplier, modulo ``2**64`` (``0`` where ``tokens`` is
    shorter than the level); token ids are non-negative."""
    hashes = np.zeros(_ENDS.size, dtype=np.uint64)
    unreached = bisect.bisect_left(_FULL_STRIDES, -(tokens.size // PREFIX_STRIDE))  # levels too long
    if unreached < _ENDS.size:
        sampled = tokens[:_SAMPLED:PREFIX_STRIDE].astype(np.uint64)
        sampled *= MULTIPLIERS[: sampled.size]
        hashes[unreached:] = np.cumsum(sampled, dtype=np.uint64)[_ENDS[unreached:]]
    return hashes
