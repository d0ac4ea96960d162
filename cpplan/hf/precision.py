"""Run a transformers model in float64 end to end, for exactness checks.

transformers' Qwen3 / Qwen3.5 modules upcast to float32 inside, whatever the parameters' dtype: every
RMSNorm (``x.float()`` or ``.to(torch.float32)``), the gated RMSNorm of Gated DeltaNet, the torch
fallback of the gated delta rule, the router softmax of the MoE blocks, the rotary angles and the eager
attention softmax. A float64 model is therefore float32-exact in those places, so two different but
mathematically equal computations of the same logits (a packed wave and each request alone) differ by
about 1e-7, and their gradients too (the backward of a float32 cast rounds the gradient to float32).

:func:`float64_internals` is a scoped ``TorchFunctionMode`` that turns every float32 request made by
torch calls inside it (``Tensor.float()``, ``dtype=torch.float32`` arguments, the default dtype) into
float64. The model's code is unchanged; it simply computes in float64 inside the context.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.overrides import TorchFunctionMode


def _promote(value):
    return torch.float64 if value is torch.float32 else value


class _Float32AsFloat64(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.float:
            return args[0].to(torch.float64)
        args = tuple(_promote(a) for a in args)
        kwargs = {k: _promote(v) for k, v in kwargs.items()}
        return func(*args, **kwargs)


@contextmanager
def float64_internals() -> Iterator[None]:
    """Inside this context, torch calls that ask for float32 get float64 (and the default dtype is
    float64), so a float64 transformers model has no float32 step left. Use it around both sides of a
    comparison (packed run and reference run) and around their backward passes."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with _Float32AsFloat64():
            yield
    finally:
        torch.set_default_dtype(before)


__all__ = ["float64_internals"]
