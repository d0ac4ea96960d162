"""A verl FSDP2 engine whose micro-batches are cpplan's planned waves, each run tree-packed.

:class:`CpplanFSDPEngine` is verl's ``FSDPEngineWithLMHead`` (verl 0.9) with one method changed:
``forward_backward_batch`` turns an RL batch (the jagged ``input_ids`` of ``prompts`` + ``responses``)
into one cpplan item per distinct prompt, plans the step, and runs each wave as one micro-batch: the
wave's packed forward (:func:`cpplan.hf.packed_logprobs_and_entropies`, a prompt shared by its group's
responses stored once), its log-probs and entropies put back in verl's jagged layout, verl's own loss
function on the wave's samples, the backward. The outputs go through verl's ``postprocess_batch_func``,
so callers see what the stock engine returns.

Each DP rank plans the samples verl handed it: they are its share of the step already, so the call is
``planner.plan(rows)`` with a planner of one CP group (``CPPLAN_TOPOLOGY`` without ``dp``).
Every DP rank runs the same number of micro-batches (the most any rank planned; the others run
:func:`cpplan.hf.padding_wave`), as FSDP2's per-forward all-gathers need; gradients are synchronised on
the last one only (verl's ``_gradient_sync_context``). A batch this path does not cover (no
``prompts``/``responses``, fused kernels, top-k distillation, Σπ², multi-modal inputs, 3-D or shifted
position ids, per-sample temperatures, Ulysses SP) goes to the stock method.

Each training wave is measured (:mod:`.engine_meter`: peak bytes above the pre-wave baseline and seconds,
on CUDA) and observed by the planner, so later plans budget with the learned correction; set
``cpplan_observe = False`` (or ``CPPLAN_OBSERVE=0``) to opt out.

Select it with ``actor_rollout_ref.model.model_type=cpplan_language_model`` (the registry key); the
``verl.plugins`` entry point registers it when verl is imported. The planner comes from
:func:`configure_engine` or the ``CPPLAN_MEMORY``, ``CPPLAN_CARD``, ``CPPLAN_TOPOLOGY`` and
``CPPLAN_SOLVER`` environment variables of the worker processes; with no card named, the card is
derived from the model's config (:func:`cpplan.spec.config_card.card_from_config`, as cpplan's TRL
trainer does) and logged once.
"""

from __future__ import annotations

import logging
import os
from contextlib import nullcontext
from typing import ClassVar

import torch
import torch.distributed as dist
from verl.utils import tensordict_utils as tu
from verl.utils.dataset.dataset_utils import DatasetPadMode
from verl.utils.device import get_device_id, get_device_name
from verl.utils.seqlen_balancing import restore_dynamic_batch
from verl.workers.engine.base import EngineRegistry
from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead
from verl.workers.engine.utils import detach_tree, postprocess_batch_func

from cpplan.errors import InputError
from cpplan.hf.padding import padding_wave
from cpplan.hf.wave_runner import packed_logprobs, packed_logprobs_and_entropies
from cpplan.integrations.packed_step import agreed_num_waves
from cpplan.integrations.plan_ahead import PlanAhead
from cpplan.integrations.rollout_items import grouped_workload
from cpplan.integrations.unshared_reason import UnsharedNote
from cpplan.integrations.verl.engine_meter import default_memory, measured, single_rank_waves
from cpplan.integrations.verl.rollout_batch import (
    PassTokens,
    RolloutStep,
    rollout_step,
    verl_layout,
    wave_samples,
)
from cpplan.planner import Planner
from cpplan.spec.config_card import card_from_config, card_summary

MODEL_TYPE = "cpplan_language_model"
"""The verl model type that selects this engine (``actor_rollout_ref.model.model_type``)."""

logger = logging.getLogger(__name__)


class _Configured:
    """What :func:`configure_engine` set (one slot per process, replaced on every call): a ready
    planner, or the settings of one whose card is derived from the engine's model config; and the
    planners derived so far, by card and settings (the engines of one process share them)."""

    planner: Planner | None = None
    settings: dict | None = None
    derived: ClassVar[dict] = {}


def configure_engine(
    planner: Planner | None = None,
    *,
    card: str | None = None,
    memory_bytes: int | str | None = None,
    topology=None,
    solver: str = "trainer",
) -> Planner | None:
    """Set the planner the engines made in this process use: a ready one, or one made from ``card``
    and ``memory_bytes`` (per GPU, for one wave), ``topology`` (default one rank) and ``solver``
    (default ``"trainer"``: deterministic work limits, so the plan does not depend on the load).
    Without ``card`` each engine derives one from its model's config
    (:func:`cpplan.spec.config_card.card_from_config`), and ``None`` is returned."""
    if planner is None:
        if memory_bytes is None:
            raise ValueError("give a cpplan planner, or memory_bytes (and a card, else one is derived)")
        settings = {"memory_bytes": memory_bytes, "topology": topology, "solver": solver}
        if card is None:
            _Configured.planner, _Configured.settings = None, settings
            return None
        planner = Planner(model=card, **settings)
    _Configured.planner, _Configured.settings = planner, None
    return planner


def configured_planner(hf_config=None, *, dtype_bytes: int | None = None) -> Planner:
    """The planner of :func:`configure_engine`, else one made from ``CPPLAN_MEMORY`` and ``CPPLAN_CARD``
    (with ``CPPLAN_TOPOLOGY`` and ``CPPLAN_SOLVER`` if set). Where no card is named, the card is
    derived from ``hf_config`` (the model's transformers config) with ``dtype_bytes`` per element and
    logged once; a config no derived card prices is an ``InputError`` saying to name a card."""
    if _Configured.planner is not None:
        return _Configured.planner
    settings, card = _Configured.settings, None
    if settings is None:
        card, memory = os.environ.get("CPPLAN_CARD"), os.environ.get("CPPLAN_MEMORY")
        if not memory:
            raise InputError(
                "the cpplan verl engine needs a planner: call "
                "cpplan.integrations.verl.configure_engine(...) in the worker, or set CPPLAN_MEMORY "
                "(per-GPU bytes for one wave; optionally CPPLAN_CARD, else a card is derived from "
                "model.config, CPPLAN_TOPOLOGY, CPPLAN_SOLVER)",
                field="planner",
            )
        settings = {
            "memory_bytes": memory,
            "topology": os.environ.get("CPPLAN_TOPOLOGY") or None,
            "solver": os.environ.get("CPPLAN_SOLVER") or "trainer",
        }
        if card:
            return configure_engine(card=card, **settings)
    if hf_config is None:
        raise InputError(
            "no card named and no model config to derive one from: set CPPLAN_CARD or call "
            "configure_engine(card=...)",
            field="card",
        )
    try:
        derived = card_from_config(hf_config, dtype_bytes=dtype_bytes)
    except ValueError as error:
        raise InputError(
            f"no card named, and none can be derived from model.config ({error}): set CPPLAN_CARD or "
            f"call cpplan.integrations.verl.configure_engine(card=...)",
            field="card",
        ) from error
    key = (derived.model_dump_json(), repr(sorted(settings.items())))
    if key not in _Configured.derived:
        logger.warning("cpplan: no card named; derived one from model.config (%s)", card_summary(derived))
        _Configured.derived[key] = Planner(model=derived, **settings)
    return _Configured.derived[key]


@EngineRegistry.register(model_type=MODEL_TYPE, backend=["fsdp", "fsdp2"], device=["cuda", "cpu"])
class CpplanFSDPEngine(FSDPEngineWithLMHead):
    """verl's FSDP2 language-model engine (same arguments) with cpplan planning and tree-packing each
    step's micro-batches. ``planner``: default :func:`configured_planner`. ``memory``: where wave peaks
    are read (default: the CUDA allocator on CUDA, none elsewhere). Attributes: ``cpplan_planner``,
    ``cpplan_memory``, ``cpplan_clock``, ``cpplan_observe`` (default on unless ``CPPLAN_OBSERVE=0``),
    ``cpplan_kernels`` (for :func:`cpplan.hf.packed_logprobs`), ``cpplan_ahead`` (after a forward-only
    pass, the update pass over the same samples is planned ahead on the planner's worker thread:
    :class:`~cpplan.integrations.plan_ahead.PlanAhead`), ``cpplan_tokens`` (the last pass's
    :class:`PassTokens`), ``cpplan_result`` (its plan) and ``cpplan_micro_batches`` (the micro-batches
    it ran: the plan's waves, then padding waves up to the most any DP rank planned)."""

    def __init__(self, model_config, engine_config, optimizer_config, checkpoint_config, **cpplan) -> None:
        if engine_config.strategy != "fsdp2":
            raise ValueError(
                f"the cpplan engine runs on FSDP2: set the engine strategy to fsdp2, not "
                f"{engine_config.strategy!r}"
            )
        unknown = set(cpplan) - {"planner", "memory"}
        if unknown:
            raise TypeError(f"unexpected arguments {sorted(unknown)}")
        model_config.model_type = "language_model"  # what verl builds: a causal LM
        super().__init__(model_config, engine_config, optimizer_config, checkpoint_config)
        self.cpplan_planner: Planner = cpplan.get("planner") or configured_planner(
            model_config.hf_config, dtype_bytes=_compute_bytes(engine_config)
        )
        self.cpplan_ahead = PlanAhead(self.cpplan_planner)
        self.cpplan_memory = cpplan.get("memory") or default_memory(get_device_id())
        self.cpplan_clock = None
        self.cpplan_observe = os.environ.get("CPPLAN_OBSERVE", "1") != "0"
        self.cpplan_kernels = os.environ.get("CPPLAN_KERNELS", "auto")
        self.cpplan_tokens: PassTokens | None = None
        self.cpplan_result = None
        self.cpplan_micro_batches = 0
        self.cpplan_unshared = UnsharedNote(logger)
        """Logs once why the plans share no repeated prompt, when they do not."""

    def forward_backward_batch(self, data, loss_function, forward_only=False):
        reason = self.stock_reason(data)
        if reason is not None:
            logger.info("cpplan engine: verl's own micro-batches run (%s)", reason)
            return super().forward_backward_batch(data, loss_function, forward_only)
        tu.assign_non_tensor(data, sp_size=self.ulysses_sequence_parallel_size)
        group = self.get_data_parallel_group()
        counted = data["loss_mask"].sum().to(get_device_id())
        dist.all_reduce(counted, op=dist.ReduceOp.SUM, group=group)
        tu.assign_non_tensor(data, batch_num_tokens=counted.item(), dp_size=self.get_data_parallel_size())

        step = rollout_step(data, grad=not forward_only)
        result = self.cpplan_ahead.take((step.rows, not forward_only), step.workload)
        if forward_only:  # the update pass over these samples comes next: plan it while this one runs
            self.cpplan_ahead.submit((step.rows, True), grouped_workload(step.rows)[0])
        self.cpplan_result = result
        self.cpplan_unshared.check(self.cpplan_planner, result, step.workload)
        self.cpplan_tokens = step.tokens(result.plan.packed_tokens)
        waves = wave_samples(step, result)
        total = agreed_num_waves(len(waves), group=group, device=get_device_id())
        self.cpplan_micro_batches = total
        observed = single_rank_waves(result)
        outputs = []
        for k in range(total):
            sync = (
                nullcontext()
                if forward_only
                else self._gradient_sync_context(is_last_micro_batch=k == total - 1)
            )
            with (
                torch.no_grad() if forward_only else nullcontext(),
                sync,
                torch.profiler.record_function(f"micro_batch{k}"),
            ):
                if k >= len(waves):
                    self._padding_wave(forward_only)
                    continue
                run = lambda k=k: self._wave(data, step, result, k, waves[k], loss_function, forward_only)  # noqa: E731
                if forward_only or not self.cpplan_observe or self.cpplan_memory is None or not observed[k]:
                    outputs.append(run())
                    continue
                clock = {} if self.cpplan_clock is None else {"clock": self.cpplan_clock}
                out, reading = measured(run, self.cpplan_memory, **clock)
                seconds = reading.seconds if reading.seconds > 0 else None
                self.cpplan_planner.observe(
                    result, wave=k, rank=0, peak_bytes=reading.peak_bytes, seconds=seconds
                )
                outputs.append(out)
        return self._postprocess(outputs, waves, data)

    def stock_reason(self, data) -> str | None:
        """Why ``data`` goes to the stock method (``None``: cpplan runs it)."""
        flag = lambda key: tu.get_non_tensor_data(data=data, key=key, default=False)  # noqa: E731
        pad_mode = tu.get_non_tensor_data(data=data, key="pad_mode", default=DatasetPadMode.NO_PADDING)
        checks = [
            (pad_mode != DatasetPadMode.NO_PADDING, f"pad_mode {pad_mode}"),
            (not {"prompts", "responses", "input_ids"} <= set(data.keys()), "not an RL batch"),
            (flag("use_fused_kernels"), "fused kernels"),
            (flag("distillation_use_topk") or flag("distillation_only"), "top-k distillation"),
            (flag("calculate_sum_pi_squared"), "sum of squared probabilities"),
            ("multi_modal_inputs" in data, "multi-modal inputs"),
            (self.use_ulysses_sp, "Ulysses sequence parallelism"),
        ]
        for failed, reason in checks:
            if failed:
                return reason
        if not _plain_positions(data["position_ids"]):
            return "position ids are not 0 .. n-1 per sample"
        if _temperature(data) is None:
            return "per-sample temperatures"
        return None

    def _wave(self, data, step: RolloutStep, result, k: int, samples, loss_function, forward_only) -> dict:
        """Wave ``k`` as one micro-batch: packed forward, verl's layout, verl's loss, backward."""
        micro_batch = tu.index_select_tensor_dict(data, samples).to(get_device_id())
        entropy = tu.get_non_tensor_data(data=micro_batch, key="calculate_entropy", default=False)
        options = {"wave": k, "temperature": _temperature(data), "kernels": self.cpplan_kernels}
        options["positions"] = "loss"
        with self._autocast():
            if entropy:
                logprobs, entropies = packed_logprobs_and_entropies(
                    self.module, result, step.workload, **options
                )
            else:
                logprobs, entropies = packed_logprobs(self.module, result, step.workload, **options), None
            offsets = micro_batch["input_ids"].offsets()
            model_output = {"log_probs": verl_layout(logprobs, step, samples, offsets)}
            if entropies is not None:
                model_output["entropy"] = verl_layout(entropies, step, samples, offsets)
            if loss_function is not None:
                loss, metrics = loss_function(
                    model_output=model_output, data=micro_batch, dp_group=self.get_data_parallel_group()
                )
            else:
                assert forward_only, "forward_only must be True when loss_function is None"
                loss, metrics = torch.tensor(1.0, device=get_device_id()), {}
        if not forward_only:
            scaler = getattr(self, "scaler", None)
            (scaler.scale(loss) if scaler is not None else loss).backward()
            if not tu.get_non_tensor_data(data=data, key="return_model_output", default=False):
                model_output = {}
        return {"model_output": detach_tree(model_output), "loss": loss.detach().item(), "metrics": metrics}

    def _padding_wave(self, forward_only: bool) -> None:
        """A padding micro-batch: the module calls of a wave (FSDP2's collectives), zero gradients."""
        with self._autocast():
            zero = padding_wave(self.module)
        if not forward_only:
            zero.backward()

    def _autocast(self):
        """verl's autocast for the forward (none under float32 or float64 parameters)."""
        dtype = getattr(self, "_autocast_dtype", torch.bfloat16)
        if dtype in (torch.float32, torch.float64):
            return nullcontext()
        return torch.autocast(device_type=get_device_name(), dtype=dtype)

    def _postprocess(self, outputs: list[dict], waves: list[list[int]], data) -> dict:
        """verl's ``postprocess_batch_func`` over the waves' outputs, in batch order."""
        result = postprocess_batch_func(output_lst=outputs, indices=waves, data=data)
        if not tu.get_non_tensor_data(data=data, key="use_dynamic_bsz", default=True):
            model_output = result["model_output"]
            for key in model_output:
                model_output[key] = restore_dynamic_batch(model_output[key], waves)
        return result


def _plain_positions(position_ids: torch.Tensor) -> bool:
    """Whether every sample's position ids are ``0 .. n-1`` (what cpplan's packing assumes)."""
    if not position_ids.is_nested or position_ids.dim() != 2:
        return False
    offsets = position_ids.offsets()
    values = position_ids.values()
    starts = torch.repeat_interleave(offsets[:-1], offsets.diff())
    return bool(torch.equal(values, torch.arange(values.numel(), device=values.device) - starts))


def _compute_bytes(engine_config) -> int:
    """Bytes per element the engine computes in: FSDP2's mixed-precision parameter dtype (verl's
    default bf16), as ``_build_fsdp_module`` resolves it."""
    from verl.utils.torch_dtypes import PrecisionType

    mixed = engine_config.mixed_precision
    dtype = PrecisionType.to_dtype(mixed.get("param_dtype", "bf16")) if mixed is not None else torch.bfloat16
    return torch.empty((), dtype=dtype).element_size()


def _temperature(data) -> float | None:
    """The batch's sampling temperature (``None`` for per-sample temperatures that differ)."""
    temperature = data["temperature"]  # verl requires it (prepare_model_inputs)
    if isinstance(temperature, torch.Tensor):
        flat = temperature.reshape(-1)
        if flat.numel() == 0 or not bool((flat == flat[0]).all()):
            return None
        return float(flat[0])
    return float(temperature)


__all__ = ["MODEL_TYPE", "CpplanFSDPEngine", "configure_engine", "configured_planner"]
