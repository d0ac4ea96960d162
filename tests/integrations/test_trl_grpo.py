"""cpplan's GRPOTrainer against the installed TRL: the same completions give the same GRPO steps as
stock ``trl.GRPOTrainer``, with fewer tokens run."""

from __future__ import annotations

import contextlib
import os

import pytest
import torch

pytest.importorskip("trl", reason="the trl extra is not installed")
pytest.importorskip("datasets", reason="TRL's datasets dependency is not installed")

import trl

from cpplan.hf import float64_internals
from cpplan.integrations.trl import GRPOTrainer
from tests.integrations import trl_setup
from tests.support.hf_models import one_thread  # noqa: F401

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
CPPLAN = {"card": "qwen3.6-35b-a3b", "memory_bytes": "8GiB", "solver": "deterministic"}
DTYPES = {"qwen3": torch.float64, "qwen3_5_moe": torch.float32}


def trainer(cls, path, outdir, dtype, **overrides):
    """A trainer of ``cls`` on the shared set-up (the cpplan settings when ``cls`` is cpplan's)."""
    extra = CPPLAN if cls is GRPOTrainer else {}
    args = trl_setup.config(outdir, model_init_kwargs={"dtype": dtype}, **overrides)
    return trl_setup.make_trainer(cls, path, args, **extra)


def padded_batch(tr) -> tuple[torch.Tensor, torch.Tensor, int]:
    """TRL's layout for two prompts x three completions: left-padded prompts, right-padded completions."""
    from trl.trainer.utils import pad

    prompts = trl_setup.dataset(2)["prompt"]
    out = trl_setup.rollout([p for p in prompts for _ in range(3)], tr)
    pid, cid = out["prompt_ids"], out["completion_ids"]
    ones = (
        [torch.ones(len(x), dtype=torch.long) for x in pid],
        [torch.ones(len(x), dtype=torch.long) for x in cid],
    )
    prompt = pad([torch.tensor(x) for x in pid], padding_value=0, padding_side="left")
    completion = pad([torch.tensor(x) for x in cid], padding_value=0, padding_side="right")
    mask = torch.cat([pad(ones[0], padding_value=0, padding_side="left"), pad(ones[1], padding_value=0)], 1)
    return torch.cat([prompt, completion], 1), mask, completion.shape[1]


def test_packed_pass_equals_the_models_own_forward(tmp_path):
    """The overridden log-prob pass (temperature 0.7, entropies asked) equals log_softmax(logits / T) of
    the model's own padded float64 forward on every completion token, to 1e-12 (float64 internals on
    both sides); padding is 0; and it ran packed (fewer tokens than the padded batch)."""
    path = trl_setup.saved_model("qwen3", tmp_path / "model", torch.float64)
    tr = trainer(GRPOTrainer, path, tmp_path / "out", torch.float64, temperature=0.7)
    ids, mask, keep = padded_batch(tr)
    with torch.no_grad(), float64_internals():
        logps, entropies, aux = tr._get_per_token_logps_and_entropies(
            tr.model, ids, mask, keep, compute_entropy=True
        )
        logits = tr.model(input_ids=ids, attention_mask=mask).logits[:, -keep - 1 : -1] / 0.7
    full = logits.log_softmax(-1)
    expected = full.gather(-1, ids[:, -keep:, None])[..., 0] * mask[:, -keep:]
    expected_entropy = -(full.exp() * full).sum(-1) * mask[:, -keep:]
    assert aux is None and logps.dtype == torch.float64
    assert float((logps - expected).abs().max()) < 1e-12
    assert float((entropies - expected_entropy).abs().max()) < 1e-12
    assert tr.cpplan_tokens.packed < tr.cpplan_tokens.padded == ids.numel()


def test_router_loss_pass_runs_packed_and_equals_trls(tmp_path):
    """A pass that asks for the MoE router loss runs packed (shared prompts once) and returns TRL's own
    padded aux loss and log-probs (float32: 1e-6); asked over chunks of rows it is TRL's pass."""
    path = trl_setup.saved_model("qwen3_5_moe", tmp_path / "model", torch.float32)
    tr = trainer(GRPOTrainer, path, tmp_path / "out", torch.float32)
    stock = trainer(trl.GRPOTrainer, path, tmp_path / "stock", torch.float32)
    assert tr.aux_loss_enabled
    ids, mask, keep = padded_batch(tr)
    with torch.no_grad():
        logps, _, aux = tr._get_per_token_logps_and_entropies(
            tr.model, ids, mask, keep, compute_aux_loss=True
        )
        expected, _, expected_aux = stock._get_per_token_logps_and_entropies(
            stock.model, ids, mask, keep, compute_aux_loss=True
        )
    assert tr.cpplan_tokens is not None and tr.cpplan_tokens.packed < tr.cpplan_tokens.padded
    assert float(expected_aux) > 0 and float(abs(aux - expected_aux)) < 1e-6
    assert float((logps - expected).abs().max()) < 1e-5
    tr.cpplan_tokens = None
    with torch.no_grad():
        _, _, chunked = tr._get_per_token_logps_and_entropies(
            tr.model, ids, mask, keep, batch_size=2, compute_aux_loss=True
        )
    assert chunked is not None and tr.cpplan_tokens is None


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen3", "qwen3_5_moe"])
def test_grpo_steps_equal_stock_trl(family, tmp_path):
    """Two SGD steps of GRPO (lr 1e-2) with a KL term (policy, old-policy and reference passes all
    packed) give stock TRL's losses and parameters. float64, float64 internals on both sides: loss 1e-9
    relative, parameters 1e-9 (measured 1.3e-10 and 1.3e-10: the backward of TRL's fused LM head
    accumulates in float32 buffers whatever the dtype). float32: 1e-6 both (float32 rounding). The
    second step's loss depends on the log-probs (the policy moved), and every pass ran fewer packed
    tokens than TRL's padded batch. The MoE model keeps its router loss (TRL's default coefficient,
    the config's), computed from the packed waves."""
    dtype = DTYPES[family]
    path = trl_setup.saved_model(family, tmp_path / "model", dtype)
    options = {"optim": "sgd", "max_steps": 2}
    runs = {}
    for cls in (trl.GRPOTrainer, GRPOTrainer):
        tr = trainer(cls, path, tmp_path / cls.__module__, dtype, **options)
        assert tr.aux_loss_enabled == (family != "qwen3")
        with float64_internals() if dtype == torch.float64 else contextlib.nullcontext():
            tr.train()
        losses = [log["loss"] for log in tr.state.log_history if "loss" in log]
        runs[cls] = tr, losses, {n: p.detach().clone() for n, p in tr.model.named_parameters()}
    (_, stock_losses, stock), (ours, losses, params) = runs[trl.GRPOTrainer], runs[GRPOTrainer]
    assert len(losses) == 2 and abs(losses[1] - losses[0]) > 1e-4
    exact = dtype == torch.float64
    assert losses == pytest.approx(stock_losses, rel=1e-9 if exact else 1e-6)
    worst = max(float((params[n] - stock[n]).abs().max()) for n in stock)
    assert worst < (1e-9 if exact else 1e-6)
    moved = max(float((params[n] - p0).abs().max()) for n, p0 in trl_setup.initial(path, dtype).items())
    assert moved > 100 * worst
    logged = [log for log in ours.state.log_history if "loss" in log]
    assert all(log["cpplan/packed_tokens"] < log["cpplan/padded_tokens"] for log in logged)
    assert ours.cpplan_tokens.packed < ours.cpplan_tokens.padded


def test_a_batch_scored_without_gradients_is_planned_once(tmp_path, monkeypatch):
    """TRL scores one batch several times (old policy, reference, then the policy at one step per
    generation): passes without gradients over the same rows share one plan, the next pass with
    gradients takes it once more, and a later pass plans again; other rows are planned anew. The
    log-probs of a reused plan equal a freshly planned pass's."""
    path = trl_setup.saved_model("qwen3", tmp_path / "model", torch.float64)
    tr = trainer(GRPOTrainer, path, tmp_path / "out", torch.float64)
    ids, mask, keep = padded_batch(tr)
    planned = []
    plan = tr.cpplan_planner.plan
    monkeypatch.setattr(tr.cpplan_planner, "plan", lambda workload: planned.append(1) or plan(workload))
    with torch.no_grad():
        first = tr._get_per_token_logps_and_entropies(tr.model, ids, mask, keep)[0]
        again = tr._get_per_token_logps_and_entropies(tr.model, ids, mask, keep)[0]
    assert len(planned) == 1 and torch.equal(first, again)
    with_grad = tr._get_per_token_logps_and_entropies(tr.model, ids, mask, keep)[0]
    assert len(planned) == 1 and torch.allclose(with_grad.detach(), first, rtol=0, atol=1e-12)
    tr._get_per_token_logps_and_entropies(tr.model, ids, mask, keep)
    assert len(planned) == 2
    with torch.no_grad():
        tr._get_per_token_logps_and_entropies(tr.model, ids[:3], mask[:3], keep)
    assert len(planned) == 3
