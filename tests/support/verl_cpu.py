"""verl's FSDP engines on the CPU for the cpplan engine tests: what had to be patched, a tiny model saved
for verl to load, verl's own engine configs, and an RL batch in verl's NO_PADDING layout.

verl 0.9.1's FSDP engines cannot be constructed on a CPU-only machine as installed; three things are
patched, in this process only (:func:`cpu_verl`, undone afterwards):

1. **The device.** verl asks its platform layer (``verl.plugin.platform``) for the device; it knows
   CUDA, NPU and ROCm and, finding none, falls back to CUDA (``get_device_id()`` then calls
   ``torch.cuda.current_device()``, which fails on a CPU build of torch). :class:`CpuPlatform` is a
   ``PlatformBase`` for the CPU (device ``cpu``, gloo, no-op allocator and profiler calls), installed
   with verl's own ``platform_manager.set_platform``, the hook verl provides for new hardware.
2. **float64.** ``PrecisionType.to_dtype`` (verl/utils/torch_dtypes.py) maps fp16, fp32 and bf16 only;
   the exactness checks need float64 parameters and float64 FSDP2 mixed precision, so ``"fp64"`` is
   mapped to ``torch.float64`` (every other value goes to verl's own function).
3. **A TRL import.** ``apply_monkey_patch`` (verl/models/transformers/monkey_patch.py) imports
   ``AutoModelForCausalLMWithValueHead`` from TRL whenever TRL is installed, to patch a value-head
   model's ``state_dict``; TRL 1.16 (cpplan's ``trl`` extra) no longer has it, so the import fails.
   ``monkey_patch.is_trl_available`` is made to answer False (no value-head model is built here).

Everything else is verl's code as installed: its configs, ``FSDPEngineWithLMHead.__init__`` and
``initialize`` (FSDP2 ``fully_shard`` through ``apply_fsdp2``, verl's monkey patches, the optimizer),
``forward_backward_batch``, ``postprocess_batch_func`` and its PPO loss. Attention is ``eager``
(verl's default, flash-attention 2, needs CUDA).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import numpy as np
import torch

MEMORY_3_WAVES = int(5.6 * 2**30)
"""The per-GPU budget (Qwen3.6-35B-A3B card) under which :func:`ppo_batch` plans one wave per prompt."""


def cpu_platform():
    """A verl ``PlatformBase`` for the CPU (made on first use: verl is imported then)."""
    from verl.plugin.platform.platform_base import PlatformBase

    class CpuPlatform(PlatformBase):
        """The CPU as a verl platform: device ``cpu``, gloo, nothing to synchronise or profile."""

        device_name = "cpu"
        vendor_name = "cpu"
        device_module = torch.cpu

        def is_available(self):
            return True

        def current_device(self):
            return "cpu"

        def device_count(self):
            return 1

        def set_device(self, device_index):
            pass

        def synchronize(self, device_index=None):
            pass

        def manual_seed(self, seed):
            torch.manual_seed(seed)

        def manual_seed_all(self, seed):
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings):
            pass

        def empty_cache(self):
            pass

        def get_device_capability(self, device_index=0):
            return (None, None)

        def communication_backend_name(self):
            return "gloo"

        def visible_devices_envvar(self):
            return "CUDA_VISIBLE_DEVICES"

        @contextlib.contextmanager
        def nvtx_range(self, msg):
            yield

        def profiler_start(self):
            pass

        def profiler_stop(self):
            pass

        def ray_resource_name(self):
            return "CPU"

        def ray_noset_envvars(self):
            return []

        def is_ipc_supported(self):
            return False

        def cudart(self):
            return None

    return CpuPlatform()


@contextlib.contextmanager
def cpu_verl() -> Iterator[None]:
    """The three patches of this module's docstring, undone on exit."""
    from verl.models.transformers import monkey_patch
    from verl.plugin.platform import platform_manager
    from verl.utils.torch_dtypes import PrecisionType

    platform_before = platform_manager._current_platform
    to_dtype = PrecisionType.__dict__["to_dtype"]
    trl_before = monkey_patch.is_trl_available

    def float64_too(precision):
        if precision in ("fp64", "float64", torch.float64):
            return torch.float64
        return to_dtype.__func__(precision)

    platform_manager._current_platform = cpu_platform()
    PrecisionType.to_dtype = staticmethod(float64_too)
    monkey_patch.is_trl_available = lambda: False
    try:
        yield
    finally:
        platform_manager._current_platform = platform_before
        PrecisionType.to_dtype = to_dtype
        monkey_patch.is_trl_available = trl_before


def saved_model(family: str, folder) -> str:
    """A tiny random ``family`` model (2 layers, float64) and a word-level tokenizer saved under
    ``folder``, as verl's ``HFModelConfig(path=...)`` loads them."""
    from tests.integrations import trl_setup

    trl_setup.saved_model(family, folder, torch.float64)
    trl_setup.tokenizer().save_pretrained(folder)
    return str(folder)


def engine(engine_class, path: str, *, remove_padding: bool = True, **kwargs):
    """``engine_class`` (verl's ``FSDPEngineWithLMHead`` or cpplan's) built and initialised from verl's
    own configs: FSDP2, float64 parameters and mixed precision, eager attention, no gradient
    checkpointing, no torch.compile, SGD-like AdamW at lr 1e-2, no clipping."""
    from verl.trainer.config import CheckpointConfig
    from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig

    model = HFModelConfig(
        path=path,
        override_config={"attn_implementation": "eager"},
        enable_gradient_checkpointing=False,
        use_remove_padding=remove_padding,
    )
    fp64 = {"param_dtype": "fp64", "reduce_dtype": "fp64", "buffer_dtype": "fp64"}
    config = FSDPEngineConfig(
        strategy="fsdp2", model_dtype="fp64", mixed_precision=fp64, use_torch_compile=False
    )
    optimizer = FSDPOptimizerConfig(lr=1e-2, total_training_steps=1, clip_grad=1e9)
    built = engine_class(
        model_config=model,
        engine_config=config,
        optimizer_config=optimizer,
        checkpoint_config=CheckpointConfig(),
        **kwargs,
    )
    built.initialize()
    return built


def ppo_loss(num_samples: int):
    """verl's PPO loss (``verl.workers.utils.losses.ppo_loss``) with an entropy term, token-mean over a
    mini-batch of ``num_samples``, as the actor worker binds it."""
    from verl.workers.config import ActorConfig
    from verl.workers.utils.losses import ppo_loss as verl_ppo_loss

    config = ActorConfig(
        strategy="fsdp2",
        rollout_n=4,
        ppo_mini_batch_size=num_samples,
        use_dynamic_bsz=True,
        entropy_coeff=0.01,
        use_torch_compile=False,
    )
    return functools.partial(verl_ppo_loss, config=config)


def ppo_batch(
    seed: int = 0,
    *,
    num_prompts: int = 3,
    group: int = 4,
    vocab: int = 64,
    temperature=0.7,
    remove_padding: bool = True,
    empty_responses: int = 0,
    **settings,
):
    """An RL batch as verl's trainer hands it to an engine: ``num_prompts`` prompts (20 to 39 tokens)
    with ``group`` responses each (3 to 14 tokens; the last ``empty_responses`` of the first group
    empty), left-padded prompts and right-padded responses made NO_PADDING by verl's own
    ``left_right_2_no_padding``, random old log-probs and advantages, and the non-tensor settings the
    actor worker adds (dynamic batch size, a 200-token cap, entropy on; ``settings`` override)."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    rng = np.random.default_rng(seed)
    prompts, responses = [], []
    for _ in range(num_prompts):
        prompt = rng.integers(1, vocab, int(rng.integers(20, 40))).tolist()
        for _ in range(group):
            prompts.append(prompt)
            responses.append(rng.integers(1, vocab, int(rng.integers(3, 15))).tolist())
    for k in range(empty_responses):
        responses[group - 1 - k] = []
    width_p, width_r, num = max(map(len, prompts)), max(map(len, responses)), len(prompts)
    ids = torch.zeros(num, width_p + width_r, dtype=torch.long)
    attention = torch.zeros_like(ids)
    prompt_ids = torch.zeros(num, width_p, dtype=torch.long)
    response_ids = torch.zeros(num, width_r, dtype=torch.long)
    response_mask = torch.zeros(num, width_r, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        prompt_ids[i, width_p - len(p) :] = torch.tensor(p)
        response_ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        ids[i, width_p - len(p) : width_p] = torch.tensor(p)
        ids[i, width_p : width_p + len(r)] = torch.tensor(r, dtype=torch.long)
        attention[i, width_p - len(p) : width_p + len(r)] = 1
        response_mask[i, : len(r)] = 1
    positions = (attention.cumsum(1) - 1).clamp(min=0)
    old = torch.tensor(rng.normal(-4.0, 0.3, (num, width_r))) * response_mask
    advantages = torch.tensor(rng.normal(0.0, 1.0, (num, width_r))) * response_mask
    tensors = {
        "input_ids": ids,
        "attention_mask": attention,
        "position_ids": positions,
        "prompts": prompt_ids,
        "responses": response_ids,
        "response_mask": response_mask,
        "old_log_probs": old,
        "advantages": advantages,
    }
    data = left_right_2_no_padding(tu.get_tensordict(tensors, {"temperature": temperature}))
    defaults = {
        "use_remove_padding": remove_padding,
        "use_dynamic_bsz": True,
        "max_token_len_per_gpu": 200,
        "micro_batch_size_per_gpu": 4,
        "use_fused_kernels": False,
        "calculate_entropy": True,
        "global_batch_size": num,
    }
    tu.assign_non_tensor(data, **(defaults | settings))
    return data


__all__ = ["MEMORY_3_WAVES", "cpu_platform", "cpu_verl", "engine", "ppo_batch", "ppo_loss", "saved_model"]
