"""Memory floors: for every wave and envelope, ``static + Σ coef · rank bound ≤ B / safety``, in KiB.

The coefficients are the card's own, the numbers the numpy evaluator prices with, rounded as
:mod:`cpplan.cpsat.scaling` says. A quantity bounded through the per-rank chunk cap is priced per chunk
(at most one KiB of rounding per 128 tokens). Ranks are symmetric under the bounds of
:mod:`cpplan.cpsat.chunk_caps`, so one row per (wave, envelope) stands for every rank; the rows of a wave
that takes an exact column are not enforced.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from cpplan.cpsat.chunk_caps import OwnershipVars
from cpplan.cpsat.scaling import Scaling
from cpplan.pricing.ownership import CHUNK_TOKENS
from cpplan.spec.card import ResolvedCard
from cpplan.spec.quantities import QUANTITY_INDEX, QUANTITY_NAMES


@dataclass(frozen=True, kw_only=True)
class MemoryRows:
    """Integer envelope rows: per envelope, the static KiB, KiB per chunk of the cap, and KiB per unit
    of each other bounded quantity; and the per-rank budget in KiB."""

    static_kib: tuple[int, ...]
    per_chunk_kib: tuple[int, ...]
    per_token_kib: tuple[tuple[int, int], ...]
    per_unit_kib: tuple[dict[str, int], ...]
    memory_kib: int
    exact_tokens: bool

    def rank_kib(self, envelope: int, cap: int, values: dict[str, int]) -> int:
        """The integer model's price of a rank bounded by ``cap`` chunks (or, with ``exact_tokens``,
        owning ``values["tokens"]`` tokens) and ``values`` for the other quantities."""
        if self.exact_tokens:
            whole, fraction = self.per_token_kib[envelope]
            tokens = values["tokens"]
            folded = whole * tokens - (-fraction * tokens // CHUNK_TOKENS)
        else:
            folded = self.per_chunk_kib[envelope] * cap
        return (
            self.static_kib[envelope]
            + folded
            + sum(coef * values[name] for name, coef in self.per_unit_kib[envelope].items())
        )


def memory_rows(
    card: ResolvedCard,
    memory_bytes: int,
    scaling: Scaling,
    *,
    folded: frozenset[str],
) -> MemoryRows:
    """The envelopes of ``card`` in integer units; the quantities in ``folded`` (those the rank's chunk
    cap bounds, :func:`~cpplan.cpsat.chunk_caps.folded_quantities`) are priced per chunk of the cap. At
    CP1 the one rank owns exactly the packed tokens, so those are priced per token at 1/128 KiB
    precision (no partial-chunk rounding)."""
    coef = card.envelope_coefficients()
    statics, per_chunk, per_token, per_unit = [], [], [], []
    for e in range(card.num_envelopes):
        token_bytes = sum(float(coef[e, QUANTITY_INDEX[name]]) for name in folded)
        per_chunk.append(scaling.memory_coef(token_bytes * CHUNK_TOKENS))
        per_token.append(scaling.memory_coef_split(token_bytes, CHUNK_TOKENS))
        statics.append(scaling.static(float(card.envelope_static_bytes[e])))
        per_unit.append(
            {
                name: scaling.memory_coef(float(coef[e, QUANTITY_INDEX[name]]))
                for name in QUANTITY_NAMES
                if name not in folded and coef[e, QUANTITY_INDEX[name]] > 0
            }
        )
    return MemoryRows(
        static_kib=tuple(statics),
        per_chunk_kib=tuple(per_chunk),
        per_token_kib=tuple(per_token),
        per_unit_kib=tuple(per_unit),
        memory_kib=scaling.memory_kib(memory_bytes, card.safety),
        exact_tokens=card.topology.cp == 1,
    )


def needed_quantities(card: ResolvedCard) -> frozenset[str]:
    """Quantities some envelope of ``card`` prices."""
    used = np.flatnonzero(card.envelope_coefficients().max(axis=0) > 0)
    return frozenset(QUANTITY_NAMES[q] for q in used.tolist())


def add_memory(
    model: cp_model.CpModel,
    rows: MemoryRows,
    ownership: OwnershipVars,
    used: list[cp_model.IntVar],
    column: list[cp_model.IntVar | None],
) -> dict[tuple[int, int], cp_model.IntVar]:
    """One constraint per wave and envelope, enforced on used waves that take no exact column (``column[w]``,
    see :mod:`~cpplan.cpsat.columns`). Returns the
    rounding variables ``r[w, e] = ceil(fraction · tokens / 128)`` of the exact-token (CP1) rows."""
    rounding: dict[tuple[int, int], cp_model.IntVar] = {}
    for w, bounds in enumerate(ownership.bounds):
        active = [used[w]] if column[w] is None else [used[w], ~column[w]]
        for e in range(len(rows.static_kib)):
            if rows.exact_tokens:
                whole, fraction = rows.per_token_kib[e]
                r = model.new_int_var(0, fraction * ownership.packed_ub, f"r[{w},{e}]")
                model.add(CHUNK_TOKENS * r >= fraction * bounds["tokens"])
                rounding[(w, e)] = r
                folded = whole * bounds["tokens"] + r
            else:
                folded = rows.per_chunk_kib[e] * ownership.cap[w]
            load = folded + sum(coef * bounds[name] for name, coef in rows.per_unit_kib[e].items())
            model.add(rows.static_kib[e] + load <= rows.memory_kib).only_enforce_if(active)
    return rounding
