"""Bin packing of indivisible groups of chunks onto CP ranks by predicted seconds, within every rank's
memory room: longest first to the least-loaded rank that fits, then exchanges of groups between ranks,
each the one that lowers the wave's compute seconds (per barrier the slowest rank, summed) most; and,
for blocks laid out rank after rank, exchanges that make every rank's tokens but the last's a whole
number of chunks. Every step is deterministic (the first candidate wins ties)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import combinations

import numpy as np

IMPROVING_STEPS = 64
"""The most improving exchanges :func:`pack_groups` makes after the longest-first placement."""

ALIGN_SLACK = 1e-3
"""How much dearer (relative) than before an exchange of one group may leave a wave's compute seconds
while aligning a rank for :func:`align_ranks` to take it without pricing exchanges of two."""

LISTED_ROWS = 512
"""Up to this many candidate exchanges (before filtering) :func:`_exchanges` lists them one by one in
Python, which is faster than numpy's per-call overhead on so few; above it, it builds them as arrays."""

FAILED_TRIES = 2
"""How many tries :func:`align_ranks` makes, each failing, before it gives up."""

ALIGNED_STEPS = 16
"""The most improving exchanges :func:`align_ranks` makes after aligning each rank."""


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

    @cached_property
    def padded(self) -> tuple[np.ndarray, np.ndarray]:
        """``barrier_s`` and ``bytes`` each with a row of zeros appended (what index ``-1`` reads)."""
        return tuple(np.concatenate([v, np.zeros((1, v.shape[1]))]) for v in (self.barrier_s, self.bytes))


def pack_groups(loads: GroupLoads, num_ranks: int) -> np.ndarray | None:
    """Each group's rank: longest first (predicted seconds; the lower index on ties) to the least-loaded
    rank it leaves within the room (the lower rank on ties), then up to :data:`IMPROVING_STEPS` moves
    or swaps out of the slowest rank; ``None`` when some group fits no rank."""
    seconds = loads.barrier_s.sum(axis=1)
    rank_of = np.full(loads.num_groups, -1, dtype=np.int64)
    rank_s = np.zeros(num_ranks)
    rank_bytes = np.zeros((num_ranks, loads.bytes.shape[1]))
    for g in np.argsort(-seconds, kind="stable").tolist():
        fits = ((rank_bytes + loads.bytes[g]) <= loads.room_bytes).all(axis=1)
        if not fits.any():
            return None
        rank = int(np.argmin(np.where(fits, rank_s, np.inf)))
        rank_of[g] = rank
        rank_s[rank] += seconds[g]
        rank_bytes[rank] += loads.bytes[g]
    return improved_packing(loads, rank_of, num_ranks)


def improved_packing(loads: GroupLoads, rank_of: np.ndarray, num_ranks: int) -> np.ndarray:
    """A copy of ``rank_of`` after up to :data:`IMPROVING_STEPS` moves or swaps out of the slowest rank,
    each the one that lowers :func:`compute_s` most within the room."""
    rank_of = np.array(rank_of, dtype=np.int64)
    for _ in range(IMPROVING_STEPS):
        if not _improve(loads, rank_of, num_ranks, None):
            break
    return rank_of


def compute_s(loads: GroupLoads, rank_of: np.ndarray, num_ranks: int) -> float:
    """The compute seconds of a group-to-rank map: per barrier the slowest rank, summed."""
    return float(_rank_sums(loads.barrier_s, rank_of, num_ranks).max(axis=0).sum())


def align_ranks(
    loads: GroupLoads, tokens: np.ndarray, rank_of: np.ndarray, num_ranks: int, chunk_tokens: int
) -> np.ndarray | None:
    """A copy of ``rank_of`` under which every rank but the last owns a whole number of chunks of tokens
    (``tokens``: per group), so that ranks' blocks of whole groups, laid out rank after rank, meet on
    chunk boundaries; ``None`` when none is found. Each rank in turn may be the one left unaligned
    (ranks relabelled so it is the last), keeping the least compute seconds (the first on ties), until
    one costs at most :data:`ALIGN_SLACK` more than ``rank_of``. Where the first :data:`FAILED_TRIES`
    tries find no alignment the search stops: on the bench suite 262 of 647 searches found none with
    any rank and 10 found one only at a third try or later, while a failing search at CP8 took eight
    tries (about 20 ms for 30 GRPO groups); the quick suite's shuffled GRPO step at CP2 finds its
    cheaper plan at the second try."""
    best: np.ndarray | None = None
    best_s, unaligned_s = np.inf, compute_s(loads, rank_of, num_ranks)
    for free in range(num_ranks - 1, -1, -1):
        label = np.array([r for r in range(num_ranks) if r != free] + [free], dtype=np.int64)
        trial = np.argsort(label)[rank_of]  # rank ``label[k]`` becomes rank k
        if not _align(loads, tokens, trial, num_ranks, chunk_tokens):
            if best is None and num_ranks - free >= FAILED_TRIES:
                break
            continue
        seconds = compute_s(loads, trial, num_ranks)
        if seconds < best_s:
            best, best_s = trial, seconds
        if best_s <= unaligned_s * (1 + ALIGN_SLACK):
            break
    return best


def can_align(tokens: np.ndarray, num_ranks: int, chunk_tokens: int) -> bool:
    """Whether groups of ``tokens`` could be laid out so that every rank holds some and every rank but
    the last a whole number of chunks (:func:`align_ranks` keeps every rank holding a group): a rank's
    groups sum to whole chunks only as one group that does or as two or more, so with ``z`` groups of
    whole chunks among ``n`` at most ``z + (n - z) // 2`` ranks can be aligned."""
    whole = int((tokens % chunk_tokens == 0).sum())
    return tokens.size >= num_ranks and whole + (tokens.size - whole) // 2 >= num_ranks - 1


@dataclass(frozen=True, kw_only=True, eq=False)
class _Exchanges:
    """Exchanges between rank ``rank`` and others: per exchange the ``partner`` rank, the groups going
    ``out`` of ``rank`` to it and those coming ``back`` (rows padded with ``-1``)."""

    rank: int
    partner: np.ndarray
    out: np.ndarray
    back: np.ndarray

    def sums(self, padded: np.ndarray) -> np.ndarray:
        """Per exchange, what ``rank`` gives up of a per-group value (``padded``: rows of groups and a
        last row of zeros)."""
        out, back = self.out, self.back
        return (padded[out[:, 0]] + padded[out[:, 1]]) - (padded[back[:, 0]] + padded[back[:, 1]])

    def apply(self, rank_of: np.ndarray, k: int) -> None:
        """Carry out exchange ``k`` on ``rank_of``."""
        rank_of[self.out[k][self.out[k] >= 0]] = self.partner[k]
        rank_of[self.back[k][self.back[k] >= 0]] = self.rank


def _subsets(groups: np.ndarray, sizes: tuple[int, ...]) -> np.ndarray:
    """Every subset of ``groups`` of each size in ``sizes`` (at most two), as rows of two padded with
    ``-1``."""
    rows = []
    for size in sizes:
        if size == 0:
            rows.append(np.full((1, 2), -1, dtype=np.int64))
        elif size == 1:
            single = np.full((groups.size, 2), -1, dtype=np.int64)
            single[:, 0] = groups
            rows.append(single)
        else:
            first, second = np.triu_indices(groups.size, k=1)
            pairs = np.empty((first.size, 2), dtype=np.int64)
            pairs[:, 0], pairs[:, 1] = groups[first], groups[second]
            rows.append(pairs)
    return rows[0] if len(rows) == 1 else np.concatenate(rows)


@dataclass(frozen=True, kw_only=True, eq=False)
class _Whole:
    """Which exchanges :func:`_exchanges` keeps: with a partner that ``binding`` marks, only those after
    which the exchanging rank holds a whole number of chunks of ``tokens`` (per group; ``held``: what it
    holds now, taken as ``0`` where only the exchanged tokens must be whole chunks)."""

    tokens: np.ndarray
    chunk_tokens: int
    held: int
    binding: np.ndarray

    def residue(self, row: tuple[int, int], tokens: list[int]) -> int:
        """The tokens of one subset ``row`` (padded with ``-1``; ``tokens`` as a list) modulo a chunk."""
        first, second = row
        return (
            (tokens[first] if first >= 0 else 0) + (tokens[second] if second >= 0 else 0)
        ) % self.chunk_tokens

    def residues(self, subsets: np.ndarray) -> np.ndarray:
        """Per row of ``subsets``, its tokens modulo a chunk."""
        padded = np.append(self.tokens, 0)
        return padded[subsets].sum(axis=1) % self.chunk_tokens


def _exchanges(
    rank_of: np.ndarray,
    rank: int,
    partners: list[int],
    shapes: tuple[tuple[tuple[int, ...], ...], ...],
    whole: _Whole | None = None,
) -> _Exchanges:
    """The exchanges between ``rank`` and each of ``partners`` of the given ``shapes`` (pairs of subset
    sizes going out and coming back; the empty exchange left out), in order: partner, shape, then
    out-subset, then back-subset; with ``whole`` given only those it keeps."""
    members: list[list[int]] = [[] for _ in range(max(int(rank_of.max()), rank, *partners) + 1)]
    for g, r in enumerate(rank_of.tolist()):
        members[r].append(g)
    num_rows = sum(
        _num_subsets(len(members[rank]), out_sizes) * _num_subsets(len(members[p]), back_sizes)
        for p in partners
        for out_sizes, back_sizes in shapes
    )
    if num_rows > LISTED_ROWS:
        return _array_exchanges(rank_of, rank, partners, shapes, whole)
    outs = [_subset_rows(members[rank], out_sizes) for out_sizes, _ in shapes]
    partner, out, back = [], [], []
    tokens = whole.tokens.tolist() if whole is not None else []
    lefts = (
        [[whole.held - whole.residue(a, tokens) for a in rows] for rows in outs] if whole is not None else []
    )
    for other in partners:
        for s, (_, back_sizes) in enumerate(shapes):
            backs = _subset_rows(members[other], back_sizes)
            bound = whole is not None and bool(whole.binding[other])
            taken = [whole.residue(b, tokens) for b in backs] if bound else [0] * len(backs)
            for a, left in zip(outs[s], lefts[s] if bound else [0] * len(outs[s]), strict=True):
                for b, b_residue in zip(backs, taken, strict=True):
                    if a[0] < 0 and b[0] < 0:
                        continue
                    if bound and (left + b_residue) % whole.chunk_tokens:
                        continue
                    partner.append(other)
                    out.extend(a)
                    back.extend(b)
    return _Exchanges(
        rank=rank,
        partner=np.array(partner, dtype=np.int64),
        out=np.array(out, dtype=np.int64).reshape(-1, 2),
        back=np.array(back, dtype=np.int64).reshape(-1, 2),
    )


def _num_subsets(num_groups: int, sizes: tuple[int, ...]) -> int:
    """How many rows :func:`_subsets` gives for ``num_groups`` groups."""
    return sum((1, num_groups, num_groups * (num_groups - 1) // 2)[size] for size in sizes)


def _subset_rows(groups: list[int], sizes: tuple[int, ...]) -> list[tuple[int, int]]:
    """:func:`_subsets` as a list of pairs."""
    rows: list[tuple[int, int]] = []
    for size in sizes:
        if size == 0:
            rows.append((-1, -1))
        elif size == 1:
            rows.extend((g, -1) for g in groups)
        else:
            rows.extend(combinations(groups, 2))
    return rows


def _array_exchanges(
    rank_of: np.ndarray,
    rank: int,
    partners: list[int],
    shapes: tuple[tuple[tuple[int, ...], ...], ...],
    whole: _Whole | None,
) -> _Exchanges:
    """:func:`_exchanges`, built as arrays."""
    partner, out, back = [], [], []
    mine = np.flatnonzero(rank_of == rank)
    outs = [_subsets(mine, out_sizes) for out_sizes, _ in shapes]
    out_residues = [whole.residues(a) for a in outs] if whole is not None else []
    for other in partners:
        theirs = np.flatnonzero(rank_of == other)
        for s, (_, back_sizes) in enumerate(shapes):
            a, b = outs[s], _subsets(theirs, back_sizes)
            keep = (a[:, 0] >= 0)[:, None] | (b[:, 0] >= 0)[None, :]
            if whole is not None and whole.binding[other]:
                given = out_residues[s][:, None] - whole.residues(b)[None, :]
                keep &= (whole.held - given) % whole.chunk_tokens == 0
            rows, cols = np.nonzero(keep)
            partner.append(np.full(rows.size, other, dtype=np.int64))
            out.append(a[rows])
            back.append(b[cols])
    return _Exchanges(
        rank=rank,
        partner=np.concatenate([np.zeros(0, dtype=np.int64), *partner]),
        out=np.concatenate([np.zeros((0, 2), dtype=np.int64), *out]),
        back=np.concatenate([np.zeros((0, 2), dtype=np.int64), *back]),
    )


SINGLE = (((0, 1), (0, 1)),)
"""Exchange shapes: a move either way or a swap of one group for one."""

DOUBLE = (((2,), (0, 1)), ((0, 1), (2,)))
"""Exchange shapes: two groups one way, at most one the other."""


def _trials(loads: GroupLoads, rank_of: np.ndarray, num_ranks: int, ex: _Exchanges) -> np.ndarray:
    """The compute seconds after each exchange (infinite where it leaves a rank over its room or without
    a group: every rank of a group runs its own tokens)."""
    rank_s = _rank_sums(loads.barrier_s, rank_of, num_ranks)
    rank_bytes = _rank_sums(loads.bytes, rank_of, num_ranks)
    moved, moved_bytes = (ex.sums(padded) for padded in loads.padded)
    fits = ((rank_bytes[ex.partner] + moved_bytes <= loads.room_bytes).all(axis=1)) & (
        (rank_bytes[ex.rank] - moved_bytes <= loads.room_bytes).all(axis=1)
    )
    counts = np.bincount(rank_of, minlength=num_ranks)
    moved_count = (ex.out >= 0).sum(axis=1) - (ex.back >= 0).sum(axis=1)
    fits &= (counts[ex.rank] - moved_count > 0) & (counts[ex.partner] + moved_count > 0)
    rest = _max_without(rank_s, ex.rank)
    after = np.maximum(rank_s[ex.rank] - moved, rank_s[ex.partner] + moved)
    return np.where(fits, np.maximum(rest[ex.partner], after).sum(axis=1), np.inf)


def _improve(loads: GroupLoads, rank_of: np.ndarray, num_ranks: int, keep: _Residues | None) -> bool:
    """Apply the move or swap out of the slowest rank that lowers :func:`compute_s` most within the room
    and keeps ``keep``'s aligned ranks aligned; whether one did. ``rank_of`` changes in place."""
    rank_s = _rank_sums(loads.barrier_s, rank_of, num_ranks)
    slowest = int(np.argmax(rank_s.sum(axis=1)))
    whole = None if keep is None else keep.whole(slowest)
    ex = _exchanges(rank_of, slowest, [r for r in range(num_ranks) if r != slowest], SINGLE, whole)
    if ex.partner.size == 0:
        return False
    trial = _trials(loads, rank_of, num_ranks, ex)
    k = int(np.argmin(trial))
    if not trial[k] < float(rank_s.max(axis=0).sum()) * (1 - 1e-12):
        return False
    ex.apply(rank_of, k)
    return True


@dataclass(frozen=True, kw_only=True, eq=False)
class _Residues:
    """Ranks whose tokens must stay a whole number of chunks (``aligned``, a mask over ranks)."""

    tokens: np.ndarray
    chunk_tokens: int
    aligned: np.ndarray

    def whole(self, rank: int) -> _Whole:
        """The exchanges of ``rank`` that leave every aligned rank aligned."""
        return _Whole(
            tokens=self.tokens,
            chunk_tokens=self.chunk_tokens,
            held=0,
            binding=self.aligned | self.aligned[rank],
        )


def _align(
    loads: GroupLoads, tokens: np.ndarray, rank_of: np.ndarray, num_ranks: int, chunk_tokens: int
) -> bool:
    """Rank by rank but the last: the exchange with a later rank (:data:`SINGLE` or :data:`DOUBLE`) that
    leaves the rank's tokens a whole number of chunks at the least compute seconds within the room,
    then improving exchanges that keep the aligned ranks aligned; whether every rank was aligned.
    ``rank_of`` changes in place."""
    keep = _Residues(tokens=tokens, chunk_tokens=chunk_tokens, aligned=np.zeros(num_ranks, dtype=bool))
    for rank in range(num_ranks - 1):
        held = int(tokens[rank_of == rank].sum())
        if held % chunk_tokens and not _aligning(loads, tokens, rank_of, num_ranks, rank, chunk_tokens):
            return False
        keep.aligned[rank] = True
        for _ in range(ALIGNED_STEPS):
            if not _improve(loads, rank_of, num_ranks, keep):
                break
    return True


def _aligning(
    loads: GroupLoads, tokens: np.ndarray, rank_of: np.ndarray, num_ranks: int, rank: int, chunk_tokens: int
) -> bool:
    """Apply the exchange between ``rank`` and a later rank that leaves ``rank``'s tokens a whole number
    of chunks at the least compute seconds within the room: a :data:`SINGLE` one where it costs no more
    than :data:`ALIGN_SLACK` over the seconds before, else the better of it and the best
    :data:`DOUBLE` one; whether one was found. ``rank_of`` changes in place."""
    before = compute_s(loads, rank_of, num_ranks)
    held = int(tokens[rank_of == rank].sum())
    best: tuple[float, _Exchanges, int] | None = None
    whole = _Whole(
        tokens=tokens, chunk_tokens=chunk_tokens, held=held, binding=np.ones(num_ranks, dtype=bool)
    )
    for shapes in (SINGLE, DOUBLE):
        ex = _exchanges(rank_of, rank, list(range(rank + 1, num_ranks)), shapes, whole)
        if ex.partner.size == 0:
            continue
        trial = _trials(loads, rank_of, num_ranks, ex)
        k = int(np.argmin(trial))
        if np.isfinite(trial[k]) and (best is None or trial[k] < best[0]):
            best = (float(trial[k]), ex, k)
        if best is not None and best[0] <= before * (1 + ALIGN_SLACK):
            break
    if best is None:
        return False
    best[1].apply(rank_of, best[2])
    return True


def _rank_sums(values: np.ndarray, rank_of: np.ndarray, num_ranks: int) -> np.ndarray:
    """Per rank, the sum of its groups' rows of ``values`` (groups added in order)."""
    columns = [np.bincount(rank_of, weights=column, minlength=num_ranks) for column in values.T]
    return np.stack(columns, axis=1) if columns else np.zeros((num_ranks, 0))


def _max_without(rank_s: np.ndarray, a: int) -> np.ndarray:
    """Per rank ``b`` and barrier, the slowest rank's seconds among ranks other than ``a`` and ``b``
    (zero if none), shape ``(ranks, barriers)``."""
    num_ranks = rank_s.shape[0]
    left = ~np.eye(num_ranks, dtype=bool)
    left[:, a] = False
    rest = np.where(left[:, :, None], rank_s[None, :, :], -np.inf).max(axis=1)
    return np.where(left.any(axis=1)[:, None], rest, 0.0)
