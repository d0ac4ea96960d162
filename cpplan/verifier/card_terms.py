"""The card's resolved terms as plain Python numbers, read once per plan checked: what the verifier walks
for every rank it prices (:mod:`.rank_prices`) and every stated envelope it checks (:mod:`.claims`).

The numbers are the card's own, term by term in the card's order (each ``float``/``int`` of its array
entry), so sums over them are the ones the verifier made from the arrays; nothing is derived that the
card does not state.
"""

from __future__ import annotations

from dataclasses import dataclass

from cpplan.spec.card import ResolvedCard


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
    """A card's envelopes, and its cost terms grouped by barrier, as ``(barrier index, ((seconds per
    unit, quantity index), ...))`` with the barriers in the order their first term comes in the card."""

    envelopes: tuple[EnvelopeTerms, ...]
    barriers: tuple[tuple[int, tuple[tuple[float, int], ...]], ...]


def card_terms(card: ResolvedCard) -> CardTerms:
    """``card``'s terms, read from its arrays."""
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
    return CardTerms(
        envelopes=tuple(envelopes),
        barriers=tuple((b, tuple(terms)) for b, terms in barriers.items()),
    )
