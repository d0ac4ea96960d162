"""The verifier's own pricing of a wave: per-rank local quantities summed token by token from the
owners and the segment tree, then peaks and seconds from the resolved card's terms with plain Python
arithmetic (no code shared with the numpy evaluator)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from cpplan.spec.card import ResolvedCard
from cpplan.spec.quantities import COUNTS, QUANTITIES, QUANTITY_NAMES, check_rules
from cpplan.verifier.chains import Coverage
from cpplan.verifier.handoff import handoff_seconds
from cpplan.verifier.segments import Segment

PEAK_TOLERANCE_BYTES = 2
COST_TOLERANCE = 1e-9

_PER_TOKEN = {"token": lambda pos: np.ones_like(pos), "pair": lambda pos: pos + 1}
"""What one owned token at position ``pos`` adds to a per-token count: 1, or the keys it attends."""
check_rules("verifier.rank_prices", (*_PER_TOKEN, "segment", "remote"), COUNTS)


def close(a: float, b: float) -> bool:
    """Equal within :data:`COST_TOLERANCE` (relative, absolute below 1)."""
    return abs(a - b) <= COST_TOLERANCE * max(1.0, abs(a), abs(b))


def price_ranks(
    w: int,
    wave: dict[str, Any],
    segments: list[Segment],
    offsets: list[int],
    owner: np.ndarray,
    coverage: Coverage,
    card: ResolvedCard,
    budget: int,
    violations: list[str],
) -> tuple[float, int]:
    """Price every rank of the wave, check it against the budget and the plan's claims; the wave's cost
    (slowest rank plus overhead) and its worst peak."""
    cp = card.topology.cp
    packed = int(owner.size)
    seg_of, pos = _token_positions(segments, offsets, packed)
    grad = np.array(coverage.grad, dtype=bool)[seg_of]
    loss = np.array(coverage.loss, dtype=bool)[seg_of]
    for c, needed in coverage.masked_loss.items():
        loss[offsets[c] : offsets[c] + needed.size] |= needed
    per_rank = rank_sums(owner, seg_of, pos, grad, loss, cp)
    claimed = {int(r["rank"]): r for r in wave["ranks"]}
    slowest, worst = 0.0, 0
    for rank in range(cp):
        local = {name: int(values[rank]) for name, values in per_rank.items()}
        quantities = tuple(local[name] for name in QUANTITY_NAMES)
        peak, seconds = _peak(card, quantities), _seconds(card, quantities)
        slowest = max(slowest, seconds)
        worst = max(worst, peak)
        if peak > budget:
            violations.append(
                f"wave {w} rank {rank}: predicted peak {peak:,} bytes exceeds the budget of {budget:,} bytes"
            )
        _check_claims(w, rank, claimed.get(rank), local, peak, violations)
    cost = slowest + card.wave_overhead_s + handoff_seconds(card, segments, offsets, owner, seg_of)
    if "cost_s" in wave and not close(float(wave["cost_s"]), cost):
        violations.append(f"wave {w}: cost_s {wave['cost_s']} but the verifier prices {cost}")
    return cost, worst


def _token_positions(
    segments: list[Segment], offsets: list[int], packed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each packed token's segment and its position in the request (the segment's start plus the
    token's place in the segment)."""
    seg_len = np.array([s[2] for s in segments], dtype=np.int64)
    seg_of = np.repeat(np.arange(len(segments)), seg_len)
    seg_start = np.array([s[1] for s in segments], dtype=np.int64)
    shift = np.array(offsets, dtype=np.int64) - seg_start
    pos = np.arange(packed, dtype=np.int64) - np.repeat(shift, seg_len)
    return seg_of, pos


def _check_claims(
    w: int, rank: int, entry: dict[str, Any] | None, local: dict[str, int], peak: int, violations: list[str]
) -> None:
    """The plan's figures for the rank (owned tokens, loss tokens, peak bytes) are the verifier's."""
    if entry is None:
        return
    tokens = local["tokens"]
    if int(entry.get("tokens", -1)) != tokens:
        violations.append(f"wave {w} rank {rank}: tokens {entry.get('tokens')} but owns {tokens}")
    if "loss_tokens" in entry and int(entry["loss_tokens"]) != local["loss_tokens"]:
        violations.append(
            f"wave {w} rank {rank}: loss_tokens {entry['loss_tokens']} but the verifier counts "
            f"{local['loss_tokens']} owned tokens whose logits are needed"
        )
    if abs(int(entry.get("peak_bytes", -1)) - peak) > PEAK_TOLERANCE_BYTES:
        violations.append(
            f"wave {w} rank {rank}: peak_bytes {entry.get('peak_bytes')} but the verifier prices {peak}"
        )


def rank_sums(owner, seg_of, pos, grad, loss, cp: int) -> dict[str, np.ndarray]:
    """Every local quantity of the registry per rank, counted the way its entry states: per owned token
    (1, or position + 1 keys for a pair count; only tokens of gradient / loss segments where the entry
    says so), pieces owned (runs of one segment on the rank), or packed tokens not owned.

    Ownership comes in runs of consecutive tokens, so each token-level prefix sum is read once per run.
    """
    sums = {name: np.zeros(cp, dtype=np.int64) for name in QUANTITY_NAMES}
    if owner.size == 0:
        return sums
    bounds = np.concatenate([[0], np.flatnonzero(owner[1:] != owner[:-1]) + 1, [owner.size]])
    run_owner = owner[bounds[:-1]]
    keep = (run_owner >= 0) & (run_owner < cp)
    flags = {"all": np.ones(pos.size, dtype=bool), "grad": grad, "loss": loss}
    for q in QUANTITIES:
        if q.count in _PER_TOKEN:
            values = _PER_TOKEN[q.count](pos) * flags[q.only]
            prefix = np.concatenate([[0], np.cumsum(values, dtype=np.int64)])
            run_sums = prefix[bounds[1:]] - prefix[bounds[:-1]]
            np.add.at(sums[q.name], run_owner[keep], run_sums[keep])
        elif q.count == "segment":
            sums[q.name] = _segments_touched(owner, seg_of, cp)
    owned = np.bincount(owner[(owner >= 0) & (owner < cp)], minlength=cp)[:cp]
    for q in QUANTITIES:
        if q.count == "remote":
            sums[q.name] = owner.size - owned
    return sums


def _segments_touched(owner: np.ndarray, seg_of: np.ndarray, cp: int) -> np.ndarray:
    """Pieces per rank: runs of consecutive packed tokens with the same owner and segment (a rank
    holding two separate ranges of one segment holds two pieces, each with its own incoming state)."""
    change = np.flatnonzero((owner[1:] != owner[:-1]) | (seg_of[1:] != seg_of[:-1])) + 1
    run_owner = owner[np.concatenate([[0], change])]
    keep = (run_owner >= 0) & (run_owner < cp)
    return np.bincount(run_owner[keep], minlength=cp)[:cp].astype(np.int64)


def _peak(card: ResolvedCard, quantities: tuple[int, ...]) -> int:
    """``ceil(safety * max over envelopes of (static + the envelope's terms))``."""
    best = -math.inf
    for e in range(len(card.envelope_names)):
        total = float(card.envelope_static_bytes[e])
        for t in range(len(card.term_names)):
            if card.envelope_terms[e, t]:
                total += float(card.term_bytes[t]) * quantities[int(card.term_quantity[t])]
        best = max(best, total)
    return math.ceil(card.safety * best)


def _seconds(card: ResolvedCard, quantities: tuple[int, ...]) -> float:
    """The sum of the card's cost terms."""
    return math.fsum(
        float(card.cost_seconds[c]) * quantities[int(card.cost_quantity[c])]
        for c in range(len(card.cost_names))
    )
