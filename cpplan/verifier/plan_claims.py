"""What a plan states as a whole, each recomputed or checked for consistency: its totals (``num_waves``,
``packed_tokens``, ``logical_tokens``, ``peak_bytes``), its ``safety``, and, where the plan carries
them, its ``workload`` digest, its ``candidates`` and ``strategy`` and its ``solver`` bound.

The candidates are the planner's own record of what it tried; the verifier cannot re-run them, so it
checks what must hold between them and the plan: the chosen ``strategy`` is among them, valid, with the
plan's ``cost_s`` and ``num_waves``, and no valid candidate is cheaper. The solver's bound is checked
against what it bounds: a bound over all plans lies at or below the plan's cost, a model's own bound at
or below that model's objective, and ``gap`` is the gap between them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cpplan.spec.workload import Workload
from cpplan.spec.workload_digest import plan_digest, wave_digest, wave_keys
from cpplan.verifier.claims import PEAK_TOLERANCE_BYTES, check_present, close, is_number

PLAN_REQUIRED = ("safety", "cost_s", "num_waves", "logical_tokens", "packed_tokens", "peak_bytes")
"""The plan fields every plan states that the verifier checks (the settings are checked by the caller,
which reads them)."""

BOUND_SCOPES = ("all plans", "proposed waves", "its model")
"""The scopes a solver bound states."""

ROUNDED_S = 1e-6
"""The solver writes its objective and bound to the microsecond."""


@dataclass(frozen=True, kw_only=True)
class PlanTotals:
    """The verifier's own totals of a plan: its cost, waves, packed and logical tokens, worst peak and
    the card's safety factor."""

    cost_s: float
    num_waves: int
    packed_tokens: int
    logical_tokens: int
    peak_bytes: int
    safety: float


def check_plan_claims(
    data: dict[str, Any], totals: PlanTotals, workload: Workload, violations: list[str]
) -> None:
    """Every field of the plan named in the module's docstring against the verifier's own (called once
    every wave checks, for a whole plan: a plan's totals are not a part's)."""
    check_present("plan", data, PLAN_REQUIRED, violations)
    for name in ("num_waves", "packed_tokens", "logical_tokens"):
        if name in data and data[name] != getattr(totals, name):
            violations.append(f"plan {name} {data[name]!r} but the verifier counts {getattr(totals, name)}")
    peak = data.get("peak_bytes")
    if "peak_bytes" in data and not (
        is_number(peak) and abs(peak - totals.peak_bytes) <= PEAK_TOLERANCE_BYTES
    ):
        violations.append(
            f"plan peak_bytes {peak!r} but the verifier's worst rank peaks at {totals.peak_bytes}"
        )
    if "safety" in data and not (is_number(data["safety"]) and close(data["safety"], totals.safety)):
        violations.append(f"plan safety {data['safety']!r} but the card's safety factor is {totals.safety}")
    if isinstance(data.get("workload"), dict):
        _check_digests(data, workload, violations)
    if "candidates" in data:
        _check_candidates(data, totals, violations)
    if "solver" in data:
        _check_solver(data, violations)


def _check_digests(data: dict[str, Any], workload: Workload, violations: list[str]) -> None:
    """The ``workload`` object's counts are the plan's, each wave digest is that of the wave's requests
    in ``workload``, and ``sha256`` is the digest of the wave digests."""
    summary, waves = data["workload"], data["waves"]
    items = len({i for wave in waves for i in wave.get("items") or []})
    requests = sum(len(wave.get("requests") or []) for wave in waves)
    for name, count in (("items", items), ("requests", requests)):
        if summary.get(name) != count:
            violations.append(f"plan workload.{name} {summary.get(name)!r} but the waves hold {count}")
    digests = summary.get("wave_sha256")
    if not isinstance(digests, list) or len(digests) != len(waves):
        violations.append(f"plan workload.wave_sha256 is not one digest per wave ({len(waves)})")
        return
    for w, (wave, digest) in enumerate(zip(waves, digests, strict=True)):
        try:
            ours = wave_digest(workload, wave_keys(wave))
        except (KeyError, TypeError):
            continue  # a request the workload lacks: reported with the chains
        if digest != ours:
            violations.append(f"plan workload.wave_sha256[{w}] is not the digest of wave {w}'s requests")
    if summary.get("sha256") != plan_digest([str(d) for d in digests]):
        violations.append("plan workload.sha256 is not the digest of its wave_sha256")


def _check_candidates(data: dict[str, Any], totals: PlanTotals, violations: list[str]) -> None:
    """The chosen ``strategy`` is a valid candidate with the plan's cost and waves, and the cheapest."""
    candidates = data["candidates"]
    if not isinstance(candidates, list) or not all(isinstance(c, dict) for c in candidates):
        violations.append("plan candidates is not a list of objects")
        return
    if candidates and all(str(c.get("reason", "")).startswith("replica ") for c in candidates):
        _check_replica_winners(candidates, totals, violations)
        return
    strategy = data.get("strategy")
    chosen = next((c for c in candidates if c.get("strategy") == strategy and c.get("valid") is True), None)
    if chosen is None:
        violations.append(f"plan strategy {strategy!r} is not a valid candidate")
        return
    cost = chosen.get("cost_s")
    if not (is_number(cost) and close(cost, totals.cost_s)):
        violations.append(
            f"plan candidate {strategy!r} (chosen) costs {cost!r} but the plan costs {totals.cost_s}"
        )
        return
    if chosen.get("num_waves") != totals.num_waves:
        violations.append(
            f"plan candidate {strategy!r} (chosen) has {chosen.get('num_waves')!r} waves but the plan "
            f"{totals.num_waves}"
        )
    for other in candidates:
        price = other.get("cost_s")
        if other.get("valid") is True and is_number(price) and price < cost and not close(price, cost):
            violations.append(
                f"plan strategy {strategy!r} costs {cost} but candidate {other.get('strategy')!r} is valid "
                f"and costs {price}: the cheapest valid candidate is chosen"
            )


def _check_replica_winners(candidates: list[dict], totals: PlanTotals, violations: list[str]) -> None:
    """A step assembled from its DP replicas' plans lists each replica's winner (reason ``replica k:
    ...``): every one valid, and the step costs the slowest replica's plan (its makespan)."""
    costs = [c.get("cost_s") for c in candidates]
    if not all(c.get("valid") is True for c in candidates) or not all(is_number(c) for c in costs):
        violations.append("plan candidates: a replica's winner is not a valid, priced plan")
        return
    if not close(max(costs), totals.cost_s):
        violations.append(
            f"plan costs {totals.cost_s} but its slowest replica's plan costs {max(costs)}: a step "
            "assembled from its replicas' plans costs the slowest of them"
        )


def _check_solver(data: dict[str, Any], violations: list[str]) -> None:
    """A bound over all plans lies at or below the plan's cost (the deciding model's objective may round
    below the price it bounds), another at or below its model's objective, and ``gap`` is what it states
    it is."""
    solver = data["solver"]
    if not isinstance(solver, dict):
        violations.append("plan solver is not an object")
        return
    check_present("plan solver", solver, ("status", "objective_s", "bound_s", "gap"), violations)
    scope, bound, objective = solver.get("bound_scope"), solver.get("bound_s"), solver.get("objective_s")
    if scope is not None and scope not in BOUND_SCOPES:
        violations.append(f"plan solver.bound_scope {scope!r} is not one of {', '.join(BOUND_SCOPES)}")
        return
    if bound is None:
        return
    if not is_number(bound):
        violations.append(f"plan solver.bound_s {bound!r} is not a number of seconds")
        return
    cost = data.get("cost_s")
    if scope == "all plans":
        if not is_number(cost):
            return  # reported with the plan's totals
        if bound > cost + ROUNDED_S:
            violations.append(
                f"plan solver.bound_s {bound} bounds all plans but lies above the plan's cost_s {cost}"
            )
            return
        priced = _candidate_cost(data, "cpsat") if data.get("strategy") != "cpsat" else None
        _check_gap(solver, bound, priced if priced is not None else cost, violations)
    elif is_number(objective):
        if bound > objective + ROUNDED_S:
            violations.append(f"plan solver.bound_s {bound} lies above its model's objective_s {objective}")
            return
        _check_gap(solver, bound, objective, violations)


def _check_gap(solver: dict[str, Any], bound: float, priced: float, violations: list[str]) -> None:
    """``gap`` is ``max(0, (priced - bound) / priced)``."""
    gap = solver.get("gap")
    expected = max(0.0, (priced - bound) / priced) if priced > 0 else 0.0
    if not (is_number(gap) and abs(gap - expected) <= ROUNDED_S):
        violations.append(f"plan solver.gap {gap!r} but its bound {bound} and cost {priced} give {expected}")


def _candidate_cost(data: dict[str, Any], strategy: str) -> float | None:
    """The cost of the named candidate, where the plan lists it with one."""
    for candidate in data.get("candidates") or []:
        if (
            isinstance(candidate, dict)
            and candidate.get("strategy") == strategy
            and is_number(candidate.get("cost_s"))
        ):
            return float(candidate["cost_s"])
    return None
