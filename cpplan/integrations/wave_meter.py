"""Each wave of a trainer's pass measured as it runs: its peak bytes above its pre-wave baseline and its
seconds, forward and backward, for :meth:`cpplan.Planner.observe` (the loop closed: the planner learns
its correction as the run trains).

A :class:`WaveMeter` measures one segment (``start()``, then ``stop() -> (peak_bytes, seconds)``): on CUDA
:class:`CudaMeter` (``torch.cuda.reset_peak_memory_stats`` and ``max_memory_allocated`` above the
allocation at ``start``, the device synchronized at both ends); anywhere else a meter the caller gives
(the CPU tests inject one). :class:`MeteredWave` wraps one wave's forward function
(:func:`cpplan.integrations.packed_step.step_logprobs` calls it) and measures what the plan priced for
that wave, its forward and its backward:

- a wave recomputed in backward (:func:`~cpplan.integrations.packed_step.recomputed`): its first
  forward (under ``torch.no_grad``) is one segment; its rerun in backward and that backward, from the
  rerun's start to the gradient reaching the embedding output (the last step of the wave's backward),
  the other. The wave's peak is the larger, its seconds the sum.
- a wave not recomputed (a pass of one wave): one segment from its forward's start to the end of its
  backward (the loss the trainer computes between them is in its seconds).

The end of a backward is seen by an identity autograd node on the embedding's output (a forward hook
for the wave's call; the node makes the output require a gradient, so a frozen embedding's output gets
one too, at the cost of the first layer's input gradient). A pass without gradients is not measured: the
planner prices every request of a trainer's pass with its backward, so a forward alone would teach it a
smaller scale than the passes with gradients need.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

import torch


class WaveMeter(Protocol):
    """Measures one segment of a wave: ``start()``, then ``stop()`` gives the peak bytes above the
    allocation at ``start`` and the seconds since."""

    def start(self) -> None:
        """Begin a segment (the baseline is what is allocated now)."""

    def stop(self) -> tuple[int, float]:
        """End the segment: its peak bytes above the baseline and its seconds."""


class CudaMeter:
    """:class:`WaveMeter` on one CUDA device (synchronized at both ends, so the seconds are the
    device's)."""

    def __init__(self, device: torch.device) -> None:
        self.device = torch.device(device)
        self._baseline_bytes = 0
        self._started_s = 0.0

    def start(self) -> None:
        """Synchronize, take the allocation as the baseline, reset the peak, start the clock."""
        torch.cuda.synchronize(self.device)
        self._baseline_bytes = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        self._started_s = time.perf_counter()

    def stop(self) -> tuple[int, float]:
        """Synchronize; the peak above the baseline and the seconds since :meth:`start`."""
        torch.cuda.synchronize(self.device)
        peak = torch.cuda.max_memory_allocated(self.device) - self._baseline_bytes
        return max(int(peak), 0), time.perf_counter() - self._started_s


@dataclass(frozen=True, kw_only=True)
class WaveMeasurement:
    """What one wave measured: its peak bytes above its baseline and its seconds, forward and backward."""

    wave: int
    peak_bytes: int
    seconds: float


class MeteredWave:
    """One wave's forward function (``run``, called as the wave runs) measured by ``meter``; each finished
    wave (its backward done) is handed to ``record``. ``embed`` is the model's input embedding module."""

    def __init__(
        self,
        run: Callable[[], tuple[torch.Tensor, ...]],
        *,
        wave: int,
        meter: WaveMeter,
        record: Callable[[WaveMeasurement], None],
        embed: torch.nn.Module,
    ) -> None:
        self.run, self.wave, self.meter, self.record, self.embed = run, wave, meter, record, embed
        self._forward: tuple[int, float] | None = None

    @property
    def keys(self):
        """The wrapped wave's request keys (as :class:`~cpplan.integrations.packed_step` reads them)."""
        return self.run.keys

    def __call__(self) -> tuple[torch.Tensor, ...]:
        if not torch.is_grad_enabled():  # a recomputed wave's first forward: one segment
            self.meter.start()
            out = self.run()
            self._forward = self.meter.stop()
            return out
        self.meter.start()
        with _end_of_backward(self.embed, self._finished):
            return self.run()

    def _finished(self) -> None:
        peak, seconds = self.meter.stop()
        if self._forward is not None:
            peak, seconds = max(peak, self._forward[0]), seconds + self._forward[1]
        self.record(WaveMeasurement(wave=self.wave, peak_bytes=peak, seconds=seconds))


@contextmanager
def _end_of_backward(embed: torch.nn.Module, callback: Callable[[], None]):
    """While the context is open, each output of ``embed`` passes through an identity node; ``callback``
    runs once, when the gradient has reached every one of them (the end of the backward of what ran)."""
    pending = [0]
    anchor = torch.zeros((), requires_grad=True)

    def arrived() -> None:
        pending[0] -= 1
        if pending[0] == 0:
            callback()

    def hook(_module, _args, output):
        pending[0] += 1
        return _BackwardEnd.apply(output, anchor.to(output.device), arrived)

    handle = embed.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


class _BackwardEnd(torch.autograd.Function):
    """Identity on ``x``; its backward calls ``arrived()`` (``anchor`` makes the output need a gradient
    even where ``x`` does not)."""

    @staticmethod
    def forward(ctx, x, anchor, arrived):
        ctx.arrived = arrived
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        ctx.arrived()
        return grad, None, None


__all__ = ["CudaMeter", "MeteredWave", "WaveMeasurement", "WaveMeter"]
