"""What a wave states about itself beyond its tokens and prices, each recomputed: its ``index`` (its place
in the plan), its ``dp_rank`` (the replica its ``gpus`` lie on), its ``items`` (each once, each with a
request in the wave), ``split`` (true exactly when the wave holds only part of some item),
``logical_tokens`` (its requests' tokens), ``card_cost_s`` (the wave's cost by the card alone: a learned
correction scales every second of a wave alike) and ``layout``.

A layout's name is checked against what the wave's segments share (a segment on two or more request
chains is shared): ``none`` shares no segment; ``full`` leaves nothing shareable unshared (no two
segments with one parent, or two roots, start with the same token); ``depth:K`` shares no segment below
tree level ``K`` (a root is level 1); ``min_span:T`` shares no segment shorter than ``T`` tokens. The
joint model's own choice of decisions (``cpsat``) and the baselines' layouts (``prefix_grouped``,
``custom``) follow no rule a name states: they are accepted as names, and their segments are checked as
every wave's are.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from cpplan.errors import InputError
from cpplan.spec.layout_specs import parse_layout
from cpplan.spec.topology import Topology
from cpplan.spec.workload import Item
from cpplan.verifier.claims import check_present, close, is_count, is_number
from cpplan.verifier.segments import Segment

WAVE_REQUIRED = (
    "index",
    "dp_rank",
    "items",
    "layout",
    "split",
    "packed_tokens",
    "logical_tokens",
    "cost_s",
    "card_cost_s",
    "segments",
    "requests",
    "ranks",
)
"""The fields of a wave every plan states (``cp``, ``gpus``, ``start_s`` and ``gdn_handoff`` have the
defaults of plans written before them)."""

FREE_LAYOUTS = ("cpsat", "prefix_grouped", "custom")
"""Layout names whose sharing follows no stated rule: the joint model's choice and the baselines'."""


@dataclass(frozen=True, kw_only=True)
class WaveFacts:
    """What the verifier found in one wave: its index in the plan (the expected ``index``), the plan's
    topology, its segments, how many request chains pass through each and its tokens as read back
    (``None``: unread), the tokens of the requests it is the
    first to hold, its cost and its cost by the card alone."""

    w: int
    index: int
    topology: Topology
    segments: list[Segment]
    segment_uses: list[int]
    segment_tokens: list[np.ndarray | None]
    logical_tokens: int
    cost_s: float
    card_cost_s: float


def check_wave_claims(
    wave: dict[str, Any], facts: WaveFacts, by_id: dict[str, Item], violations: list[str]
) -> None:
    """Every stated field of the wave listed in the module's docstring, against the verifier's own."""
    w = facts.w
    check_present(f"wave {w}", wave, WAVE_REQUIRED, violations)
    if "index" in wave and wave["index"] != facts.index:
        violations.append(f"wave {w}: index {wave['index']!r} but it is wave {facts.index} of the plan")
    _check_dp_rank(w, wave, facts, violations)
    _check_items(w, wave, by_id, violations)
    logical = facts.logical_tokens
    if "logical_tokens" in wave and wave["logical_tokens"] != logical:
        violations.append(
            f"wave {w}: logical_tokens {wave['logical_tokens']!r} but its requests hold {logical}"
        )
    stated = wave.get("card_cost_s")
    if "card_cost_s" in wave and not (is_number(stated) and close(stated, facts.card_cost_s)):
        violations.append(f"wave {w}: card_cost_s {stated!r} but the verifier prices {facts.card_cost_s}")
    if "layout" in wave:
        _check_layout(w, wave, facts, violations)


def _check_dp_rank(w: int, wave: dict[str, Any], facts: WaveFacts, violations: list[str]) -> None:
    """``dp_rank`` is the replica holding the wave's ``gpus`` (``None`` for a group spanning
    replicas); without ``gpus``, the replica the wave is dealt to round-robin."""
    if "dp_rank" not in wave:
        return
    cp, dp = facts.topology.cp, facts.topology.dp
    gpus = wave.get("gpus")
    if isinstance(gpus, list) and gpus and all(is_count(g) for g in gpus):
        aligned = gpus == list(range(gpus[0], gpus[0] + len(gpus))) and not gpus[0] % len(gpus)
        if not aligned or gpus[-1] >= facts.topology.pool:
            return  # not an aligned block: reported with the schedule
        first, last = gpus[0] // cp, gpus[-1] // cp
        expected = first if first == last else None
        how = (
            f"its gpus {gpus} lie on replica {expected}" if expected is not None else "its gpus span replicas"
        )
    else:
        expected = facts.index % dp
        how = f"without gpus it runs on replica {expected}"
    if wave["dp_rank"] != expected or isinstance(wave["dp_rank"], bool):
        violations.append(f"wave {w}: dp_rank {wave['dp_rank']!r} but {how} (dp={dp})")


def _check_items(w: int, wave: dict[str, Any], by_id: dict[str, Item], violations: list[str]) -> None:
    """Each listed item once; ``split``, a boolean, true exactly when some listed item has only part of
    its requests here, and then each listed item has some (a wave not marked split holds every request
    of each: :func:`~cpplan.verifier.chains.check_whole_items`)."""
    items = wave.get("items")
    if not isinstance(items, list):
        return
    for item_id, times in Counter(map(str, items)).items():
        if times > 1:
            violations.append(f"wave {w}: item {item_id!r} is listed {times} times")
    split = wave.get("split")
    if "split" in wave and not isinstance(split, bool):
        violations.append(f"wave {w}: split {split!r} is not true or false")
    if split is not True:
        return
    held = Counter(e.get("item") for e in wave.get("requests") or [] if isinstance(e, dict))
    listed = [i for i in dict.fromkeys(items) if isinstance(i, str) and i in by_id]
    for item_id in listed:
        if not held[item_id]:
            violations.append(f"wave {w}: item {item_id!r} is listed but none of its requests is in the wave")
    if not any(0 < held[i] < len(by_id[i].requests) for i in listed):
        violations.append(f"wave {w}: split true but it holds every request of each item it lists")


def _check_layout(w: int, wave: dict[str, Any], facts: WaveFacts, violations: list[str]) -> None:
    """The wave's ``layout`` names a layout whose sharing rule its segments keep."""
    name = wave["layout"]
    if isinstance(name, str) and name in FREE_LAYOUTS:
        return
    try:
        kind, value = parse_layout(name) if isinstance(name, str) else ("", 0)
    except InputError:
        kind, value = "", 0
    if not kind:
        violations.append(
            f"wave {w}: layout {name!r} is not a layout the planner writes "
            f"(full, none, depth:K, min_span:T, {', '.join(FREE_LAYOUTS)})"
        )
        return
    broken = _layout_break(kind, value, wave, facts)
    if broken:
        violations.append(f"wave {w}: layout {name!r} but {broken}")


def _layout_break(kind: str, value: int, wave: dict[str, Any], facts: WaveFacts) -> str:
    """How the wave's segments break the layout's rule (``""``: they keep it)."""
    segments, chains = facts.segments, facts.segment_uses
    if kind == "full":
        return _unshared_prefix(segments, facts.segment_tokens)
    shared = [s for s, uses in enumerate(chains) if uses >= 2]
    if kind == "none" and shared:
        return f"segment {shared[0]} is on {chains[shared[0]]} requests' chains"
    level: list[int] = []
    for parent, _, _ in segments:
        level.append(level[parent] + 1 if parent >= 0 else 1)
    for s in shared:
        if kind == "depth" and level[s] > value:
            return f"segment {s}, shared, is at tree level {level[s]}"
        if kind == "min_span" and segments[s][2] < value:
            return f"segment {s}, shared, holds {segments[s][2]} tokens"
    return ""


def _unshared_prefix(segments: list[Segment], tokens: list[np.ndarray | None]) -> str:
    """Two segments with one parent (or two roots) that start with the same token: a prefix full
    sharing would store once (``""`` when there is none)."""
    starts = [
        (s[0], held.item(0))
        for s, held in zip(segments, tokens, strict=True)
        if held is not None and held.size
    ]
    if len(set(starts)) == len(starts):
        return ""
    seen: dict[tuple[int, int], int] = {}
    for s, ((parent, _, _), held) in enumerate(zip(segments, tokens, strict=True)):
        if held is None or not held.size:
            continue
        token = int(held[0])
        other = seen.setdefault((parent, token), s)
        if other != s:
            after = f"after segment {parent}" if parent >= 0 else "as roots"
            return f"segments {other} and {s} both start with token {token} {after}"
    return ""
