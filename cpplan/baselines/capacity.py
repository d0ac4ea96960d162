"""The token budgets the baselines are configured with, derived from the same model card.

Token-budget trainers are told a number of tokens per micro-batch, not bytes. To give each baseline its
best honest setting, the number is read off the card: the largest packed sequence that fits the budget
when it is one segment split evenly over the CP ranks (every token taking gradients and loss). Anything
the token count cannot see (many short segments, uneven ownership, shared tokens) is what the
evaluator then prices.

Both capacities are computed once per problem (kept in its memo): the portfolio's ``seeded`` strategy
asks for them once per baseline it seeds from.
"""

from __future__ import annotations

import numpy as np

from cpplan.pricing.amounts import span_amounts
from cpplan.pricing.evaluator import price
from cpplan.pricing.memo import memoized
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
    """The largest packed length (at least 1) whose even split fits ``memory_bytes`` under ``card``."""
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
    """Tokens per wave a well-tuned token budget would allow at the problem's own topology (once per
    problem, in its memo: every baseline of the seeded strategy asks)."""
    return memoized(
        problem.memo.planned,
        ("capacity", "token"),
        lambda: card_token_capacity(problem.card, problem.memory_bytes),
    )


def per_gpu_token_capacity(problem: Problem) -> int:
    """Tokens one GPU fits without context parallelism: the card resolved at cp=1 (the CP factor folded
    into dp so the expert grid still divides the dense grid; once per problem, in its memo)."""
    return memoized(
        problem.memo.planned,
        ("capacity", "per_gpu"),
        lambda: card_token_capacity(_cp1_card(problem), problem.memory_bytes),
    )


def _cp1_card(problem: Problem) -> ResolvedCard:
    """The problem's model resolved at cp=1 (its depth and phase)."""
    sizes = problem.topology.model_dump()
    topology = Topology(**{**sizes, "cp": 1, "dp": sizes["dp"] * sizes["cp"]})
    return problem.model.resolve(topology, num_layers=problem.card.num_layers, phase=problem.card.phase)
