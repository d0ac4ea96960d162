"""Run one planned wave through a transformers causal LM, exactly as planned, and read back log-probs."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from cpplan.errors import InputError
from cpplan.hf.attention import attention_layer
from cpplan.hf.comm import ProcessGroupComm, SimulatedComm
from cpplan.hf.delta_rule import compute_dtype
from cpplan.hf.gdn import gdn_layer
from cpplan.hf.geometry import WaveGeometry
from cpplan.hf.model import adapt
from cpplan.runtime.materialize import materialize_wave
from cpplan.spec.workload import Workload

Key = tuple[str, int]
KERNELS = ("auto", "torch", "flex", "fla")


def packed_logprobs(
    model: torch.nn.Module,
    result: Any,
    workload: Workload,
    *,
    wave: int,
    group: dist.ProcessGroup | None = None,
    distributed: bool = False,
    kernels: str = "auto",
) -> dict[Key, torch.Tensor]:
    """Per request of wave ``wave``: ``log p(tokens[t+1] | tokens[:t+1])`` for ``t = 0 .. n-2``.

    The wave runs as planned: its packed tokens are embedded once, every CP rank computes only the
    tokens it owns, attention layers see keys through the tree mask, and Gated DeltaNet layers carry
    conv and recurrent states along each request's path (across branch points and CP boundaries). The
    result is differentiable with respect to the model's parameters. ``model``: an unmodified
    transformers causal LM (Qwen3, Qwen3-MoE, Qwen3.5, Qwen3.5/3.6-MoE), PEFT-wrapped or not.
    ``result``: a PlanResult, a Plan or a plan file (path or dict) made for ``workload``.

    Without ``distributed`` every CP rank runs in this process. With ``distributed=True`` this process
    is CP rank ``dist.get_rank(group)`` of ``group`` (one process per CP rank of the plan): keys,
    values and states are exchanged with collectives, every rank returns all of the wave's
    log-probabilities, every rank must backpropagate the same loss computed from them, and the
    parameter gradients must then be summed over the group (:func:`cpplan.hf.sum_gradients`).
    ``kernels``: ``"auto"`` (on CUDA: fla's gated delta rule, when installed, and compiled
    flex_attention; elsewhere pure torch), ``"torch"`` (pure torch everywhere), ``"flex"``
    (flex_attention for attention layers even on the CPU, forward only there; pure-torch GDN) or
    ``"fla"`` (fla required, CUDA only). Raises
    :class:`cpplan.InputError` for a wave out of range, a plan made for another workload, or a model
    whose layers cpplan cannot route.
    """
    if kernels not in KERNELS:
        raise ValueError(f"kernels must be one of {KERNELS}, got {kernels!r}")
    batches = materialize_wave(result, workload, wave=wave)
    lm = adapt(model)
    geo = WaveGeometry.build(batches)
    comm = ProcessGroupComm(geo.num_ranks, group) if distributed else SimulatedComm(geo.num_ranks)
    hs, ropes = _embed(lm, batches, geo, comm, wave)
    for layer in lm.layers:
        hs = _layer(layer, hs, ropes, geo, comm, kernels)
    return _read_back(lm, hs, geo, comm)


def _embed(lm, batches, geo: WaveGeometry, comm, wave: int) -> tuple[dict, dict]:
    """Each local rank's embedded owned tokens and their rotary ``(cos, sin)``."""
    largest, vocab = int(geo.input_ids.max()), lm.embed.num_embeddings
    if largest >= vocab:
        raise InputError(
            f"wave {wave} holds token id {largest}, outside the model's vocabulary of {vocab}",
            field="workload",
        )
    device = lm.lm_head.weight.device
    hs, ropes = {}, {}
    for r in comm.ranks:
        hs[r] = lm.embed(batches[r].input_ids.to(device))
        ropes[r] = lm.rotary(hs[r][None], batches[r].position_ids.to(device)[None])
    return hs, ropes


def _layer(layer, hs: dict, ropes: dict, geo, comm, kernels: str) -> dict:
    normed = {r: layer.input_norm(hs[r]) for r in comm.ranks}
    if layer.kind == "attention":
        mixed = attention_layer(layer, normed, ropes, geo, comm, kernels=kernels)
    else:
        mixed = gdn_layer(layer, normed, geo, comm, kernels=kernels)
    out = {}
    for r in comm.ranks:
        h = hs[r] + mixed[r]
        mlp = layer.mlp(layer.post_norm(h)[None])
        out[r] = h + (mlp[0] if isinstance(mlp, tuple) else mlp)[0]
    return out


def _read_back(lm, hs: dict, geo: WaveGeometry, comm) -> dict[Key, torch.Tensor]:
    """Every request's next-token log-probs, each value computed by the rank owning its position."""
    positions = np.concatenate([rb[:-1] for rb in geo.readback])
    targets = geo.input_ids[np.concatenate([rb[1:] for rb in geo.readback])]
    owner = geo.owner[positions]
    order = np.argsort(owner, kind="stable")
    counts = np.bincount(owner, minlength=geo.num_ranks).tolist()
    values = {}
    for r in comm.ranks:
        logits = lm.lm_head(lm.norm(hs[r]))
        logprobs = logits.to(compute_dtype(logits.dtype)).log_softmax(-1)
        mine = order[owner[order] == r]
        rows = torch.as_tensor(geo.local[positions[mine]], device=logits.device)
        values[r] = logprobs[rows, torch.as_tensor(targets[mine], device=logits.device)]
    gathered = comm.replicate(values, counts)
    flat = gathered[torch.as_tensor(np.argsort(order, kind="stable"), device=gathered.device)]
    sizes = [rb.size - 1 for rb in geo.readback]
    return dict(zip(geo.requests, torch.split(flat, sizes), strict=True))


__all__ = ["packed_logprobs"]
