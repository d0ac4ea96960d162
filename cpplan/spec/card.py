"""Model cards: declarative geometry, memory floors, cost terms and calibration, read from TOML.

A card's floor and cost terms are formulas (see :mod:`cpplan.spec.expr`) over the geometry, the topology,
the card's constants and derived values. :meth:`ModelCard.resolve` turns them into numbers for one
topology, depth and phase: the :class:`ResolvedCard` that both the numpy evaluator and the CP-SAT
model read (one source of truth, two readers).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    FiniteFloat,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from cpplan.errors import InputError, UnsupportedTopologyError
from cpplan.spec.expr import FormulaError, evaluate, names_in
from cpplan.spec.quantities import NUM_QUANTITIES, QUANTITY_INDEX, QUANTITY_NAMES
from cpplan.spec.shipped import toml_files
from cpplan.spec.tomlines import file_line
from cpplan.spec.topology import AXES, Topology
from cpplan.spec.validation import input_error

Formula = str | float | int
Phase = Literal["cold", "warm"]
LAYER_KINDS = ("attention", "gdn")
Barrier = Literal["none", "attention", "gdn", "head"]
BARRIERS: tuple[str, ...] = ("none", "attention", "gdn", "head")
"""Where the ranks of a CP group wait for each other (see :class:`CostTerm`): ``none`` (the term runs
free of any collective until the wave's end), every layer of one kind (its collective: the key/value
all-gather of an attention layer, the state hand-off and conv-tail gather of a GDN layer) or the LM
head (the backward's first collective follows it)."""


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Geometry(_Strict):
    """Architecture numbers (the models' published figures). Zero means "absent"."""

    hidden: int = Field(gt=0)
    ffn: int = Field(default=0, ge=0)
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    num_layers: int = Field(gt=0)
    layer_pattern: tuple[Literal["attention", "gdn"], ...] = ("attention",)
    vocab: int = Field(gt=0)
    dtype_bytes: int = Field(default=2, gt=0)
    max_context: int = Field(default=131072, gt=0)
    num_experts: int = Field(default=0, ge=0)
    top_k: int = Field(default=0, ge=0, validate_default=True)
    expert_ffn: int = Field(default=0, ge=0)
    shared_expert_ffn: int = Field(default=0, ge=0)
    gdn_value_heads: int = Field(default=0, ge=0)
    gdn_key_heads: int = Field(default=0, ge=0)
    gdn_head_dim: int = Field(default=0, ge=0)
    gdn_conv_kernel: int = Field(default=0, ge=0)

    @field_validator("layer_pattern")
    @classmethod
    def _pattern_not_empty(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("must list at least one layer kind")
        return value

    @field_validator("num_kv_heads")
    @classmethod
    def _kv_heads_group(cls, value: int, info: ValidationInfo) -> int:
        heads = info.data.get("num_heads")
        if heads is not None and heads % value:
            raise ValueError(
                f"num_kv_heads = {value} must divide num_heads = {heads} (each key/value head serves "
                f"a whole group of query heads); divisors of {heads}: {_divisors(heads)}"
            )
        return value

    @field_validator("top_k")
    @classmethod
    def _top_k_of_experts(cls, value: int, info: ValidationInfo) -> int:
        experts = info.data.get("num_experts")
        if experts is None:
            return value
        if experts == 0 and value:
            raise ValueError(f"top_k = {value} on a card without experts (num_experts = 0): leave top_k out")
        if experts and not 1 <= value <= experts:
            raise ValueError(
                f"top_k = {value} must be between 1 and num_experts = {experts} (the experts each token "
                "is routed to)"
            )
        return value

    @field_validator("gdn_key_heads")
    @classmethod
    def _gdn_key_heads_group(cls, value: int, info: ValidationInfo) -> int:
        values = info.data.get("gdn_value_heads")
        if value and values and values % value:
            raise ValueError(
                f"gdn_key_heads = {value} must divide gdn_value_heads = {values} (each key head serves "
                f"a whole group of value heads); divisors of {values}: {_divisors(values)}"
            )
        return value

    def parallel_problem(self, *, tp: int = 1, ep: int = 1, etp: int = 1) -> tuple[str, str] | None:
        """The first of the parallel sizes ``tp``, ``ep``, ``etp`` this geometry cannot be sharded by, as
        ``(axis, reason)`` (``None`` when every size shards it): TP must divide the attention heads, the
        key/value heads (Megatron-LM's rule: each rank holds whole query groups, none replicated), the GDN
        key and value heads (where the model has GDN layers) and the dense and shared-expert FFN; EP must
        divide the experts and ETP each expert's FFN (both 1 on a model without experts)."""
        for axis, size, rules in (
            ("tp", tp, self._tp_rules()),
            ("ep", ep, self._expert_rules("ep", "num_experts", "experts")),
            ("etp", etp, self._expert_rules("etp", "expert_ffn", "expert FFN width")),
        ):
            reason = next((why for holds, why in (rule(size) for rule in rules) if not holds), None)
            if reason is not None:
                return axis, reason
        return None

    def parallel_sizes(self, axis: str, limit: int = 1024) -> list[int]:
        """The sizes of ``axis`` (``tp``, ``ep`` or ``etp``) up to ``limit`` this geometry shards by."""
        return [size for size in range(1, limit + 1) if self.parallel_problem(**{axis: size}) is None]

    def _tp_rules(self) -> list:
        """Each TP rule as ``size -> (holds, reason)``."""
        rules = [_divides("tp", self.num_heads, "attention heads (num_heads)")]
        rules.append(_divides("tp", self.num_kv_heads, "key/value heads (num_kv_heads)"))
        if "gdn" in self.layer_pattern:
            rules.append(_divides("tp", self.gdn_value_heads, "GDN value heads (gdn_value_heads)"))
            rules.append(_divides("tp", self.gdn_key_heads, "GDN key heads (gdn_key_heads)"))
        rules.append(_divides("tp", self.ffn, "FFN width (ffn)"))
        rules.append(_divides("tp", self.shared_expert_ffn, "shared-expert FFN width (shared_expert_ffn)"))
        return rules

    def _expert_rules(self, axis: str, field: str, what: str) -> list:
        """The rule of an expert axis: its size divides ``field``; 1 on a model without experts."""
        if self.num_experts == 0:
            return [lambda size: (size == 1, f"{axis}={size} on a model without experts (num_experts = 0)")]
        return [_divides(axis, getattr(self, field), f"{what} ({field})")]

    def layer_counts(self, num_layers: int) -> dict[str, int]:
        """Layers of each kind when the pattern is repeated (and truncated) to ``num_layers``."""
        pattern = self.layer_pattern
        full, rest = divmod(num_layers, len(pattern))
        counts = {kind: full * pattern.count(kind) + pattern[:rest].count(kind) for kind in LAYER_KINDS}
        return {
            "layers": num_layers,
            "attn_layers": counts["attention"],
            "gdn_layers": counts["gdn"],
            "moe_layers": num_layers if self.num_experts > 0 else 0,
            "dense_layers": 0 if self.num_experts > 0 else num_layers,
        }

    def layer_positions(self, num_layers: int) -> dict[str, int]:
        """What is live while the backward runs through the top (highest, first in backward) and the
        bottom (lowest, last in backward) layer of each kind, for floors that depend on where the
        backward is: ``{kind}_{top|bottom}_held_layers`` (layers at or below it, whose checkpointed
        inputs are still held), ``..._held_gdn_layers`` (the GDN layers among them) and
        ``..._done_layers`` (layers at or above it, whose gradients exist). ``kind`` is ``attn`` or
        ``gdn``; every count is 0 for a kind the truncated model does not have."""
        kinds = [self.layer_pattern[i % len(self.layer_pattern)] for i in range(num_layers)]
        names: dict[str, int] = {}
        for kind, short in (("attention", "attn"), ("gdn", "gdn")):
            indices = [i for i, k in enumerate(kinds) if k == kind]
            ends = (("top", max(indices, default=None)), ("bottom", min(indices, default=None)))
            for position, index in ends:
                prefix = f"{short}_{position}"
                held = [] if index is None else kinds[: index + 1]
                names[f"{prefix}_held_layers"] = len(held)
                names[f"{prefix}_held_gdn_layers"] = held.count("gdn")
                names[f"{prefix}_done_layers"] = 0 if index is None else num_layers - index
        return names


def _divisors(number: int) -> str:
    return ", ".join(str(d) for d in range(1, number + 1) if number % d == 0)


def _divides(axis: str, count: int, what: str):
    """A rule: a size of ``axis`` must divide ``count`` (none when ``count`` is 0: absent)."""
    return lambda size: (
        count == 0 or count % size == 0,
        f"{axis}={size} must divide the model's {count} {what}",
    )


class Hardware(_Strict):
    """The accelerator the cost terms are priced on."""

    name: str
    bf16_flops_per_s: float = Field(gt=0, allow_inf_nan=False)
    mfu: float = Field(gt=0, le=1, allow_inf_nan=False)
    hbm_bytes_per_s: float = Field(gt=0, allow_inf_nan=False)
    interconnect_bytes_per_s: float = Field(gt=0, allow_inf_nan=False)
    wave_overhead_s: float = Field(ge=0, allow_inf_nan=False)
    collective_base_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """Fixed latency of one collective over the CP group (NCCL's ring ``baseLat``); 0: not priced."""
    collective_step_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """Latency of each step of a ring collective (NCCL's ``hwLat``); an all-gather over g ranks takes
    g - 1 steps; 0: not priced."""


class MemoryTerm(_Strict):
    """A linear floor term: ``bytes_per_unit`` (a formula) times one local quantity of the rank.

    ``when`` (a formula over the topology) states the topologies the term holds for; ``phase`` limits
    it to cold (first call) or warm pricing. A formula may name an earlier term: that term's bytes per
    unit here (0 where it does not hold), so a term can scale another without repeating its formula.
    """

    quantity: str
    bytes_per_unit: Formula
    when: str = "true"
    phase: Literal["any", "cold", "warm"] = "any"
    doc: str = ""

    @field_validator("quantity")
    @classmethod
    def _known_quantity(cls, value: str) -> str:
        if value not in QUANTITY_INDEX:
            raise ValueError(f"unknown quantity {value!r}; known: {', '.join(QUANTITY_NAMES)}")
        return value


class Envelope(_Strict):
    """One candidate peak: a static part plus a sum of terms. The floor is the max over envelopes."""

    name: str
    static_bytes: Formula = 0
    terms: tuple[str, ...]
    doc: str = ""


class Memory(_Strict):
    """Memory floors: named terms, the envelopes that sum them, and the safety factor."""

    safety: float = Field(default=1.1, ge=1.0, allow_inf_nan=False)
    terms: dict[str, MemoryTerm]
    envelopes: tuple[Envelope, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _terms_exist(self) -> Memory:
        for envelope in self.envelopes:
            for term in envelope.terms:
                if term not in self.terms:
                    raise ValueError(f"envelope {envelope.name!r} lists unknown term {term!r}")
        return self


class CostTerm(_Strict):
    """A linear time term: ``seconds_per_unit`` (a formula) times one local quantity of the rank.

    ``barrier`` names the layers whose collectives the term's work runs between: the ranks of a CP group
    wait for each other at every layer of a kind, so a wave costs, per barrier, the slowest rank's sum
    of that barrier's terms, summed over barriers (not the slowest rank's total: a rank with the most
    tokens and another with the most attended pairs are both on the critical path)."""

    quantity: str
    seconds_per_unit: Formula
    barrier: Barrier = "none"
    when: str = "true"
    doc: str = ""

    _known_quantity = field_validator("quantity")(MemoryTerm._known_quantity.__func__)


class WaveTerm(_Strict):
    """Seconds a wave spends once, whatever its tokens: a formula over the geometry, the topology (its
    CP group size ``cp``) and the hardware, for latency-bound collectives and kernel fixed costs."""

    seconds: Formula
    when: str = "true"
    doc: str = ""


class Handoff(_Strict):
    """The GDN recurrent-state hand-off on a wave's critical path (see ``docs/time_model.md``).

    Pieces run in rounds: a piece whose path predecessor lies on another rank waits for that rank's
    state, so a wave with ``R`` rounds adds ``(R - 1) * round_seconds`` (one sequential collective per
    GDN layer and pass per extra round), ``state_seconds`` per handed-over state (its bytes over the
    link), and the recurrence work that waits: ``wait_seconds_per_token`` times the tokens by which the
    sum over rounds of the busiest rank's round work exceeds the busiest rank's total.
    """

    round_seconds: Formula = 0
    state_seconds: Formula = 0
    wait_seconds_per_token: Formula = 0
    when: str = "true"
    head_parallel_seconds_per_token: Formula = 0
    """Head-parallel (no state crosses; :mod:`cpplan.pricing.head_parallel`): seconds per token-row
    moved by the two all-to-alls of every GDN layer and pass, at the row's full width."""
    head_parallel_collective_seconds: Formula = 0
    """Head-parallel: the latency of all of a wave's all-to-alls."""
    head_parallel_level_seconds: Formula = 0
    """Head-parallel: one more serial recurrence call per GDN layer and pass, per prefix-tree level
    beyond the first."""
    head_parallel_when: str = "false"
    """Where head-parallel is offered (its three prices 0 elsewhere): the GDN value heads must divide
    over the CP ranks."""
    doc: str = ""


class Cost(_Strict):
    """Predicted seconds per rank (``terms``), per wave (``wave_terms``, the GDN ``handoff``) and per
    step (``step_terms``); a wave costs, per barrier, its slowest rank, plus its wave terms, its hand-off
    and ``hardware.wave_overhead_s``. Step terms (gradient reduction, optimizer) are paid once per step
    whatever the plan, so they are reported beside a plan's cost, not inside it."""

    terms: dict[str, CostTerm]
    wave_terms: dict[str, WaveTerm] = Field(default_factory=dict)
    step_terms: dict[str, WaveTerm] = Field(default_factory=dict)
    handoff: Handoff | None = None


class CalibrationRow(_Strict):
    """One measured row a calibration was fitted on, and what the fitted card predicts for it."""

    line: int = Field(ge=1)
    layers: int = Field(ge=1)
    topology: str
    phase: Literal["cold", "warm"]
    requests: int = Field(ge=1)
    total_tokens: int = Field(ge=1)
    observed_max_bytes: int = Field(ge=0)
    predicted_bytes: int = Field(ge=0)
    ratio: float


class Calibration(_Strict):
    """Provenance of calibrated coefficients: what was measured, where, when and how it was fitted.

    ``coefficients`` are names the card's formulas may use (non-negative); ``fitted`` names the ones a
    calibration fitted (the rest are fixed or transferred, see ``method``); ``rows`` the measurements
    and the fitted card's prediction for each.
    """

    source: str = ""
    source_sha256: str = ""
    hardware: str = ""
    date: str = ""
    method: str = ""
    tool: str = ""
    notes: str = ""
    coefficients: dict[str, float] = Field(default_factory=dict)
    fitted: tuple[str, ...] = ()
    rows: tuple[CalibrationRow, ...] = ()

    @field_validator("coefficients")
    @classmethod
    def _physical(cls, value: dict[str, float]) -> dict[str, float]:
        for name, number in value.items():
            if not math.isfinite(number) or number < 0:
                raise ValueError(f"coefficient {name!r} is {number}; calibrated coefficients are >= 0")
        return value

    @model_validator(mode="after")
    def _fitted_known(self) -> Calibration:
        unknown = [name for name in self.fitted if name not in self.coefficients]
        if unknown:
            raise ValueError(f"fitted names {', '.join(unknown)} are not in coefficients")
        return self


class ModelCard(_Strict):
    """A validated model card (one TOML file per architecture)."""

    name: str
    display_name: str = ""
    aliases: tuple[str, ...] = ()
    supports: str = "true"
    geometry: Geometry
    constants: dict[str, FiniteFloat] = Field(default_factory=dict)
    derived: dict[str, Formula] = Field(default_factory=dict)
    hardware: Hardware
    memory: Memory
    cost: Cost
    calibration: Calibration | None = None
    path: str | None = None

    def environment(self, topology: Topology, num_layers: int | None = None) -> dict[str, float]:
        """Every name a formula may use, for one topology and depth."""
        layers = self.geometry.num_layers if num_layers is None else num_layers
        env: dict[str, float] = {
            k: float(v) for k, v in self.geometry.model_dump().items() if isinstance(v, int | float)
        }
        env.update({k: float(v) for k, v in self.geometry.layer_counts(layers).items()})
        env.update({k: float(v) for k, v in self.geometry.layer_positions(layers).items()})
        env.update(topology.as_env())
        env.update({k: float(v) for k, v in self.hardware.model_dump().items() if isinstance(v, int | float)})
        env.update(self.constants)
        env.update(self.calibration.coefficients if self.calibration else {})
        for name, formula in self.derived.items():
            env[name] = evaluate(formula, env)
        return env

    def without_head_parallel(self) -> ModelCard:
        """This card with head-parallel GDN offered nowhere (``head_parallel_when = "false"``): the
        choice between rounds and parallel passing alone."""
        handoff = self.cost.handoff.model_copy(update={"head_parallel_when": "false"})
        return self.model_copy(update={"cost": self.cost.model_copy(update={"handoff": handoff})})

    def check_supported(self, topology: Topology) -> None:
        """Raise :class:`UnsupportedTopologyError` for a topology the card cannot price: one its
        ``supports`` formula excludes, or one whose sizes cannot shard the model's geometry
        (:meth:`Geometry.parallel_problem`)."""
        if not evaluate(self.supports, topology.as_env()):
            raise UnsupportedTopologyError(
                f"model card {self.name!r} cannot price topology {topology} (it supports: {self.supports})",
                field="topology",
            )
        problem = self.geometry.parallel_problem(tp=topology.tp, ep=topology.ep, etp=topology.etp)
        if problem is not None:
            axis, reason = problem
            sizes = ", ".join(map(str, self.geometry.parallel_sizes(axis)))
            raise UnsupportedTopologyError(
                f"{reason}, so model {self.name!r} cannot be sharded that way; the {axis} sizes it "
                f"takes: {sizes}",
                field=f"topology.{axis}",
            )

    def resolve(
        self, topology: Topology, *, num_layers: int | None = None, phase: Phase = "cold"
    ) -> ResolvedCard:
        """Numbers for one topology, depth and phase."""
        whole = isinstance(num_layers, int | np.integer) and not isinstance(num_layers, bool)
        if num_layers is not None and not whole:
            raise InputError(f"must be a whole number of layers, got {num_layers!r}", field="layers")
        if num_layers is not None and not 1 <= num_layers <= self.geometry.num_layers:
            raise InputError(
                f"must be between 1 and the model's {self.geometry.num_layers} layers, got {num_layers}",
                field="layers",
            )
        self.check_supported(topology)
        env = self.environment(topology, num_layers)
        where = self.path or self.name
        term_names, term_q, term_b = self._memory_terms(env, phase, where)
        statics, member = self._envelopes(env, term_names, where)
        cost_names, cost_q, cost_s, cost_b = self._cost_terms(env, where)
        wave_names, wave_s = self._wave_terms(env, where, "wave_terms")
        step_names, step_s = self._wave_terms(env, where, "step_terms")
        return ResolvedCard(
            name=self.name,
            topology=topology,
            num_layers=int(env["layers"]),
            phase=phase,
            safety=self.memory.safety,
            max_context=self.geometry.max_context,
            term_names=tuple(term_names),
            term_quantity=_frozen(np.array(term_q, dtype=np.int64)),
            term_bytes=_frozen(np.array(term_b, dtype=np.float64)),
            envelope_names=tuple(e.name for e in self.memory.envelopes),
            envelope_static_bytes=_frozen(statics),
            envelope_terms=_frozen(member),
            cost_names=tuple(cost_names),
            cost_quantity=_frozen(np.array(cost_q, dtype=np.int64)),
            cost_seconds=_frozen(np.array(cost_s, dtype=np.float64)),
            cost_barrier=_frozen(np.array(cost_b, dtype=np.int64)),
            wave_term_names=tuple(wave_names),
            wave_term_seconds=_frozen(np.array(wave_s, dtype=np.float64)),
            step_term_names=tuple(step_names),
            step_term_seconds=_frozen(np.array(step_s, dtype=np.float64)),
            wave_overhead_s=self.hardware.wave_overhead_s + math.fsum(wave_s),
            handoff=self._handoff(env, where),
            model=self,
            group_cards=self._group_cards(topology, int(env["layers"]), phase),
        )

    def _group_cards(self, topology: Topology, num_layers: int, phase: Phase) -> tuple[ResolvedCard, ...]:
        """Under dynamic CP, the card of every other group size of the pool (what
        :meth:`ResolvedCard.group_card` returns), resolved with this card; none under fixed CP. Raises
        :class:`UnsupportedTopologyError` naming the first group size the card cannot price."""
        if not topology.dynamic_cp:
            return ()
        cards = []
        for size in topology.group_sizes():
            if size == topology.cp:
                continue
            group = topology.group(size)
            if not evaluate(self.supports, group.as_env()):
                raise UnsupportedTopologyError(
                    f"model card {self.name!r} cannot price dynamic CP group size {size} of the pool of "
                    f"{topology.pool} GPUs (topology {group}; it supports: {self.supports})",
                    field="topology.dynamic_cp",
                )
            cards.append(self.resolve(group, num_layers=num_layers, phase=phase))
        return tuple(cards)

    def _memory_terms(self, env: dict[str, float], phase: Phase, where: str):
        """The memory terms that hold here: names, quantity indices and bytes per unit. Each term's value
        joins ``env`` under its name (0 where it does not hold), for later terms that name it."""
        names, quantities, values = [], [], []
        for name in self.memory.terms:
            env[name] = 0.0
        for name, term in self.memory.terms.items():
            if term.phase not in ("any", phase) or not _holds(term.when, env, where, f"memory.terms.{name}"):
                continue
            value = _value(term.bytes_per_unit, env, where, f"memory.terms.{name}.bytes_per_unit")
            env[name] = value
            names.append(name)
            quantities.append(QUANTITY_INDEX[term.quantity])
            values.append(value)
        return names, quantities, values

    def _envelopes(self, env: dict[str, float], term_names: list[str], where: str):
        """Each envelope's static bytes, and which of the holding terms it sums."""
        index = {name: i for i, name in enumerate(term_names)}
        statics = np.array(
            [
                _value(e.static_bytes, env, where, f"memory.envelopes.{e.name}.static_bytes")
                for e in self.memory.envelopes
            ],
            dtype=np.float64,
        )
        member = np.zeros((len(self.memory.envelopes), len(term_names)), dtype=bool)
        for e, envelope in enumerate(self.memory.envelopes):
            for term in envelope.terms:
                if term in index:
                    member[e, index[term]] = True
        return statics, member

    def _cost_terms(self, env: dict[str, float], where: str):
        """The cost terms that hold here: names, quantity indices, seconds per unit and barrier indices
        (into :data:`BARRIERS`)."""
        names, quantities, values, barriers = [], [], [], []
        for name, term in self.cost.terms.items():
            if not _holds(term.when, env, where, f"cost.terms.{name}"):
                continue
            names.append(name)
            quantities.append(QUANTITY_INDEX[term.quantity])
            values.append(_value(term.seconds_per_unit, env, where, f"cost.terms.{name}.seconds_per_unit"))
            barriers.append(BARRIERS.index(term.barrier))
        return names, quantities, values, barriers

    def _wave_terms(self, env: dict[str, float], where: str, table: str) -> tuple[list[str], list[float]]:
        """The terms of ``cost.{table}`` (wave or step terms) that hold here: names and seconds."""
        names, values = [], []
        for name, term in getattr(self.cost, table).items():
            field = f"cost.{table}.{name}"
            if _holds(term.when, env, where, field):
                names.append(name)
                values.append(_value(term.seconds, env, where, f"{field}.seconds"))
        return names, values

    def _handoff(self, env: dict[str, float], where: str) -> HandoffSeconds:
        """The hand-off's seconds per extra round, per handed-over state and per waiting token (all 0
        where the card has none or it does not hold)."""
        handoff = self.cost.handoff
        if handoff is None or not _holds(handoff.when, env, where, "cost.handoff"):
            return HandoffSeconds()
        values = {
            name: _value(getattr(handoff, name), env, where, f"cost.handoff.{name}")
            for name in _HANDOFF_FIELDS.values()
        }
        if _holds(handoff.head_parallel_when, env, where, "cost.handoff.head_parallel"):
            values.update(
                {
                    name: _value(getattr(handoff, name), env, where, f"cost.handoff.{name}")
                    for name in _HEAD_PARALLEL_FIELDS.values()
                }
            )
            fields = _HANDOFF_FIELDS | _HEAD_PARALLEL_FIELDS
        else:
            fields = _HANDOFF_FIELDS
        return HandoffSeconds(**{key: values[name] for key, name in fields.items()})


_HANDOFF_FIELDS = {
    "round_s": "round_seconds",
    "state_s": "state_seconds",
    "wait_s_per_token": "wait_seconds_per_token",
}
""":class:`HandoffSeconds` fields and the :class:`Handoff` formulas they resolve."""

_HEAD_PARALLEL_FIELDS = {
    "head_s_per_token": "head_parallel_seconds_per_token",
    "head_collective_s": "head_parallel_collective_seconds",
    "head_level_s": "head_parallel_level_seconds",
}
""":class:`HandoffSeconds`' head-parallel fields and the formulas they resolve (where
``head_parallel_when`` holds)."""


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _holds(formula: str, env: dict[str, float], where: str, field: str) -> bool:
    try:
        return bool(evaluate(formula, env))
    except FormulaError as exc:
        raise InputError(
            str(exc), file=where, line=file_line(where, f"{field}.when"), field=f"{field}.when"
        ) from None


def _value(formula: Formula, env: dict[str, float], where: str, field: str) -> float:
    line = functools.partial(file_line, where, field)
    try:
        value = evaluate(formula, env)
    except (FormulaError, ZeroDivisionError, OverflowError) as exc:
        raise InputError(
            f"cannot evaluate {formula!r}: {exc}", file=where, line=line(), field=field
        ) from None
    if not math.isfinite(value):
        raise InputError(
            f"{formula!r} evaluates to {value}, not a finite number", file=where, line=line(), field=field
        )
    if value < 0:
        raise InputError(
            f"{formula!r} evaluates to {value:g}; floors and costs cannot be negative",
            file=where,
            line=line(),
            field=field,
        )
    return value


@dataclass(frozen=True, kw_only=True)
class HandoffSeconds:
    """The resolved GDN hand-off (see :class:`Handoff`): seconds per extra round, per handed-over state
    and per token of recurrence work that waits on an earlier round; head-parallel's seconds per
    token-row moved, its all-to-alls' latency and its seconds per extra tree level (all 0 where the card
    does not offer it)."""

    round_s: float = 0.0
    state_s: float = 0.0
    wait_s_per_token: float = 0.0
    head_s_per_token: float = 0.0
    head_collective_s: float = 0.0
    head_level_s: float = 0.0

    @property
    def head_parallel_priced(self) -> bool:
        """Whether the card offers head-parallel here (prices its all-to-alls)."""
        return self.head_s_per_token > 0 or self.head_collective_s > 0

    @property
    def priced(self) -> bool:
        """Whether any part of the hand-off costs time."""
        return (
            self.round_s > 0
            or self.state_s > 0
            or self.wait_s_per_token > 0
            or self.head_parallel_priced
            or self.head_level_s > 0
        )

    def scaled(self, factor: float) -> HandoffSeconds:
        """Every price times ``factor``."""
        return HandoffSeconds(**{k: v * factor for k, v in dataclasses.asdict(self).items()})


@dataclass(frozen=True, kw_only=True, eq=False)
class CardConstants:
    """Numbers derived from a resolved card once and read on every wave priced under it."""

    time_coefficients: np.ndarray
    """Seconds per unit of each quantity (:meth:`ResolvedCard.time_coefficients`), read-only."""

    cost_group: np.ndarray
    """Per cost term, the index of its barrier in :attr:`ResolvedCard.barrier_names`, read-only."""

    barrier_coefficients: np.ndarray
    """Seconds per unit of each quantity within each barrier of :attr:`ResolvedCard.barrier_names`,
    shape ``(barriers, quantities)``, read-only; its rows sum to :attr:`time_coefficients`."""

    static_peak_bytes: float
    """The peak of a rank that owns nothing: safety times the largest envelope's static bytes."""


@dataclass(frozen=True, kw_only=True, eq=False)
class ResolvedCard:
    """A card's floors and costs as numbers for one topology, depth and phase.

    Rank peak: ``safety * max_e(static[e] + sum_t member[e, t] * term_bytes[t] * q[term_quantity[t]])``.
    Rank time in barrier b: ``sum_{c in b} cost_seconds[c] * q[cost_quantity[c]]``. Wave time: the sum
    over barriers of the slowest rank in each, plus ``wave_overhead_s`` (the hardware's per-wave overhead
    and every wave term, ``wave_term_seconds``), plus the GDN ``handoff`` priced on the wave's pieces.
    ``step_s`` is paid once per step (gradient reduction, optimizer), whatever the plan.
    """

    name: str
    topology: Topology
    num_layers: int
    phase: Phase
    safety: float
    max_context: int
    term_names: tuple[str, ...]
    term_quantity: np.ndarray
    term_bytes: np.ndarray
    envelope_names: tuple[str, ...]
    envelope_static_bytes: np.ndarray
    envelope_terms: np.ndarray
    cost_names: tuple[str, ...]
    cost_quantity: np.ndarray
    cost_seconds: np.ndarray
    wave_overhead_s: float
    cost_barrier: np.ndarray = dataclasses.field(default_factory=lambda: _frozen(np.zeros(0, np.int64)))
    """Per cost term, its barrier's index in :data:`BARRIERS` (empty: every term in ``none``)."""
    wave_term_names: tuple[str, ...] = ()
    wave_term_seconds: np.ndarray = dataclasses.field(default_factory=lambda: _frozen(np.zeros(0)))
    step_term_names: tuple[str, ...] = ()
    step_term_seconds: np.ndarray = dataclasses.field(default_factory=lambda: _frozen(np.zeros(0)))
    handoff: HandoffSeconds = dataclasses.field(default_factory=HandoffSeconds)
    model: ModelCard | None = dataclasses.field(default=None, repr=False)
    memory_scale: float = 1.0
    time_scale: float = 1.0
    group_cards: tuple[ResolvedCard, ...] = dataclasses.field(default=(), repr=False)
    """Under dynamic CP, the card of every other group size of the pool, in size order (resolved with
    this one by :meth:`ModelCard.resolve` and scaled with it); empty under fixed CP."""
    constants: CardConstants = dataclasses.field(init=False, repr=False)
    """What every wave priced under this card reads, derived when the card is made."""

    def __post_init__(self) -> None:
        if self.cost_barrier.size != self.cost_seconds.size:
            object.__setattr__(self, "cost_barrier", _frozen(np.zeros(self.cost_seconds.size, np.int64)))
        coefficients = _frozen(self.time_coefficients())
        static = self.safety * float(self.envelope_static_bytes.max())
        group = np.searchsorted(np.unique(self.cost_barrier), self.cost_barrier).astype(np.int64)
        constants = CardConstants(
            time_coefficients=coefficients,
            cost_group=_frozen(group),
            barrier_coefficients=_frozen(self._barrier_coefficients(group)),
            static_peak_bytes=static,
        )
        object.__setattr__(self, "constants", constants)

    @property
    def barrier_names(self) -> tuple[str, ...]:
        """The barriers the card's holding cost terms fall in, in :data:`BARRIERS` order."""
        return tuple(BARRIERS[b] for b in np.unique(self.cost_barrier).tolist())

    @property
    def step_s(self) -> float:
        """Seconds paid once per step (every step term)."""
        return math.fsum(self.step_term_seconds.tolist())

    def group_card(self, size: int) -> ResolvedCard:
        """This card resolved for a CP group of ``size`` ranks of the same pool (same depth, phase,
        TP, EP, ETP and PP; ``dp`` = pool / size): what a dynamic-CP wave of that group size is priced
        with. ``size`` must be one of the topology's group sizes."""
        if size == self.topology.cp:
            return self
        for card in self.group_cards:
            if card.topology.cp == size:
                return card
        raise AssertionError(f"group size {size} is not one of topology {self.topology}'s")

    def scaled(self, memory_scale: float, time_scale: float) -> ResolvedCard:
        """This card with every memory floor (terms and statics) multiplied by ``memory_scale`` and every
        time price (rank terms, the wave overhead with its wave terms, the GDN hand-off) by
        ``time_scale``: a learned correction. Its group cards are scaled alike."""
        if memory_scale == 1.0 and time_scale == 1.0:
            return self
        m, t = float(memory_scale), float(time_scale)
        return dataclasses.replace(
            self,
            term_bytes=_frozen(self.term_bytes * m),
            envelope_static_bytes=_frozen(self.envelope_static_bytes * m),
            cost_seconds=_frozen(self.cost_seconds * t),
            wave_overhead_s=self.wave_overhead_s * t,
            wave_term_seconds=_frozen(self.wave_term_seconds * t),
            step_term_seconds=_frozen(self.step_term_seconds * t),
            handoff=self.handoff.scaled(t),
            memory_scale=self.memory_scale * m,
            time_scale=self.time_scale * t,
            group_cards=tuple(card.scaled(m, t) for card in self.group_cards),
        )

    @property
    def num_envelopes(self) -> int:
        """Number of envelopes."""
        return len(self.envelope_names)

    def envelope_coefficients(self) -> np.ndarray:
        """Bytes per unit of each quantity in each envelope: shape (envelopes, quantities)."""
        coef = np.zeros((self.num_envelopes, NUM_QUANTITIES))
        for e in range(self.num_envelopes):
            np.add.at(
                coef[e], self.term_quantity[self.envelope_terms[e]], self.term_bytes[self.envelope_terms[e]]
            )
        return coef

    def time_coefficients(self) -> np.ndarray:
        """Seconds per unit of each quantity: shape (quantities,)."""
        coef = np.zeros(NUM_QUANTITIES)
        np.add.at(coef, self.cost_quantity, self.cost_seconds)
        return coef

    def _barrier_coefficients(self, group: np.ndarray) -> np.ndarray:
        """Seconds per unit of each quantity within each barrier: shape (barriers, quantities)."""
        coef = np.zeros((max(len(self.barrier_names), 1), NUM_QUANTITIES))
        np.add.at(coef, (group, self.cost_quantity), self.cost_seconds)
        return coef


# --------------------------------------------------------------------------------------------- loading


def _packaged_cards() -> dict[str, Path]:
    return toml_files("cpplan.cards")


def available_models() -> list[str]:
    """Names of the model cards shipped with cpplan."""
    return sorted(_packaged_cards())


def load_model(name_or_path: str | Path) -> ModelCard:
    """Load a shipped card by name or alias (case-insensitive), or a TOML card by path."""
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        return load_card_file(path)
    wanted = str(name_or_path).lower()
    for name, card_path in sorted(_packaged_cards().items()):
        if name.lower() == wanted:
            return load_card_file(card_path)
    for card_path in sorted(_packaged_cards().values()):
        card = load_card_file(card_path)
        if wanted in (a.lower() for a in (card.display_name, *card.aliases)):
            return card
    raise InputError(
        f"unknown model {str(name_or_path)!r}; shipped cards: {', '.join(available_models())}"
        " (or give a path to a .toml card)",
        field="model",
    )


def load_card_file(path: str | Path) -> ModelCard:
    """Load and validate a card; errors name the file, the line (where known) and the field."""
    data, text = read_toml(path, what="model card")
    data.setdefault("path", str(path))
    try:
        card = ModelCard.model_validate(data)
    except ValidationError as exc:
        raise input_error(exc, file=path, toml_text=text) from None
    _check_formulas(card)
    return card


def _check_formulas(card: ModelCard) -> None:
    """Resolve once at the default topology so unknown names and negative terms fail on load."""
    topology = Topology()
    where = card.path or card.name
    try:
        env = card.environment(topology)
    except FormulaError as exc:
        raise InputError(str(exc), file=where, field="derived") from None
    for axis in AXES:
        env.setdefault(axis, 1.0)
    for name in card.memory.terms:
        if name in env:
            raise InputError(
                f"term name {name!r} is already a geometry, topology, constant or derived name",
                file=where,
                line=file_line(card.path, f"memory.terms.{name}"),
                field=f"memory.terms.{name}",
            )
    earlier_terms: set[str] = set()
    for field, formulas in (
        ("memory.terms", {k: (t.bytes_per_unit, t.when) for k, t in card.memory.terms.items()}),
        ("cost.terms", {k: (t.seconds_per_unit, t.when) for k, t in card.cost.terms.items()}),
    ):
        for name, pair in formulas.items():
            for formula in pair:
                if isinstance(formula, str):
                    known = set(env) | (earlier_terms if field == "memory.terms" else set())
                    unknown = names_in(formula) - known - {"true", "false", "True", "False"}
                    if unknown:
                        raise InputError(
                            f"unknown name(s) {', '.join(sorted(unknown))} in {formula!r}",
                            file=where,
                            line=file_line(card.path, f"{field}.{name}"),
                            field=f"{field}.{name}",
                        )
            if field == "memory.terms":
                earlier_terms.add(name)
    _check_wave_formulas(card, env, where)
    if evaluate(card.supports, topology.as_env()):
        card.resolve(topology, phase="cold")
        card.resolve(topology, phase="warm")


def _check_wave_formulas(card: ModelCard, env: dict[str, float], where: str) -> None:
    """Unknown names in the wave terms and the hand-off fail on load, naming the field."""
    formulas = {
        f"cost.{table}.{k}": (t.seconds, t.when)
        for table in ("wave_terms", "step_terms")
        for k, t in getattr(card.cost, table).items()
    }
    if card.cost.handoff is not None:
        h = card.cost.handoff
        formulas["cost.handoff"] = (*(getattr(h, name) for name in _HANDOFF_FIELDS.values()), h.when)
        formulas["cost.handoff.head_parallel"] = (
            *(getattr(h, name) for name in _HEAD_PARALLEL_FIELDS.values()),
            h.head_parallel_when,
        )
    for field, group in formulas.items():
        for formula in group:
            if not isinstance(formula, str):
                continue
            unknown = names_in(formula) - set(env) - {"true", "false", "True", "False"}
            if unknown:
                raise InputError(
                    f"unknown name(s) {', '.join(sorted(unknown))} in {formula!r}",
                    file=where,
                    line=file_line(card.path, field),
                    field=field,
                )


def read_toml(path: str | Path, *, what: str) -> tuple[dict, str]:
    """Read a TOML file, turning I/O and syntax errors into :class:`InputError`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror}", file=str(path)) from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None) or _line_from_message(str(exc))
        raise InputError(f"invalid TOML: {exc}", file=str(path), line=line) from None


def _line_from_message(message: str) -> int | None:
    match = re.search(r"line (\d+)", message)
    return int(match.group(1)) if match else None
