"""The token budgets the baselines are configured with, derived from the same model card.

Token-budget trainers are told a number of tokens per micro-batch, not bytes. To give each baseline its
best honest setting, the number is read off the card: the largest packed sequence that fits the budget
when it is one segment split evenly over the CP ranks (every token taking gradients and loss). Anything
the token count cannot see (many short segments, uneven ownership, shared tokens) is what the
evaluator then prices.

Both capacities are pure functions of a resolved card (immutable) and the budget, so each is computed
once per card object and budget (:data:`_CAPACITIES`, :data:`_CP1_CARDS`): a trainer's
:class:`~cpplan.Planner` keeps one card for the run, and the portfolio's ``seeded`` strategy asks for
them on every step. :func:`forget` drops a card's (what a cold benchmark run starts from).
"""

from __future__ import annotations

import weakref

import numpy as np

from cpplan.pricing.amounts import span_amounts
from cpplan.pricing.evaluator import price
from cpplan.pricing.problem import Problem
from cpplan.spec.card import ResolvedCard
from cpplan.spec.quantities import COUNTS, QUANTITIES, QUANTITY_INDEX, check_rules
from cpplan.spec.topology import Topology


def even_split_quantities(packed_tokens: int, cp: int) -> np.ndarray:
    """Quantities of the busiest rank when one segment of ``packed_tokens`` (every token taking gradients
    and loss) is split evenly: it owns the last ``ceil(packed / cp)`` tokens, touches one segment and
    gathers the rest."""
    local = -(-packed_tokens // cp)
    every = np.ones(1, dtype=bool)
    q = span_amounts([local], [packed_tokens - local], {"grad": every, "loss": every}).astype(np.float64)
    for quantity in QUANTITIES:
        q[0, QUANTITY_INDEX[quantity.name]] += _NON_ADDITIVE[quantity.count](packed_tokens, local)
    return q


_NON_ADDITIVE = {
    "token": lambda packed, local: 0,
    "pair": lambda packed, local: 0,
    "segment": lambda packed, local: 1,
    "remote": lambda packed, local: packed - local,
}
check_rules("baselines.capacity", _NON_ADDITIVE, COUNTS)


def card_token_capacity(card: ResolvedCard, memory_bytes: int, *, limit: int = 1 << 26) -> int:
    """The largest packed length (at least 1) whose even split fits ``memory_bytes`` under ``card``
    (computed once per card object, budget and limit)."""
    known = _CAPACITIES.setdefault(card, {})
    key = (int(memory_bytes), int(limit))
    if key not in known:
        known[key] = _largest_fitting(card, memory_bytes, limit)
    return known[key]


def _largest_fitting(card: ResolvedCard, memory_bytes: int, limit: int) -> int:
    """The bisection behind :func:`card_token_capacity`."""
    cp = card.topology.cp

    def fits(tokens: int) -> bool:
        return bool(price(card, even_split_quantities(tokens, cp)).peak_bytes[0] <= memory_bytes)

    lo, hi = 0, limit
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return max(lo, 1)


def token_capacity(problem: Problem) -> int:
    """Tokens per wave a well-tuned token budget would allow at the problem's own topology."""
    return card_token_capacity(problem.card, problem.memory_bytes)


def per_gpu_token_capacity(problem: Problem) -> int:
    """Tokens one GPU fits without context parallelism: the card resolved at cp=1 (the CP factor folded
    into dp so the expert grid still divides the dense grid)."""
    return card_token_capacity(_cp1_card(problem), problem.memory_bytes)


def _cp1_card(problem: Problem) -> ResolvedCard:
    """The problem's model resolved at cp=1 (its depth and phase), once per card object, topology and
    model."""
    key = (problem.model, problem.topology)
    kept = _CP1_CARDS.get(problem.card)
    if kept is not None and kept[0][0] is key[0] and kept[0][1] == key[1]:
        return kept[1]
    sizes = problem.topology.model_dump()
    topology = Topology(**{**sizes, "cp": 1, "dp": sizes["dp"] * sizes["cp"]})
    card = problem.model.resolve(topology, num_layers=problem.card.num_layers, phase=problem.card.phase)
    _CP1_CARDS[problem.card] = (key, card)
    return card


def forget(card: ResolvedCard) -> None:
    """Drop what was computed for ``card`` (its capacities and its cp=1 card)."""
    _CAPACITIES.pop(card, None)
    _CP1_CARDS.pop(card, None)


_CAPACITIES: weakref.WeakKeyDictionary[ResolvedCard, dict[tuple[int, int], int]] = weakref.WeakKeyDictionary()
"""Per resolved card (weakly held), its capacity per ``(memory_bytes, limit)``."""
_CP1_CARDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Per resolved card (weakly held), the ``(model, topology)`` it was made for and its cp=1 card."""
