"""Byte sizes: parsing user strings and formatting for tables, and what ``--memory`` means."""

from __future__ import annotations

import math
import re
from fractions import Fraction

from cpplan.errors import InputError

MEMORY_MEANING = (
    "the bytes per rank free for the wave, above the weights, the optimizer state and anything else "
    "resident before it"
)
"""What ``--memory`` / ``memory_bytes`` is: the one sentence the README, ``--help`` and errors use."""

MAX_BYTES = 2**63 - 1
"""The largest size accepted (what a signed 64-bit integer holds: the solver's integer range)."""

TINY_PLAIN_BYTES = 2**20
"""A memory size given without a unit below this many bytes is refused as a probable missing unit."""

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
"""The accepted units, in any case: bytes, the decimal ``KB`` ... ``TB`` and the binary ``KiB`` ...
``TiB`` (what DESIGN.md, ``--help`` and docs/cli.md list)."""

UNIT_NAMES = "GiB, GB, MiB, MB, KiB, KB, TiB, TB, B or none (bytes)"
"""The accepted units as a user reads them (errors and ``--help``)."""

_AMBIGUOUS = {"k": "K", "m": "M", "g": "G", "t": "T", "ki": "K", "mi": "M", "gi": "G", "ti": "T"}
"""Letters without ``B`` (``8G``, ``8Gi``): refused with both spellings they may have meant, since
``8G`` is 8 GiB to some tools and 8 GB to others."""
_POWERS = {"K": 10, "M": 20, "G": 30, "T": 40}

LARGEST_GPU_BYTES = 288 * 10**9
"""The memory of the largest GPUs made (B300 and MI355X: 288 GB): a per-rank wave budget above it cannot
be free memory on one GPU."""
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([+-]?[0-9]+))?\s*([A-Za-z]*)\s*$", re.ASCII)


def parse_bytes(text: str | int, *, field: str = "memory") -> int:
    """Parse ``80GiB``, ``80GB``, ``512MiB``, ``1.5e9`` or plain bytes into whole bytes (rounded down),
    exactly (no float rounding) and at most :data:`MAX_BYTES`."""
    if isinstance(text, bool):
        raise InputError(f"expected a size, got {text!r}", field=field)
    value = text if isinstance(text, int) else _parse_text(str(text), field)
    if value <= 0:
        raise InputError(f"{field} must be positive, got {text!r}", field=field)
    if value > MAX_BYTES:
        raise InputError(
            f"size {text!r} is too large: at most {MAX_BYTES:,} bytes (2^63 - 1) are accepted", field=field
        )
    return value


def _parse_text(text: str, field: str) -> int:
    match = _SIZE.match(text)
    if match is None and _SIZE.match(text.strip().removeprefix("-")) is not None:
        raise InputError(f"{field} must be positive, got {text.strip()!r}", field=field)
    if match is None:
        raise InputError(
            f"cannot read size {text!r}; use e.g. 80GiB, 80GB, 512MiB or plain bytes", field=field
        )
    number, exponent, unit = match.groups()
    factor = _UNITS.get(unit.lower())
    if factor is None:
        prefix = _AMBIGUOUS.get(unit.lower())
        if prefix is not None:
            size = text.strip()[: -len(unit)]
            raise InputError(
                f"{text.strip()!r} has no B: write {size}{prefix}iB (binary, 2^{_POWERS[prefix]} bytes "
                f"each) or {size}{prefix}B (decimal, 10^{_POWERS[prefix] * 3 // 10} bytes each); units: "
                f"{UNIT_NAMES}",
                field=field,
            )
        raise InputError(f"unknown unit {unit!r} in {text!r}; units: {UNIT_NAMES}", field=field)
    power = int(exponent) if exponent else 0
    try:
        rough = float(number) * 10.0**power * factor
    except OverflowError:
        rough = math.inf
    if not math.isfinite(rough):
        raise InputError(f"size {text!r} is not finite", field=field)
    if rough > 2 * MAX_BYTES:
        return MAX_BYTES + 1  # refused by the caller; no exact arithmetic on huge exponents
    exact = Fraction(number) * Fraction(10) ** power * factor
    if 0 < exact < 1:
        raise InputError(f"{text.strip()!r} is less than one byte; sizes are whole bytes", field=field)
    return math.floor(exact)


def parse_memory(text: str | int, *, field: str = "memory") -> int:
    """A per-rank memory budget (:data:`MEMORY_MEANING`): :func:`parse_bytes`, refusing a number without
    a unit that is too small to be meant as bytes (``--memory 80`` is 80 bytes, not 80 GiB)."""
    value = parse_bytes(text, field=field)
    if isinstance(text, str) and _is_plain(text) and value < TINY_PLAIN_BYTES:
        number = text.strip()
        raise InputError(
            f"{number!r} has no unit, so it is {_plain_amount(number)} bytes, less than 1 MiB: "
            f"{_unit_hint(number)}; --memory is {MEMORY_MEANING}",
            field=field,
        )
    return value


def _plain_amount(number: str) -> str:
    """A plain number as the bytes it is: ``1,048,575``, ``8.5``."""
    exact = Fraction(number)
    return f"{exact.numerator:,}" if exact.denominator == 1 else f"{float(exact):g}"


def _unit_hint(number: str) -> str:
    """The units a plain number may have been meant in: those that make it a size one GPU can have
    free (GiB, else MiB), or none."""
    exact = Fraction(number)
    for binary, decimal, factor in (("GiB", "GB", 2**30), ("MiB", "MB", 2**20)):
        if TINY_PLAIN_BYTES <= exact * factor <= LARGEST_GPU_BYTES:
            return f"write {number}{binary} (or {number}{decimal}) if that is what you meant"
    return "give a unit (e.g. 40GiB)"


def memory_warning(num_bytes: int) -> str | None:
    """A warning when a ``--memory`` of ``num_bytes`` is more than any GPU holds (above
    :data:`LARGEST_GPU_BYTES`): a sum over GPUs or a slipped digit, since it is one rank's free bytes
    (``None`` otherwise: every size a single GPU can have free is taken without comment)."""
    if num_bytes <= LARGEST_GPU_BYTES:
        return None
    return (
        f"cpplan: warning: --memory {num_bytes:,} bytes ({format_bytes(num_bytes)}) is more than any GPU "
        f"holds (the largest hold {LARGEST_GPU_BYTES // 10**9} GB); --memory is {MEMORY_MEANING}. It is "
        "planned as given."
    )


def _is_plain(text: str) -> bool:
    match = _SIZE.match(text)
    return match is not None and not match.group(3)


def memory_from_gpu(gpu_memory: str | int, resident: str | int) -> int:
    """The per-rank budget of a GPU of ``gpu_memory`` bytes holding ``resident`` bytes before the wave
    (weights, optimizer state, framework reserves): their difference, which must be positive."""
    gpu = parse_bytes(gpu_memory, field="gpu_memory")
    held = parse_bytes(resident, field="resident")
    if held >= gpu:
        raise InputError(
            f"{format_bytes_like(held, resident)} resident leaves nothing of the "
            f"{format_bytes_like(gpu, gpu_memory)} GPU for the wave",
            field="resident",
        )
    return gpu - held


def format_bytes(num_bytes: float) -> str:
    """Human-readable bytes in GiB/MiB/KiB."""
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(num_bytes) >= factor:
            return f"{num_bytes / factor:.2f} {unit}"
    return f"{num_bytes:.0f} B"


def format_bytes_like(num_bytes: float, like: str | int) -> str:
    """``num_bytes`` in the user's kind of unit: decimal (``GB``, ``MB``, ``KB``, ``TB``) when the size
    ``like`` they wrote is decimal, else binary (:func:`format_bytes`)."""
    match = _SIZE.match(like) if isinstance(like, str) else None
    if match is None or match.group(3).lower() not in ("kb", "mb", "gb", "tb"):
        return format_bytes(num_bytes)
    for unit, factor in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if abs(num_bytes) >= factor:
            return f"{num_bytes / factor:.2f} {unit}"
    return f"{num_bytes:.0f} B"
