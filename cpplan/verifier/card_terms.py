"""The card's resolved terms as plain Python numbers, read once per card: what the verifier walks for
every rank it prices (:mod:`.rank_prices`) and every stated envelope it checks (:mod:`.claims`); and
the card's topology in the JSON form a plan states it.

The numbers are the card's own, term by term in the card's order (each ``float``/``int`` of its array
entry), so sums over them are the ones the verifier made from the arrays; nothing is derived that the
card does not state. A resolved card is immutable (its arrays are read-only), so its terms are kept
for as long as the card lives.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from cpplan.spec.card import ResolvedCard
from cpplan.spec.settings import topology_from_json, topology_to_json


@dataclass(frozen=True, kw_only=True)
class EnvelopeTerms:
    """One envelope: its name, its static bytes, its terms' names and its terms as ``(bytes per unit,
    quantity index)``, in the card's term order."""

    name: str
    static_bytes: float
    term_names: tuple[str, ...]
    terms: tuple[tuple[float, int], ...]


@dataclass(frozen=True, kw_only=True)
class CardTerms:
    """A card's envelopes; its cost terms grouped by barrier, as ``(barrier index, ((seconds per unit,
    quantity index), ...))`` with the barriers in the order their first term comes in the card; and
    whether any part of its GDN hand-off costs time; ``topology_json``: its topology as a plan states
    it, where that form reads back as the card's topology (``None`` otherwise)."""

    envelopes: tuple[EnvelopeTerms, ...]
    barriers: tuple[tuple[int, tuple[tuple[float, int], ...]], ...]
    handoff_priced: bool
    topology_json: dict[str, Any] | None


_TERMS: weakref.WeakKeyDictionary[ResolvedCard, CardTerms] = weakref.WeakKeyDictionary()


def card_terms(card: ResolvedCard) -> CardTerms:
    """``card``'s terms (read from the card the first time it is asked for)."""
    terms = _TERMS.get(card)
    if terms is None:
        terms = _TERMS[card] = _read_terms(card)
    return terms


def _read_terms(card: ResolvedCard) -> CardTerms:
    term_bytes, term_quantity = card.term_bytes.tolist(), card.term_quantity.tolist()
    envelopes = []
    rows = zip(
        card.envelope_names, card.envelope_static_bytes.tolist(), card.envelope_terms.tolist(), strict=True
    )
    for name, static, members in rows:
        chosen = [t for t, member in enumerate(members) if member]
        envelopes.append(
            EnvelopeTerms(
                name=name,
                static_bytes=float(static),
                term_names=tuple(card.term_names[t] for t in chosen),
                terms=tuple((float(term_bytes[t]), int(term_quantity[t])) for t in chosen),
            )
        )
    barriers: dict[int, list[tuple[float, int]]] = {}
    costs = zip(
        card.cost_barrier.tolist(), card.cost_seconds.tolist(), card.cost_quantity.tolist(), strict=True
    )
    for barrier, seconds, quantity in costs:
        barriers.setdefault(int(barrier), []).append((float(seconds), int(quantity)))
    topology_json = topology_to_json(card.topology)
    return CardTerms(
        envelopes=tuple(envelopes),
        barriers=tuple((b, tuple(terms)) for b, terms in barriers.items()),
        handoff_priced=card.handoff.priced,
        topology_json=topology_json if topology_from_json(topology_json) == card.topology else None,
    )
