"""The independent verifier.

It reads a plan in its JSON form and the workload, rebuilds every packed token from the segments and
request chains, and checks: every request exactly once, every packed token owned exactly once, the tree
metadata consistent, and every rank's peak within the budget. It prices ranks token by token from the
model card's resolved terms with its own arithmetic: it shares no code path with the planners or the
numpy evaluator beyond the card. Every figure the plan states is recomputed and compared, or checked for
consistency with the rest of the plan (docs/verify.md lists each field). One module per concern:
:mod:`.segments` (the tree), :mod:`.chains` (requests read back), :mod:`.owners` (ownership),
:mod:`.rank_prices` (pricing), :mod:`.claims` (a rank's figures and the tolerances), :mod:`.wave_claims`
and :mod:`.plan_claims` (what a wave and a plan state beyond them); this module checks the plan as a
whole.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from cpplan.errors import InputError
from cpplan.plans.plan_fields import GDN_HANDOFF_MODES
from cpplan.spec.card import ResolvedCard
from cpplan.spec.settings import topology_from_json
from cpplan.spec.topology import Topology
from cpplan.spec.workload import Item, Workload
from cpplan.verifier.card_terms import CardTerms, card_terms
from cpplan.verifier.chains import check_used, check_whole_items, read_requests
from cpplan.verifier.claims import is_number
from cpplan.verifier.owners import read_owners
from cpplan.verifier.plan_claims import PlanTotals, check_plan_claims
from cpplan.verifier.rank_prices import close, price_ranks
from cpplan.verifier.schedule_replay import replay_cost, wave_gpus, wave_group
from cpplan.verifier.segments import check_packed_tokens, check_segments, read_segments, segment_offsets
from cpplan.verifier.wave_claims import WaveFacts, check_wave_claims

DEFAULT_CHUNK_TOKENS = 128


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
    requests: Collection[tuple[str, int]] | None = None,
    check_starts: bool = True,
) -> Verification:
    """Check a plan dictionary (as written by ``cpplan plan``) against the workload and card.

    ``requests``: the ``(item id, request index)`` pairs the plan must hold, when it is a part of a
    larger plan (a pack shard); default every request of the workload. ``check_starts``: replay the
    waves' claimed starts (off for a part that does not hold every wave of its schedule)."""
    chunk = int(chunk_tokens or data.get("chunk_tokens") or DEFAULT_CHUNK_TOKENS)
    waves = data.get("waves")
    if not isinstance(waves, list) or not waves:
        return Verification(valid=False, violations=("plan has no waves",), cost_s=None, peak_bytes=None)
    mismatch = _stated_settings(data, card)
    if mismatch is not None:
        return Verification(valid=False, violations=(mismatch,), cost_s=None, peak_bytes=None)
    by_id = {item.id: item for item in workload.items}
    violations: list[str] = []
    seen: dict[tuple[str, int], int] = {}
    wave_costs: list[float] = []
    placed: tuple[list[dict], list[list[int]], list[int]] = ([], [], [])
    worst_peak = packed_tokens = logical_tokens = 0
    terms: dict[int, CardTerms] = {}
    first = _first_index(waves) if requests is not None else 0
    for w, wave in enumerate(waves):
        if not isinstance(wave, dict):
            violations.append(f"wave {w}: malformed (a wave is a JSON object, got {type(wave).__name__})")
            continue
        try:
            group = _wave_card(w, wave, card, violations)
            if group is None:
                continue
            if group.topology.cp not in terms:
                terms[group.topology.cp] = card_terms(group)
            where = _Where(w=w, index=first + w, topology=card.topology)
            priced_by = (group, terms[group.topology.cp])
            cost, peak, tokens = _check_wave(
                where, wave, by_id, seen, priced_by, memory_bytes, chunk, violations
            )
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            violations.append(f"wave {w}: malformed ({type(exc).__name__}: {exc})")
            continue
        wave_costs.append(cost)
        packed_tokens, logical_tokens = packed_tokens + tokens[0], logical_tokens + tokens[1]
        placed[0].append(wave)
        placed[1].append(wave_gpus(w, wave, group.topology.cp, card.topology, violations))
        placed[2].append(w)
        worst_peak = max(worst_peak, peak)
    violations.extend(_split_violations(waves, seen))
    violations.extend(_coverage_violations(workload, seen, requests))
    padding = (data.get("padding"), card.wave_overhead_s)
    replayed = violations if check_starts else []
    total = replay_cost(placed[0], placed[1], wave_costs, card.topology, replayed, padding, indices=placed[2])
    totals = PlanTotals(
        cost_s=total,
        num_waves=len(waves),
        packed_tokens=packed_tokens,
        logical_tokens=logical_tokens,
        peak_bytes=worst_peak,
        safety=card.safety,
    )
    _check_plan(data, totals, workload, violations, whole=requests is None)
    return Verification(
        valid=not violations,
        violations=tuple(violations),
        cost_s=total,
        peak_bytes=worst_peak,
        wave_costs_s=tuple(wave_costs),
    )


def _stated_settings(data: dict[str, Any], card: ResolvedCard) -> str | None:
    """The first setting the plan states (``model``, ``layers``, ``phase``, ``topology``) other than the
    card's, named with both values (``None`` when they agree or the plan leaves them out): every figure
    of the plan would disagree, so that is the one violation."""
    ours = {"model": card.name, "layers": card.num_layers, "phase": card.phase}
    for name, value in ours.items():
        if name in data and data[name] != value:
            return f"the plan states {name} {data[name]!r}, but it is checked with {value!r}"
    if "topology" not in data:
        return None
    try:
        stated = topology_from_json(data["topology"])
    except InputError as exc:
        return f"the plan's topology {data['topology']!r} is not a topology: {exc}"
    if stated != card.topology:
        return f"the plan states topology {stated}, but it is checked under {card.topology}"
    return None


def _first_index(waves: list) -> int:
    """The ``index`` a part of a plan (a shard) starts at: its first wave's."""
    first = waves[0].get("index", 0) if isinstance(waves[0], dict) else 0
    return first if isinstance(first, int) else 0


def _check_plan(
    data: dict[str, Any], totals: PlanTotals, workload: Workload, violations: list[str], *, whole: bool
) -> None:
    """The plan's ``cost_s`` against the replay's; then, once every wave checks and for a whole plan,
    everything else it states as a whole (:mod:`.plan_claims`)."""
    claimed = data.get("cost_s")
    if "cost_s" in data and not is_number(claimed):
        violations.append(f"plan cost_s {claimed!r} is not a number of seconds")
    elif not violations and is_number(claimed) and not close(claimed, totals.cost_s):
        violations.append(f"plan cost_s {claimed} differs from the verifier's {totals.cost_s}")
    if not violations and whole:
        check_plan_claims(data, totals, workload, violations)


def _wave_card(w: int, wave: dict, card: ResolvedCard, violations: list[str]) -> ResolvedCard | None:
    """The card a wave is priced with: resolved for its CP group size (a violation, and ``None``, for
    a size the topology does not allow or the card cannot price)."""
    size = wave_group(w, wave, card.topology, violations)
    if size is None:
        return None
    try:
        return card.group_card(size)
    except InputError as exc:
        violations.append(f"wave {w}: {exc}")
        return None


@dataclass(frozen=True, kw_only=True)
class _Where:
    """A wave's place: its position in the plan JSON, its expected ``index`` and the plan's topology."""

    w: int
    index: int
    topology: Topology


def _check_wave(
    where: _Where,
    wave: dict,
    by_id: dict[str, Item],
    seen: dict[tuple[str, int], int],
    priced_by: tuple[ResolvedCard, CardTerms],
    memory_bytes: int,
    chunk: int,
    violations: list[str],
) -> tuple[float, int, tuple[int, int]]:
    """One wave's structure, requests, ownership, prices (by the card of its group and its terms) and
    stated fields; its cost, worst peak, and packed and logical tokens."""
    w = where.w
    card = priced_by[0]
    segments = read_segments(wave)
    check_segments(w, segments, violations)
    offsets, packed = segment_offsets(segments)
    coverage = read_requests(w, wave, segments, by_id, seen, violations)
    check_whole_items(w, wave, by_id, violations)
    check_used(w, coverage, violations)
    check_packed_tokens(w, wave, packed, violations)
    _check_gdn_handoff(w, wave, violations)
    runs = read_owners(w, wave["ranks"], packed, chunk, card.topology.cp, violations)
    cost, peak = price_ranks(w, wave, segments, offsets, runs, coverage, priced_by, memory_bytes, violations)
    facts = WaveFacts(
        w=w,
        index=where.index,
        topology=where.topology,
        segments=segments,
        segment_uses=coverage.uses,
        segment_tokens=coverage.tokens,
        logical_tokens=coverage.logical_tokens,
        cost_s=cost,
        card_cost_s=cost / card.time_scale,
    )
    check_wave_claims(wave, facts, by_id, violations)
    return cost, peak, (packed, coverage.logical_tokens)


def _check_gdn_handoff(w: int, wave: dict, violations: list[str]) -> None:
    """The wave's ``gdn_handoff``, where given, names a mode the executor runs."""
    mode = wave.get("gdn_handoff", "rounds")
    if not isinstance(mode, str) or mode not in GDN_HANDOFF_MODES:
        modes = ", ".join(map(repr, GDN_HANDOFF_MODES))
        violations.append(f"wave {w}: gdn_handoff {mode!r} is not one of {modes}")


def _coverage_violations(
    workload: Workload, seen: dict[tuple[str, int], int], requests: Collection[tuple[str, int]] | None
) -> list[str]:
    """Every expected request in some wave, and no request that is not in the workload."""
    everything = {(item.id, k) for item in workload.items for k in range(len(item.requests))}
    if requests is None and seen.keys() == everything:
        return []
    expected = everything if requests is None else everything & set(requests)
    found = [f"request {key[1]} of item {key[0]!r} is in no wave" for key in sorted(expected - set(seen))]
    found += [
        f"request {key[1]} of item {key[0]!r} is not in the workload"
        for key in sorted(set(seen) - everything)
    ]
    return found


def _split_violations(waves: list, seen: dict[tuple[str, int], int]) -> list[str]:
    """An item whose requests lie in more than one wave must lie in consecutive waves marked split."""
    if len(set(seen.values())) < 2 and set(map(type, map(itemgetter(0), seen))) <= {str}:
        return []  # the requests lie in one wave at most
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
