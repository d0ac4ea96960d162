"""Each snippet of docs/integrations.md runs as written: the TRL one trains a tiny model one step
packed, the verl one makes verl's FSDP engine call cpplan's prepare_micro_batches, and the verl command
line's overrides compose with verl's own Hydra config into cpplan's engine."""

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
    """The TRL block exactly as written, in an empty namespace (it builds its own tiny model, tokenizer,
    dataset and reward, offline; its GRPOConfig must pick use_cpu and float32 itself on this CPU-only
    machine), trains one step with TRL's own generation, and its last log-prob pass ran fewer packed
    tokens than TRL's padded batch."""
    trl = pytest.importorskip("trl", reason="the trl extra is not installed")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    scope: dict = {}
    exec(compile(snippet("## TRL"), str(DOC), "exec"), scope)
    tokens = scope["trainer"].cpplan_tokens
    assert isinstance(scope["args"], trl.GRPOConfig)
    assert scope["trainer"].state.global_step == 1
    assert tokens is not None and tokens.packed < tokens.padded


def test_trl_snippet_defines_everything_it_uses():
    """The TRL block names nothing it does not define or import: every name it loads is bound in the
    block itself or is a builtin (what broke a newcomer: ``model``, ``reward_fn``, ``train_dataset``
    and ``tokenizer`` were never defined)."""
    import ast
    import builtins

    tree = ast.parse(snippet("## TRL"))
    bound = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.FunctionDef):
            bound.add(node.name)
            bound.update(a.arg for a in [*node.args.args, *node.args.kwonlyargs])
            bound.update(a.arg for a in (node.args.vararg, node.args.kwarg) if a is not None)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    assert loaded <= bound, sorted(loaded - bound)
    assert {"model", "reward_fn", "train_dataset", "tokenizer"} <= bound


def test_trl_snippet_config_builds_on_this_machine(tmp_path, monkeypatch):
    """The TRL block's ``GRPOConfig(...)`` call, run alone as written, builds on a machine without a GPU
    (TRL's bf16 default refuses one): use_cpu follows the GPU and bf16 is off without one."""
    trl = pytest.importorskip("trl", reason="the trl extra is not installed")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
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


def verl_overrides() -> list[str]:
    """The ``key=value`` overrides of the verl command line in the "verl engine" section's bash block."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## verl engine") :]
    match = re.search(r"```bash\n(.*?)```", section, flags=re.DOTALL)
    assert match is not None, "the verl engine section has no command line"
    words = match.group(1).replace("\\\n", " ").split()
    assert words[:3] == ["python", "-m", "verl.trainer.main_ppo"], words[:3]
    return [w for w in words[3:] if "=" in w]


def test_the_documented_verl_command_line_selects_cpplans_engine(tmp_path):
    """The documented overrides compose with verl's own Hydra config (verl/trainer/config/ppo_trainer.yaml,
    as ``python -m verl.trainer.main_ppo`` composes it; the model path replaced by a tiny local model and
    tokenizer): the model config verl's worker builds says ``cpplan_language_model``, the actor runs
    FSDP2, and verl's engine registry answers cpplan's engine for them. The same override without its
    leading ``+`` is refused by Hydra, as a newcomer saw."""
    pytest.importorskip("verl", reason="the verl extra is not installed")
    import importlib.util

    from hydra import compose, initialize_config_dir
    from hydra.errors import ConfigCompositionException
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.engine import EngineRegistry

    from cpplan.integrations.verl import MODEL_TYPE, CpplanFSDPEngine
    from tests.integrations import trl_setup

    overrides = verl_overrides()
    assert f"+actor_rollout_ref.model.model_type={MODEL_TYPE}" in overrides
    local = str(tmp_path / "model")
    trl_setup.saved_model("qwen3", local, torch.float32)
    trl_setup.tokenizer().save_pretrained(local)
    overrides = [o for o in overrides if not o.startswith("actor_rollout_ref.model.path=")]
    overrides.append(f"actor_rollout_ref.model.path={local}")
    config_dir = Path(importlib.util.find_spec("verl").origin).parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        config = compose("ppo_trainer", overrides=overrides)
        with pytest.raises(ConfigCompositionException, match=r"use \+actor_rollout_ref\.model\.model_type"):
            compose("ppo_trainer", overrides=[o.removeprefix("+") for o in overrides])
    model_config = omega_conf_to_dataclass(config.actor_rollout_ref.model)
    strategy = config.actor_rollout_ref.actor.strategy
    assert model_config.get("model_type", "language_model") == MODEL_TYPE and strategy == "fsdp2"
    assert EngineRegistry.get_engine_cls(model_config.get("model_type"), strategy) is CpplanFSDPEngine
