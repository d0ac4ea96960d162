"""Execute planned waves on Hugging Face transformers models, exactly as planned.

:func:`packed_logprobs` runs one wave of a cpplan plan through an unmodified transformers causal LM:
tree-packed, every CP rank computing only its owned tokens (in one process or one process per rank),
Gated DeltaNet conv and recurrent states handed over along every request's path, through the model's
own module calls (so it runs inside FSDP2, HSDP and DDP, in bf16, fp32 or float64). Its per-request
log-probabilities equal running each request alone (:func:`unpacked_logprobs`). :func:`padding_wave` runs
an equal-waves plan's empty waves through the same wrappers. :mod:`cpplan.hf.losses` holds the RL loss
reductions; :func:`float64_internals` makes float64 comparisons exact.
"""

from cpplan.hf.losses import (
    loss_denominators,
    loss_masks,
    policy_loss,
    sequence_mean_token_mean,
    sequence_mean_token_sum,
    token_mean,
)
from cpplan.hf.padding import padding_wave
from cpplan.hf.precision import float64_internals
from cpplan.hf.reference import unpacked_logprobs
from cpplan.hf.wave_runner import packed_logprobs, packed_logprobs_and_entropies
from cpplan.runtime.comm import sum_gradients

__all__ = [
    "float64_internals",
    "loss_denominators",
    "loss_masks",
    "packed_logprobs",
    "packed_logprobs_and_entropies",
    "padding_wave",
    "policy_loss",
    "sequence_mean_token_mean",
    "sequence_mean_token_sum",
    "sum_gradients",
    "token_mean",
    "unpacked_logprobs",
]
