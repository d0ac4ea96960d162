"""Loss reductions RL trainers use, over per-request log-probabilities of a wave.

Every reduction takes per-request values (one per predicted token: entry ``t`` predicts token
``t + 1``) and per-request 0/1 loss masks over the same entries (:func:`loss_masks`; by default the
workload requests' own, ``Request.predicted()``: the targets the planner prices and
:func:`cpplan.materialize` lists as loss pairs), and returns a scalar:

- :func:`token_mean`: ``sum_k sum_t m v / sum_k sum_t m`` (every counted token weighs the same);
- :func:`sequence_mean_token_mean`: ``mean_k (sum_t m v / sum_t m)`` (every sequence weighs the same);
- :func:`sequence_mean_token_sum`: ``mean_k sum_t m v`` (long sequences weigh more).

Sequences with no counted token are left out of the sequence means (and of their counts).
:func:`policy_loss` is ``-reduction(weights * logprobs)``: with advantages as weights, the policy
gradient surrogate of GRPO-style trainers; with no weights, the negative log-likelihood.

Normalisation across ranks. Under :func:`cpplan.hf.packed_logprobs` every CP rank holds all of the
wave's log-probabilities, so the numerators and denominators above are the same on every CP rank: CP
needs no reduction of them (each CP rank backpropagates the same loss; parameter gradients are then
summed over CP). Across data-parallel ranks (and across the waves accumulated into one optimizer step)
the denominators span the whole step: compute :func:`loss_denominators` of every wave, all-reduce
(sum) them over the DP group, and pass the totals as ``denominator`` to every wave's reduction; then
*sum* the gradients over DP and over accumulated waves (not average). With each wave's own
denominators instead, the step's loss becomes a mean of per-wave means, which differs whenever waves
count different numbers of tokens or sequences.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

Key = tuple[str, int]
Values = Mapping[Key, torch.Tensor]


def loss_masks(
    logprobs: Values, workload=None, masks: Mapping[Key, object] | None = None
) -> dict[Key, torch.Tensor]:
    """Per request, the 0/1 mask over its log-prob entries (entry ``t`` predicts token ``t + 1``).

    From ``masks[key]`` when given: a token mask (length ``n``, 1 where predicting that token counts;
    token 0 is never predicted, so never counts). Else from the workload's request, exactly the
    targets the planner and :func:`cpplan.materialize` count: its
    :meth:`~cpplan.spec.workload.Request.predicted` (its ``loss_mask`` shifted by one, every entry
    without one, none unless its ``output`` is ``"loss"``). Else every entry counts."""
    out = {}
    for key, lp in logprobs.items():
        mask = None if masks is None else masks.get(key)
        if mask is not None:
            out[key] = _token_mask(key, mask, lp)
        elif workload is not None:
            out[key] = _predicted(key, workload, lp)
        else:
            out[key] = torch.ones_like(lp, dtype=lp.dtype)
    return out


def _token_mask(key: Key, mask: object, lp: torch.Tensor) -> torch.Tensor:
    """An explicit token mask as a mask over the log-prob entries."""
    mask = np.asarray(mask)
    if mask.shape != (lp.numel() + 1,) or not np.isin(mask, (0, 1)).all():
        raise ValueError(f"loss mask of {key} must be {lp.numel() + 1} values of 0 or 1")
    return torch.tensor(mask[1:], dtype=lp.dtype, device=lp.device)


def _predicted(key: Key, workload, lp: torch.Tensor) -> torch.Tensor:
    """The workload request's counted entries (``predicted()``) as a mask over its log-prob entries."""
    item_id, index = key
    if item_id not in workload.index_of or not 0 <= index < len(
        workload.items[workload.index_of[item_id]].requests
    ):
        raise ValueError(f"log-probs of {key}: the workload has no such request")
    predicted = workload.items[workload.index_of[item_id]].requests[index].predicted()
    if predicted.size != lp.numel():
        raise ValueError(
            f"log-probs of {key} have {lp.numel()} entries, but the workload's request predicts "
            f"{predicted.size} tokens: is this the workload the log-probs were computed for?"
        )
    return torch.tensor(predicted, dtype=lp.dtype, device=lp.device)


def loss_denominators(masks: Values) -> dict[str, int]:
    """Counted tokens and counted sequences (those with at least one counted token) of a wave: what to
    all-reduce over data-parallel ranks before passing as ``denominator``."""
    sums = [float(m.sum()) for m in masks.values()]
    return {"tokens": int(sum(sums)), "sequences": sum(1 for s in sums if s > 0)}


def token_mean(values: Values, masks: Values, *, denominator: float | None = None) -> torch.Tensor:
    """``sum_k sum_t m v`` over ``denominator`` (default: the counted tokens of these requests)."""
    total = _sum(m * values[k] for k, m in masks.items())
    count = loss_denominators(masks)["tokens"] if denominator is None else denominator
    return total / max(count, 1)


def sequence_mean_token_mean(
    values: Values, masks: Values, *, denominator: float | None = None
) -> torch.Tensor:
    """The mean over counted sequences of each one's token mean; ``denominator``: the number of
    sequences to divide by (default: the counted sequences of these requests)."""
    per_sequence = ((m * values[k]).sum() / m.sum() for k, m in masks.items() if float(m.sum()) > 0)
    count = loss_denominators(masks)["sequences"] if denominator is None else denominator
    return _sum(per_sequence) / max(count, 1)


def sequence_mean_token_sum(
    values: Values, masks: Values, *, denominator: float | None = None
) -> torch.Tensor:
    """The mean over counted sequences of each one's token sum; ``denominator`` as in
    :func:`sequence_mean_token_mean`."""
    total = _sum(m * values[k] for k, m in masks.items())
    count = loss_denominators(masks)["sequences"] if denominator is None else denominator
    return total / max(count, 1)


REDUCTIONS = {
    "token_mean": token_mean,
    "sequence_mean_token_mean": sequence_mean_token_mean,
    "sequence_mean_token_sum": sequence_mean_token_sum,
}


def policy_loss(
    logprobs: Values,
    weights: Mapping[Key, torch.Tensor | float] | None = None,
    *,
    reduction: str = "token_mean",
    masks: Mapping[Key, object] | None = None,
    workload=None,
    denominator: float | None = None,
) -> torch.Tensor:
    """``-reduction(weights * logprobs)`` under the requests' loss masks (see :func:`loss_masks`:
    explicit ``masks``, else the ``workload`` requests' own, else every entry).

    ``weights[key]``: per-token weights (one per log-prob entry) or one number for the whole request
    (a sequence-level advantage); missing requests and ``weights=None`` weigh 1. ``reduction``: one of
    ``token_mean``, ``sequence_mean_token_mean``, ``sequence_mean_token_sum``."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {sorted(REDUCTIONS)}, got {reduction!r}")
    resolved = loss_masks(logprobs, workload, masks)
    values = {}
    for key, lp in logprobs.items():
        w = 1.0 if weights is None else weights.get(key, 1.0)
        values[key] = lp * torch.as_tensor(w, dtype=lp.dtype, device=lp.device)
    return -REDUCTIONS[reduction](values, resolved, denominator=denominator)


def _sum(terms) -> torch.Tensor:
    sums = [t.sum() for t in terms]
    return torch.stack(sums).sum() if sums else torch.zeros(())


__all__ = [
    "loss_denominators",
    "loss_masks",
    "policy_loss",
    "sequence_mean_token_mean",
    "sequence_mean_token_sum",
    "token_mean",
]
