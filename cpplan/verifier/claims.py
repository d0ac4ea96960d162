"""How the verifier compares what a plan states with what it recomputes: the tolerances, the check that a
field the writer always emits is there, and each CP rank's stated figures.

Integers (tokens, counts, indices) must be equal. Bytes are compared within
:data:`PEAK_TOLERANCE_BYTES` (the writer's floats and the verifier's sum terms in another order); seconds
within :data:`COST_TOLERANCE`, relative (absolute below one second).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cpplan.spec.card import ResolvedCard
from cpplan.spec.quantities import QUANTITY_NAMES
from cpplan.verifier.card_terms import CardTerms

PEAK_TOLERANCE_BYTES = 2
COST_TOLERANCE = 1e-9

_STATED_AS = {
    "tokens": "owns {}",
    "loss_tokens": "the verifier counts {} owned tokens whose logits are needed",
}
"""How a rank's quantity is said where it is not the plain count."""


def close(a: float, b: float) -> bool:
    """Equal within :data:`COST_TOLERANCE` (relative, absolute below 1)."""
    return abs(a - b) <= COST_TOLERANCE * max(1.0, abs(a), abs(b))


def is_number(value: Any) -> bool:
    """An int or float that is not a boolean."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_count(value: Any) -> bool:
    """An int that is not a boolean."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_present(where: str, entry: dict[str, Any], fields: tuple[str, ...], violations: list[str]) -> None:
    """Every one of ``fields`` is in ``entry`` (a field the plan writer always emits, deleted, is a
    violation: the verifier checks what a plan states, and a plan states these)."""
    for name in fields:
        if name not in entry:
            violations.append(f"{where}: field '{name}' is missing")


@dataclass(frozen=True, kw_only=True)
class RankPrice:
    """The verifier's price of one rank: its peak (safety applied), that peak by the card alone (without
    the learned correction the card may carry), the binding envelope's index and its bytes before the
    safety factor, the rank's local quantities and its seconds per barrier."""

    peak_bytes: int
    card_peak_bytes: int
    envelope: int
    envelope_bytes: float
    quantities: tuple[int, ...]
    barrier_s: dict[int, float]

    @property
    def time_s(self) -> float:
        """The rank's seconds: its barriers' summed."""
        return sum(self.barrier_s.values())


def check_rank_claims(
    where: str,
    entry: Any,
    local: dict[str, int],
    priced: RankPrice,
    priced_by: tuple[ResolvedCard, CardTerms],
    violations: list[str],
) -> None:
    """The plan's figures for one rank are the verifier's (priced by the card and its terms): every
    local quantity, ``peak_bytes``, ``card_peak_bytes``, the binding ``envelope``, its ``breakdown`` and
    ``time_s``."""
    if not isinstance(entry, dict):
        return
    for name in QUANTITY_NAMES:
        stated = entry.get(name)
        if stated != local[name] or not (type(stated) is int or is_count(stated)):
            said = _STATED_AS.get(name, "the verifier counts {}").format(local[name])
            violations.append(f"{where}: {name} {stated!r} but {said}")
    for name, peak in (("peak_bytes", priced.peak_bytes), ("card_peak_bytes", priced.card_peak_bytes)):
        stated = entry.get(name)
        if not (is_count(stated) and abs(stated - peak) <= PEAK_TOLERANCE_BYTES):
            violations.append(f"{where}: {name} {stated!r} but the verifier prices {peak}")
    if not (is_number(entry.get("time_s")) and close(entry["time_s"], priced.time_s)):
        violations.append(f"{where}: time_s {entry.get('time_s')!r} but the verifier prices {priced.time_s}")
    check_present(where, entry, ("envelope", "breakdown"), violations)
    _check_envelope(where, entry, priced, priced_by, violations)


def _check_envelope(
    where: str,
    entry: dict[str, Any],
    priced: RankPrice,
    priced_by: tuple[ResolvedCard, CardTerms],
    violations: list[str],
) -> None:
    """``envelope`` names an envelope whose bytes are the rank's largest (a tie may name either), and
    ``breakdown`` holds that envelope's static bytes and each of its terms' bytes, before the safety
    factor."""
    if "envelope" not in entry:
        return
    card, terms = priced_by
    names = card.envelope_names
    if entry["envelope"] not in names:
        known = ", ".join(names)
        violations.append(f"{where}: envelope {entry['envelope']!r} is not one of the card's {known}")
        return
    envelope = terms.envelopes[names.index(entry["envelope"])]
    quantities = priced.quantities
    parts = {"static": envelope.static_bytes}
    for name, (unit_bytes, q) in zip(envelope.term_names, envelope.terms, strict=True):
        parts[name] = unit_bytes * quantities[q]
    if sum(parts.values()) < priced.envelope_bytes - PEAK_TOLERANCE_BYTES:
        binding = names[priced.envelope]
        violations.append(f"{where}: envelope {entry['envelope']!r} but the binding one is {binding!r}")
        return
    _check_breakdown(where, entry.get("breakdown"), parts, violations)


def _check_breakdown(where: str, stated: Any, parts: dict[str, float], violations: list[str]) -> None:
    """The stated ``breakdown`` has exactly the envelope's parts, each within the byte tolerance."""
    if stated is None:
        return
    if not isinstance(stated, dict) or list(stated) != list(parts):
        shown = sorted(stated) if isinstance(stated, dict) else type(stated).__name__
        violations.append(f"{where}: breakdown has {shown}, not the envelope's parts {list(parts)}")
        return
    for name, value in parts.items():
        number = stated[name]
        plain = type(number) is int or type(number) is float or is_number(number)
        if not (plain and abs(number - value) <= PEAK_TOLERANCE_BYTES):
            said = f"breakdown {name!r} is {number!r}"
            violations.append(f"{where}: {said} but the verifier prices {round(value)}")
