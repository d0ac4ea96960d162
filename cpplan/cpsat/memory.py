"""Memory floors: for every wave and envelope, ``static + Σ coef · rank bound ≤ B / safety``, in KiB.

The coefficients are the card's own, the numbers the numpy evaluator prices with, rounded as
:mod:`cpplan.cpsat.scaling` says. A quantity bounded through the per-rank chunk cap is priced per chunk
(at most one KiB of rounding per 128 tokens). Ranks are symmetric under the bounds of
:mod:`cpplan.cpsat.chunk_caps`, so one row per (wave, envelope) stands for every rank; a wave in the
weighted mode uses ``static + weight_cap + (one segment) + Σ coef · (other bounds) ≤ B / safety``; the
rows of a wave that takes an exact column are not enforced.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from cpplan.cpsat.chunk_caps import OwnershipVars
from cpplan.cpsat.scaling import Scaling
from cpplan.pricing.ownership import CHUNK_TOKENS
from cpplan.spec.card import ResolvedCard
from cpplan.spec.quantities import QUANTITIES, QUANTITY_INDEX, QUANTITY_NAMES, SEGMENT_COLUMNS

_SEGMENT_COUNTS = frozenset(q.name for q in QUANTITIES if q.count == "segment")
"""Quantities the weighted mode charges through the chunk weight's segment starts."""


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
    weighted: bool = False
    weight_token_bytes: float = 0.0
    weight_start_bytes: float = 0.0
    weight_chunk_kib: int = 0
    weight_start_kib: int = 0
    weight_max_kib: int = 0

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

    def rank_kib_weighted(self, envelope: int, weight_cap_kib: int, values: dict[str, int]) -> int:
        """The integer model's price of a rank whose chunks weigh at most ``weight_cap_kib`` (the
        weighted mode of :mod:`cpplan.cpsat.chunk_caps`), with ``values`` for the other quantities: numbers,
        or the model's own variables and expressions (the weighted row :func:`add_memory` states)."""
        return (
            self.static_kib[envelope]
            + weight_cap_kib
            + self.weight_start_kib
            + sum(
                coef * values[name]
                for name, coef in self.per_unit_kib[envelope].items()
                if name not in _SEGMENT_COUNTS
            )
        )


def memory_rows(
    card: ResolvedCard,
    memory_bytes: int,
    scaling: Scaling,
    *,
    folded: frozenset[str],
    max_starts_per_chunk: int = CHUNK_TOKENS,
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
        **_weighted_rows(card, coef, scaling, folded, max_starts_per_chunk),
        static_kib=tuple(statics),
        per_chunk_kib=tuple(per_chunk),
        per_token_kib=tuple(per_token),
        per_unit_kib=tuple(per_unit),
        memory_kib=scaling.memory_kib(memory_bytes, card.safety),
        exact_tokens=card.topology.cp == 1,
    )


def _weighted_rows(
    card: ResolvedCard, coef: np.ndarray, scaling: Scaling, folded: frozenset[str], max_starts: int
) -> dict:
    """The weighted mode (CP > 1, every token count folded into the chunk cap): one chunk weight, the
    largest per-token and per-segment bytes of any envelope, bounds every envelope's token and segment
    terms at once."""
    token_bytes = max(
        sum(float(coef[e, QUANTITY_INDEX[n]]) for n in folded) for e in range(card.num_envelopes)
    )
    start_bytes = float(coef[:, list(SEGMENT_COLUMNS)].max())
    every_token_count_folded = all(q.name in folded for q in QUANTITIES if q.count == "token")
    return {
        "weighted": card.topology.cp > 1 and every_token_count_folded,
        "weight_token_bytes": token_bytes,
        "weight_start_bytes": start_bytes,
        "weight_chunk_kib": scaling.memory_coef(token_bytes * CHUNK_TOKENS),
        "weight_start_kib": scaling.memory_coef(start_bytes),
        "weight_max_kib": scaling.memory_coef(token_bytes * CHUNK_TOKENS + start_bytes * max_starts),
    }


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
    see :mod:`~cpplan.cpsat.columns`), in the weighted mode's form when the wave takes it. Returns the
    rounding variables ``r[w, e] = ceil(fraction · tokens / 128)`` of the exact-token (CP1) rows."""
    rounding: dict[tuple[int, int], cp_model.IntVar] = {}
    for w, bounds in enumerate(ownership.bounds):
        weighted = ownership.weighted[w]
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
            row = model.add(rows.static_kib[e] + load <= rows.memory_kib)
            if weighted is None:
                row.only_enforce_if(active)
                continue
            row.only_enforce_if([*active, ~weighted])
            by_weight = rows.rank_kib_weighted(e, ownership.weight_cap[w], bounds)
            model.add(by_weight <= rows.memory_kib).only_enforce_if([*active, weighted])
    return rounding
