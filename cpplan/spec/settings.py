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

JSON_KEYS = {
    "model": "model",
    "topology": "topology",
    "memory_bytes": "memory_bytes",
    "num_layers": "layers",
    "phase": "phase",
}
"""Each setting's key in the settings' one JSON form (:meth:`Settings.to_json`): the plan JSON's header,
the planner state's header and the pack run's configuration."""
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
        object.__setattr__(self, "memory_bytes", _whole_bytes(self.memory_bytes))
        if self.phase not in get_args(Phase):
            raise InputError(f"must be 'cold' or 'warm', got {self.phase!r}", field="phase")
        layers = self.num_layers
        if layers is not None:
            if isinstance(layers, bool) or not isinstance(layers, int | np.integer):
                raise InputError(f"must be a whole number of layers, got {layers!r}", field="layers")
            object.__setattr__(self, "num_layers", int(layers))
        _require(self.correction, Correction | None, "correction", "a cpplan Correction or None")
        self.model.check_supported(self.topology)

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

    def to_json(self) -> dict[str, Any]:
        """The settings' one JSON form, written by every writer (plan JSON, planner state, pack run):
        the card's name, the resolved number of layers, the phase, the topology as an object of sizes,
        the per-rank memory budget in bytes and the learned correction (``None``: the card alone).
        :meth:`from_json` reads it back."""
        return {
            "model": self.model.name,
            "layers": self.card_alone.num_layers,
            "phase": self.phase,
            "topology": topology_to_json(self.topology),
            "memory_bytes": self.memory_bytes,
            "correction": None if self.correction is None else self.correction.to_dict(),
        }

    @classmethod
    def from_json(
        cls,
        data: dict[str, Any],
        *,
        model: ModelCard | None = None,
        file: str | None = None,
        line: int | None = None,
    ) -> Settings:
        """The settings :meth:`to_json` wrote (the card loaded by ``model_path`` when given, else by
        name; ``model``: a card already loaded). Also reads the planner state written before there was
        one form: the topology as text, ``layers`` ``None`` for the card's own depth and ``model`` a
        card's path. Errors are :class:`InputError` naming ``file``, ``line`` and the field."""
        try:
            missing = [key for key in JSON_KEYS.values() if key not in data]
            if missing:
                raise InputError(f"lacks {', '.join(missing)}", field=missing[0])
            card = model or load_model(data.get("model_path") or data["model"])
            recorded = data.get("correction")
            return cls(
                topology=topology_from_json(data["topology"]),
                model=card,
                memory_bytes=data["memory_bytes"],
                num_layers=data["layers"],
                phase=data["phase"],
                correction=None if recorded is None else Correction.from_dict(recorded, file=file),
            )
        except InputError as exc:
            if exc.file is not None or file is None:
                raise
            named = f"field '{exc.field}': "
            message = str(exc).removeprefix(named) if exc.field else str(exc)
            raise InputError(message, file=file, line=line, field=exc.field) from None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("card", None)  # resolved again where unpickled, not shipped
        state.pop("card_alone", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


def topology_to_json(topology: Topology) -> dict[str, Any]:
    """A topology's JSON form: its sizes and ``dynamic_cp``, and ``equal_waves: true`` only when every
    GPU of the pool runs the same number of waves (so a plan without that requirement reads as plans
    always did)."""
    data = topology.model_dump(exclude={"equal_waves"})
    return {**data, "equal_waves": True} if topology.needs_equal_waves else data


def topology_from_json(value: Any) -> Topology:
    """A topology's JSON form: an object of sizes (:meth:`Settings.to_json`; without ``equal_waves`` it
    was made without equal waves), or the text form older planner states wrote (``"tp=1,cp=2,..."``);
    an :class:`InputError` naming ``topology`` otherwise."""
    if isinstance(value, str):
        return Topology.parse(value)
    if not isinstance(value, dict):
        raise InputError(f"must be an object of parallel sizes, got {type(value).__name__}", field="topology")
    try:
        return Topology.create(**{"equal_waves": False, **value})
    except (TypeError, ValueError) as exc:
        raise InputError(str(exc), field="topology") from None


def _whole_bytes(memory: Any) -> int:
    """``memory_bytes`` as an ``int``: a whole, positive number of bytes up to 2^63 - 1 (a numpy integer
    too), or an :class:`InputError` saying which of these it is not."""
    whole = isinstance(memory, int | np.integer) and not isinstance(memory, bool)
    if isinstance(memory, float | np.floating):
        raise InputError(
            f"must be a whole number of bytes (an int) or a size string such as '80GiB', got the float "
            f"{memory!r} ({MEMORY_MEANING})",
            field="memory",
        )
    if not whole or not 0 < memory <= MAX_BYTES:
        raise InputError(
            f"must be a whole, positive number of bytes up to 2^63 - 1, got {memory!r} ({MEMORY_MEANING})",
            field="memory",
        )
    return int(memory)


def _require(value: Any, expected: Any, field: str, wanted: str) -> None:
    if not isinstance(value, expected):
        raise InputError(f"must be {wanted}, got {type(value).__name__}", field=field)
