"""CP ownership in the joint model: per-rank chunk caps while the model chooses waves, exact owners after.

Per wave the model decides ``chunks[w] = ceil(packed[w] / 128)`` and a per-rank cap ``K[w]`` with
``cp · K[w] ≥ chunks[w]``, and bounds every rank's local quantities from above (tokens ``≤ 128 · K``;
gradient / loss tokens ``≤ min(that, wave total)``; segments touched ``≤`` the wave's segment starts;
pairs and gathered tokens ``≤`` the wave's), so one memory row per wave and envelope covers every rank.
:func:`cpplan.cpsat.realize.capped_owner` then assigns chunks within the cap, balancing predicted
seconds, so realized quantities never exceed the model's bounds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from cpplan.cpsat.sharing import WaveTotals
from cpplan.cpsat.waves import WaveVars
from cpplan.pricing.ownership import CHUNK_TOKENS
from cpplan.spec.quantities import QUANTITIES, RANK_BOUNDS, check_rules


@dataclass(frozen=True, kw_only=True, eq=False)
class OwnershipVars:
    """``chunks[w]``, ``cap[w]`` (chunks per rank) and the per-rank upper bounds, per quantity, as
    ``(expression, tokens per unit)`` pairs: ``bounds[w][quantity]``."""

    chunks: list[cp_model.IntVar]
    cap: list[cp_model.IntVar]
    packed_ub: int
    bounds: list[dict[str, cp_model.LinearExprT]]
    min_vars: list[dict[str, cp_model.IntVar]]


def folded_quantities(all_flagged: dict[str, bool]) -> frozenset[str]:
    """The quantities a rank's chunk cap bounds directly: its tokens, and the flag-restricted token counts
    whose flag every request of the workload has (those equal the rank's tokens)."""
    return frozenset(
        q.name
        for q in QUANTITIES
        if q.rank_bound == "chunk_cap" or (q.rank_bound == "chunk_cap_or_total" and all_flagged[q.only])
    )


def add_ownership(
    model: cp_model.CpModel,
    waves: WaveVars,
    totals: WaveTotals,
    num_ranks: int,
    *,
    folded: frozenset[str],
    needed: frozenset[str],
) -> OwnershipVars:
    """Chunk counts, per-rank caps and, per wave, a bound for every quantity named in ``needed`` by the
    rule its registry entry states (:data:`~cpplan.spec.quantities.RANK_BOUNDS`); the quantities in
    ``folded`` (:func:`folded_quantities`) are bounded by the same ``128 · K`` as the tokens."""
    chunk_ub = -(-totals.packed_tokens_ub // CHUNK_TOKENS)
    chunks, caps, bounds, min_vars = [], [], [], []
    for w in range(waves.num_waves):
        packed = totals.packed_tokens[w]
        chunk = model.new_int_var(0, chunk_ub, f"chunks[{w}]")
        model.add(CHUNK_TOKENS * chunk >= packed)
        model.add(CHUNK_TOKENS * chunk <= packed + CHUNK_TOKENS - 1)
        if num_ranks == 1:
            cap = chunk
        else:
            cap = model.new_int_var(0, chunk_ub, f"cap[{w}]")
            model.add(num_ranks * cap >= chunk)
            model.add(cap <= chunk)
        rank = _RankBounds(model=model, totals=totals, wave=w, num_ranks=num_ranks, cap=cap)
        wave_bounds: dict[str, cp_model.LinearExprT] = {}
        for q in QUANTITIES:
            if q.name in folded:
                wave_bounds[q.name] = rank.tokens
            elif q.name in needed or q.rank_bound != "chunk_cap_or_total":
                wave_bounds[q.name] = _BOUNDS[q.rank_bound](rank, q.name)
        chunks.append(chunk), caps.append(cap), bounds.append(wave_bounds), min_vars.append(rank.min_vars)
    return OwnershipVars(
        chunks=chunks, cap=caps, packed_ub=totals.packed_tokens_ub, bounds=bounds, min_vars=min_vars
    )


@dataclass(kw_only=True, eq=False)
class _RankBounds:
    """What one wave's per-rank bounds are made of; ``min_vars`` collects the ``min`` variables made."""

    model: cp_model.CpModel
    totals: WaveTotals
    wave: int
    num_ranks: int
    cap: cp_model.LinearExprT
    min_vars: dict[str, cp_model.IntVar] = field(default_factory=dict)

    @property
    def tokens(self) -> cp_model.LinearExprT:
        """A rank's tokens: at most ``128 · K``; at CP1, exactly the packed tokens."""
        return self.totals.packed_tokens[self.wave] if self.num_ranks == 1 else CHUNK_TOKENS * self.cap

    def capped_total(self, name: str) -> cp_model.IntVar:
        """``min(128 · K, the wave's total of name)``."""
        var = self.model.new_int_var(0, self.totals.packed_tokens_ub, f"{name}[{self.wave}]")
        self.model.add_min_equality(var, [CHUNK_TOKENS * self.cap, self.totals.amounts[name][self.wave]])
        self.min_vars[name] = var
        return var


_BOUNDS = {
    "chunk_cap": lambda rank, name: rank.tokens,
    "chunk_cap_or_total": lambda rank, name: rank.capped_total(name),
    "wave_total": lambda rank, name: rank.totals.amounts[name][rank.wave],
    "wave_segments": lambda rank, name: rank.totals.segments[rank.wave],
    "wave_packed": lambda rank, name: rank.totals.packed_tokens[rank.wave] if rank.num_ranks > 1 else 0,
}
check_rules("cpsat.chunk_caps", _BOUNDS, RANK_BOUNDS)
