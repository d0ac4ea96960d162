"""A learned correction of a resolved card: the one way observations change what every reader prices.

A :class:`Correction` scales a :class:`~cpplan.spec.card.ResolvedCard` for one context (model, topology,
depth, phase): every memory floor (each envelope's static bytes and each term's bytes per unit) by
``memory_scale`` and every time term (and the per-wave overhead) by ``time_scale``. Because a rank's
peak is ``safety × max_e(static_e + Σ terms)`` and a wave's time is ``max_r Σ terms + overhead``, both
scale exactly: the corrected peak is ``memory_scale ×`` the card's (to the byte's rounding), the corrected
time ``time_scale ×`` the card's. :meth:`Settings.card <cpplan.spec.settings.Settings.card>` applies it,
so the numpy evaluator, the CP-SAT rows and the independent verifier all read the same corrected numbers;
the plan JSON records it (``correction``) so ``cpplan verify`` re-checks a corrected plan against what
it budgeted against. The scales are learned by :mod:`cpplan.calibration.online`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from cpplan.errors import InputError
from cpplan.spec.card import Phase, ResolvedCard
from cpplan.spec.topology import Topology

_FIELDS = ("model", "topology", "layers", "phase", "memory_scale", "time_scale")


@dataclass(frozen=True, kw_only=True)
class Correction:
    """Scales for one context's resolved card, and how many believed observations they rest on."""

    model: str
    """The card's name."""

    topology: str
    """The topology as text (``tp=1,cp=4,ep=1,etp=1,pp=1,dp=1``)."""

    layers: int
    """The depth the card is resolved at."""

    phase: Phase
    """``cold`` or ``warm``."""

    memory_scale: float = 1.0
    """Every memory floor is multiplied by this (1: the card alone)."""

    time_scale: float = 1.0
    """Every time term and the wave overhead are multiplied by this (1: the card alone)."""

    memory_observations: int = 0
    """Believed peak observations the memory scale was learned from."""

    time_observations: int = 0
    """Believed time observations the time scale was learned from."""

    def __post_init__(self) -> None:
        for name in ("memory_scale", "time_scale"):
            check_scale(getattr(self, name), name)

    @property
    def is_identity(self) -> bool:
        """Whether applying it changes nothing."""
        return self.memory_scale == 1.0 and self.time_scale == 1.0

    def matches(self, card: ResolvedCard) -> bool:
        """Whether this correction was learned for ``card``'s context."""
        return (self.model, self.topology, self.layers, self.phase) == (
            card.name,
            str(card.topology),
            card.num_layers,
            card.phase,
        )

    def apply(self, card: ResolvedCard) -> ResolvedCard:
        """``card`` with every memory floor scaled by :attr:`memory_scale` and every time term and the
        wave overhead by :attr:`time_scale`. Refuses a card of another context."""
        if not self.matches(card):
            raise InputError(
                f"the correction was learned for {self.model} {self.topology} at {self.layers} layers "
                f"({self.phase}), not for {card.name} {card.topology} at {card.num_layers} layers "
                f"({card.phase})",
                field="correction",
            )
        if self.is_identity:
            return card
        return card.scaled(float(self.memory_scale), float(self.time_scale))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form recorded in plan JSON and planner state."""
        return {
            "model": self.model,
            "topology": self.topology,
            "layers": self.layers,
            "phase": self.phase,
            "memory_scale": self.memory_scale,
            "time_scale": self.time_scale,
            "memory_observations": self.memory_observations,
            "time_observations": self.time_observations,
        }

    @classmethod
    def from_dict(cls, data: Any, *, file: str | None = None) -> Correction:
        """Read :meth:`to_dict`'s form back; errors name the field (``correction.memory_scale``)."""
        if not isinstance(data, dict):
            raise InputError("must be an object", file=file, field="correction")
        missing = [k for k in _FIELDS if k not in data]
        if missing:
            raise InputError(f"missing {', '.join(missing)}", file=file, field="correction")
        try:
            topology = str(Topology.parse(str(data["topology"])))
        except (InputError, ValueError) as exc:
            raise InputError(str(exc), file=file, field="correction.topology") from None
        layers, phase = data["layers"], data["phase"]
        if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
            raise InputError(
                f"must be a positive integer, got {layers!r}", file=file, field="correction.layers"
            )
        if phase not in ("cold", "warm"):
            raise InputError(f"must be 'cold' or 'warm', got {phase!r}", file=file, field="correction.phase")
        for name in ("memory_scale", "time_scale"):
            check_scale(data[name], name, file=file)
        return cls(
            model=str(data["model"]),
            topology=topology,
            layers=layers,
            phase=phase,
            memory_scale=data["memory_scale"],
            time_scale=data["time_scale"],
            memory_observations=_count(data, "memory_observations", file),
            time_observations=_count(data, "time_observations", file),
        )


def check_scale(value: object, name: str, *, file: str | None = None) -> None:
    """Refuse a scale that is not a positive finite number, naming ``correction.<name>``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(f"must be a finite number, got {value!r}", file=file, field=f"correction.{name}")
    if value <= 0:
        raise InputError(f"must be positive, got {value!r}", file=file, field=f"correction.{name}")


def _count(data: dict[str, Any], name: str, file: str | None) -> int:
    value = data.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(
            f"must be a non-negative integer, got {value!r}", file=file, field=f"correction.{name}"
        )
    return value


def identity_for(card: ResolvedCard) -> Correction:
    """The correction that changes nothing, for ``card``'s context."""
    return Correction(model=card.name, topology=str(card.topology), layers=card.num_layers, phase=card.phase)


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array
