"""The MoE load-balancing loss of packed waves, equal to the one the padded batch gives.

Transformers' ``load_balancing_loss_func`` (the Switch Transformer loss the MoE families return as
``aux_loss``) pools every routed layer's router logits over the batch's real tokens: with ``f[k, e]``
the share of (layer, token) pairs whose ``k``-th choice is expert ``e`` and ``P[e]`` the mean router
probability of ``e``, it is ``E · Σ_{k,e} f[k, e] · P[e]``. A padded batch repeats a shared prompt in
every row; a packed wave holds it once. Weighting each packed token by the requests whose path runs
through it (its multiplicity) makes the packed sums the padded ones, so the loss, and its gradient,
are the same.

:func:`recorded_router_logits` hooks the modules a model's own output recording names for
``router_logits`` (``_can_record_outputs``; the first output of each MoE router); :func:`router_sums`
weighs one wave's recorded logits; :meth:`RouterSums.loss` is the loss of sums added over waves.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from cpplan.hf.geometry import WaveGeometry
from cpplan.runtime.materialize import materialize_wave


@dataclass(frozen=True)
class RouterSums:
    """Weighted sums over (routed layer, token): ``routed[k, e]`` of the ``k``-th top choice being
    expert ``e`` (no gradient), ``probs[e]`` of the router's softmax, and ``weight`` of the weights."""

    routed: torch.Tensor
    probs: torch.Tensor
    weight: torch.Tensor

    def __add__(self, other: RouterSums) -> RouterSums:
        return RouterSums(self.routed + other.routed, self.probs + other.probs, self.weight + other.weight)

    def loss(self) -> torch.Tensor:
        """``E · Σ_{k,e} (routed / weight) · (probs / weight)``: transformers' load-balancing loss."""
        num_experts = self.probs.shape[-1]
        return num_experts * ((self.routed / self.weight) * (self.probs / self.weight)[None, :]).sum()

    def as_tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The three sums, for a function that must return tensors (a checkpointed wave)."""
        return self.routed, self.probs, self.weight


def router_modules(model: nn.Module) -> list[nn.Module]:
    """The modules whose first output the model records as ``router_logits`` (empty for a dense model)."""
    classes = set()
    for module in model.modules():
        recorder = getattr(type(module), "_can_record_outputs", None) or {}
        spec = recorder.get("router_logits")
        if spec is not None:
            classes.add(getattr(spec, "target_class", spec))
    return [m for m in model.modules() if isinstance(m, tuple(classes))] if classes else []


@contextlib.contextmanager
def recorded_router_logits(model: nn.Module) -> Iterator[list[tuple[nn.Module, torch.Tensor]]]:
    """Within the block, every call of a router module appends ``(router, its logits)``."""
    found: list[tuple[nn.Module, torch.Tensor]] = []

    def record(module, _inputs, output):
        found.append((module, output[0] if isinstance(output, tuple | list) else output))

    handles = [module.register_forward_hook(record) for module in router_modules(model)]
    try:
        yield found
    finally:
        for handle in handles:
            handle.remove()


def router_sums(recorded: list[tuple[nn.Module, torch.Tensor]], weights: torch.Tensor) -> RouterSums:
    """One wave's sums: each recorded call's logits (rows: the wave's local tokens, in the order the
    layers saw them) weighted by ``weights`` (one per row: the requests through the token)."""
    if not recorded:
        raise ValueError("no router ran: not a mixture-of-experts model")
    total: RouterSums | None = None
    for module, logits in recorded:
        assert logits.shape[0] == weights.shape[0], (logits.shape, weights.shape)
        w = weights.to(device=logits.device, dtype=logits.dtype)
        p = torch.softmax(logits, dim=-1)
        hits = nn.functional.one_hot(torch.topk(p, module.top_k, dim=-1).indices, p.shape[-1]).to(p.dtype)
        step = RouterSums((w[:, None, None] * hits.detach()).sum(0), (w[:, None] * p).sum(0), w.sum())
        total = step if total is None else total + step
    return total


def wave_token_multiplicity(result, workload, wave: int) -> np.ndarray:
    """:func:`token_multiplicity` of every CP rank of ``result``'s wave ``wave`` (the rows a wave run in
    one process hands its decoder layers)."""
    geometry = WaveGeometry.build(materialize_wave(result, workload, wave=wave))
    return token_multiplicity(geometry, list(range(geometry.num_ranks)))


def token_multiplicity(geometry, ranks: list[int]) -> np.ndarray:
    """Per local token of ``ranks`` (rank by rank, each in its owned order: the rows the decoder layers
    see), how many of the wave's requests run through it."""
    through = np.bincount(np.concatenate(geometry.readback), minlength=geometry.owner.size)
    offsets = np.cumsum([0, *(geometry.counts[r] for r in ranks)])[:-1]
    rows = np.zeros(sum(geometry.counts[r] for r in ranks), dtype=np.int64)
    for offset, r in zip(offsets.tolist(), ranks, strict=True):
        mine = np.flatnonzero(geometry.owner == r)
        rows[offset + geometry.local[mine]] = through[mine]
    return rows


__all__ = [
    "RouterSums",
    "recorded_router_logits",
    "router_modules",
    "router_sums",
    "token_multiplicity",
    "wave_token_multiplicity",
]
