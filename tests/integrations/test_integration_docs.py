"""Each snippet of docs/integrations.md runs as written: the TRL one trains a tiny model one step
packed, the verl one makes verl's FSDP engine call cpplan's prepare_micro_batches."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from tests.support.hf_models import one_thread  # noqa: F401 (autouse fixture)

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"


def snippet(section: str) -> str:
    """The first Python block after the heading ``section``."""
    text = DOC.read_text(encoding="utf-8")
    match = re.search(r"```python\n(.*?)```", text[text.index(section) :], flags=re.DOTALL)
    assert match is not None, f"{section} has no python block"
    return match.group(1)


@pytest.mark.slow
def test_trl_snippet_trains_packed(tmp_path, monkeypatch):
    """The TRL block exactly as written (its GRPOConfig untouched: on this CPU-only machine it must pick
    use_cpu and float32 itself), with ``model`` the path of a tiny random Qwen3 saved locally, a local
    tokenizer, a plain reward and TRL's own generation, trains one step and its last log-prob pass ran
    fewer packed tokens than TRL's padded batch."""
    trl = pytest.importorskip("trl", reason="the trl extra is not installed")
    from tests.integrations import trl_setup

    monkeypatch.chdir(tmp_path)
    scope = {
        "model": trl_setup.saved_model("qwen3", tmp_path / "model", torch.float32),
        "reward_fn": trl_setup.reward,
        "train_dataset": trl_setup.dataset(4),
        "tokenizer": trl_setup.tokenizer(),
    }
    exec(compile(snippet("## TRL"), str(DOC), "exec"), scope)
    tokens = scope["trainer"].cpplan_tokens
    assert isinstance(scope["args"], trl.GRPOConfig)
    assert scope["trainer"].state.global_step == 1
    assert tokens is not None and tokens.packed < tokens.padded


def test_trl_snippet_config_builds_on_this_machine(tmp_path, monkeypatch):
    """The TRL block's ``GRPOConfig(...)`` call, run alone as written, builds on a machine without a GPU
    (TRL's bf16 default refuses one): use_cpu follows the GPU and bf16 is off without one."""
    trl = pytest.importorskip("trl", reason="the trl extra is not installed")
    monkeypatch.chdir(tmp_path)
    code = snippet("## TRL")
    config_part = code[: code.index("trainer = GRPOTrainer(")].replace(
        "from cpplan.integrations.trl import GRPOTrainer\n", ""
    )
    scope: dict = {}
    exec(compile(config_part, str(DOC), "exec"), scope)
    args = scope["args"]
    assert isinstance(args, trl.GRPOConfig)
    assert args.use_cpu is (not torch.cuda.is_available()) and args.bf16 is torch.cuda.is_available()


def test_verl_snippet_routes_verls_engine_to_cpplan(monkeypatch):
    """After the verl block, the FSDP engine's prepare_micro_batches is cpplan's, configured: called on
    a verl batch it returns every sample once within the token cap."""
    pytest.importorskip("verl", reason="the verl extra is not installed")
    import verl.workers.engine.fsdp.transformer_impl as fsdp_engine

    from cpplan.integrations import verl as cpplan_verl
    from tests.integrations.test_verl_micro_batches import CAP, lengths, verl_batch

    monkeypatch.setattr(fsdp_engine, "prepare_micro_batches", fsdp_engine.prepare_micro_batches)
    monkeypatch.setattr(cpplan_verl.micro_batches._Configured, "planner", None)
    exec(compile(snippet("## verl"), str(DOC), "exec"), {})
    assert fsdp_engine.prepare_micro_batches is cpplan_verl.prepare_micro_batches
    data = verl_batch(0)
    _, idx = fsdp_engine.prepare_micro_batches(data)
    sizes = lengths(data)
    assert sorted(i for p in idx for i in p) == list(range(len(data)))
    assert all(sum(sizes[i] for i in p) <= CAP for p in idx)
