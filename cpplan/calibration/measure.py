"""Measure planned waves on a real model: per CP rank and phase, the peak bytes allocated above the
pre-wave baseline and the wave's seconds, written as logs that ``cpplan calibrate`` and
:meth:`cpplan.Planner.load` read.

A wave is measured as a trainer runs it: gradients cleared (``set_to_none``), the device synchronized,
the allocator's peak reset and the allocated bytes taken as the baseline; then the wave's forward, loss
and backward (by default :func:`cpplan.hf.packed_logprobs` and a mean log-prob loss, or any ``run_wave``
callable); then the peak above the baseline (``torch.cuda.max_memory_allocated`` minus the baseline: the
quantity ``--memory`` budgets) and the elapsed seconds. Each wave runs ``repeats`` times in a row: the
first run is recorded as phase ``cold``, the others as ``warm`` (a second call of the same shape). Per-rank
peaks need one process per CP rank (``torchrun --nproc-per-node CP``); a single process measures CP1
plans. The memory source is pluggable (:class:`CudaMemory` on a GPU, a fake in tests).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from cpplan.calibration.online import Observation, TrustPolicy, policy_to_dict, write_log
from cpplan.errors import InputError
from cpplan.spec.card import Phase
from cpplan.spec.profile import load_solver
from cpplan.spec.quantities import QUANTITY_NAMES
from cpplan.spec.settings import topology_from_json, topology_to_json
from cpplan.spec.workload import Workload

RunWave = Callable[[int], Any]
"""Runs wave ``w`` forward, loss and backward on this process's rank (returns anything)."""


class MemorySource(Protocol):
    """Where allocated bytes are read: the CUDA caching allocator, or a fake in tests."""

    def synchronize(self) -> None:
        """Wait for queued device work to finish."""

    def reset_peak(self) -> None:
        """Start a new peak from the bytes allocated now."""

    def allocated(self) -> int:
        """Bytes allocated now."""

    def peak(self) -> int:
        """The most bytes allocated since :meth:`reset_peak`."""


class CudaMemory:
    """:class:`MemorySource` of one CUDA device: ``torch.cuda.memory_allocated`` and
    ``max_memory_allocated``."""

    def __init__(self, device: Any = None) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device if device is not None else "cuda")

    def synchronize(self) -> None:
        """``torch.cuda.synchronize`` on the device."""
        self.torch.cuda.synchronize(self.device)

    def reset_peak(self) -> None:
        """``torch.cuda.reset_peak_memory_stats`` on the device."""
        self.torch.cuda.reset_peak_memory_stats(self.device)

    def allocated(self) -> int:
        """``torch.cuda.memory_allocated``."""
        return int(self.torch.cuda.memory_allocated(self.device))

    def peak(self) -> int:
        """``torch.cuda.max_memory_allocated``."""
        return int(self.torch.cuda.max_memory_allocated(self.device))


class FakeMemory:
    """:class:`MemorySource` for runs without a GPU: a fixed baseline, and a peak of the baseline plus
    :attr:`above_bytes` (the caller sets it before each run: a simulated truth, never a measurement)."""

    def __init__(self, baseline_bytes: int = 5 * 10**9) -> None:
        self.baseline_bytes = baseline_bytes
        self.above_bytes = 0

    def synchronize(self) -> None:
        """Nothing is queued."""

    def reset_peak(self) -> None:
        """Nothing to reset: the peak is what the caller set."""

    def allocated(self) -> int:
        """The baseline."""
        return self.baseline_bytes

    def peak(self) -> int:
        """The baseline plus the simulated bytes of the run in flight."""
        return self.baseline_bytes + self.above_bytes


@dataclass(frozen=True, kw_only=True)
class WaveMeasurement:
    """One run of one wave on one CP rank: its phase, peak bytes above the baseline and seconds."""

    wave: int
    rank: int
    run: int
    phase: Phase
    peak_bytes: int
    baseline_bytes: int
    seconds: float


def measure_wave(
    run_wave: RunWave,
    *,
    wave: int,
    rank: int,
    run: int,
    phase: Phase,
    memory: MemorySource,
    clear: Callable[[], None] = lambda: None,
    clock: Callable[[], float] = time.perf_counter,
) -> WaveMeasurement:
    """Run wave ``wave`` once (``clear`` first: the gradients) and measure it."""
    clear()
    memory.synchronize()
    memory.reset_peak()
    baseline = memory.allocated()
    started = clock()
    run_wave(wave)
    memory.synchronize()
    seconds = clock() - started
    return WaveMeasurement(
        wave=wave,
        rank=rank,
        run=run,
        phase=phase,
        peak_bytes=max(memory.peak() - baseline, 0),
        baseline_bytes=baseline,
        seconds=seconds,
    )


def measure_plan(
    run_wave: RunWave,
    plan: dict[str, Any],
    *,
    memory: MemorySource,
    rank: int = 0,
    waves: Sequence[int] | None = None,
    repeats: int = 2,
    clear: Callable[[], None] = lambda: None,
    clock: Callable[[], float] = time.perf_counter,
) -> list[WaveMeasurement]:
    """Measure ``waves`` (default: all) of a plan JSON on CP rank ``rank``, each ``repeats`` times in a
    row (the first run cold, the rest warm)."""
    chosen = check_waves(plan, waves)
    if not isinstance(repeats, int) or repeats < 1:
        raise InputError(f"must be a positive number of runs, got {repeats!r}", field="repeats")
    out = []
    for w in chosen:
        for k in range(repeats):
            phase: Phase = "cold" if k == 0 else "warm"
            run = len(out)
            out.append(
                measure_wave(
                    run_wave, wave=w, rank=rank, run=run, phase=phase, memory=memory, clear=clear, clock=clock
                )
            )
    return out


def check_waves(plan: dict[str, Any], waves: Sequence[int] | None) -> list[int]:
    """The waves to measure: every wave of the plan, or the listed ones (each must exist)."""
    num_waves = len(plan.get("waves") or [])
    if num_waves == 0:
        raise InputError("the plan has no waves", field="waves")
    chosen = list(range(num_waves)) if waves is None else list(waves)
    bad = [w for w in chosen if not isinstance(w, int) or not 0 <= w < num_waves]
    if bad or not chosen:
        raise InputError(
            f"must list waves of the plan, 0 to {num_waves - 1}, got {bad or chosen}", field="waves"
        )
    return chosen


def write_logs(
    measurements: Sequence[WaveMeasurement], plan: dict[str, Any], prefix: str | Path
) -> list[Path]:
    """One planner-state log per phase measured (``PREFIX.cold.jsonl``, ``PREFIX.warm.jsonl``): the
    plan's settings as the header, one observation per measurement with the wave's rank quantities from
    the plan. ``cpplan calibrate`` fits a card to them; :meth:`Planner.load` learns from them."""
    written = []
    for phase in ("cold", "warm"):
        rows = [m for m in measurements if m.phase == phase]
        if not rows:
            continue
        path = Path(f"{prefix}.{phase}.jsonl")
        write_log(path, plan_header(plan, phase), [_observation(plan, m) for m in rows])
        written.append(path)
    return written


def plan_header(plan: dict[str, Any], phase: Phase) -> dict[str, Any]:
    """A planner-state header for the plan's settings in ``phase`` (the runtime profile, the default
    trust policy)."""
    try:
        header = {
            "model": str(plan["model"]),
            "layers": int(plan["layers"]),
            "phase": phase,
            "topology": topology_to_json(topology_from_json(plan["topology"])),
            "memory_bytes": int(plan["memory_bytes"]),
            "correction": None,
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"the plan lacks its settings ({exc})", field="plan") from None
    header["solver"] = load_solver("runtime").model_dump(mode="json")
    header["policy"] = policy_to_dict(TrustPolicy())
    return header


def _observation(plan: dict[str, Any], m: WaveMeasurement) -> Observation:
    ranks = plan["waves"][m.wave]["ranks"]
    quantities = np.array([[float(r.get(name, 0)) for name in QUANTITY_NAMES] for r in ranks])
    return Observation(
        step=m.run,
        wave=m.wave,
        rank=m.rank,
        quantities=quantities,
        peak_bytes=m.peak_bytes,
        seconds=m.seconds,
    )


# ------------------------------------------------------------------------------- the cpplan.hf run


def hf_run_wave(
    model: Any,
    plan: dict[str, Any],
    workload: Workload,
    *,
    distributed: bool = False,
    group: Any = None,
    kernels: str = "auto",
) -> RunWave:
    """A :data:`RunWave` running the planned wave through :func:`cpplan.hf.packed_logprobs` (logits only
    at the positions the loss counts, as planned) and backpropagating the token-mean policy loss under
    the requests' loss masks (what a policy-gradient step costs in memory)."""
    from cpplan.hf import packed_logprobs, policy_loss

    def run(wave: int) -> None:
        logprobs = packed_logprobs(
            model,
            plan,
            workload,
            wave=wave,
            distributed=distributed,
            group=group,
            kernels=kernels,
            positions="loss",
        )
        loss = policy_loss(logprobs, workload=workload)
        if loss.requires_grad:  # a wave whose requests count no token has nothing to backpropagate
            loss.backward()

    return run


def clear_gradients(model: Any) -> Callable[[], None]:
    """Drop every gradient (``set_to_none``): each wave is measured as the first of a step."""
    return lambda: model.zero_grad(set_to_none=True)


def build_model(
    config_path: str | Path,
    *,
    num_layers: int,
    dtype: str = "bfloat16",
    device: str = "cuda",
    lora_rank: int = 16,
) -> Any:
    """A random-weight transformers causal LM from a config (a ``config.json`` or its folder), truncated
    to ``num_layers`` layers (its layer pattern kept), in ``dtype`` on ``device``; with ``lora_rank`` > 0
    the base weights are frozen and LoRA adapters (PEFT, fp32) put on every linear projection."""
    return model_from_config(
        _read_config(config_path), num_layers=num_layers, dtype=dtype, device=device, lora_rank=lora_rank
    )


def model_from_config(
    config: Any,
    *,
    num_layers: int,
    dtype: str = "bfloat16",
    device: str = "cuda",
    lora_rank: int = 16,
) -> Any:
    """:func:`build_model` from a transformers config object (it is changed: truncated in place)."""
    import torch
    import transformers

    config.num_hidden_layers = num_layers
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = config.layer_types[:num_layers]
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    return _with_lora(model, lora_rank) if lora_rank > 0 else model


def _read_config(path: str | Path) -> Any:
    import transformers

    path = Path(path)
    file = path / "config.json" if path.is_dir() else path
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read the model config: {exc}", file=str(file), field="hf_config") from None
    if "text_config" in data:
        data = data["text_config"]
    model_type = data.pop("model_type", None)
    if not model_type:
        raise InputError("the config names no model_type", file=str(file), field="hf_config")
    return transformers.AutoConfig.for_model(model_type, **data)


def _with_lora(model: Any, rank: int) -> Any:
    try:
        import peft
    except ImportError:
        raise InputError(
            "LoRA needs the peft package (pip install peft), or --lora-rank 0", field="lora_rank"
        ) from None
    config = peft.LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear")
    return peft.get_peft_model(model, config, autocast_adapter_dtype=True)
