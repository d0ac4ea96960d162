"""The cards' predictions measured: Qwen3.6-35B-A3B truncated to 8 layers (the card's geometry, random
weights, LoRA, bf16) on three waves planned at CP1 (no sharing, a GRPO tree, a long chain), each run cold
and warm through ``cpplan measure``'s harness (:mod:`cpplan.calibration.measure`): the peak bytes above
the pre-wave baseline and the seconds, against the card's peak and seconds for the planned wave.

In a dry run the same steps run on the CPU on a tiny Qwen3.5-MoE at a few hundred tokens, with
:class:`~cpplan.calibration.measure.FakeMemory` reporting 0.9 x the card's peak (a simulated truth; only
the seconds are measured, on the CPU, against the card's H200 seconds)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from cpplan.calibration.measure import (
    CudaMemory,
    FakeMemory,
    MemorySource,
    clear_gradients,
    hf_run_wave,
    measure_plan,
)
from cpplan.calibration.measurements import unique_workload
from cpplan.pricing.evaluator import price, wave_cost_s
from cpplan.spec.card import ModelCard
from cpplan.spec.quantities import QUANTITY_NAMES
from cpplan.spec.topology import Topology
from cpplan.spec.workload import Item, Request, Workload

FAKE_RATIO = 0.9
"""A dry run's simulated peak: this multiple of the card's own prediction."""


@dataclass(frozen=True, kw_only=True)
class Shapes:
    """The sizes of the three waves: requests and tokens of the unshared wave, the GRPO tree (a shared
    system prompt, prompts, completions per prompt) and the chain's turns."""

    unshared_requests: int
    unshared_tokens: int
    system_tokens: int
    num_prompts: int
    prompt_tokens: int
    num_completions: int
    completion_tokens: int
    num_turns: int
    turn_tokens: int
    num_layers: int

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")


GPU_SHAPES = Shapes(
    unshared_requests=8,
    unshared_tokens=65_536,
    system_tokens=1_024,
    num_prompts=4,
    prompt_tokens=3_072,
    num_completions=8,
    completion_tokens=1_536,
    num_turns=4,
    turn_tokens=32_768,
    num_layers=8,
)
"""65,536 unshared tokens; a GRPO tree of 62,464 packed tokens (180,224 logical); a 4-turn chain of
131,072 tokens (327,680 logical)."""

DRY_SHAPES = Shapes(
    unshared_requests=4,
    unshared_tokens=384,
    system_tokens=32,
    num_prompts=2,
    prompt_tokens=48,
    num_completions=3,
    completion_tokens=40,
    num_turns=3,
    turn_tokens=128,
    num_layers=4,
)


@dataclass(frozen=True, kw_only=True)
class WaveCase:
    """One measured workload: its name, what it is and the workload."""

    name: str
    description: str
    workload: Workload


def _ids(rng: np.random.Generator, n: int, vocab: int) -> np.ndarray:
    return rng.integers(0, vocab, n)


def wave_cases(shapes: Shapes, *, vocab: int, seed: int = 0) -> tuple[WaveCase, ...]:
    """The three waves. The unshared one is :func:`unique_workload` (what a calibration CSV row of
    ``requests`` and ``total_tokens`` describes), its ids folded into ``vocab`` (first tokens kept
    distinct, so nothing is shared). GRPO completions and each chain turn's new tokens carry the loss."""
    rng = np.random.default_rng(seed)
    unshared = unique_workload(shapes.unshared_requests, shapes.unshared_tokens, seed)
    folded = tuple(
        Item(id=item.id, requests=(Request(tokens=np.r_[r.tokens[:1], r.tokens[1:] % vocab]),))
        for item in unshared.items
        for r in item.requests
    )
    system = _ids(rng, shapes.system_tokens, vocab)
    groups = []
    for p in range(shapes.num_prompts):
        prompt = np.r_[system, _ids(rng, shapes.prompt_tokens, vocab)]
        completions = [_ids(rng, shapes.completion_tokens, vocab) for _ in range(shapes.num_completions)]
        mask = np.r_[np.zeros(prompt.size, np.int64), np.ones(shapes.completion_tokens, np.int64)]
        requests = tuple(Request(tokens=np.r_[prompt, c], loss_mask=mask) for c in completions)
        groups.append(Item(id=f"prompt{p}", requests=requests))
    chain = _ids(rng, shapes.num_turns * shapes.turn_tokens, vocab)
    turns = []
    for t in range(1, shapes.num_turns + 1):
        end = t * shapes.turn_tokens
        mask = (np.arange(end) >= end - shapes.turn_tokens).astype(np.int64)
        turns.append(Request(tokens=chain[:end], loss_mask=mask))
    return (
        WaveCase(
            name="no_sharing",
            description=f"{shapes.unshared_requests} unique requests, {shapes.unshared_tokens:,} tokens",
            workload=Workload(items=folded),
        ),
        WaveCase(
            name="grpo_tree",
            description=(
                f"GRPO: a {shapes.system_tokens:,}-token system prompt, {shapes.num_prompts} prompts of "
                f"{shapes.prompt_tokens:,}, {shapes.num_completions} completions of "
                f"{shapes.completion_tokens:,} each (loss on completions)"
            ),
            workload=Workload(items=tuple(groups)),
        ),
        WaveCase(
            name="long_chain",
            description=(
                f"a {shapes.num_turns}-turn chain of {shapes.num_turns * shapes.turn_tokens:,} tokens, each "
                "turn a request extending the last (loss on each turn's new tokens)"
            ),
            workload=Workload(items=(Item(id="chain", requests=tuple(turns)),)),
        ),
    )


def card_hf_config(card: ModelCard) -> Any:
    """A transformers Qwen3.5-MoE text config with the card's geometry (every layer of the card; the
    measuring model truncates it)."""
    import transformers

    g = card.geometry
    if g.num_experts == 0 or "gdn" not in g.layer_pattern:
        raise ValueError(f"card {card.name!r} is not a hybrid GDN MoE model (a Qwen3.5/3.6-MoE card)")
    kinds = {"gdn": "linear_attention", "attention": "full_attention"}
    pattern = [kinds[k] for k in g.layer_pattern]
    return transformers.Qwen3_5MoeTextConfig(
        vocab_size=g.vocab,
        hidden_size=g.hidden,
        num_hidden_layers=g.num_layers,
        num_attention_heads=g.num_heads,
        num_key_value_heads=g.num_kv_heads,
        head_dim=g.head_dim,
        num_experts=g.num_experts,
        num_experts_per_tok=g.top_k,
        moe_intermediate_size=g.expert_ffn,
        shared_expert_intermediate_size=g.shared_expert_ffn,
        linear_num_value_heads=g.gdn_value_heads,
        linear_num_key_heads=g.gdn_key_heads,
        linear_key_head_dim=g.gdn_head_dim,
        linear_value_head_dim=g.gdn_head_dim,
        linear_conv_kernel_dim=g.gdn_conv_kernel,
        layer_types=[pattern[k % len(pattern)] for k in range(g.num_layers)],
        max_position_embeddings=g.max_context,
    )


@dataclass(frozen=True, kw_only=True)
class WaveRow:
    """One run of one planned wave: measured peak above the baseline and seconds, and the card's."""

    case: str
    wave: int
    run: int
    phase: str
    packed_tokens: int
    logical_tokens: int
    measured_peak_bytes: int
    baseline_bytes: int
    card_peak_bytes: int
    measured_s: float
    card_s: float
    memory_source: str

    @property
    def peak_ratio(self) -> float:
        """Measured over predicted peak."""
        return self.measured_peak_bytes / self.card_peak_bytes if self.card_peak_bytes else float("inf")

    @property
    def seconds_ratio(self) -> float:
        """Measured over predicted seconds."""
        return self.measured_s / self.card_s if self.card_s else float("inf")

    def to_dict(self) -> dict:
        """JSON form, with the two ratios."""
        return {**asdict(self), "peak_ratio": self.peak_ratio, "seconds_ratio": self.seconds_ratio}


def card_prediction(card: ModelCard, plan: dict, wave: int, phase: str) -> tuple[int, float]:
    """The card's peak bytes (rank 0, safety included) and seconds for a planned CP1 wave in ``phase``:
    its quantities from the plan, priced as the online calibration prices an observation."""
    resolved = card.resolve(Topology(cp=int(plan["topology"]["cp"])), num_layers=plan["layers"], phase=phase)
    ranks = plan["waves"][wave]["ranks"]
    quantities = np.array([[float(r.get(name, 0)) for name in QUANTITY_NAMES] for r in ranks])
    prices = price(resolved, quantities)
    return int(prices.peak_bytes[0]), wave_cost_s(resolved, prices)


def measure_case(
    case: WaveCase,
    plan: dict,
    model: Any,
    card: ModelCard,
    *,
    memory: MemorySource,
    repeats: int = 2,
) -> tuple[list, list[WaveRow]]:
    """Every wave of ``plan`` (made for ``case.workload`` at CP1) run ``repeats`` times (first cold) on
    ``model`` with ``kernels="auto"``; returns the harness's measurements and the rows. A
    :class:`FakeMemory` is set, before each run, to :data:`FAKE_RATIO` x the card's peak."""
    run = hf_run_wave(model, plan, case.workload, kernels="auto")
    predicted = {
        (w, phase): card_prediction(card, plan, w, phase)
        for w in range(len(plan["waves"]))
        for phase in ("cold", "warm")
    }
    runs_of: dict[int, int] = {}

    def tracked(wave: int) -> None:
        phase = "cold" if runs_of.get(wave, 0) == 0 else "warm"
        runs_of[wave] = runs_of.get(wave, 0) + 1
        if isinstance(memory, FakeMemory):
            memory.above_bytes = round(FAKE_RATIO * predicted[(wave, phase)][0])
        run(wave)

    measured = measure_plan(tracked, plan, memory=memory, repeats=repeats, clear=clear_gradients(model))
    source = "fake" if isinstance(memory, FakeMemory) else "cuda"
    rows = []
    for m in measured:
        peak, seconds = predicted[(m.wave, m.phase)]
        wave = plan["waves"][m.wave]
        rows.append(
            WaveRow(
                case=case.name,
                wave=m.wave,
                run=m.run,
                phase=m.phase,
                packed_tokens=int(wave["packed_tokens"]),
                logical_tokens=int(wave["logical_tokens"]),
                measured_peak_bytes=m.peak_bytes,
                baseline_bytes=m.baseline_bytes,
                card_peak_bytes=peak,
                measured_s=m.seconds,
                card_s=seconds,
                memory_source=source,
            )
        )
    return measured, rows


def memory_source(device: str) -> MemorySource:
    """The CUDA allocator's counters on a GPU, the fake elsewhere."""
    return CudaMemory(device) if device.startswith("cuda") else FakeMemory()


__all__ = [
    "DRY_SHAPES",
    "FAKE_RATIO",
    "GPU_SHAPES",
    "Shapes",
    "WaveCase",
    "WaveRow",
    "card_hf_config",
    "card_prediction",
    "measure_case",
    "memory_source",
    "wave_cases",
]
