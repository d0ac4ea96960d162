"""verl's RL batch (NO_PADDING: jagged ``input_ids``, the padded or jagged ``prompts`` and ``responses``)
as a cpplan step: one item per distinct prompt (its responses share it once in the prefix tree), the
samples of each planned wave, and the wave's log-probs back in verl's layout.

verl's layout (``FSDPEngineWithLMHead.prepare_model_outputs``): per sample, a jagged row as long as its
``input_ids``, entry ``t`` the log-prob of token ``t + 1``; its losses read entries ``P - 1 .. n - 2``
(``no_padding_2_padding``: the response tokens). cpplan fills exactly those entries (the planner prices
logits there only) and writes 0 elsewhere.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from cpplan.integrations.rollout_items import Key, RolloutRow, grouped_workload
from cpplan.spec.items import Item, Request
from cpplan.spec.workload import Workload


@dataclass(frozen=True, kw_only=True)
class PassTokens:
    """Tokens of one pass over a batch: verl's padding-free count (every sample's tokens, what its
    ``use_remove_padding`` engine runs), the padded count (samples × the longest) and cpplan's packed
    tokens (shared prompts stored once)."""

    unpacked: int
    padded: int
    packed: int


@dataclass(frozen=True, kw_only=True)
class RolloutStep:
    """A batch made a cpplan workload: its rows, each row's ``(item id, request index)`` (``None``: no
    response token), and each sample's token count."""

    rows: tuple[RolloutRow, ...]
    keys: tuple[Key | None, ...]
    workload: Workload
    lengths: tuple[int, ...]

    def tokens(self, packed: int) -> PassTokens:
        """The pass's :class:`PassTokens` given the plan's ``packed`` tokens."""
        return PassTokens(
            unpacked=sum(self.lengths), padded=len(self.lengths) * max(self.lengths), packed=packed
        )


def rollout_step(data, *, grad: bool = True) -> RolloutStep:
    """The step of ``data`` (a verl TensorDict with jagged ``input_ids``, ``prompts`` and ``responses``,
    padded with ``attention_mask`` or jagged); ``grad``: whether the pass backpropagates (the planner
    prices a forward-only pass without its backward)."""
    ids = data["input_ids"]
    offsets = ids.offsets().tolist()
    flat = ids.values().tolist()
    prompt_lens, response_lens = prompt_response_lengths(data)
    rows = []
    for i, (p, r) in enumerate(zip(prompt_lens, response_lens, strict=True)):
        sequence = flat[offsets[i] : offsets[i + 1]]
        if p + r != len(sequence) or p < 1:
            raise ValueError(
                f"sample {i}: {p} prompt + {r} response tokens, but input_ids has {len(sequence)} "
                "(and the prompt needs at least one token)"
            )
        rows.append(RolloutRow(prompt=tuple(sequence[:p]), completion=tuple(sequence[p:])))
    workload, keys = grouped_workload(rows)
    if not grad:
        workload = _without_grad(workload)
    lengths = tuple(b - a for a, b in itertools.pairwise(offsets))
    return RolloutStep(rows=tuple(rows), keys=tuple(keys), workload=workload, lengths=lengths)


def prompt_response_lengths(data) -> tuple[list[int], list[int]]:
    """Each sample's prompt and response token counts, as verl's ``no_padding_2_padding`` reads them."""
    prompts, responses = data["prompts"], data["responses"]
    if prompts.is_nested:
        return prompts.offsets().diff().tolist(), responses.offsets().diff().tolist()
    attention = data["attention_mask"]
    width = prompts.shape[1]
    return attention[:, :width].sum(1).tolist(), attention[:, width:].sum(1).tolist()


def _without_grad(workload: Workload) -> Workload:
    """``workload`` with every request's ``grad`` off."""
    items = (
        Item(
            id=item.id,
            requests=tuple(
                Request(tokens=r.tokens, loss_mask=r.loss_mask, grad=False) for r in item.requests
            ),
        )
        for item in workload.items
    )
    return Workload(items=tuple(items))


def wave_samples(step: RolloutStep, result) -> list[list[int]]:
    """The sample indices of each planned wave, ascending; samples without a response token (not in
    the plan) join the first wave, so every sample is in exactly one wave."""
    flat_of: dict[Key, int] = {}
    for item in step.workload.items:
        for k in range(len(item.requests)):
            flat_of[(item.id, k)] = len(flat_of)
    sample_of = {flat_of[key]: i for i, key in enumerate(step.keys) if key is not None}
    waves = [sorted(sample_of[int(r)] for r in wave.layout.request_ids) for wave in result.plan.waves]
    unscored = [i for i, key in enumerate(step.keys) if key is None]
    waves[0] = sorted(waves[0] + unscored)
    assert sorted(i for w in waves for i in w) == list(range(len(step.keys)))
    return waves


def verl_layout(
    values: Mapping[Key, torch.Tensor], step: RolloutStep, samples: list[int], offsets: torch.Tensor
) -> torch.Tensor:
    """The jagged ``[len(samples), j]`` tensor verl's losses read: sample ``i``'s row is its ``n - 1``
    cpplan entries (entry ``t`` scores token ``t + 1``) then a 0; a sample without a response token is
    all 0. ``offsets``: the micro-batch's ``input_ids.offsets()``."""
    reference = next(iter(values.values()))
    parts = []
    for i in samples:
        key = step.keys[i]
        if key is None:
            parts.append(reference.new_zeros(step.lengths[i]))
        else:
            parts.append(torch.cat([values[key], reference.new_zeros(1)]))
    flat = torch.cat(parts)
    return torch.nested.nested_tensor_from_jagged(flat, offsets.to(flat.device))


__all__ = [
    "PassTokens",
    "RolloutStep",
    "prompt_response_lengths",
    "rollout_step",
    "verl_layout",
    "wave_samples",
]
