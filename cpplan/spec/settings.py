"""The five settings every planning problem is priced under: topology, model card, memory, depth, phase.

:class:`Settings` is the one place they are validated, and :meth:`Settings.from_user` the one place
user-level values (a card name or path, a size string, a topology string) are loaded and parsed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, get_args

import numpy as np

from cpplan.errors import InputError
from cpplan.spec.card import ModelCard, Phase, ResolvedCard, load_model
from cpplan.spec.correction import Correction
from cpplan.spec.topology import Topology
from cpplan.spec.units import MAX_BYTES, MEMORY_MEANING, parse_memory

_TOPOLOGY_WANTED = "a cpplan.Topology (or Topology.parse('cp=4'))"
_MODEL_WANTED = "a ModelCard, a shipped card name or a .toml path"


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Validated, immutable settings of a planning problem (everything but the workload).

    Build it directly from loaded values, or with :meth:`from_user` from what a user types.
    """

    topology: Topology = field(default_factory=Topology)
    """Parallel sizes (tp, cp, ep, etp, pp, dp); CP decides how many ranks share a wave's tokens."""

    model: ModelCard
    """The model card as loaded (geometry, memory floors, cost terms), before resolution."""

    memory_bytes: int
    """The bytes per rank free for the wave, above the weights, the optimizer state and anything else
    resident before it: the admission limit every rank's ``peak_bytes`` must meet."""

    num_layers: int | None = None
    """Run the card with this many layers, keeping its layer pattern (``None``: the card's own depth);
    the range is checked against the card when it is resolved."""

    phase: Phase = "cold"
    """Price a first call (``"cold"``) or a warm repeat (``"warm"``)."""

    correction: Correction | None = None
    """A learned correction of the card (:mod:`cpplan.calibration.online`): :attr:`card` applies it, so
    every reader prices with it; ``None``: the card alone."""

    def __post_init__(self) -> None:
        _require(self.topology, Topology, "topology", _TOPOLOGY_WANTED)
        _require(
            self.model, ModelCard, "model", "a ModelCard (or use Settings.from_user with a name or path)"
        )
        memory = self.memory_bytes
        whole = isinstance(memory, int | np.integer) and not isinstance(memory, bool)
        if not whole or not 0 < memory <= MAX_BYTES:
            raise InputError(
                f"must be a positive number of bytes up to 2^63 - 1, got {memory!r} ({MEMORY_MEANING})",
                field="memory",
            )
        object.__setattr__(self, "memory_bytes", int(memory))
        if self.phase not in get_args(Phase):
            raise InputError(f"must be 'cold' or 'warm', got {self.phase!r}", field="phase")
        layers = self.num_layers
        if layers is not None:
            if isinstance(layers, bool) or not isinstance(layers, int | np.integer):
                raise InputError(f"must be a whole number of layers, got {layers!r}", field="layers")
            object.__setattr__(self, "num_layers", int(layers))
        _require(self.correction, Correction | None, "correction", "a cpplan Correction or None")

    @classmethod
    def from_user(
        cls,
        *,
        topology: Topology | str | None = None,
        model: ModelCard | str | Path,
        memory_bytes: int | str,
        num_layers: int | None = None,
        phase: Phase = "cold",
    ) -> Settings:
        """Settings from user-level values: a :class:`Topology`, its text (``"cp=4"``) or ``None`` (all
        sizes 1); a :class:`ModelCard`, a shipped card name or a ``.toml`` path; a number of bytes or a
        size string (``"80GiB"``). Every error is an :class:`InputError` naming the field."""
        if isinstance(topology, str):
            topology = Topology.parse(topology)
        _require(topology, Topology | None, "topology", _TOPOLOGY_WANTED)
        _require(model, ModelCard | str | Path, "model", _MODEL_WANTED)
        card = model if isinstance(model, ModelCard) else load_model(model)
        memory = parse_memory(memory_bytes) if isinstance(memory_bytes, str) else memory_bytes
        return cls(
            topology=topology or Topology(),
            model=card,
            memory_bytes=memory,
            num_layers=num_layers,
            phase=phase,
        )

    @cached_property
    def card(self) -> ResolvedCard:
        """The card resolved for the topology, depth and phase, with :attr:`correction` applied: what
        every reader prices with (computed once per settings object). Under dynamic CP it holds the card
        of every group size (corrected alike), so a size the card cannot price fails here."""
        return self.card_alone if self.correction is None else self.correction.apply(self.card_alone)

    @cached_property
    def card_alone(self) -> ResolvedCard:
        """The card resolved for the topology, depth and phase, without any learned correction (what
        ``card_peak_bytes`` reports)."""
        return self.model.resolve(self.topology, num_layers=self.num_layers, phase=self.phase)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("card", None)  # resolved again where unpickled, not shipped
        state.pop("card_alone", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


def _require(value: Any, expected: Any, field: str, wanted: str) -> None:
    if not isinstance(value, expected):
        raise InputError(f"must be {wanted}, got {type(value).__name__}", field=field)
