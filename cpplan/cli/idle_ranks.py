"""A warning when most CP ranks of a plan own nothing (``cp=1024`` for a workload of a few chunks)."""

from __future__ import annotations

import numpy as np

from cpplan.plans.result import PlanResult
from cpplan.pricing.wave import local_tokens


def idle_ranks(result: PlanResult) -> tuple[int, int]:
    """``(idle, ranks)``: how many of the plan's CP ranks own no token in any wave, of how many."""
    waves = result.plan.waves
    num_ranks = max((wave.cp for wave in waves), default=0)
    busy = np.zeros(num_ranks, dtype=bool)
    for wave in waves:
        busy[: wave.cp] |= local_tokens(wave) > 0
    return int(num_ranks - busy.sum()), num_ranks


def idle_ranks_warning(result: PlanResult) -> str | None:
    """A warning naming how many CP ranks own no token in any wave, when that is more than half of
    them (``None`` otherwise): such a plan is valid, but those GPUs do nothing in the whole step."""
    num_idle, num_ranks = idle_ranks(result)
    if num_idle * 2 <= num_ranks:
        return None
    most = max(int((local_tokens(wave) > 0).sum()) for wave in result.plan.waves)
    return (
        f"cpplan: warning: {num_idle:,} of the {num_ranks:,} CP ranks own no token in any wave (at most "
        f"{most:,} ranks own tokens in a wave: a rank owns whole chunks and the waves hold too few); the "
        "plan is valid, but a smaller cp leaves fewer GPUs idle"
    )
