"""Layout specs: the names of the layouts a solver profile may list (``full``, ``none``, ``depth:K``,
``min_span:T``), checked here so a profile is validated without the pricing layer."""

from __future__ import annotations

from cpplan.errors import InputError

NAMED_LAYOUTS = ("full", "none")
"""Layouts named without a parameter."""


def parse_layout(spec: str) -> tuple[str, int]:
    """Check a layout spec: ``full``, ``none``, ``depth:K`` (share tree levels 1..K) or ``min_span:T``
    (share a node when its span is at least T tokens). Returns ``(kind, parameter)``."""
    kind, _, value = spec.partition(":")
    if kind in NAMED_LAYOUTS and not value:
        return kind, 0
    if kind in ("depth", "min_span"):
        try:
            number = int(value)
        except ValueError:
            number = -1
        if number >= 0:
            return kind, number
    raise InputError(f"unknown layout {spec!r}; use full, none, depth:K or min_span:T", field="layouts")
