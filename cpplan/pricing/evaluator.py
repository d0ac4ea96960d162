"""The numpy evaluator: prices local quantities per rank with a resolved model card.

A wave's compute time is the sum over the card's barriers (:data:`cpplan.spec.card.BARRIERS`) of the
slowest rank's seconds within each: the ranks of a CP group wait for each other at every layer's
collective, so a rank that is busiest in the GDN layers and another busiest in the attention layers
both add to the wave (``docs/time_model.md``, the per-layer barrier)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cpplan.spec.card import ResolvedCard


@dataclass(frozen=True, kw_only=True, eq=False)
class RankPrices:
    """Per-rank predicted peaks (safety applied), binding envelopes, term bytes and seconds (``time_s``
    the rank's total, ``barrier_s`` its seconds within each barrier of the card, shape
    ``(ranks, barriers)``)."""

    peak_bytes: np.ndarray
    envelope: np.ndarray
    term_bytes: np.ndarray
    time_s: np.ndarray
    barrier_s: np.ndarray

    @property
    def compute_s(self) -> float:
        """The wave's rank-dependent seconds: per barrier the slowest rank, summed over barriers."""
        return float(self.barrier_s.max(axis=0).sum())

    def breakdown(self, card: ResolvedCard, rank: int) -> dict[str, int]:
        """Bytes of each term (and ``static``) in the rank's binding envelope, before the safety factor."""
        e = int(self.envelope[rank])
        parts = {"static": round(card.envelope_static_bytes[e])}
        for t in np.flatnonzero(card.envelope_terms[e]).tolist():
            parts[card.term_names[t]] = round(self.term_bytes[rank, t])
        return parts


def price(card: ResolvedCard, quantities: np.ndarray) -> RankPrices:
    """Price a ``(ranks, quantities)`` matrix: ``peak = ceil(safety * max_e(static_e + sum of terms))``."""
    quantities = np.atleast_2d(np.asarray(quantities, dtype=np.float64))
    term_bytes = quantities[:, card.term_quantity] * card.term_bytes
    envelopes = _sum_envelopes(card, term_bytes)
    binding = np.argmax(envelopes, axis=1)
    raw = envelopes[np.arange(quantities.shape[0]), binding]
    peak = np.ceil(card.safety * raw).astype(np.int64)
    barrier_s = quantities @ card.constants.barrier_coefficients.T
    time_s = barrier_s.sum(axis=1)
    return RankPrices(
        peak_bytes=peak, envelope=binding, term_bytes=term_bytes, time_s=time_s, barrier_s=barrier_s
    )


def envelope_bytes(card: ResolvedCard, quantities: np.ndarray) -> np.ndarray:
    """Every rank's every envelope (static part plus its terms) before the safety factor, shape
    ``(ranks, envelopes)``, from a ``(ranks, quantities)`` matrix: what :func:`price` maximizes."""
    quantities = np.atleast_2d(np.asarray(quantities, dtype=np.float64))
    return _sum_envelopes(card, quantities[:, card.term_quantity] * card.term_bytes)


def _sum_envelopes(card: ResolvedCard, term_bytes: np.ndarray) -> np.ndarray:
    """Each envelope's static bytes plus its member terms, per rank."""
    return card.envelope_static_bytes + term_bytes @ card.envelope_terms.T.astype(np.float64)


def wave_cost_s(card: ResolvedCard, prices: RankPrices) -> float:
    """A wave costs, per barrier, its slowest rank, plus the per-wave overhead (the hand-off apart)."""
    return prices.compute_s + card.wave_overhead_s
