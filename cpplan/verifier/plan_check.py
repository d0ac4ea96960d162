"""The independent verifier.

It reads a plan in its JSON form and the workload, rebuilds every packed token from the segments and
request chains, and checks: every request exactly once, every packed token owned exactly once, the tree
metadata consistent, and every rank's peak within the budget. It prices ranks token by token from the
model card's resolved terms with its own arithmetic: it shares no code path with the planners or the
numpy evaluator beyond the card.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cpplan.spec.card import ResolvedCard
from cpplan.spec.workload import Workload

PEAK_TOLERANCE_BYTES = 2
COST_TOLERANCE = 1e-9


@dataclass(frozen=True, kw_only=True)
class Verification:
    """The verifier's verdict, its own price of the plan, and each violation found."""

    valid: bool
    violations: tuple[str, ...]
    cost_s: float | None
    peak_bytes: int | None
    wave_costs_s: tuple[float, ...] = field(default=())


def verify_plan(
    data: dict[str, Any],
    workload: Workload,
    card: ResolvedCard,
    memory_bytes: int,
    *,
    chunk_tokens: int | None = None,
) -> Verification:
    """Check a plan dictionary (as written by ``cpplan plan``) against the workload and card."""
    violations: list[str] = []
    chunk = int(chunk_tokens or data.get("chunk_tokens") or 128)
    cp = card.topology.cp
    expected = {(item.id, k) for item in workload.items for k in range(len(item.requests))}
    seen: dict[tuple[str, int], int] = {}
    by_id = {item.id: item for item in workload.items}
    wave_costs: list[float] = []
    worst_peak = 0
    waves = data.get("waves")
    if not isinstance(waves, list) or not waves:
        return Verification(valid=False, violations=("plan has no waves",), cost_s=None, peak_bytes=None)
    for w, wave in enumerate(waves):
        try:
            cost, peak = _check_wave(w, wave, by_id, seen, card, memory_bytes, chunk, cp, violations)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            violations.append(f"wave {w}: malformed ({type(exc).__name__}: {exc})")
            continue
        wave_costs.append(cost)
        worst_peak = max(worst_peak, peak)
    violations.extend(_split_violations(waves, seen))
    for key in sorted(expected - set(seen)):
        violations.append(f"request {key[1]} of item {key[0]!r} is in no wave")
    for key in sorted(set(seen) - expected):
        violations.append(f"request {key[1]} of item {key[0]!r} is not in the workload")
    total = math.fsum(wave_costs)
    claimed = data.get("cost_s")
    if not violations and isinstance(claimed, int | float) and not _close(claimed, total):
        violations.append(f"plan cost_s {claimed} differs from the verifier's {total}")
    return Verification(
        valid=not violations,
        violations=tuple(violations),
        cost_s=total,
        peak_bytes=worst_peak,
        wave_costs_s=tuple(wave_costs),
    )


def _split_violations(waves: list, seen: dict[tuple[str, int], int]) -> list[str]:
    """An item whose requests lie in more than one wave must lie in consecutive waves marked split."""
    spread: dict[str, set[int]] = {}
    for (item_id, _), w in seen.items():
        spread.setdefault(item_id, set()).add(w)
    found = []
    for item_id, where in sorted(spread.items()):
        if len(where) < 2:
            continue
        if max(where) - min(where) + 1 != len(where):
            found.append(f"item {item_id!r} is split over waves {sorted(where)}, which are not consecutive")
        unmarked = [w for w in sorted(where) if not (isinstance(waves[w], dict) and waves[w].get("split"))]
        if unmarked:
            found.append(
                f"item {item_id!r} is split over waves {sorted(where)}; waves {unmarked} are not marked split"
            )
    return found


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= COST_TOLERANCE * max(1.0, abs(a), abs(b))


def _check_wave(
    w: int,
    wave: dict,
    by_id: dict,
    seen: dict,
    card: ResolvedCard,
    budget: int,
    chunk: int,
    cp: int,
    violations: list[str],
) -> tuple[float, int]:
    segments = [tuple(int(x) for x in s) for s in wave["segments"]]
    num_segments = len(segments)
    for s, (parent, position, length) in enumerate(segments):
        if length < 1:
            violations.append(f"wave {w} segment {s}: length {length} < 1")
        if parent == -1:
            if position != 0:
                violations.append(
                    f"wave {w} segment {s}: a root segment starts at position {position}, not 0"
                )
        elif not 0 <= parent < s:
            violations.append(f"wave {w} segment {s}: parent {parent} does not come before it")
        elif position != segments[parent][1] + segments[parent][2]:
            violations.append(f"wave {w} segment {s}: position {position} does not continue parent {parent}")
    offsets = [0] * num_segments
    for s in range(1, num_segments):
        offsets[s] = offsets[s - 1] + segments[s - 1][2]
    packed = offsets[-1] + segments[-1][2] if segments else 0
    seg_tokens: list[np.ndarray | None] = [None] * num_segments
    seg_grad = [False] * num_segments
    seg_loss = [False] * num_segments
    used = [False] * num_segments
    wave_items = set(wave["items"])
    for entry in wave["requests"]:
        item_id, k, chain = entry["item"], int(entry["request"]), [int(c) for c in entry["segments"]]
        key = (item_id, k)
        if item_id not in wave_items:
            violations.append(f"wave {w}: request {k} of item {item_id!r} belongs to an item not listed")
        if key in seen:
            violations.append(f"request {k} of item {item_id!r} appears in waves {seen[key]} and {w}")
            continue
        seen[key] = w
        item = by_id.get(item_id)
        if item is None or not 0 <= k < len(item.requests):
            continue
        request = item.requests[k]
        position, previous = 0, -1
        for c in chain:
            if not 0 <= c < num_segments:
                violations.append(f"wave {w}: request {k} of {item_id!r} names segment {c}, out of range")
                break
            parent, start, length = segments[c]
            if parent != previous or start != position:
                violations.append(f"wave {w}: request {k} of {item_id!r} has a broken chain at segment {c}")
                break
            piece = request.tokens[position : position + length]
            if seg_tokens[c] is None:
                seg_tokens[c] = piece
            if piece.size != length or not np.array_equal(seg_tokens[c], piece):
                violations.append(
                    f"wave {w}: segment {c} holds tokens that differ from request {k} of {item_id!r}"
                )
                break
            used[c] = True
            seg_grad[c] |= request.grad
            seg_loss[c] |= request.output in ("loss", "logits")
            position, previous = position + length, c
        else:
            if position != request.num_tokens:
                violations.append(
                    f"wave {w}: request {k} of {item_id!r} reads back {position} of "
                    f"{request.num_tokens} tokens"
                )
    if not wave.get("split"):
        for item_id in wave_items:
            item = by_id.get(item_id)
            if item is None:
                violations.append(f"wave {w}: item {item_id!r} is not in the workload")
                continue
            listed = sum(1 for e in wave["requests"] if e["item"] == item_id)
            if listed != len(item.requests):
                violations.append(
                    f"wave {w}: item {item_id!r} has {listed} of its {len(item.requests)} "
                    "requests (waves never split an item unless marked split)"
                )
    for s in range(num_segments):
        if not used[s]:
            violations.append(f"wave {w}: segment {s} is used by no request")
    if wave.get("packed_tokens") != packed:
        violations.append(f"wave {w}: packed_tokens {wave.get('packed_tokens')} but segments hold {packed}")
    # Ownership: every packed token exactly once, at chunk boundaries.
    owner = np.full(packed, -1, dtype=np.int64)
    ranks = wave["ranks"]
    if sorted(int(r["rank"]) for r in ranks) != list(range(cp)):
        violations.append(f"wave {w}: ranks listed are not exactly 0..{cp - 1}")
    for entry in ranks:
        rank = int(entry["rank"])
        for start, end in entry["ranges"]:
            start, end = int(start), int(end)
            if not 0 <= start < end <= packed:
                violations.append(f"wave {w} rank {rank}: range [{start}, {end}) outside [0, {packed})")
                continue
            if start % chunk or (end % chunk and end != packed):
                violations.append(
                    f"wave {w} rank {rank}: range [{start}, {end}) is not on {chunk}-token chunks"
                )
            if (owner[start:end] != -1).any():
                violations.append(f"wave {w} rank {rank}: range [{start}, {end}) overlaps another owner")
            owner[start:end] = rank
    if (owner == -1).any():
        violations.append(f"wave {w}: {int((owner == -1).sum())} packed tokens have no owner")
    # Price token by token.
    seg_len = np.array([s[2] for s in segments], dtype=np.int64)
    seg_of = np.repeat(np.arange(num_segments), seg_len)
    seg_start = np.array([s[1] for s in segments], dtype=np.int64)
    shift = np.array(offsets, dtype=np.int64) - seg_start
    pos = np.arange(packed, dtype=np.int64) - np.repeat(shift, seg_len)
    grad = np.array(seg_grad, dtype=bool)[seg_of]
    loss = np.array(seg_loss, dtype=bool)[seg_of]
    slowest, worst = 0.0, 0
    claimed = {int(r["rank"]): r for r in ranks}
    per_rank = _rank_sums(owner, seg_of, pos, grad, loss, cp)
    for rank in range(cp):
        local = {name: int(values[rank]) for name, values in per_rank.items()}
        local["remote_tokens"] = int(packed - local["tokens"])
        peak = _peak(card, local)
        seconds = math.fsum(
            float(card.cost_seconds[c]) * local[_qname(card.cost_quantity[c])]
            for c in range(len(card.cost_names))
        )
        slowest = max(slowest, seconds)
        worst = max(worst, peak)
        if peak > budget:
            violations.append(
                f"wave {w} rank {rank}: predicted peak {peak:,} bytes exceeds the budget of {budget:,} bytes"
            )
        entry = claimed.get(rank)
        if entry is not None:
            if int(entry.get("tokens", -1)) != local["tokens"]:
                violations.append(
                    f"wave {w} rank {rank}: tokens {entry.get('tokens')} but owns {local['tokens']}"
                )
            if abs(int(entry.get("peak_bytes", -1)) - peak) > PEAK_TOLERANCE_BYTES:
                violations.append(
                    f"wave {w} rank {rank}: peak_bytes {entry.get('peak_bytes')} but the "
                    f"verifier prices {peak}"
                )
    cost = slowest + card.wave_overhead_s
    if "cost_s" in wave and not _close(float(wave["cost_s"]), cost):
        violations.append(f"wave {w}: cost_s {wave['cost_s']} but the verifier prices {cost}")
    return cost, worst


def _rank_sums(owner, seg_of, pos, grad, loss, cp: int) -> dict[str, np.ndarray]:
    """Per rank, summed over its tokens: owned tokens, gradient and loss tokens, attention pairs (a
    token at position p attends p + 1 keys, its gradient pairs likewise) and distinct segments touched.

    Ownership comes in runs of consecutive tokens, so each token-level prefix sum is read once per run.
    """
    sums = {name: np.zeros(cp, dtype=np.int64) for name in (*_SUMMED, "segments")}
    if owner.size == 0:
        return sums
    bounds = np.concatenate([[0], np.flatnonzero(owner[1:] != owner[:-1]) + 1, [owner.size]])
    run_owner = owner[bounds[:-1]]
    keep = (run_owner >= 0) & (run_owner < cp)
    keys = pos + 1
    per_token = {
        "tokens": np.ones_like(pos),
        "grad_tokens": grad,
        "loss_tokens": loss,
        "attn_pairs": keys,
        "grad_attn_pairs": keys * grad,
    }
    for name, values in per_token.items():
        prefix = np.concatenate([[0], np.cumsum(values, dtype=np.int64)])
        run_sums = prefix[bounds[1:]] - prefix[bounds[:-1]]
        np.add.at(sums[name], run_owner[keep], run_sums[keep])
    # Distinct (rank, segment) pairs: one per run of tokens with the same owner and segment.
    change = np.flatnonzero((owner[1:] != owner[:-1]) | (seg_of[1:] != seg_of[:-1])) + 1
    starts = np.concatenate([[0], change])
    pair_owner = owner[starts]
    keep = (pair_owner >= 0) & (pair_owner < cp)
    width = int(seg_of[-1]) + 1
    pairs = np.unique(pair_owner[keep] * width + seg_of[starts][keep])
    sums["segments"] = np.bincount(pairs // width, minlength=cp)[:cp].astype(np.int64)
    return sums


_SUMMED = ("tokens", "grad_tokens", "loss_tokens", "attn_pairs", "grad_attn_pairs")


def _qname(index: int) -> str:
    from cpplan.spec.quantities import QUANTITY_NAMES

    return QUANTITY_NAMES[int(index)]


def _peak(card: ResolvedCard, local: dict[str, int]) -> int:
    best = -math.inf
    for e in range(len(card.envelope_names)):
        total = float(card.envelope_static_bytes[e])
        for t in range(len(card.term_names)):
            if card.envelope_terms[e, t]:
                total += float(card.term_bytes[t]) * local[_qname(card.term_quantity[t])]
        best = max(best, total)
    return math.ceil(card.safety * best)
