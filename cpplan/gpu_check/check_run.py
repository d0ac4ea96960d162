"""The GPU check from start to end: environment, exactness, measured waves, kernels alone, files.

Each step asks the :class:`~cpplan.gpu_check.time_guard.TimeGuard` before each part; what it refuses is
listed as skipped and the files are written with what was measured. A step that raises (other than for
bad input) is recorded as an error and the next step runs (``CPPLAN_DEBUG=1`` re-raises at once)."""

from __future__ import annotations

import datetime
import gc
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from cpplan.calibration.measure import model_from_config, write_logs
from cpplan.errors import InputError
from cpplan.gpu_check import cp_terms, exactness, kernel_sweeps, measured_waves
from cpplan.gpu_check.environment import describe, environment
from cpplan.gpu_check.report_files import FORMAT, LOGS_DIR, write_report
from cpplan.gpu_check.time_guard import DEFAULT_LIMIT_S, TimeGuard
from cpplan.gpu_check.tiny_models import tiny_config
from cpplan.spec.card import load_model
from cpplan.spec.topology import Topology

STEPS = ("exactness", "waves", "kernels", "cp_terms")
EXIT_FAILED, EXIT_ERROR = 1, 70
EXACTNESS_MEMORY_BYTES = 80 * 2**30
SWEEP_MEMORY_BYTES = 2**40
"""Budgets for plans that only need to be one wave (the tiny models, the attention sweep's trees)."""


@dataclass(frozen=True, kw_only=True)
class CheckConfig:
    """What ``cpplan gpu-check`` was asked for."""

    output: Path
    dry_run: bool = False
    time_limit_s: float = DEFAULT_LIMIT_S
    steps: tuple[str, ...] = STEPS
    card: str = "qwen3.6-35b-a3b"
    perturb_logprob: float = 0.0
    """Added to one packed log-prob of every exactness run (a self-test: the check must then fail)."""

    def __post_init__(self) -> None:
        unknown = [s for s in self.steps if s not in STEPS]
        if unknown or not self.steps:
            raise InputError(f"must be some of {', '.join(STEPS)}, got {self.steps}", field="steps")
        if not self.time_limit_s > 0:
            raise InputError(f"must be positive, got {self.time_limit_s}", field="time_limit_s")

    @property
    def device(self) -> str:
        """``"cpu"`` for a dry run, else ``"cuda"``."""
        return "cpu" if self.dry_run else "cuda"


@dataclass
class CheckState:
    """What the run has so far (the report's parts)."""

    report: dict
    guard: TimeGuard
    echo: Callable[[str], None]
    errors: list[str] = field(default_factory=list)


def _plan(workload, *, cp: int, card, memory_bytes: int, num_layers: int | None = None):
    from cpplan.api import plan

    return plan(
        workload,
        topology=Topology(cp=cp),
        model=card,
        memory_bytes=memory_bytes,
        solver="deterministic",
        num_layers=num_layers,
    )


def step_exactness(config: CheckConfig, state: CheckState) -> None:
    """Tiny Qwen3.5-MoE and Qwen3, CP 1, 2 and 4, both dtypes of the device: ``auto`` against
    ``torch`` and against each request alone."""
    workload = exactness.exactness_workload(config.dry_run)
    plans: dict = {}

    def plan_at(cp: int):
        if cp not in plans:
            plans[cp] = _plan(workload, cp=cp, card=config.card, memory_bytes=EXACTNESS_MEMORY_BYTES)
            assert plans[cp].plan.num_waves == 1, "the exactness workload must be one wave"
        return plans[cp]

    def show(row: exactness.ExactnessRow) -> None:
        worst = max(c.logprobs_abs for c in row.comparisons)
        verdict = "ok" if row.passed else "FAILED"
        state.echo(f"exactness {row.family} {row.dtype} cp={row.cp}: {verdict} (log-probs {worst:.1e})")

    state.report["tolerances"] = {
        f"{device}/{dtype}": t.to_dict() for (device, dtype), t in exactness.TOLERANCES.items()
    }
    rows = exactness.check_exactness(
        device=config.device,
        workload=workload,
        plans=plan_at,
        allowed=lambda: state.guard.allows("exactness (the remaining families and CP sizes)"),
        perturb_logprob=config.perturb_logprob,
        on_row=show,
    )
    state.report["exactness"] = [r.to_dict() for r in rows]


def _measuring_model(config: CheckConfig, card, shapes: measured_waves.Shapes):
    if config.dry_run:
        return model_from_config(
            tiny_config("qwen3_5_moe"),
            num_layers=shapes.num_layers,
            dtype="float32",
            device="cpu",
            lora_rank=4,
        )
    config_hf = measured_waves.card_hf_config(card)
    return model_from_config(config_hf, num_layers=shapes.num_layers, dtype="bfloat16", device="cuda")


def _wave_budget(config: CheckConfig) -> int:
    """The bytes a wave may use: the GPU's free memory after the model (less 1 GiB), or 80 GiB."""
    if config.dry_run:
        return EXACTNESS_MEMORY_BYTES
    torch.cuda.synchronize()
    free, _ = torch.cuda.mem_get_info()
    return int(free) - 2**30


def step_waves(config: CheckConfig, state: CheckState) -> None:
    """The three CP1 waves on the truncated model, cold and warm, with the card's predictions; each
    case's planner-state logs under ``logs/``."""
    if not state.guard.allows("waves"):
        return
    card = load_model(config.card)
    shapes = measured_waves.DRY_SHAPES if config.dry_run else measured_waves.GPU_SHAPES
    model = _measuring_model(config, card, shapes)
    vocab = int(model.get_input_embeddings().num_embeddings)
    budget = _wave_budget(config)
    memory = measured_waves.memory_source(config.device)
    state.report["wave_budget_bytes"] = budget
    cases = state.report.setdefault("wave_cases", {})
    rows = state.report.setdefault("waves", [])
    estimate = 0.0
    for case in measured_waves.wave_cases(shapes, vocab=vocab):
        if not state.guard.allows(f"waves/{case.name}", estimate):
            continue
        started = state.guard.elapsed_s()
        plan = _plan(
            case.workload, cp=1, card=card, memory_bytes=budget, num_layers=shapes.num_layers
        ).to_dict()
        measured, found = measured_waves.measure_case(case, plan, model, card, memory=memory)
        logs = Path(config.output) / LOGS_DIR
        logs.mkdir(parents=True, exist_ok=True)
        write_logs(measured, plan, logs / case.name)
        requests = [r for _, _, r in case.workload.requests()]
        cases[case.name] = {
            "description": case.description,
            "layers": shapes.num_layers,
            "requests": len(requests),
            "total_tokens": sum(r.num_tokens for r in requests),
            "num_waves": len(plan["waves"]),
            "plan_cost_s": plan["cost_s"],
        }
        rows += [r.to_dict() for r in found]
        for r in found:
            state.echo(
                f"wave {case.name} {r.phase}: {r.measured_peak_bytes / 1e9:.3f} GB ({r.memory_source}) "
                f"against {r.card_peak_bytes / 1e9:.3f}, {r.measured_s:.3f} s against {r.card_s:.3f}"
            )
        estimate = 1.5 * (state.guard.elapsed_s() - started)
    del model
    _release(config)


def _release(config: CheckConfig) -> None:
    gc.collect()
    if not config.dry_run:
        torch.cuda.empty_cache()


def step_kernels(config: CheckConfig, state: CheckState) -> None:
    """The GDN kernel and the tree attention alone, with the card's seconds per unit."""
    if not state.guard.allows("kernels"):
        return
    card = load_model(config.card)
    shapes = measured_waves.DRY_SHAPES if config.dry_run else measured_waves.GPU_SHAPES
    env = card.environment(Topology(cp=1), num_layers=shapes.num_layers)
    dtype = torch.float32 if config.dry_run else torch.bfloat16
    per_token = env["gdn_recurrence_s"] / env["gdn_layers"] if env.get("gdn_layers") else None
    # The card's attention and attention_backward terms per attention layer: 4 + 12 FLOPs x heads x dim.
    per_pair = 16 * env["num_heads"] * env["head_dim"] / env["effective_flops"]
    rows = state.report.setdefault("kernels", [])
    gdn = kernel_sweeps.DRY_GDN if config.dry_run else kernel_sweeps.GPU_GDN
    found = kernel_sweeps.gdn_sweep(
        gdn,
        device=config.device,
        dtype=dtype,
        card_s_per_token=per_token,
        allowed=lambda s: state.guard.allows("kernels/gdn (larger sizes)", s),
    )
    rows += [r.to_dict() for r in found]
    for r in found:
        state.echo(f"gdn T={r.tokens}: {r.seconds:.4f} s ({r.path}; first {r.first_s:.3f} s)")
    trees = []
    for divisor in (4, 1):
        small = _scaled(shapes, divisor)
        case = measured_waves.wave_cases(small, vocab=card.geometry.vocab)[1]
        result = _plan(
            case.workload, cp=1, card=card, memory_bytes=SWEEP_MEMORY_BYTES, num_layers=small.num_layers
        )
        trees.append((case.workload, result.to_dict()))
    attention = kernel_sweeps.DRY_ATTENTION if config.dry_run else kernel_sweeps.GPU_ATTENTION
    found = kernel_sweeps.attention_sweep(
        trees,
        attention,
        device=config.device,
        dtype=dtype,
        card_s_per_pair=per_pair,
        allowed=lambda s: state.guard.allows("kernels/attention (larger trees)", s),
    )
    rows += [r.to_dict() for r in found]
    for r in found:
        state.echo(f"{r.kernel} T={r.tokens}: {r.seconds:.4f} s ({r.path}; first {r.first_s:.3f} s)")
    _release(config)


def _scaled(shapes: measured_waves.Shapes, divisor: int) -> measured_waves.Shapes:
    """The GRPO tree's prompts and completions ``divisor`` times shorter."""
    from dataclasses import replace

    return replace(
        shapes,
        system_tokens=max(1, shapes.system_tokens // divisor),
        prompt_tokens=max(1, shapes.prompt_tokens // divisor),
        completion_tokens=max(1, shapes.completion_tokens // divisor),
    )


def step_cp_terms(config: CheckConfig, state: CheckState) -> None:
    """The CP terms the card takes from published figures: the ring-step block efficiency sweep and the
    all-to-all bandwidth, each skipped (with its reason in the report) where the hardware cannot run it."""
    if not state.guard.allows("cp_terms"):
        return
    card = load_model(config.card)
    env = card.environment(Topology(cp=1))
    flops = env.get("attention_flops", env["effective_flops"])
    per_pair = 14 * env["num_heads"] * env["head_dim"] / flops  # forward 4 + backward 10 FLOPs per pair
    report = state.report.setdefault("cp_terms", {})
    report["ring_block"] = cp_terms.ring_block_sweep(
        cp_terms.GPU_BLOCK,
        device=config.device,
        allowed=lambda s: state.guard.allows("cp_terms/ring_block (larger blocks)", s),
        card_s_per_pair=per_pair,
        card_cp_efficiency=env.get("cp_published_efficiency"),
    )
    if state.guard.allows("cp_terms/all_to_all"):
        report["all_to_all"] = cp_terms.all_to_all_measurement(
            device=config.device,
            card_all_to_all_bytes_per_s=env.get("all_to_all_bytes_per_s"),
            card_all_gather_bytes_per_s=card.hardware.interconnect_bytes_per_s,
        )
    for name, part in report.items():
        state.echo(
            f"cp_terms {name}: {part['status']}" + (f" ({part['reason']})" if "reason" in part else "")
        )


STEP_FUNCTIONS = {
    "exactness": step_exactness,
    "waves": step_waves,
    "kernels": step_kernels,
    "cp_terms": step_cp_terms,
}


def _run_step(name: str, config: CheckConfig, state: CheckState) -> None:
    """One step, timed; an exception other than bad input is recorded (re-raised with CPPLAN_DEBUG)."""
    started = state.guard.elapsed_s()
    try:
        STEP_FUNCTIONS[name](config, state)
    except InputError:
        raise
    except Exception as exc:
        if os.environ.get("CPPLAN_DEBUG"):
            raise
        state.errors.append(f"{name}: {type(exc).__name__}: {exc}")
        state.report.setdefault("tracebacks", {})[name] = traceback.format_exc()
        state.echo(f"step {name} raised {type(exc).__name__}: {exc}")
        _release(config)
    state.report.setdefault("step_s", {})[name] = state.guard.elapsed_s() - started


def run_check(config: CheckConfig, echo: Callable[[str], None] = print) -> tuple[dict, int]:
    """Run the check and write its files; returns the report and the exit code: 1 when an exactness
    check failed, else 70 when a step raised, else 0 (the report's ``passed`` is also false when the
    time limit skipped a part)."""
    if not config.dry_run and not torch.cuda.is_available():
        raise InputError(
            "needs a CUDA device (torch.cuda.is_available() is False); --dry-run runs the CPU check",
            field="device",
        )
    output = Path(config.output)
    if output.exists() and not output.is_dir():
        raise InputError("must be a folder, not a file", file=str(output), field="output")
    load_model(config.card)  # a bad card name is bad input before anything runs
    guard = TimeGuard(config.time_limit_s)
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    report: dict = {"format": FORMAT, "started": started, "dry_run": config.dry_run, "card": config.card}
    report["steps"] = list(config.steps)
    report["time_limit_s"] = config.time_limit_s
    report["environment"] = environment(config.device)
    for line in describe(report["environment"]):
        echo(line)
    state = CheckState(report=report, guard=guard, echo=echo)
    threads = torch.get_num_threads()
    if config.dry_run:
        torch.set_num_threads(1)  # tiny tensors: more threads only spin against other processes
    try:
        for name in config.steps:
            _run_step(name, config, state)
    finally:
        torch.set_num_threads(threads)
    failed = [r for r in report.get("exactness", []) if not r["passed"]]
    report["skipped"] = list(guard.skipped)
    report["errors"] = state.errors
    report["passed"] = not failed and not state.errors and not guard.skipped
    report["wall_s"] = guard.elapsed_s()
    for path in write_report(report, output):
        echo(f"wrote {path}")
    code = EXIT_FAILED if failed else EXIT_ERROR if state.errors else 0
    return report, code


__all__ = ["STEPS", "CheckConfig", "run_check"]
