"""Amounts of the additive local quantities over spans of consecutive tokens, in closed form.

A span is ``n`` tokens at positions ``p .. p + n - 1`` of one request path: a packed segment, the part
of a segment inside a chunk, a prefix-tree node. Per :attr:`Quantity.count` of the registry
(:mod:`cpplan.spec.quantities`): a ``token`` count adds ``n``; a ``pair`` count adds the keys each token
attends on its path, ``(p + 1) + ... + (p + n) = n · p + n (n + 1) / 2``. ``only`` keeps the spans whose
flag is set (segments taking gradients, segments whose outputs are read).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from cpplan.spec.quantities import ADDITIVE, NUM_QUANTITIES, QUANTITY_INDEX, check_rules

SpanRule = Callable[[np.ndarray, np.ndarray], np.ndarray]

SPAN_RULES: dict[str, SpanRule] = {
    "token": lambda n, p: n,
    "pair": lambda n, p: n * p + n * (n + 1) // 2,
}
"""Per additive count: the amount of ``n`` tokens starting at position ``p``."""
check_rules("pricing.amounts", SPAN_RULES, {q.count for q in ADDITIVE})


def span_amounts(lengths: np.ndarray, starts: np.ndarray, flags: Mapping[str, np.ndarray]) -> np.ndarray:
    """Shape ``(spans, NUM_QUANTITIES)``: every additive quantity over each span (other columns zero).

    ``flags`` maps ``"grad"`` and ``"loss"`` to per-span booleans (only the ones the registry uses)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64)
    out = np.zeros((lengths.size, NUM_QUANTITIES), dtype=np.int64)
    for q in ADDITIVE:
        amount = SPAN_RULES[q.count](lengths, starts)
        out[:, QUANTITY_INDEX[q.name]] = amount if q.only == "all" else amount * flags[q.only]
    return out
