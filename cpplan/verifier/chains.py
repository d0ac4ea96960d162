"""The verifier's reading of a wave's request chains: each request read back through its segments,
token by token against the workload, each request in exactly one wave, each segment used, and an item's
requests kept together unless the wave is marked split."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np

from cpplan.spec.workload import Item, Request
from cpplan.verifier.segments import Segment


@dataclass(kw_only=True)
class Coverage:
    """What the requests of one wave put in its segments: the tokens read so far, whether any request
    through a segment takes gradients or needs the logits of all its tokens (``loss``), which of its
    tokens' logits requests with a loss mask need (``masked_loss``, only where one passes), and how
    many requests' chains pass through it (``uses``); ``logical_tokens``: the tokens of the requests
    this wave is the first to hold (unpacked)."""

    tokens: list[np.ndarray | None]
    grad: list[bool]
    loss: list[bool]
    uses: list[int]
    masked_loss: dict[int, np.ndarray] = field(default_factory=dict)
    logical_tokens: int = 0

    @classmethod
    def empty(cls, num_segments: int) -> Coverage:
        """Nothing read yet."""
        return cls(
            tokens=[None] * num_segments,
            grad=[False] * num_segments,
            loss=[False] * num_segments,
            uses=[0] * num_segments,
        )


def read_requests(
    w: int,
    wave: dict[str, Any],
    segments: list[Segment],
    by_id: dict[str, Item],
    seen: dict[tuple[str, int], int],
    violations: list[str],
) -> Coverage:
    """Read every request of the wave back through its chain, recording in ``seen`` which wave holds it.

    A well-formed wave (:func:`read_whole_wave`) is read in one pass; any other request by request
    (:func:`read_each_request`), each break reported where it is found."""
    coverage = read_whole_wave(w, wave, segments, by_id, seen)
    if coverage is not None:
        return coverage
    return read_each_request(w, wave, segments, by_id, seen, violations)


def read_each_request(
    w: int,
    wave: dict[str, Any],
    segments: list[Segment],
    by_id: dict[str, Item],
    seen: dict[tuple[str, int], int],
    violations: list[str],
) -> Coverage:
    """:func:`read_requests` request by request, reporting each break where it is found."""
    coverage = Coverage.empty(len(segments))
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
        coverage.logical_tokens += item.requests[k].tokens.size
        _read_chain(w, item_id, k, item.requests[k], chain, segments, coverage, violations)
    return coverage


def _read_chain(
    w: int,
    item_id: str,
    k: int,
    request: Request,
    chain: list[int],
    segments: list[Segment],
    coverage: Coverage,
    violations: list[str],
) -> None:
    """Follow one request's chain root to leaf; its segments must hold its tokens, in order, all of them."""
    position, previous = 0, -1
    masked = masked_logits_needed(request)
    for c in chain:
        if not 0 <= c < len(segments):
            violations.append(f"wave {w}: request {k} of {item_id!r} names segment {c}, out of range")
            return
        parent, start, length = segments[c]
        if parent != previous or start != position:
            violations.append(f"wave {w}: request {k} of {item_id!r} has a broken chain at segment {c}")
            return
        piece = request.tokens[position : position + length]
        held = coverage.tokens[c]
        if held is None:
            coverage.tokens[c] = held = piece
        same = held is piece or (held.size == piece.size and bool((held == piece).all()))
        if piece.size != length or not same:
            violations.append(
                f"wave {w}: segment {c} holds tokens that differ from request {k} of {item_id!r}"
            )
            return
        coverage.uses[c] += 1
        coverage.grad[c] |= request.grad
        coverage.loss[c] |= masked is None and request.output in ("loss", "logits")
        if masked is not None:
            here = masked[position : position + length]
            coverage.masked_loss[c] = here | coverage.masked_loss.get(c, False)
        position, previous = position + length, c
    if position != request.num_tokens:
        violations.append(
            f"wave {w}: request {k} of {item_id!r} reads back {position} of {request.num_tokens} tokens"
        )


_MALFORMED = (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError)
"""What reading a malformed wave at once may raise: such a wave is read request by request instead."""


def read_whole_wave(
    w: int,
    wave: dict[str, Any],
    segments: list[Segment],
    by_id: dict[str, Item],
    seen: dict[tuple[str, int], int],
) -> Coverage | None:
    """Every request of the wave read back in one pass, recording in ``seen`` which wave holds it, when
    the wave breaks nothing that reading request by request reports: each request listed once, in the
    workload, of an item the wave lists and in no earlier wave, its chain unbroken and in range, its
    segments holding its tokens, all of them. ``None`` (and nothing recorded) otherwise."""
    try:
        read = _read_all(wave, segments, by_id)
    except _MALFORMED:
        return None
    if read is None:
        return None
    keys, coverage = read
    if len(set(keys)) != len(keys) or not seen.keys().isdisjoint(keys):
        return None
    for key in keys:
        seen[key] = w
    return coverage


def _read_all(
    wave: dict[str, Any], segments: list[Segment], by_id: dict[str, Item]
) -> tuple[list[tuple[str, int]], Coverage] | None:
    """The wave's request keys and what its requests put in its segments (as :func:`_read_chain`
    records it), when each names a request of the workload of an item the wave lists, and its chain
    names segments in range, each the child of the one before (a root first) starting where it ends,
    holding the request's tokens and ending at its last (``None`` otherwise)."""
    wave_items = set(wave["items"])
    num_segments = len(segments)
    coverage = Coverage.empty(num_segments)
    held, uses, grad, loss = coverage.tokens, coverage.uses, coverage.grad, coverage.loss
    keys = []
    count_nonzero = np.count_nonzero
    for entry in wave["requests"]:
        item_id, k = entry["item"], entry["request"]
        item = by_id.get(item_id)
        if item is None or type(k) is not int or not 0 <= k < len(item.requests) or item_id not in wave_items:
            return None
        keys.append((item_id, k))
        request = item.requests[k]
        tokens, output = request.tokens, request.output
        size, takes_grad = tokens.size, request.grad
        masked = masked_logits_needed(request) if output == "loss" and request.loss_mask is not None else None
        needs_logits = masked is None and output in ("loss", "logits")
        position, previous = 0, -1
        for c in entry["segments"]:
            if type(c) is not int or not 0 <= c < num_segments:
                return None
            parent, start, length = segments[c]
            if parent != previous or start != position or length < 1:
                return None
            previous, position = c, position + length
            if position > size:
                return None
            first = held[c]
            if first is None:
                held[c] = tokens[start:position]
            elif count_nonzero(first != tokens[start:position]):
                return None
            uses[c] += 1
            if takes_grad:
                grad[c] = True
            if needs_logits:
                loss[c] = True
            if masked is not None:
                coverage.masked_loss[c] = masked[start:position] | coverage.masked_loss.get(c, False)
        if position != size:
            return None
        coverage.logical_tokens += size
    return keys, coverage


def masked_logits_needed(request: Request) -> np.ndarray | None:
    """For a loss request with a mask, the verifier's own reading of which tokens need logits: token
    ``t`` where ``predicted()`` is set (predicting token ``t + 1`` counts); ``None`` for any other
    request (it needs the logits of all its tokens, output ``logits`` or ``loss``, or of none)."""
    if request.output != "loss" or request.loss_mask is None:
        return None
    return np.concatenate([request.predicted(), [False]]).astype(bool)


def check_whole_items(w: int, wave: dict[str, Any], by_id: dict[str, Item], violations: list[str]) -> None:
    """A wave not marked split holds every request of each item it lists."""
    if wave.get("split"):
        return
    listed = Counter(map(itemgetter("item"), wave["requests"]))
    for item_id in dict.fromkeys(wave["items"]):
        item = by_id.get(item_id)
        if item is None:
            violations.append(f"wave {w}: item {item_id!r} is not in the workload")
            continue
        if listed[item_id] != len(item.requests):
            violations.append(
                f"wave {w}: item {item_id!r} has {listed[item_id]} of its {len(item.requests)} "
                "requests (waves never split an item unless marked split)"
            )


def check_used(w: int, coverage: Coverage, violations: list[str]) -> None:
    """Every segment lies on some request's chain."""
    for s, uses in enumerate(coverage.uses):
        if not uses:
            violations.append(f"wave {w}: segment {s} is used by no request")
