"""The tiny dense Qwen3 (float64, CPU) both packers' rows run on, ART's mask rule and ART's loss summed
over rows, for the ART comparison tests."""

from __future__ import annotations

import types

import torch
import transformers

QWEN3_SIZES = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
)


def tiny_qwen3() -> transformers.Qwen3ForCausalLM:
    """A seeded random two-layer Qwen3 in float64 with SDPA attention (eager attention takes its
    softmax in float32, which makes the logits depend on the row length at 1e-9) and RMSNorm in
    float64."""
    torch.manual_seed(0)
    config = transformers.Qwen3Config(**QWEN3_SIZES, attn_implementation="sdpa")
    model = transformers.Qwen3ForCausalLM(config).to(torch.float64)
    for module in model.modules():
        if type(module).__name__ == "Qwen3RMSNorm":
            module.forward = types.MethodType(_rms_norm_in_input_dtype, module)
    return model


def _rms_norm_in_input_dtype(self, hidden_states: torch.Tensor) -> torch.Tensor:
    """Qwen3's RMSNorm without its float32 cast: a shared prompt sums its completions' gradients before
    the norm, so a float32 step there rounds a shared and an unshared prompt's gradients differently
    (1e-8); in float64 throughout both agree to rounding."""
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


def art_mask(group_ids: torch.Tensor, parent_ids: torch.Tensor) -> torch.Tensor:
    """ART's attention rule (``art/unsloth/train.py: calculate_mask``): causal and (same group or the
    query's parent group is the key's group), as a ``[B, 1, S, S]`` additive float64 mask."""
    size = group_ids.shape[1]
    causal = torch.tril(torch.ones(size, size, dtype=torch.bool))
    same = group_ids.unsqueeze(2) == group_ids.unsqueeze(1)
    parent = parent_ids.unsqueeze(2) == group_ids.unsqueeze(1)
    allowed = causal & (same | parent)
    zero = torch.zeros((), dtype=torch.float64)
    return torch.where(allowed, zero, torch.tensor(float("-inf"), dtype=torch.float64)).unsqueeze(1)


def row_logprobs(model, tensors: dict, row: int) -> torch.Tensor:
    """``[1, S]`` log-probs of each row position's next token (the last position's is of token 0), the
    row run with ART's mask and ``input_pos`` as positions (ART's Megatron trainer passes them)."""
    tokens = tensors["tokens"][row : row + 1]
    logits = model(
        input_ids=tokens,
        attention_mask=art_mask(tensors["group_ids"][row : row + 1], tensors["parent_ids"][row : row + 1]),
        position_ids=tensors["input_pos"][row : row + 1],
    ).logits
    following = torch.nn.functional.pad(tokens[:, 1:], (0, 1), value=0)
    return torch.log_softmax(logits, dim=-1).gather(-1, following.unsqueeze(-1)).squeeze(-1)


def summed_loss(model, tensors: dict, loss_fn) -> torch.Tensor:
    """ART's ``loss_fn`` (``reduction="sum"``, default experimental config) summed over the rows."""
    total = torch.zeros((), dtype=torch.float64)
    for row in range(tensors["tokens"].shape[0]):
        inputs = {k: v[row : row + 1] for k, v in tensors.items() if isinstance(v, torch.Tensor)}
        new_logprobs = row_logprobs(model, tensors, row)
        total = total + loss_fn(inputs, new_logprobs, None, None, {}, reduction="sum").policy_loss
    return total


def loss_and_grads(model, tensors: dict, loss_fn) -> tuple[float, dict[str, torch.Tensor]]:
    """The summed loss of ``tensors`` and every parameter's gradient of it."""
    model.zero_grad(set_to_none=True)
    loss = summed_loss(model, tensors, loss_fn)
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return float(loss), grads
