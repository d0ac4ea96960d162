"""The per-rank local quantities that memory floors and cost terms are linear in."""

from __future__ import annotations

QUANTITIES: tuple[str, ...] = (
    "tokens",  # packed tokens the rank owns
    "grad_tokens",  # owned tokens that gradients flow through
    "loss_tokens",  # owned tokens whose outputs (loss or logits) are read
    "segments",  # packed segments the rank's tokens touch
    "attn_pairs",  # sum over owned tokens of (position + 1): keys attended on the token's path
    "grad_attn_pairs",  # the same over owned gradient tokens
    "remote_tokens",  # packed tokens of the wave the rank does not own (gathered keys and values)
)
QUANTITY_NAMES: tuple[str, ...] = QUANTITIES
QUANTITY_INDEX: dict[str, int] = {name: i for i, name in enumerate(QUANTITIES)}
NUM_QUANTITIES = len(QUANTITIES)
