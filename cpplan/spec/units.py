"""Byte sizes: parsing user strings and formatting for tables."""

from __future__ import annotations

import math
import re

from cpplan.errors import InputError

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:e([+-]?[0-9]+))?\s*([A-Za-z]*)\s*$")


def parse_bytes(text: str | int, *, field: str = "memory") -> int:
    """Parse ``80GiB``, ``80GB``, ``512MiB``, ``1.5e9`` or plain bytes into whole bytes (rounded down)."""
    if isinstance(text, bool):
        raise InputError(f"expected a size, got {text!r}", field=field)
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE.match(str(text))
        if match is None:
            raise InputError(
                f"cannot read size {text!r}; use e.g. 80GiB, 80GB, 512MiB or plain bytes", field=field
            )
        number, exponent, unit = match.groups()
        factor = _UNITS.get(unit.lower())
        if factor is None:
            raise InputError(
                f"unknown unit {unit!r} in {text!r}; known: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB",
                field=field,
            )
        try:
            scaled = float(number) * (10 ** int(exponent) if exponent else 1) * factor
        except OverflowError:
            scaled = math.inf
        if not math.isfinite(scaled):
            raise InputError(f"size {text!r} is not finite", field=field)
        value = int(scaled)
    if value <= 0:
        raise InputError(f"size must be positive, got {text!r}", field=field)
    return value


def format_bytes(num_bytes: float) -> str:
    """Human-readable bytes in GiB/MiB/KiB."""
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(num_bytes) >= factor:
            return f"{num_bytes / factor:.2f} {unit}"
    return f"{num_bytes:.0f} B"
