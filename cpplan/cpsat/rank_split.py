"""A contiguous, rank-ordered split of one wave's chunks as CP-SAT variables (the order encoding).

``y[r][c]`` (``1 <= r < cp``) is 1 when chunk ``c``'s owner is at least ``r``: non-decreasing in ``c``
and non-increasing in ``r``. Rank ``r`` owns chunk ``c`` when ``y[r][c] - y[r + 1][c] = 1``, so a rank's
sum of a per-chunk constant is a difference of two linear sums (:meth:`RankSplit.owned`), and a constant
read where rank ``r``'s range starts is ``Σ_c f[c] · (y[r][c] - y[r][c - 1])``
(:meth:`RankSplit.at_start`). Each boundary moves inside a window around the known ownerships'
(:func:`boundary_windows`); outside it ``y`` is a constant, so coefficients stay far below 2^31.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from ortools.sat.python import cp_model


def seed_boundaries(owner: np.ndarray, num_ranks: int) -> list[int]:
    """Where each rank's range starts under a non-decreasing chunk ownership: ``e_r`` for ``r`` in
    ``0..cp`` (``e_0 = 0``, ``e_cp = num_chunks``)."""
    owner = np.asarray(owner, dtype=np.int64)
    return [int(np.searchsorted(owner, r, side="left")) for r in range(num_ranks)] + [int(owner.size)]


def is_rank_ordered(owner: np.ndarray) -> bool:
    """Whether ``owner`` is contiguous in rank order (non-decreasing), as the model's splits are."""
    owner = np.asarray(owner)
    return bool(owner.size == 0 or (np.diff(owner) >= 0).all())


def boundary_windows(
    seeds: Sequence[Sequence[int]], num_chunks: int, window_chunks: int
) -> list[tuple[int, int]]:
    """Per boundary ``r`` (``0..cp``) the chunks ``[lo, hi]`` its start may take: every seed's boundary ``±
    window_chunks`` (the whole wave when that covers it); boundary 0 is chunk 0, boundary ``cp`` the end."""
    num_ranks = len(seeds[0]) - 1
    windows = [(0, 0)]
    for r in range(1, num_ranks):
        lo = max(0, min(seed[r] for seed in seeds) - window_chunks)
        hi = min(num_chunks, max(seed[r] for seed in seeds) + window_chunks)
        windows.append((lo, hi))
    windows.append((num_chunks, num_chunks))
    return windows


@dataclass(eq=False)
class RankSplit:
    """The split variables of one wave and the linear expressions read from them."""

    model: cp_model.CpModel
    num_chunks: int
    num_ranks: int
    windows: list[tuple[int, int]]
    name: str
    y: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)
    fixed_owner: np.ndarray = field(init=False, repr=False)
    """Per chunk, its owner counted over the boundaries whose window it lies outside."""
    in_window: np.ndarray = field(init=False, repr=False)
    """Per chunk, whether some boundary's window holds it (its owner is then a variable)."""

    def __post_init__(self) -> None:
        chunks = np.arange(self.num_chunks)
        self.fixed_owner = np.zeros(self.num_chunks, dtype=np.int64)
        self.in_window = np.zeros(self.num_chunks, dtype=bool)
        for r in range(1, self.num_ranks):
            lo, hi = self.windows[r]
            self.fixed_owner += chunks >= hi
            self.in_window[lo:hi] = True
        for r in range(1, self.num_ranks):
            lo, hi = self.windows[r]
            for c in range(lo, hi):
                self.y[(r, c)] = self.model.new_bool_var(f"{self.name}.y[{r},{c}]")
            for c in range(lo, hi - 1):
                self.model.add(self.y[(r, c)] <= self.y[(r, c + 1)])
        for r in range(1, self.num_ranks - 1):
            lo, hi = self.windows[r + 1]
            for c in range(lo, hi):
                upper = self.value(r, c)
                if not isinstance(upper, int):
                    self.model.add(self.y[(r + 1, c)] <= upper)
                elif upper == 0:
                    self.model.add(self.y[(r + 1, c)] == 0)

    def value(self, r: int, c: int) -> int | cp_model.IntVar:
        """``y[r][c]``: a variable inside the window, else its constant (``c < 0``: 0; ``c >= C``: 1,
        so a boundary at the end reads as a start there)."""
        if r <= 0:
            return 1
        if r >= self.num_ranks:
            return 0
        if c < 0:
            return 0
        lo, hi = self.windows[r]
        if c < lo:
            return 0
        if c >= hi:
            return 1
        return self.y[(r, c)]

    def suffix(self, r: int, amounts: np.ndarray) -> cp_model.LinearExprT:
        """``Σ_c amounts[c] · y[r][c]``: the amounts of the chunks owned by ranks ``>= r``."""
        if r <= 0:
            return int(amounts.sum())
        if r >= self.num_ranks:
            return 0
        lo, hi = self.windows[r]
        const = int(amounts[hi:].sum())
        terms = [(self.y[(r, c)], int(amounts[c])) for c in range(lo, hi) if amounts[c] != 0]
        return _weighted(terms, const)

    def owned(self, r: int, amounts: np.ndarray) -> cp_model.LinearExprT:
        """Rank ``r``'s sum of a per-chunk constant over the chunks it owns."""
        return self.suffix(r, amounts) - self.suffix(r + 1, amounts)

    def at_start(self, r: int, table: np.ndarray) -> cp_model.LinearExprT:
        """A per-boundary constant (length ``C + 1``) read at rank ``r``'s start ``e_r``."""
        lo, hi = self.windows[r]
        if r <= 0 or r >= self.num_ranks or lo == hi:
            return int(table[lo])
        terms: list[tuple[cp_model.IntVar, int]] = []
        const = 0
        for c in range(lo, hi + 1):
            if table[c] == 0:
                continue
            here, before = self.value(r, c), self.value(r, c - 1)
            const += _add(terms, here, int(table[c])) + _add(terms, before, -int(table[c]))
        return _weighted(terms, const)

    def owner_gap(self, a: int, b: int) -> tuple[int, list[cp_model.LinearExprT]]:
        """``owner(b) - owner(a)`` for chunks ``a < b``: its constant part and the variable differences
        ``y[r][b] - y[r][a]`` (each 0 or 1)."""
        if 0 <= a < b < self.num_chunks and not (self.in_window[a] or self.in_window[b]):
            return int(self.fixed_owner[b] - self.fixed_owner[a]), []
        const, parts = 0, []
        for r in range(1, self.num_ranks):
            hi_b, lo_a = self.value(r, b), self.value(r, a)
            if isinstance(hi_b, int) and isinstance(lo_a, int):
                const += hi_b - lo_a
            else:
                parts.append(hi_b - lo_a)
        return const, parts

    def owners(self, solver: cp_model.CpSolver) -> np.ndarray:
        """The chosen chunk owners."""
        owner = np.zeros(self.num_chunks, dtype=np.int64)
        for r in range(1, self.num_ranks):
            row = np.array(
                [_solved(solver, self.value(r, c)) for c in range(self.num_chunks)], dtype=np.int64
            )
            owner += row
        return owner

    def hint(self, boundaries: Sequence[int]) -> None:
        """Hint the split whose rank ``r`` starts at ``boundaries[r]`` (clipped to the windows)."""
        for (r, c), var in self.y.items():
            self.model.add_hint(var, c >= boundaries[r])


def _add(terms: list, value, coef: int) -> int:
    if isinstance(value, int):
        return value * coef
    terms.append((value, coef))
    return 0


def _weighted(terms: list[tuple[cp_model.IntVar, int]], const: int) -> cp_model.LinearExprT:
    if not terms:
        return const
    variables, coefs = zip(*terms, strict=True)
    return cp_model.LinearExpr.weighted_sum(list(variables), list(coefs)) + const


def _solved(solver: cp_model.CpSolver, value) -> int:
    return value if isinstance(value, int) else int(solver.boolean_value(value))
