"""What the cpplan verl engine measures of each planned wave it runs, and feeds back to the planner.

A wave is measured as :mod:`cpplan.calibration.measure` measures one: the device synchronized, the
allocator's peak reset, the allocated bytes taken as the baseline (weights, optimizer state and the
gradients accumulated so far), then the wave's forward, loss and backward, then the peak above that
baseline and the elapsed seconds. :meth:`cpplan.Planner.observe` gets both, so later plans budget with
the learned correction. On CUDA the memory source is :class:`~cpplan.calibration.measure.CudaMemory`;
elsewhere there is none unless one is given (a test's fake), and nothing is observed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from cpplan.calibration.measure import CudaMemory, MemorySource


@dataclass(frozen=True, kw_only=True)
class WaveReading:
    """One wave's measured peak bytes above its baseline and its seconds."""

    peak_bytes: int
    seconds: float


def default_memory(device: Any) -> MemorySource | None:
    """The memory source of ``device``: CUDA's allocator on a CUDA device, else none."""
    where = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    if where.type == "cuda" and torch.cuda.is_available():
        return CudaMemory(where)
    return None


def measured(
    run: Callable[[], Any], memory: MemorySource, clock: Callable[[], float] = time.perf_counter
) -> tuple[Any, WaveReading]:
    """``run()``'s result and its :class:`WaveReading` on ``memory``."""
    memory.synchronize()
    memory.reset_peak()
    baseline = memory.allocated()
    started = clock()
    out = run()
    memory.synchronize()
    seconds = clock() - started
    return out, WaveReading(peak_bytes=max(memory.peak() - baseline, 0), seconds=seconds)


def single_rank_waves(result) -> list[bool]:
    """Per wave of ``result``: whether it has one CP rank (a process running every rank of a wider
    wave measures all of them at once, which is no rank's peak)."""
    return [int(wave.quantities.shape[0]) == 1 for wave in result.plan.waves]


__all__ = ["WaveReading", "default_memory", "measured", "single_rank_waves"]
