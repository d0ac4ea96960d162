"""Whole-request ownership: every rank owns whole root subtrees of a wave's prefix tree, so no segment
crosses ranks (no GDN state handed over, no piece split) and ranks are balanced by bin packing.

A root subtree's segments may not end on a chunk boundary: a chunk holding tokens of two root subtrees
joins them, and what must sit on one rank is a *group*, the root subtrees joined so (:func:`chunk_groups`).
Groups are packed onto ranks by predicted seconds: longest first to the least-loaded rank that stays
within its memory floors, then improving moves and swaps of groups between ranks, each judged by the
wave's compute seconds (per barrier the slowest rank, summed). Every step is deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cpplan.pricing.amounts import span_amounts
from cpplan.pricing.layout import PackedLayout
from cpplan.pricing.ownership import ChunkStats
from cpplan.pricing.problem import Problem
from cpplan.spec.quantities import QUANTITIES, QUANTITY_INDEX, SEGMENT_COLUMNS

_REMOTE = np.array([QUANTITY_INDEX[q.name] for q in QUANTITIES if q.count == "remote"])
_SEGMENTS = np.array(SEGMENT_COLUMNS)

IMPROVING_STEPS = 64
"""The most improving moves or swaps :func:`pack_groups` makes after the longest-first placement."""

ALIGNED_STEPS = 16
"""The most improving exchanges :func:`align_ranks` makes after aligning each rank."""


def segment_roots(layout: PackedLayout) -> np.ndarray:
    """Per segment, the root segment of its subtree in the packed layout."""
    parent = layout.seg_parent.tolist()
    root = list(range(layout.num_segments))
    for s, up in enumerate(parent):  # parents come before their children
        if up >= 0:
            root[s] = root[up]
    return np.array(root, dtype=np.int64)


def _numbered(labels: np.ndarray) -> np.ndarray:
    """``labels`` renumbered ``0, 1, ...`` in the order of their first appearance."""
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank_of_label = np.argsort(np.argsort(first, kind="stable"), kind="stable")
    return rank_of_label[inverse.reshape(-1)].astype(np.int64)


def chunk_groups(layout: PackedLayout, stats: ChunkStats) -> np.ndarray:
    """Per chunk, its group: root subtrees of the layout joined where a chunk holds tokens of both,
    numbered in the order of their first chunk. A rank owning a group's chunks owns its segments whole."""
    root = segment_roots(layout)
    joined = _UnionFind(layout.num_segments)
    chunk_tokens = stats.chunk_tokens
    for s in np.flatnonzero(layout.seg_offset[1:] % chunk_tokens != 0).tolist():
        joined.union(int(root[s]), int(root[s + 1]))  # a chunk holds the end of s and the start of s + 1
    first_root = root[stats.first_segment]
    return _numbered(np.array([joined.find(int(r)) for r in first_root.tolist()], dtype=np.int64))


def segment_units(layout: PackedLayout, num_requests: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Units of the layout's items (``num_requests``: each item's requests, in packed order): root
    subtrees joined where one item's requests reach more than one, numbered in order of first use.
    Returns each item's unit and each segment's unit; a unit's segments are its items' alone."""
    root = segment_roots(layout)
    request_root = root[layout.request_segments[layout.request_ptr[:-1]]].tolist()
    joined = _UnionFind(layout.num_segments)
    start = 0
    for n in num_requests:
        for r in request_root[start + 1 : start + n]:
            joined.union(request_root[start], r)
        start += n
    label = np.array([joined.find(int(r)) for r in root.tolist()], dtype=np.int64)
    item_first = np.cumsum([0, *num_requests])[:-1]
    numbered = _numbered(np.concatenate([label[np.asarray(request_root, dtype=np.int64)[item_first]], label]))
    return numbered[: len(num_requests)], numbered[len(num_requests) :]


class _UnionFind:
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


@dataclass(frozen=True, kw_only=True, eq=False)
class GroupLoads:
    """What each group adds to the rank that owns it: ``barrier_s`` (seconds within each barrier of the
    card, shape ``(groups, barriers)``), ``bytes`` (per memory envelope, shape ``(groups, envelopes)``),
    and what every rank's envelopes may hold, ``room_bytes``."""

    barrier_s: np.ndarray
    bytes: np.ndarray
    room_bytes: np.ndarray

    @property
    def num_groups(self) -> int:
        """Number of groups."""
        return int(self.barrier_s.shape[0])


def group_loads(problem: Problem, per_group: np.ndarray, packed_tokens: int) -> GroupLoads:
    """The :class:`GroupLoads` of groups whose local quantities are ``per_group`` (a remote count's
    column holding minus the group's tokens: a rank's remote count is the wave's ``packed_tokens`` less
    its own), under ``problem``'s card and budget."""
    card = problem.card
    envelopes = card.envelope_coefficients()
    baseline = card.envelope_static_bytes + packed_tokens * envelopes[:, _REMOTE].sum(axis=1)
    return GroupLoads(
        barrier_s=per_group @ card.constants.barrier_coefficients.T,
        bytes=per_group @ envelopes.T,
        room_bytes=problem.memory_bytes / card.safety - baseline,
    )


def chunk_group_quantities(stats: ChunkStats, matrix: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Per group of :func:`chunk_groups`, its local quantities for :func:`group_loads` (``matrix``: the
    chunks' :meth:`~cpplan.pricing.ownership.ChunkStats.quantity_matrix`): its chunks' sums, less the
    shared edges inside it in each segment column (a group holds both chunks of every shared edge)."""
    per_chunk = matrix.copy()
    per_chunk[:, _SEGMENTS] -= stats.shared_edges[:, None]
    per_chunk[:, _REMOTE] = -stats.tokens[:, None]
    per_group = np.zeros((int(groups.max()) + 1, per_chunk.shape[1]))
    np.add.at(per_group, groups, per_chunk)
    return per_group


def unit_quantities(layout: PackedLayout, segment_unit: np.ndarray) -> np.ndarray:
    """Per unit of :func:`segment_units`, its local quantities for :func:`group_loads` when a rank owns
    it whole: its segments' amounts, one piece per segment (a loss mask's loss columns counted over
    whole segments: an estimate, the exact price comes after)."""
    flags = {"grad": layout.seg_grad, "loss": layout.seg_loss}
    per_segment = span_amounts(layout.seg_length, layout.seg_position, flags).astype(np.float64)
    per_segment[:, _SEGMENTS] = 1.0
    per_segment[:, _REMOTE] = -layout.seg_length[:, None]
    per_unit = np.zeros((int(segment_unit.max()) + 1, per_segment.shape[1]))
    np.add.at(per_unit, segment_unit, per_segment)
    return per_unit


def pack_groups(loads: GroupLoads, num_ranks: int) -> np.ndarray | None:
    """Each group's rank: longest first (predicted seconds; the lower index on ties) to the least-loaded
    rank it leaves within the room (the lower rank on ties), then up to :data:`IMPROVING_STEPS` moves
    or swaps, each the one that lowers the compute seconds most; ``None`` when some group fits no rank."""
    seconds = loads.barrier_s.sum(axis=1)
    rank_of = np.full(loads.num_groups, -1, dtype=np.int64)
    rank_s = np.zeros((num_ranks, loads.barrier_s.shape[1]))
    rank_bytes = np.zeros((num_ranks, loads.bytes.shape[1]))
    for g in np.argsort(-seconds, kind="stable").tolist():
        fits = ((rank_bytes + loads.bytes[g]) <= loads.room_bytes).all(axis=1)
        if not fits.any():
            return None
        rank = int(np.argmin(np.where(fits, rank_s.sum(axis=1), np.inf)))
        rank_of[g] = rank
        rank_s[rank] += loads.barrier_s[g]
        rank_bytes[rank] += loads.bytes[g]
    for _ in range(IMPROVING_STEPS):
        if not _improve(loads, rank_of, num_ranks):
            break
    return rank_of


def compute_s(loads: GroupLoads, rank_of: np.ndarray, num_ranks: int) -> float:
    """The compute seconds of a group-to-rank map: per barrier the slowest rank, summed."""
    return float(_rank_sums(loads.barrier_s, rank_of, num_ranks).max(axis=0).sum())


def _rank_sums(values: np.ndarray, rank_of: np.ndarray, num_ranks: int) -> np.ndarray:
    sums = np.zeros((num_ranks, values.shape[1]))
    np.add.at(sums, rank_of, values)
    return sums


def _improve(loads: GroupLoads, rank_of: np.ndarray, num_ranks: int, keep: _Residues | None = None) -> bool:
    """Apply the move (a group of the slowest rank to another) or swap (it and a group of another rank)
    that lowers :func:`compute_s` most within the room and keeps ``keep``'s residues (the first found on
    ties); whether one did. ``rank_of`` changes in place."""
    rank_s = _rank_sums(loads.barrier_s, rank_of, num_ranks)
    slowest = int(np.argmax(rank_s.sum(axis=1)))
    g, h, to = _exchanges(rank_of, slowest, num_ranks, into=False)
    trial = _trials(loads, rank_of, num_ranks, g, h, to)
    if keep is not None:
        trial = np.where(keep.kept(rank_of, g, h, to), trial, np.inf)
    if trial.size == 0:
        return False
    k = int(np.argmin(trial))
    if not trial[k] < float(rank_s.max(axis=0).sum()) * (1 - 1e-12):
        return False
    _apply(rank_of, g[k], h[k], to[k])
    return True


@dataclass(frozen=True, kw_only=True, eq=False)
class _Residues:
    """Ranks whose tokens must stay a multiple of ``chunk_tokens`` (``aligned``, a mask over ranks)."""

    tokens: np.ndarray
    chunk_tokens: int
    aligned: np.ndarray

    def kept(self, rank_of: np.ndarray, g: np.ndarray, h: np.ndarray, to: np.ndarray) -> np.ndarray:
        """Per exchange of :func:`_exchanges`, whether it leaves every aligned rank aligned."""
        delta = self.tokens[g] - np.concatenate([self.tokens, [0]])[h]
        touches = self.aligned[rank_of[g]] | self.aligned[to]
        return ~touches | (delta % self.chunk_tokens == 0)


def _exchanges(
    rank_of: np.ndarray, rank: int, num_ranks: int, *, into: bool, partners: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exchanges between ``rank`` and ``partners`` (default: every other rank) as arrays ``(g, h, to)``:
    group ``g`` goes to rank ``to``; ``h`` (``-1`` for none) comes back from ``to`` to g's rank. Moves of
    ``rank``'s groups out and swaps, and with ``into``, moves of the partners' groups into ``rank``."""
    if partners is None:
        partners = np.array([r for r in range(num_ranks) if r != rank], dtype=np.int64)
    mine = np.flatnonzero(rank_of == rank)
    others = np.flatnonzero(np.isin(rank_of, partners))
    g = [np.repeat(mine, partners.size), np.repeat(mine, others.size)]
    h = [np.full(mine.size * partners.size, -1), np.tile(others, mine.size)]
    to = [np.tile(partners, mine.size), np.tile(rank_of[others], mine.size)]
    if into:
        g.append(others)
        h.append(np.full(others.size, -1))
        to.append(np.full(others.size, rank))
    return tuple(np.concatenate(x).astype(np.int64) for x in (g, h, to))


def _trials(
    loads: GroupLoads, rank_of: np.ndarray, num_ranks: int, g: np.ndarray, h: np.ndarray, to: np.ndarray
) -> np.ndarray:
    """The compute seconds after each exchange of :func:`_exchanges` (infinite where it leaves a rank
    over its room)."""
    rank_s = _rank_sums(loads.barrier_s, rank_of, num_ranks)
    rank_bytes = _rank_sums(loads.bytes, rank_of, num_ranks)
    come = rank_of[g]
    zero_s = np.zeros((1, loads.barrier_s.shape[1]))
    zero_bytes = np.zeros((1, loads.bytes.shape[1]))
    moved = loads.barrier_s[g] - np.concatenate([loads.barrier_s, zero_s])[h]
    moved_bytes = loads.bytes[g] - np.concatenate([loads.bytes, zero_bytes])[h]
    fits = ((rank_bytes[to] + moved_bytes <= loads.room_bytes).all(axis=1)) & (
        (rank_bytes[come] - moved_bytes <= loads.room_bytes).all(axis=1)
    )
    rest = np.array([[_max_without(rank_s, a, b) for b in range(num_ranks)] for a in range(num_ranks)])
    trial = np.maximum(np.maximum(rest[come, to], rank_s[come] - moved), rank_s[to] + moved).sum(axis=1)
    return np.where(fits, trial, np.inf)


def _apply(rank_of: np.ndarray, g: int, h: int, to: int) -> None:
    """Carry out one exchange of :func:`_exchanges`."""
    if h >= 0:
        rank_of[h] = rank_of[g]
    rank_of[g] = to


def _max_without(rank_s: np.ndarray, a: int, b: int) -> np.ndarray:
    """Per barrier, the slowest rank's seconds among ranks other than ``a`` and ``b`` (zero if none)."""
    keep = np.ones(rank_s.shape[0], dtype=bool)
    keep[[a, b]] = False
    return rank_s[keep].max(axis=0) if keep.any() else np.zeros(rank_s.shape[1])


def align_ranks(
    loads: GroupLoads, tokens: np.ndarray, rank_of: np.ndarray, num_ranks: int, chunk_tokens: int
) -> np.ndarray | None:
    """``rank_of`` changed so that every rank but the last owns a whole number of chunks of tokens
    (``tokens``: per group), so that ranks' blocks of whole groups, laid out rank after rank, meet on
    chunk boundaries; ``None`` when not found. Each rank in turn may be the one left unaligned (ranks
    are relabelled so it is the last), keeping the least compute seconds (the first on ties)."""
    best: np.ndarray | None = None
    best_s = np.inf
    for free in range(num_ranks - 1, -1, -1):
        label = np.array([r for r in range(num_ranks) if r != free] + [free], dtype=np.int64)
        trial = np.argsort(label)[rank_of]  # rank ``label[k]`` becomes rank k
        if _align(loads, tokens, trial, num_ranks, chunk_tokens):
            seconds = compute_s(loads, trial, num_ranks)
            if seconds < best_s:
                best, best_s = trial, seconds
    return best


def _align(
    loads: GroupLoads, tokens: np.ndarray, rank_of: np.ndarray, num_ranks: int, chunk_tokens: int
) -> bool:
    """Rank by rank but the last, the exchange with a later rank (a move either way or a swap) that
    leaves the rank's tokens a multiple of ``chunk_tokens`` at the least compute seconds within the room,
    then improving exchanges that keep the aligned ranks aligned; whether every rank was aligned.
    ``rank_of`` changes in place."""
    aligned = np.zeros(num_ranks, dtype=bool)
    keep = _Residues(tokens=tokens, chunk_tokens=chunk_tokens, aligned=aligned)
    for rank in range(num_ranks - 1):
        held = int(tokens[rank_of == rank].sum())
        if held % chunk_tokens != 0:
            later = np.arange(rank + 1, num_ranks, dtype=np.int64)
            g, h, to = _exchanges(rank_of, rank, num_ranks, into=True, partners=later)
            out = np.where(to == rank, -tokens[g], tokens[g] - np.concatenate([tokens, [0]])[h])
            trial = _trials(loads, rank_of, num_ranks, g, h, to)
            trial = np.where((held - out) % chunk_tokens == 0, trial, np.inf)
            if trial.size == 0 or not np.isfinite(trial.min()):
                return False
            k = int(np.argmin(trial))
            _apply(rank_of, g[k], h[k], to[k])
        aligned[rank] = True
        for _ in range(ALIGNED_STEPS):
            if not _improve(loads, rank_of, num_ranks, keep):
                break
    return True
