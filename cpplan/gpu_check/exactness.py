"""The kernels path proved exact: tree-packed waves of tiny random models, CP ranks simulated in one
process, run with ``kernels="auto"`` against the pure-torch path and against each request run alone.

Per model family, dtype and CP size one :class:`ExactnessRow` holds three comparisons of the wave's
per-request log-probs and of every parameter's gradient of a weighted sum of them: ``auto`` (on CUDA:
fla's gated delta rule and compiled flex_attention) against ``torch`` (the pure-torch kernels), ``auto``
against ``alone`` (each request alone through the model's own ``forward``) and ``torch`` against
``alone``. :data:`TOLERANCES` states what each comparison must meet per device and dtype.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from cpplan.gpu_check.tiny_models import (
    gradients,
    max_abs_diff,
    max_rel_grad_diff,
    mixed_workload,
    rel_l2_diff,
    tiny_model,
    weighted_sum,
)
from cpplan.hf.precision import float64_internals
from cpplan.hf.reference import unpacked_logprobs
from cpplan.hf.wave_runner import packed_logprobs
from cpplan.plans.result import PlanResult
from cpplan.spec.workload import Workload

CARD = "qwen3.6-35b-a3b"
FAMILIES = ("qwen3_5_moe", "qwen3")
CP_SIZES = (1, 2, 4)
COMPARISONS = (("auto", "torch"), ("auto", "alone"), ("torch", "alone"))


@dataclass(frozen=True, kw_only=True)
class Tolerance:
    """What a comparison of two runs must meet: the largest absolute log-prob difference, the relative
    L2 difference of all gradients taken as one vector, and the largest per-parameter gradient
    difference relative to that parameter's largest reference entry (``inf``: not checked)."""

    logprobs_abs: float
    grads_rel_l2: float
    grads_max_rel: float
    why: str

    def __post_init__(self) -> None:
        for name in ("logprobs_abs", "grads_rel_l2", "grads_max_rel"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")

    def to_dict(self) -> dict:
        """JSON form (``inf`` written as ``null``: not checked)."""
        return {k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in asdict(self).items()}


INF = math.inf
TOLERANCES: dict[tuple[str, str], Tolerance] = {
    ("cpu", "float64"): Tolerance(
        logprobs_abs=1e-9,
        grads_rel_l2=1e-9,
        grads_max_rel=1e-8,
        why="float64 end to end (float64_internals): only summation order differs (seen ~1e-15, ~1e-12)",
    ),
    ("cpu", "float32"): Tolerance(
        logprobs_abs=1e-4,
        grads_rel_l2=1e-4,
        grads_max_rel=1e-3,
        why="float32 rounding (~6e-8) through 4 layers and a different summation order",
    ),
    ("cuda", "float32"): Tolerance(
        logprobs_abs=2e-2,
        grads_rel_l2=2e-2,
        grads_max_rel=INF,
        why="fla's and flex_attention's Triton dots run in TF32 (10-bit mantissa, ~1e-3 relative)",
    ),
    ("cuda", "bfloat16"): Tolerance(
        logprobs_abs=0.25,
        grads_rel_l2=0.1,
        grads_max_rel=INF,
        why="bf16 (8-bit mantissa, ~4e-3 relative) activations; an MoE router may pick another expert",
    ),
}
"""The tolerance of every comparison, by (device type, dtype). The CUDA rows are set from the formats'
precision, before any GPU run; the observed values are in each report."""

DTYPES = {"cpu": ("float32", "float64"), "cuda": ("bfloat16", "float32")}
GDN_HEAD_DIM = {"cpu": 8, "cuda": 32}
"""GDN head dimension of the tiny models: fla's Triton kernels take heads of 16 and more (their dots
need at least 16 along each side), the pure-torch kernels any."""


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """Two runs of one wave compared (``a`` against the reference ``b``)."""

    a: str
    b: str
    logprobs_abs: float
    grads_rel_l2: float
    grads_max_rel: float
    passed: bool


@dataclass(frozen=True, kw_only=True)
class ExactnessRow:
    """One family, dtype and CP size: the packed tokens, the requests and the three comparisons."""

    family: str
    dtype: str
    device: str
    cp: int
    packed_tokens: int
    num_requests: int
    comparisons: tuple[Comparison, ...]

    @property
    def passed(self) -> bool:
        """Whether every comparison is within its tolerance."""
        return all(c.passed for c in self.comparisons)

    def to_dict(self) -> dict:
        """JSON form."""
        out = asdict(self)
        out["passed"] = self.passed
        return out


def compare(a: str, b: str, runs: dict, tolerance: Tolerance) -> Comparison:
    """Run ``a`` against reference run ``b`` (each ``(logprobs, gradients)``) under ``tolerance``."""
    (lp_a, g_a), (lp_b, g_b) = runs[a], runs[b]
    lp = max_abs_diff(lp_a, lp_b)
    l2 = rel_l2_diff(g_a, g_b)
    worst = max_rel_grad_diff(g_a, g_b)
    passed = (
        lp <= tolerance.logprobs_abs and l2 <= tolerance.grads_rel_l2 and worst <= tolerance.grads_max_rel
    )
    return Comparison(a=a, b=b, logprobs_abs=lp, grads_rel_l2=l2, grads_max_rel=worst, passed=passed)


def _internals(dtype: str):
    return float64_internals() if dtype == "float64" else contextlib.nullcontext()


def _packed(model, result, workload, kernels: str, dtype: str, perturb: float):
    with _internals(dtype):
        logprobs = packed_logprobs(model, result, workload, wave=0, kernels=kernels)
        if perturb:
            key = min(logprobs)
            bump = torch.zeros_like(logprobs[key])
            bump[0] = perturb
            logprobs[key] = logprobs[key] + bump
        return logprobs, gradients(model, weighted_sum(logprobs))


def _alone(model, workload, dtype: str):
    with _internals(dtype):
        logprobs = unpacked_logprobs(model, workload)
        return logprobs, gradients(model, weighted_sum(logprobs))


def check_exactness(
    *,
    device: str,
    workload: Workload,
    plans: Callable[[int], PlanResult],
    allowed: Callable[[], bool] = lambda: True,
    perturb_logprob: float = 0.0,
    families: tuple[str, ...] = FAMILIES,
    cp_sizes: tuple[int, ...] = CP_SIZES,
    on_row: Callable[[ExactnessRow], None] = lambda row: None,
) -> list[ExactnessRow]:
    """Every family x dtype x CP size of the check on ``device`` (``"cpu"`` or ``"cuda"``); ``plans(cp)``
    gives the plan of ``workload`` at CP ``cp``. Stops early (rows so far) once ``allowed()`` is false.
    ``perturb_logprob``: added to one packed ``auto`` log-prob (a self-test: the check must fail)."""
    kind = torch.device(device).type
    rows = []
    for family in families:
        for dtype in DTYPES[kind]:
            if not allowed():
                return rows
            model = tiny_model(
                family, dtype=getattr(torch, dtype), device=device, gdn_head_dim=GDN_HEAD_DIM[kind]
            )
            alone = _alone(model, workload, dtype)
            for cp in cp_sizes:
                if not allowed():
                    return rows
                result = plans(cp)
                runs = {
                    "auto": _packed(model, result, workload, "auto", dtype, perturb_logprob),
                    "torch": _packed(model, result, workload, "torch", dtype, 0.0),
                    "alone": alone,
                }
                tolerance = TOLERANCES[(kind, dtype)]
                row = ExactnessRow(
                    family=family,
                    dtype=dtype,
                    device=kind,
                    cp=cp,
                    packed_tokens=int(result.plan.packed_tokens),
                    num_requests=len(alone[0]),
                    comparisons=tuple(compare(a, b, runs, tolerance) for a, b in COMPARISONS),
                )
                on_row(row)
                rows.append(row)
    return rows


def exactness_workload(dry_run: bool) -> Workload:
    """GRPO groups, a prefix chain with a duplicate and a lone request: about 2,600 packed tokens on a
    GPU (segments cut between ranks at CP 4), a quarter of that in a dry run."""
    return mixed_workload(0, scale=0.25 if dry_run else 1.0)


__all__ = [
    "COMPARISONS",
    "CP_SIZES",
    "DTYPES",
    "FAMILIES",
    "TOLERANCES",
    "Comparison",
    "ExactnessRow",
    "Tolerance",
    "check_exactness",
    "compare",
    "exactness_workload",
]
