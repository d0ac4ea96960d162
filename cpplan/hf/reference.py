"""The unpacked reference: each request alone through the model's own ``forward``."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from cpplan.hf.delta_rule import compute_dtype
from cpplan.spec.workload import Workload

Key = tuple[str, int]


def unpacked_logprobs(
    model: torch.nn.Module, workload: Workload, requests: Iterable[Key] | None = None
) -> dict[Key, torch.Tensor]:
    """``log p(tokens[t+1] | tokens[:t+1])`` of each request (default: every request of the workload),
    each run alone as ``model(input_ids)`` (no packing, no cache); the values :func:`packed_logprobs`
    must reproduce."""
    if requests is None:
        requests = [(item.id, k) for item in workload.items for k in range(len(item.requests))]
    device = next(model.parameters()).device
    out = {}
    for item_id, index in requests:
        request = workload.items[workload.index_of[item_id]].requests[index]
        tokens = torch.tensor(request.tokens, device=device)
        logits = model(input_ids=tokens[None], use_cache=False).logits[0]
        logprobs = logits.to(compute_dtype(logits.dtype)).log_softmax(-1)
        out[(item_id, index)] = logprobs[:-1].gather(1, tokens[1:, None])[:, 0]
    return out


__all__ = ["unpacked_logprobs"]
