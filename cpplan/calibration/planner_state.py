"""The learning half of :class:`cpplan.Planner`: checking an observation against the plan it was made
for, the settings a corrected plan is priced under, and the planner state file (header and log)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from cpplan.calibration.measurements import Measurement, file_sha256
from cpplan.calibration.online import (
    Observation,
    OnlineCalibration,
    Verdict,
    check_measurement,
    policy_from_dict,
    policy_to_dict,
    read_log,
)
from cpplan.errors import InputError
from cpplan.plans.result import PlanResult
from cpplan.spec.card import ModelCard
from cpplan.spec.correction import Correction
from cpplan.spec.profile import SolverProfile, migrated_profile
from cpplan.spec.quantities import QUANTITY_INDEX
from cpplan.spec.settings import Settings, topology_from_json
from cpplan.spec.shipped import data_dir
from cpplan.spec.topology import Topology

HEADER_FIELDS = ("model", "topology", "layers", "phase", "memory_bytes", "solver", "policy")


def observation_of(
    learning: OnlineCalibration,
    result: Any,
    *,
    step: int,
    wave: Any,
    rank: Any,
    peak_bytes: Any,
    seconds: Any,
) -> Observation:
    """The observation of wave ``wave`` on ``rank`` of ``result``, after checking that the result was
    planned for ``learning``'s context and that wave, rank and the measurement are valid."""
    if not isinstance(result, PlanResult):
        raise InputError(f"must be the PlanResult the wave ran, got {type(result).__name__}", field="result")
    card, mine = result.problem.settings.card_alone, learning.card
    if (card.name, card.topology, card.num_layers, card.phase) != (
        mine.name,
        mine.topology,
        mine.num_layers,
        mine.phase,
    ):
        raise InputError(
            f"the result was planned for {card.name} {card.topology} at {card.num_layers} layers "
            f"({card.phase}); this planner learns {mine.name} {mine.topology} at {mine.num_layers} "
            f"layers ({mine.phase})",
            field="result",
        )
    waves = result.plan.waves
    if not _index(wave) or not 0 <= wave < len(waves):
        raise InputError(f"must be a wave of the plan, 0 to {len(waves) - 1}, got {wave!r}", field="wave")
    quantities = np.array(waves[wave].quantities, dtype=np.float64)
    if not _index(rank) or not 0 <= rank < quantities.shape[0]:
        raise InputError(
            f"must be a CP rank of wave {wave}, 0 to {quantities.shape[0] - 1}, got {rank!r}", field="rank"
        )

    def fail(name: str, message: str) -> InputError:
        return InputError(message, field=name)

    check_measurement(peak_bytes, seconds, fail)
    return Observation(
        step=step,
        wave=int(wave),
        rank=int(rank),
        quantities=quantities,
        peak_bytes=None if peak_bytes is None else int(peak_bytes),
        seconds=None if seconds is None else float(seconds),
        handoff_s=waves[wave].handoff.seconds / result.problem.card.group_card(waves[wave].cp).time_scale,
    )


def _index(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def corrected_settings(settings: Settings, learning: OnlineCalibration | None) -> Settings:
    """``settings`` with the learned correction (unchanged while nothing is learned)."""
    if learning is None:
        return settings
    correction = learning.correction
    if correction.is_identity and settings.correction is None:
        return settings
    if settings.correction == correction:
        return settings
    return dataclasses.replace(settings, correction=correction)


def state_header(settings: Settings, profile: SolverProfile, learning: OnlineCalibration) -> dict[str, Any]:
    """The planner state's first line: the settings in their one JSON form (:meth:`Settings.to_json`,
    as the plan JSON writes them), the card's file when it is not a shipped one (``model_path``) and
    its digest, the solver profile and the trust policy: what :meth:`Planner.load` makes the planner
    again from."""
    model = settings.model
    return {
        **settings.to_json(),
        "model_path": _model_path(model),
        "card_sha256": file_sha256(model.path) if model.path and Path(model.path).is_file() else "",
        "solver": profile.model_dump(mode="json"),
        "policy": policy_to_dict(learning.policy),
    }


def _model_path(model: ModelCard) -> str | None:
    """``None`` for a shipped card (its name finds it), any other card's absolute path."""
    if model.path is None:
        raise InputError("a card built in code has no file to name in the planner state", field="model")
    shipped = Path(model.path).resolve().parent == data_dir("cpplan.cards").resolve()
    return None if shipped else str(Path(model.path).resolve())


def state_settings(header: dict[str, Any], path: str | Path) -> Settings:
    """The settings of a planner state's header (:meth:`Settings.from_json`; a state written before the
    one JSON form, with the topology as text and the raw layer count, reads the same), errors naming
    the file's first line."""
    return Settings.from_json(header, file=str(path), line=1)


def read_state(path: str | Path) -> tuple[dict[str, Any], list[Observation]]:
    """The planner state's header (checked: every field present; solver and policy validated) and its
    observations."""
    header, observations = read_log(path)
    missing = [k for k in HEADER_FIELDS if k not in header]
    if missing:
        raise InputError(f"the header lacks {', '.join(missing)}", file=str(path), line=1, field=missing[0])
    try:
        header["solver"] = SolverProfile.model_validate(migrated_profile(header["solver"]))
    except ValueError as exc:
        raise InputError(f"invalid solver profile: {exc}", file=str(path), line=1, field="solver") from None
    header["policy"] = policy_from_dict(header["policy"], file=str(path), line=1)
    return header, observations


def replay(learning: OnlineCalibration, observations: list[Observation], path: str | Path) -> None:
    """Feed logged observations to ``learning`` in order; one that does not fit the context names its
    line."""
    num_ranks = learning.card.topology.cp
    for observation in observations:
        if observation.quantities.shape[0] != num_ranks:
            raise InputError(
                f"the observation has {observation.quantities.shape[0]} ranks, the planner's topology "
                f"{num_ranks}",
                file=str(path),
                line=observation.line,
                field="quantities",
            )
        learning.observe(observation)


def settings_for_plan(
    data: dict[str, Any], settings: Settings, *, learned: str | Path | None = None, file: str | None = None
) -> Settings:
    """``settings`` corrected the way the plan says it was priced: with the saved planner state's
    correction when ``learned`` names one (its observations replayed with this card), else with the
    correction the plan JSON records (``correction``; none: the card alone)."""
    if learned is not None:
        return dataclasses.replace(settings, correction=learned_correction(learned, settings))
    recorded = data.get("correction")
    if recorded is None:
        return settings
    correction = Correction.from_dict(recorded, file=file)
    if not correction.matches(settings.card_alone):
        raise InputError(
            f"the plan's correction was learned for {correction.topology} at {correction.layers} layers "
            f"({correction.phase}), not for these settings",
            file=file,
            field="correction",
        )
    return dataclasses.replace(settings, correction=correction)


def learned_correction(path: str | Path, settings: Settings) -> Correction:
    """The correction a saved planner state implies for ``settings`` (which must be its context)."""
    header, observations = read_state(path)
    layers = settings.card_alone.num_layers
    theirs = (str(_topology(header, path)), header["layers"] or layers, header["phase"])
    if theirs != (str(settings.topology), layers, settings.phase):
        raise InputError(
            f"the planner state learned {theirs[0]} at {theirs[1]} layers ({theirs[2]}), not "
            f"{settings.topology} at {layers} layers ({settings.phase})",
            file=str(path),
            line=1,
            field="topology",
        )
    learning = OnlineCalibration(settings.card_alone, header["policy"])
    replay(learning, observations, path)
    return learning.correction


def observation_rows(path: str | Path) -> tuple[str, list[Measurement], list[Verdict]]:
    """A saved planner state as calibration rows: its model's name, one row per believed peak
    observation (priced on the observed rank's quantities), and the peaks its trust window rejected
    (left out, reported)."""
    header, observations = read_state(path)
    settings = state_settings({**header, "memory_bytes": max(int(header["memory_bytes"]), 1)}, path)
    model = settings.model
    learning = OnlineCalibration(settings.card_alone, header["policy"])
    replay(learning, observations, path)
    memory = learning.verdicts("memory")
    with_peak = [o for o in observations if o.peak_bytes is not None]
    rows = [
        _row(o, settings, str(path), model.name)
        for o, verdict in zip(with_peak, memory, strict=True)
        if verdict.trusted
    ]
    return model.name, rows, [v for v in memory if not v.trusted]


def _row(observation: Observation, settings: Settings, file: str, model: str) -> Measurement:
    quantities = observation.quantities[observation.rank : observation.rank + 1]
    tokens = max(int(quantities[0, QUANTITY_INDEX["tokens"]]), 1)
    return Measurement(
        line=observation.line or 0,
        file=file,
        model=model,
        layers=settings.card_alone.num_layers,
        topology=settings.topology,
        requests=1,
        total_tokens=tokens,
        phase=settings.phase,
        observed_min_bytes=observation.peak_bytes,
        observed_max_bytes=observation.peak_bytes,
        quantities=quantities,
        rank=observation.rank,
        label=f"step {observation.step} wave {observation.wave} rank {observation.rank}",
    )


def _topology(header: dict[str, Any], path: str | Path) -> Topology:
    try:
        return topology_from_json(header["topology"])
    except ValueError as exc:
        raise InputError(str(exc), file=str(path), line=1, field="topology") from None
