"""The unpacked reference: each request alone through the model's own ``forward``."""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Iterable, Iterator

import torch

from cpplan.hf.decoder_routing import role_of
from cpplan.hf.delta_rule import compute_dtype
from cpplan.spec.workload import Workload

_GDN_KERNELS = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule")
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
    with _torch_gdn_off_cuda(model, device):
        for item_id, index in requests:
            request = workload.items[workload.index_of[item_id]].requests[index]
            tokens = torch.tensor(request.tokens, device=device)
            logits = model(input_ids=tokens[None], use_cache=False).logits[0]
            logprobs = logits.to(compute_dtype(logits.dtype)).log_softmax(-1)
            out[(item_id, index)] = logprobs[:-1].gather(1, tokens[1:, None])[:, 0]
    return out


@contextlib.contextmanager
def _torch_gdn_off_cuda(model: torch.nn.Module, device: torch.device) -> Iterator[None]:
    """Off CUDA, the model's GDN layers run transformers' own torch gated delta rule: transformers binds
    flash-linear-attention's Triton kernels into its Qwen3.5 modules whenever ``fla`` imports, whatever
    the device, and without a GPU driver they raise ``RuntimeError: 0 active drivers``."""
    swapped = []
    if device.type != "cuda":
        modules = {sys.modules[type(m).__module__] for m in model.modules() if role_of(m, "gdn")}
        for module in modules:
            for name in _GDN_KERNELS:
                bound = getattr(module, name, None)
                if bound is not None and inspect.unwrap(bound) is not bound:
                    swapped.append((module, name, bound))
                    setattr(module, name, inspect.unwrap(bound))
    try:
        yield
    finally:
        for module, name, bound in swapped:
            setattr(module, name, bound)


__all__ = ["unpacked_logprobs"]
