"""TRL's ``GRPOTrainer`` with every log-prob pass (policy, old policy, reference) run packed by cpplan.

Only ``_get_per_token_logps_and_entropies`` changes: its padded ``[B, P + C]`` rows become one cpplan
item per distinct prompt (the G completions share it once in the prefix tree, ``completion_mask`` is
the loss mask), the planner plans the step, every wave runs packed, and the log-probs and entropies
come back in TRL's ``[B, C]`` layout (0 on padding). Generation, rewards, advantages, the loss types
and logging stay TRL's. The MoE router loss TRL asks for comes from the same packed waves, each packed
token weighted by the rows through it (:mod:`cpplan.hf.router_loss`), so it equals the padded batch's;
calls that carry images, or ask for the router loss over chunks of rows, go to TRL's own path.

Under FSDP2 (a model sharded with ``fully_shard``, as accelerate's FSDP2 plugin leaves it) and under DDP
(what accelerate wraps a model in otherwise) the model is called as it is, so its hooks fire (a DDP
module's unwrapped forward would leave its gradients unreduced), and every process runs the same
number of waves per pass: the most any process planned
(:func:`cpplan.integrations.packed_step.agreed_num_waves`), the others padding. As without a wrapper,
every wave of a pass with gradients (padding waves too) is recomputed in backward, one wave's backward
at a time (:func:`cpplan.integrations.packed_step.recomputed`), so one wave's activations exist at a
time (docs/integrations.md, "Distributed").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
import trl
from torch.distributed.fsdp import FSDPModule
from torch.nn.parallel import DistributedDataParallel

from cpplan.calibration.online import Verdict
from cpplan.errors import InputError
from cpplan.integrations.packed_step import agreed_num_waves, padding_waves, recomputes, step_logprobs
from cpplan.integrations.plan_ahead import PlanAhead
from cpplan.integrations.rollout_items import RolloutRow, grouped_workload
from cpplan.integrations.unshared_reason import UnsharedNote
from cpplan.integrations.wave_meter import CudaMeter, WaveMeasurement, WaveMeter
from cpplan.planner import Planner
from cpplan.spec.config_card import card_from_config, card_summary
from cpplan.spec.topology import Topology

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class StepTokens:
    """Tokens of one log-prob pass: TRL's padded ``B * (P + C)`` and cpplan's packed count."""

    padded: int
    packed: int


def _named_card_planner(card: str, **settings) -> Planner:
    """The planner of a named ``card``; an error about the model names the trainer's ``card`` argument."""
    try:
        return Planner(model=card, **settings)
    except InputError as exc:
        if exc.field != "model":
            raise
        message = str(exc).split("field 'model': ", 1)[-1]
        raise InputError(message, file=exc.file, line=exc.line, field="card") from None


class GRPOTrainer(trl.GRPOTrainer):
    """``trl.GRPOTrainer`` (same arguments) plus the cpplan settings, keyword-only: a ready
    ``planner``, or ``memory_bytes`` (per GPU, for a wave), ``card`` (a model card name or path; by
    default one derived from ``model.config``, :func:`cpplan.spec.config_card.card_from_config`, and
    logged), ``topology`` (default one rank) and ``solver`` (default ``"trainer"``: deterministic work limits,
    so the plan a step executes does not depend on the machine's load). ``kernels`` goes to
    :func:`cpplan.hf.packed_logprobs`. :attr:`cpplan_tokens` holds the last pass's token counts; the
    logs gain ``cpplan/packed_tokens`` and ``cpplan/padded_tokens``. With ``observe`` (default) every wave
    of a pass with gradients is measured (``meter``, a :class:`~cpplan.integrations.wave_meter.WaveMeter`;
    default on CUDA :class:`~cpplan.integrations.wave_meter.CudaMeter`, none elsewhere) and handed to
    :meth:`cpplan.Planner.observe`; the logs then carry the learned correction."""

    def __init__(
        self,
        *args,
        planner: Planner | None = None,
        card: str | None = None,
        memory_bytes: int | str | None = None,
        topology: Topology | str | None = None,
        solver: str = "trainer",
        kernels: str = "auto",
        observe: bool = True,
        meter: WaveMeter | None = None,
        **kwargs,
    ) -> None:
        if planner is None:
            if memory_bytes is None:
                raise ValueError("give a cpplan planner, or memory_bytes (and a card, else one is derived)")
            if card is not None:
                planner = _named_card_planner(
                    card, topology=topology, memory_bytes=memory_bytes, solver=solver
                )
        elif card is not None or memory_bytes is not None or topology is not None:
            raise ValueError("give a cpplan planner or its settings (card, memory_bytes, topology), not both")
        self.cpplan_planner = planner
        self.cpplan_kernels = kernels
        self.cpplan_tokens: StepTokens | None = None
        self.cpplan_observe = observe
        self.cpplan_meter = meter
        self.cpplan_verdicts: list[Verdict] = []
        """The verdict on every measured wave value handed to :meth:`cpplan.Planner.observe`, in order."""
        self.cpplan_unshared = UnsharedNote(logger)
        """Whether the warning that a plan stored no repeated prompt once was logged (it is, once)."""
        self._cpplan_kept: tuple | None = None
        """The last plan of a pass without gradients and its rows (:meth:`_cpplan_plan`)."""
        super().__init__(*args, **kwargs)
        if self.cpplan_planner is None:
            derived = card_from_config(self.model.config, dtype_bytes=_parameter_bytes(self.model))
            logger.warning("cpplan: no card named; derived one from model.config (%s)", card_summary(derived))
            self.cpplan_planner = Planner(
                model=derived, topology=topology, memory_bytes=memory_bytes, solver=solver
            )
        self.cpplan_ahead = PlanAhead(self.cpplan_planner)
        """Plans of the next training batch, made while the current one runs (:meth:`_prepare_inputs`)."""
        self.cpplan_unpacked_reason = unpacked_reason(self.model)
        """Why every pass runs TRL's own (unpacked) path (``None``: they run packed)."""
        if self.cpplan_unpacked_reason:
            logger.warning("cpplan: %s; every log-prob pass runs TRL's own path", self.cpplan_unpacked_reason)

    def _get_per_token_logps_and_entropies(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        batch_size=None,
        compute_entropy=False,
        compute_aux_loss=False,
        **extra,
    ):
        whole = batch_size is None or batch_size >= input_ids.shape[0]
        unpacked = any(value is not None for value in extra.values()) or self.cpplan_unpacked_reason
        if unpacked or (compute_aux_loss and not whole):
            return super()._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size,
                compute_entropy,
                compute_aux_loss,
                **extra,
            )
        rows = padded_rows(input_ids, attention_mask, logits_to_keep)
        shape = (input_ids.shape[0], logits_to_keep)
        sharded = in_lock_step(model)
        if all(not row.completion for row in rows) and not compute_aux_loss:
            return self._no_completion_pass(model, shape, input_ids.device, sharded, compute_entropy)
        workload, keys = grouped_workload(rows, keep_empty=compute_aux_loss)
        result = self._cpplan_plan(workload, (tuple(rows), compute_aux_loss))
        self.cpplan_tokens = StepTokens(padded=input_ids.numel(), packed=result.plan.packed_tokens)
        self.cpplan_unshared.check(self.cpplan_planner, result, workload)
        mode = "train" if self.model.training else "eval"
        self._metrics[mode]["cpplan/packed_tokens"].append(float(self.cpplan_tokens.packed))
        self._metrics[mode]["cpplan/padded_tokens"].append(float(self.cpplan_tokens.padded))
        waves = agreed_num_waves(result.plan.num_waves, device=input_ids.device) if sharded else None
        net = model if sharded else self.accelerator.unwrap_model(model)
        with self.accelerator.autocast():
            found = step_logprobs(
                net,
                result,
                workload,
                num_waves=waves,
                recompute_waves=True,
                temperature=self.temperature,
                kernels=self.cpplan_kernels,
                router=compute_aux_loss,
                entropies=compute_entropy,
                meter=self._cpplan_wave_meter(input_ids.device),
                record=lambda measured: self._cpplan_observed(result, measured),
            )
        logps = _scatter(found[0], rows, keys, shape)
        aux = found[2].loss() if compute_aux_loss else None
        return logps, (_scatter(found[1], rows, keys, shape) if compute_entropy else None), aux

    def _cpplan_wave_meter(self, device: torch.device) -> WaveMeter | None:
        """The meter of this pass's waves: the one given, else on CUDA :class:`CudaMeter`; ``None`` when
        observing is off or the plan's CP ranks all run in this process (one process runs every rank's
        share of a wave, so a rank's own peak is not what it measures)."""
        topology = self.cpplan_planner.settings.topology
        if not self.cpplan_observe or topology.cp != 1 or topology.dynamic_cp:
            return None
        if self.cpplan_meter is None and device.type == "cuda":
            self.cpplan_meter = CudaMeter(device)
        return self.cpplan_meter

    def _cpplan_observed(self, result, measured: WaveMeasurement) -> None:
        """Hand one measured wave of ``result`` to the planner (its rank 0: CP1)."""
        seconds = measured.seconds if measured.seconds > 0 else None
        verdicts = self.cpplan_planner.observe(
            result, wave=measured.wave, rank=0, peak_bytes=measured.peak_bytes, seconds=seconds
        )
        self.cpplan_verdicts.extend(verdicts)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """TRL's log, plus the learned correction once a wave was observed: ``cpplan/memory_scale``,
        ``cpplan/time_scale`` and ``cpplan/observed_values`` (the measured values handed to the planner)."""
        if self.cpplan_verdicts:
            correction = self.cpplan_planner.correction
            logs = logs | {
                "cpplan/memory_scale": correction.memory_scale,
                "cpplan/time_scale": correction.time_scale,
                "cpplan/observed_values": float(len(self.cpplan_verdicts)),
            }
        super().log(logs, start_time)

    def _cpplan_plan(self, workload, key: tuple):
        """The plan of ``workload`` (``key``: its rows and whether empty rows join): the last one again
        when the pass before, without gradients, planned the same rows (TRL scores one batch with the
        old policy, the reference and, at one step per generation, the policy), else the planner's. A
        pass with gradients takes such a plan at most once, so what it teaches plans the next pass. A
        plan made ahead for these rows (:meth:`_prepare_inputs`) is taken when there is one. The rows are
        this DP rank's own (TRL's sampler splits the batch), so the call is ``planner.plan(rows)`` on a
        planner of one CP group."""
        kept, self._cpplan_kept = self._cpplan_kept, None
        result = kept[1] if kept is not None and kept[0] == key else self.cpplan_ahead.take(key, workload)
        if not torch.is_grad_enabled():
            self._cpplan_kept = (key, result)
        return result

    def _prepare_inputs(self, generation_batch):
        """TRL's batch for this step; while training, when the next step's batch is already buffered
        (TRL generates ``steps_per_generation`` batches at once), its plan starts on the planner's worker
        thread (:meth:`cpplan.Planner.plan_async`), so the next step takes it instead of planning."""
        inputs = super()._prepare_inputs(generation_batch)
        if self.model.training and not self.cpplan_unpacked_reason:
            upcoming = next_buffered_batch(self)
            if upcoming is not None:
                ahead = pass_workload(upcoming, keep_empty=self.aux_loss_enabled)
                if ahead is not None:
                    self.cpplan_ahead.submit(ahead[0], ahead[1])
        return inputs

    def _no_completion_pass(self, model, shape, device, sharded: bool, compute_entropy: bool):
        """The pass of rows without a completion token to score (every one masked, as
        ``mask_truncated_completions`` leaves a micro-batch whose completions all hit the length cap):
        zeros, which TRL's padded forward gives as a differentiable zero, every parameter's gradient 0.
        With gradients on, :func:`padding_waves` gives that zero (one padding wave, or under FSDP2/DDP as
        many as the other processes run waves), so the backward runs and the optimizer steps every
        parameter, as after stock TRL's all-masked micro-batch."""
        zeros = torch.zeros(shape, device=device)
        waves = agreed_num_waves(0, device=device) if sharded else 0
        count = max(waves, 1 if torch.is_grad_enabled() else 0)
        if count:  # a differentiable zero; under a wrapper, as many forwards as the other processes run
            net = model if sharded else self.accelerator.unwrap_model(model)
            zeros = zeros + padding_waves(net, count, recompute=recomputes(count))
        return zeros, (zeros.detach().clone() if compute_entropy else None), None


def next_buffered_batch(trainer: trl.GRPOTrainer) -> dict | None:
    """The batch TRL's next training step takes from its buffer (``None`` when the next step generates
    anew or nothing is buffered); read where TRL's ``_prepare_inputs`` reads it, after this step's."""
    buffered = getattr(trainer, "_buffered_inputs", None)
    if not buffered:
        return None
    upcoming = trainer._step + 1
    if upcoming % (trainer.args.steps_per_generation * trainer.num_iterations) == 0:
        return None
    return buffered[upcoming % trainer.args.steps_per_generation]


def pass_workload(inputs: dict, *, keep_empty: bool) -> tuple[tuple, object] | None:
    """The key and workload :meth:`GRPOTrainer._get_per_token_logps_and_entropies` plans for the loss pass
    of ``inputs`` (TRL's prompt and completion tensors); ``None`` when it has no completion token."""
    completion_ids = inputs["completion_ids"]
    input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
    attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    rows = padded_rows(input_ids, attention_mask, completion_ids.size(1))
    if all(not row.completion for row in rows) and not keep_empty:
        return None
    workload, _ = grouped_workload(rows, keep_empty=keep_empty)
    return (tuple(rows), keep_empty), workload


def unpacked_reason(model: torch.nn.Module) -> str | None:
    """Why ``model``'s passes cannot run packed, or ``None``: a PEFT prompt-learning model (prompt,
    prefix or P-tuning) puts virtual tokens before every row inside its own forward, which a packed
    wave (that embeds the rows' tokens itself) would leave out."""
    config = getattr(model, "active_peft_config", None)
    if config is not None and getattr(config, "is_prompt_learning", False):
        kind = getattr(config.peft_type, "value", config.peft_type)
        return f"PEFT {kind} prepends {config.num_virtual_tokens} virtual tokens to every row in its forward"
    return None


def _parameter_bytes(model: torch.nn.Module) -> int | None:
    """Bytes per element of ``model``'s first floating-point parameter (``None``: it has none)."""
    for parameter in model.parameters():
        if parameter.is_floating_point():
            return parameter.element_size()
    return None


def in_lock_step(model: torch.nn.Module) -> bool:
    """Whether ``model`` is FSDP2-sharded or DDP-wrapped: then it must be called as it is (its hooks
    all-gather parameters, sync buffers and reduce gradients) and every process must run the same
    number of waves."""
    return isinstance(model, FSDPModule | DistributedDataParallel)


def padded_rows(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int
) -> list[RolloutRow]:
    """TRL's rows (left-padded prompts, then ``logits_to_keep`` right-padded completion columns) as
    their unpadded prompt and completion tokens."""
    ids, mask = input_ids.tolist(), attention_mask.bool().tolist()
    rows = []
    for row_ids, row_mask in zip(ids, mask, strict=True):
        prompt = [t for t, m in zip(row_ids[:-logits_to_keep], row_mask[:-logits_to_keep], strict=True) if m]
        kept = row_mask[-logits_to_keep:]
        num_completion = sum(kept)
        if not all(kept[:num_completion]):
            raise ValueError("completion columns must be right-padded (TRL's layout)")
        rows.append(
            RolloutRow(prompt=tuple(prompt), completion=tuple(row_ids[-logits_to_keep:][:num_completion]))
        )
    return rows


def _scatter(values: dict, rows: list[RolloutRow], keys: list, shape: tuple[int, int]) -> torch.Tensor:
    """Each row's completion entries (entry ``P - 1 + j`` predicts completion token ``j``) in the first
    columns of its ``[C]`` row; 0 elsewhere."""
    reference = next(iter(values.values()))
    out = []
    for row, key in zip(rows, keys, strict=True):
        start, count = len(row.prompt) - 1, len(row.completion)
        found = values[key][start : start + count] if key is not None else reference.new_zeros(0)
        out.append(torch.cat([found, reference.new_zeros(shape[1] - count)]))
    return torch.stack(out)


__all__ = ["GRPOTrainer", "StepTokens", "in_lock_step", "padded_rows", "unpacked_reason"]
