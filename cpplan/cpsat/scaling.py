"""Integer scaling: the one place the CP-SAT model's units and rounding directions are decided.

Memory is counted in KiB and time in microseconds, every rounding in the direction that keeps the
integer model *no more permissive* than the exact evaluator: memory coefficients and statics round
**up**, the per-rank budget ``B / safety`` **down** (less a margin far above float error); the joint
model's time coefficients round **up**; in the ownership model (:mod:`cpplan.cpsat.owned_model`), whose
objective is a price and whose bound must bound every plan, every time coefficient rounds **down**
while memory still rounds up. So when
``static_kib + Σ coef_kib · q ≤ memory_kib`` holds for integer bounds ``q`` of the realized quantities,
the evaluator's ``ceil(safety · (static + Σ coef · q)) ≤ B`` holds too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

KIB = 1024
TIME_UNIT_S = 1e-6
# Relative margin taken off the budget: covers the evaluator's float sums (~1e-15 relative) many times.
BUDGET_MARGIN = 1e-9


@dataclass(frozen=True, kw_only=True)
class Scaling:
    """Units of the integer model: bytes per memory unit and seconds per time unit."""

    bytes_per_unit: int = KIB
    seconds_per_unit: float = TIME_UNIT_S

    def memory_coef(self, bytes_per_unit_of_quantity: float) -> int:
        """A memory coefficient in model units, rounded up."""
        assert bytes_per_unit_of_quantity >= 0
        return math.ceil(bytes_per_unit_of_quantity / self.bytes_per_unit)

    def memory_coef_split(self, bytes_per_unit_of_quantity: float, parts: int) -> tuple[int, int]:
        """A memory coefficient as ``whole + fraction / parts`` model units, the fraction rounded up:
        ``whole · q + ceil(fraction · q / parts)`` bounds ``q`` units from above at 1/parts precision."""
        units = bytes_per_unit_of_quantity / self.bytes_per_unit
        whole = math.floor(units)
        return whole, math.ceil((units - whole) * parts)

    def static(self, static_bytes: float) -> int:
        """Static bytes of an envelope in model units, rounded up."""
        return self.memory_coef(static_bytes)

    def memory_kib(self, memory_bytes: int, safety: float) -> int:
        """The per-rank budget ``B / safety`` in model units, rounded down (with a tiny margin)."""
        return math.floor(memory_bytes / safety / self.bytes_per_unit * (1.0 - BUDGET_MARGIN))

    def time(self, seconds: float) -> int:
        """Seconds in time units, rounded up."""
        assert seconds >= 0
        return math.ceil(seconds / self.seconds_per_unit - 1e-9)

    def time_lower(self, seconds: float) -> int:
        """Seconds in time units, rounded down (for lower bounds)."""
        assert seconds >= 0
        return math.floor(seconds / self.seconds_per_unit + 1e-9)

    def seconds(self, units: float) -> float:
        """Time units back to seconds."""
        return float(units) * self.seconds_per_unit


SCALING = Scaling()
FINE_SCALING = Scaling(seconds_per_unit=1e-7)
"""The ownership model's units (:mod:`~cpplan.cpsat.owned_model`): KiB and 0.1 µs, so a hand-off's
9.3 µs per waiting token rounds by 1% instead of 4%; a row there holds only a window's chunks, so its
coefficient sum stays far below 2^31 (a 4 s wave is 4e7 units)."""
