"""Run one planned wave through a transformers causal LM, exactly as planned, and read back log-probs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.checkpoint import checkpoint

from cpplan.errors import InputError
from cpplan.hf.attention import WaveMasks
from cpplan.hf.decoder_routing import adapt
from cpplan.hf.delta_rule import compute_dtype
from cpplan.hf.geometry import WaveGeometry
from cpplan.hf.module_calls import idle_forward, local_split, mixer_forward, replaced_attributes
from cpplan.plans.plan import Plan
from cpplan.plans.plan_reader import read_plan_file, wave_gdn_handoff
from cpplan.plans.result import PlanResult
from cpplan.runtime.comm import ProcessGroupComm, SimulatedComm
from cpplan.runtime.materialize import materialize_wave
from cpplan.spec.workload import Workload

Key = tuple[str, int]
KERNELS = ("auto", "torch", "flex", "fla")
POSITIONS = ("all", "loss")
LOGITS_CHUNK_TOKENS = 1024
"""Positions whose logits exist at once by default (the shipped cards' ``logits_chunk_tokens``)."""


def packed_logprobs(
    model: torch.nn.Module,
    result: Any,
    workload: Workload,
    *,
    wave: int,
    group: dist.ProcessGroup | Any = None,
    distributed: bool = False,
    kernels: str = "auto",
    positions: str = "all",
    logits_chunk_tokens: int = LOGITS_CHUNK_TOKENS,
    temperature: float = 1.0,
) -> dict[Key, torch.Tensor]:
    """Per request of wave ``wave``: ``log p(tokens[t+1] | tokens[:t+1])`` for ``t = 0 .. n-2``.

    The wave runs as planned: its packed tokens are embedded once, every CP rank computes only the
    tokens it owns, attention layers see keys through the tree mask, and Gated DeltaNet layers carry
    conv and recurrent states along each request's path (across branch points and CP boundaries). The
    result is differentiable with respect to the model's parameters. ``model``: an unmodified
    transformers causal LM (Qwen3, Qwen3-MoE, Qwen3.5, Qwen3.5/3.6-MoE) in float64, float32 or
    bfloat16, PEFT-wrapped or not, sharded with FSDP2 ``fully_shard`` (layers and root) or wrapped in
    DDP: the wave is one call of ``model`` and every module inside is called as a module, so the
    wrappers' hooks fire (:mod:`cpplan.hf.module_calls`). The log-probs are float32 (float64 for a
    float64 model). ``result``: a PlanResult, a Plan or a plan file (path or dict) made for ``workload``.

    Without ``distributed`` every CP rank runs in this process. With ``distributed=True`` this process
    is CP rank ``dist.get_rank(group)`` of ``group`` (one process per CP rank of the plan; a
    ProcessGroup or a 1-D DeviceMesh such as ``mesh["cp"]``): keys, values and states are exchanged
    with collectives, every rank returns all of the wave's log-probabilities, every rank must
    backpropagate the same loss computed from them, and the parameter gradients must then be summed
    over the group (:func:`cpplan.hf.sum_gradients`), or, under FSDP2 or DDP over the ``dp x cp``
    ranks, by the wrapper as a sum (docs/hf.md, "Inside FSDP2, HSDP and DDP").
    ``kernels``: ``"auto"`` (on CUDA: fla's gated delta rule, when installed, and compiled
    flex_attention; elsewhere pure torch), ``"torch"`` (pure torch everywhere), ``"flex"``
    (flex_attention for attention layers even on the CPU, forward only there; pure-torch GDN) or
    ``"fla"`` (fla required: CUDA, or the CPU under ``TRITON_INTERPRET=1``).

    The LM head runs only where a log-prob is read, one chunk of ``logits_chunk_tokens`` positions at
    a time and again in backward, so at most one chunk's logits exist at once (what the cards' head
    envelope prices). ``positions``: ``"all"`` (every entry) or ``"loss"`` (only the entries the
    request's loss counts, ``Request.predicted()``: the positions the planner prices logits for; the
    other entries are 0 and carry no gradient, so the masked losses of :mod:`cpplan.hf.losses` are
    unchanged). ``temperature``: the logits are divided by it before the softmax (what a sampler at
    that temperature drew from; RL trainers score completions so). Raises :class:`cpplan.InputError`
    for a wave out of range, a plan made for another workload, or a model whose layers cpplan cannot
    route.
    """
    head = _Head(chunk_tokens=logits_chunk_tokens, temperature=temperature, entropy=False)
    return _packed_stats(model, result, workload, wave, group, distributed, kernels, positions, head)[0]


def packed_logprobs_and_entropies(
    model: torch.nn.Module,
    result: Any,
    workload: Workload,
    *,
    wave: int,
    group: dist.ProcessGroup | None = None,
    distributed: bool = False,
    kernels: str = "auto",
    positions: str = "all",
    logits_chunk_tokens: int = LOGITS_CHUNK_TOKENS,
    temperature: float = 1.0,
) -> tuple[dict[Key, torch.Tensor], dict[Key, torch.Tensor]]:
    """:func:`packed_logprobs` and, from the same logits, each entry's entropy of the next-token
    distribution ``-sum_v p_v log p_v`` (at ``temperature``; 0 where ``positions="loss"`` skips the
    entry). Both differentiable; the LM head still runs one chunk at a time."""
    head = _Head(chunk_tokens=logits_chunk_tokens, temperature=temperature, entropy=True)
    return _packed_stats(model, result, workload, wave, group, distributed, kernels, positions, head)


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Head:
    """How the LM head is read: positions per chunk, the temperature, whether entropies come too."""

    chunk_tokens: int
    temperature: float
    entropy: bool

    @property
    def width(self) -> int:
        """Values read per position: the log-prob, and the entropy with ``entropy``."""
        return 2 if self.entropy else 1

    def __post_init__(self) -> None:
        chunk = self.chunk_tokens
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise ValueError(f"logits_chunk_tokens must be a positive integer, got {chunk!r}")
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, int | float) or not 0 < t < float("inf"):
            raise ValueError(f"temperature must be a positive number, got {t!r}")


def _packed_stats(
    model, result, workload: Workload, wave: int, group, distributed: bool, kernels: str, positions: str, head
) -> tuple[dict[Key, torch.Tensor], ...]:
    """Run the wave as planned and read back every request's head values: its log-probs and (with
    ``head.entropy``) its entropies, one dict each."""
    if kernels not in KERNELS:
        raise ValueError(f"kernels must be one of {KERNELS}, got {kernels!r}")
    if positions not in POSITIONS:
        raise ValueError(f"positions must be one of {POSITIONS}, got {positions!r}")
    if isinstance(result, str | Path):
        result = read_plan_file(result)
    batches = materialize_wave(result, workload, wave=wave)
    handoff = _gdn_handoff(result, wave)
    lm = adapt(model)
    geo = WaveGeometry.build(batches)
    if distributed:
        comm = ProcessGroupComm(geo.num_ranks, process_group(group))
    else:
        comm = SimulatedComm(geo.num_ranks)
    _check_vocabulary(lm, geo, wave)
    counted = _counted_entries(workload, geo) if positions == "loss" else None
    run = _WaveRun(lm, batches, geo, comm, kernels, counted, head, handoff)
    with replaced_attributes(run.overrides()):
        return model(input_ids=run.input_ids[None], position_ids=run.position_ids[None])


def process_group(group) -> dist.ProcessGroup | None:
    """The CP process group of ``group``: a ProcessGroup, None (the default group) or a 1-D DeviceMesh
    (such as ``mesh["cp"]``)."""
    from torch.distributed.device_mesh import DeviceMesh

    if isinstance(group, DeviceMesh):
        if group.ndim != 1:
            raise ValueError(f"the CP group must be a 1-D DeviceMesh (e.g. mesh['cp']), got {group.ndim}-D")
        return group.get_group()
    return group


class _WaveRun:
    """One wave's forward through the model's own module calls (see :mod:`cpplan.hf.module_calls`):
    the overriding forwards of the causal LM, its decoder stack and each token mixer (and, where the
    local ranks own no token, ``idle``, each MLP or MoE block's own forward touching its parameters)."""

    def __init__(self, lm, batches, geo, comm, kernels: str, counted, head: _Head, handoff: str) -> None:
        self.lm, self.geo, self.comm, self.kernels, self.handoff = lm, geo, comm, kernels, handoff
        self.counted, self.head = counted, head
        self.masks = WaveMasks(geo)
        self.idle = not any(geo.counts[r] for r in comm.ranks)
        device = lm.lm_head.weight.device
        self.input_ids = torch.cat([batches[r].input_ids for r in comm.ranks]).to(device)
        self.position_ids = torch.cat([batches[r].position_ids for r in comm.ranks]).to(device)
        self.ropes: dict = {}

    def overrides(self) -> list:
        """(module, attribute, value) to install for the wave: the forwards, and no layer checkpointing."""
        mixers = [(layer.mixer, "forward", mixer_forward(layer, self)) for layer in self.lm.layers]
        unchecked = [(layer.module, "gradient_checkpointing", False) for layer in self.lm.layers]
        idle = [(layer.mlp, "forward", idle_forward(layer.mlp)) for layer in self.lm.layers if self.idle]
        return [
            (self.lm.base, "forward", self.causal_lm_forward),
            (self.lm.inner, "forward", self.stack_forward),
            *mixers,
            *unchecked,
            *idle,
        ]

    def causal_lm_forward(self, *args, **kwargs) -> tuple[dict[Key, torch.Tensor], ...]:
        """The causal LM: the decoder stack, then every request's log-probs read back."""
        hidden = self.lm.inner(input_ids=self.input_ids[None], position_ids=self.position_ids[None])
        hs = local_split(hidden, self.geo, self.comm)
        return _read_back(self.lm, hs, self.geo, self.comm, self.counted, self.head)

    def stack_forward(self, *args, **kwargs) -> torch.Tensor:
        """The decoder stack: the local ranks' owned tokens embedded, each decoder layer called, the final
        norm; ``(local tokens, hidden)``."""
        hidden = self.lm.embed(self.input_ids)
        cos, sin = self.lm.rotary(hidden[None], self.position_ids[None])
        coss, sins = local_split(cos, self.geo, self.comm, 1), local_split(sin, self.geo, self.comm, 1)
        self.ropes = {r: (coss[r], sins[r]) for r in self.comm.ranks}
        for layer in self.lm.layers:
            hidden = _output(
                layer.module(
                    hidden[None],
                    position_embeddings=(cos, sin),
                    attention_mask=None,
                    position_ids=self.position_ids[None],
                )
            )[0]
        return self.lm.norm(hidden)


def _output(out):
    return out[0] if isinstance(out, tuple) else out


def _counted_entries(workload: Workload, geo: WaveGeometry) -> np.ndarray:
    """Whether each read-back entry (requests in ``geo.requests`` order) counts for its loss."""
    requests = (workload.items[workload.index_of[item]].requests[index] for item, index in geo.requests)
    return np.concatenate([r.predicted().astype(bool) for r in requests])


def _check_vocabulary(lm, geo: WaveGeometry, wave: int) -> None:
    largest, vocab = int(geo.input_ids.max()), lm.embed.num_embeddings
    if largest >= vocab:
        raise InputError(
            f"wave {wave} holds token id {largest}, outside the model's vocabulary of {vocab}",
            field="workload",
        )


def _gdn_handoff(result, wave: int) -> str:
    """How the plan's wave passes GDN states between ranks (its ``gdn_handoff``)."""
    plan = result.plan if isinstance(result, PlanResult) else result
    if isinstance(plan, Plan):
        return plan.waves[wave].gdn_handoff
    return wave_gdn_handoff(plan, wave)


def _read_back(
    lm, hs: dict, geo: WaveGeometry, comm, counted: np.ndarray | None, head: _Head
) -> tuple[dict[Key, torch.Tensor], ...]:
    """Every request's next-token log-probs (and entropies: a second dict), each computed by the rank
    owning its position (only the ``counted`` entries, when given; others 0). The two stay separate
    tensors from the LM head on, so a loss of the log-probs alone backpropagates through no entropy."""
    positions = np.concatenate([rb[:-1] for rb in geo.readback])
    targets = geo.input_ids[np.concatenate([rb[1:] for rb in geo.readback])]
    owner = geo.owner[positions]
    order = np.argsort(owner, kind="stable")
    counts = np.bincount(owner, minlength=geo.num_ranks).tolist()
    columns: list[dict[int, torch.Tensor]] = [{} for _ in range(head.width)]
    for r in comm.ranks:
        mine = order[owner[order] == r]
        keep = np.arange(mine.size) if counted is None else np.flatnonzero(counted[mine])
        chosen = mine[keep]
        found = _target_logprobs(lm, hs[r], geo.local[positions[chosen]], targets[chosen], head)
        for column, values in zip(columns, found, strict=True):
            column[r] = values if keep.size == mine.size else _spread(values, keep, mine.size)
    # One gather per request (not views of one tensor: FSDP2 warns about views among a module's outputs).
    rows = np.split(np.argsort(order, kind="stable"), np.cumsum([rb.size - 1 for rb in geo.readback])[:-1])
    gathered = [comm.replicate(column, counts) for column in columns]
    index = [torch.as_tensor(r, device=gathered[0].device) for r in rows]
    return tuple({key: g[i] for key, i in zip(geo.requests, index, strict=True)} for g in gathered)


def _spread(values: torch.Tensor, keep: np.ndarray, size: int) -> torch.Tensor:
    """``values`` at entries ``keep`` of a zero vector of ``size``."""
    index = torch.as_tensor(keep, device=values.device)
    return values.new_zeros(size).index_copy(0, index, values)


def _target_logprobs(
    lm, hidden: torch.Tensor, rows: np.ndarray, targets: np.ndarray, head: _Head
) -> tuple[torch.Tensor, ...]:
    """``log p(targets[i] | rows[i])`` (and the entropy, a second tensor) for each pair of normed final
    states: the LM head on ``head.chunk_tokens`` of them at a time, recomputed in backward (only the
    chosen values are kept). With no pair the head still runs once, on zero rows, so that the values
    depend on the final states and the head (a zero gradient: every rank's backward reaches the same
    modules, as FSDP2 and DDP need)."""
    chunk_tokens = head.chunk_tokens
    device = hidden.device
    normed = hidden[torch.as_tensor(rows, device=device, dtype=torch.long)]
    wanted = torch.as_tensor(targets, device=device, dtype=torch.long)
    parts = [
        checkpoint(
            _head_logprobs,
            lm.lm_head,
            normed[s : s + chunk_tokens],
            wanted[s : s + chunk_tokens],
            head.temperature,
            head.entropy,
            use_reentrant=False,
        )
        for s in range(0, max(len(rows), 1), chunk_tokens)
    ]
    return tuple(torch.cat(column) for column in zip(*parts, strict=True))


def _head_logprobs(
    head: torch.nn.Module, normed: torch.Tensor, targets: torch.Tensor, temperature: float, entropy: bool
) -> tuple[torch.Tensor, ...]:
    logits = head(normed)
    logits = logits.to(compute_dtype(logits.dtype))
    logprobs = (logits if temperature == 1.0 else logits / temperature).log_softmax(-1)
    chosen = logprobs.gather(-1, targets[:, None])[:, 0]
    if not entropy:
        return (chosen,)
    return chosen, -(logprobs.exp() * logprobs).sum(-1)


__all__ = ["packed_logprobs", "packed_logprobs_and_entropies"]
