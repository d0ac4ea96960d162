"""Calibration: fit a card's calibrated coefficients to measured peaks as a safe, tight upper envelope.

Every row is priced through the real pipeline (:func:`cpplan.calibration.measurements.predict_row`), so a
row's prediction is the ``peak_bytes`` that ``cpplan plan`` reports for that workload. The coefficients enter
the card's formulas linearly (checked, not assumed), so each rank's envelope is affine in them: ``raw[i, r,
e](c) = A[i, r, e] + sum_k B[i, k, r, e] * c_k``. The linear program (GLOP) is

    minimize    sum_i t_i / observed_i
    subject to  t_i >= safety * raw[i, r, e](c)              for every row i, rank r, envelope e
                safety * raw[i, anchor_i](c) >= observed_i   for every row i
                c >= 0

``t_i`` is then the predicted peak of row i (a max over ranks and envelopes); the anchor constraint
makes one (rank, envelope) of each row reach the observed maximum, which makes the prediction safe
whatever the anchor. Anchors start where the prediction is most sensitive to the coefficients and are
moved to the binding (rank, envelope) of the last solution until they stop changing.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from ortools.linear_solver import pywraplp

from cpplan.calibration.measurements import GB, Measurement, file_sha256, row_quantities
from cpplan.errors import InputError
from cpplan.pricing.evaluator import envelope_bytes, price
from cpplan.spec.card import Calibration, CalibrationRow, ModelCard, load_card_file
from cpplan.version import cpplan_version

DEFAULT_MAX_RATIO = 1.15
_MAX_ANCHOR_ROUNDS = 10
_SIGNIFICANT_DIGITS = 6


@dataclass(frozen=True, kw_only=True)
class RowFit:
    """A measured row and the fitted card's prediction for it (``peak_bytes``, safety included)."""

    row: Measurement
    predicted_bytes: int
    rank: int
    envelope: str

    @property
    def ratio(self) -> float:
        """Predicted over observed maximum."""
        return self.predicted_bytes / self.row.observed_max_bytes


@dataclass(frozen=True, kw_only=True)
class CalibrationFit:
    """The outcome of :func:`calibrate`: the calibrated card and every row's prediction."""

    card: ModelCard
    rows: tuple[RowFit, ...]
    skipped: tuple[Measurement, ...]
    merged: tuple[Measurement, ...]

    @property
    def coefficients(self) -> dict[str, float]:
        """The card's calibrated coefficients after the fit."""
        assert self.card.calibration is not None
        return dict(self.card.calibration.coefficients)


def matches(model: ModelCard, name: str) -> bool:
    """Whether a row's model name denotes ``model`` (its name, display name or an alias)."""
    names = {model.name, model.display_name, *model.aliases}
    return name.lower() in {n.lower() for n in names if n}


def calibrate(
    model: ModelCard,
    rows: Sequence[Measurement],
    *,
    source: str,
    fit: Sequence[str] | None = None,
    max_ratio: float = DEFAULT_MAX_RATIO,
    date: str | None = None,
) -> CalibrationFit:
    """Fit ``fit`` (default: every coefficient of the card's ``[calibration]``) to ``rows``.

    Rows of other models are skipped; repeats (equal conditions) are merged to their largest observed
    maximum. Refuses (:class:`InputError`) too few rows, a coefficient no row constrains, a row no
    coefficient can raise to its observation, and rows that contradict each other (the safe fit
    over-predicts some row by more than ``max_ratio``).
    """
    coefficients = dict(model.calibration.coefficients) if model.calibration else {}
    names = _names_to_fit(model, coefficients, fit, max_ratio)
    own = [r for r in rows if matches(model, r.model)]
    skipped = tuple(r for r in rows if not matches(model, r.model))
    used, merged = _merge_repeats(own)
    _check_enough_rows(model, used, names, source)
    zero = {**coefficients, **dict.fromkeys(names, 0.0)}
    base, slopes = _linearize(model, zero, names, used, source)
    values = _solve(base, slopes, [r.observed_max_bytes for r in used], model.memory.safety)
    fitted = {**coefficients, **{n: _round_up(v) for n, v in zip(names, values, strict=True)}}
    card = _with(model, fitted)
    results = [_row_fit(card, row, source) for row in used]
    assert all(r.predicted_bytes >= r.row.observed_max_bytes for r in results), results
    _check_tight(results, max_ratio, source)
    calibration = _record(model, source, fitted, names, results, date)
    return CalibrationFit(
        card=model.model_copy(update={"calibration": calibration}),
        rows=tuple(results),
        skipped=skipped,
        merged=merged,
    )


def _names_to_fit(
    model: ModelCard, coefficients: dict[str, float], fit: Sequence[str] | None, max_ratio: float
) -> list[str]:
    """The coefficients to fit (all of the card's when ``fit`` is None), checked against the card."""
    names = list(coefficients) if fit is None else list(dict.fromkeys(fit))
    if not names:
        raise InputError(
            "the card has no calibrated coefficients to fit (add them under [calibration].coefficients)",
            file=model.path,
            field="calibration.coefficients",
        )
    unknown = [n for n in names if n not in coefficients]
    if unknown:
        raise InputError(
            f"unknown coefficient(s) {', '.join(unknown)}; the card has: {', '.join(coefficients) or 'none'}",
            field="fit",
        )
    if not max_ratio >= 1.0:
        raise InputError(f"must be at least 1, got {max_ratio}", field="max_ratio")
    return names


def _check_enough_rows(model: ModelCard, used: list[Measurement], names: list[str], source: str) -> None:
    if len(used) < len(names):
        raise InputError(
            f"{len(used)} distinct row(s) of model {model.name!r} cannot fit {len(names)} coefficient(s) "
            f"({', '.join(names)}): need at least {len(names)}",
            file=source,
            field="rows",
        )


def _linearize(
    model: ModelCard, zero: dict[str, float], names: list[str], used: list[Measurement], source: str
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each row's envelopes with the fitted coefficients at zero, and their slopes in the coefficients;
    refuses a coefficient no row constrains and a row no coefficient can raise to its observation."""
    waves = [row_quantities(_with(model, zero), row, source=source) for row in used]
    base = [_raw(_with(model, zero), row, wave) for row, wave in zip(used, waves, strict=True)]
    slopes = [_slopes(model, zero, names, row, wave, source) for row, wave in zip(used, waves, strict=True)]
    _check_constrained(names, slopes, source)
    safety = model.memory.safety
    for row, a, b in zip(used, base, slopes, strict=True):
        if not b.any() and safety * a.max() < row.observed_max_bytes:
            raise InputError(
                f"observed {row.observed_max_bytes / GB:.2f} GB but the card predicts "
                f"{safety * a.max() / GB:.2f} GB and none of {', '.join(names)} acts on this row "
                f"({row.phase}, {row.topology}, {row.layers} layers)",
                file=row.file or source,
                line=row.line,
                field=row.observed_field,
            )
    return base, slopes


def _row_fit(card: ModelCard, row: Measurement, source: str) -> RowFit:
    """The fitted card's prediction for a row: its peak, busiest rank and that rank's binding envelope."""
    resolved = card.resolve(row.topology, num_layers=row.layers, phase=row.phase)
    prices = price(resolved, row_quantities(card, row, source=source))
    rank = int(np.argmax(prices.peak_bytes))
    return RowFit(
        row=row,
        predicted_bytes=int(prices.peak_bytes[rank]),
        rank=row.rank if row.rank is not None else rank,
        envelope=resolved.envelope_names[int(prices.envelope[rank])],
    )


def _record(
    model: ModelCard,
    source: str,
    fitted: dict[str, float],
    names: list[str],
    results: list[RowFit],
    date: str | None,
) -> Calibration:
    """The card's new ``[calibration]``: provenance, method, coefficients and every row's prediction."""
    return Calibration(
        source=source,
        source_sha256=", ".join(file_sha256(p) if Path(p).is_file() else "" for p in source.split(", ")),
        hardware=model.hardware.name,
        date=date or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        method=_METHOD,
        tool=f"cpplan {cpplan_version()} calibrate",
        notes=(model.calibration.notes if model.calibration else ""),
        coefficients=fitted,
        fitted=tuple(names),
        rows=tuple(
            CalibrationRow(
                line=r.row.line,
                layers=r.row.layers,
                topology=str(r.row.topology),
                phase=r.row.phase,
                requests=r.row.requests,
                total_tokens=r.row.total_tokens,
                observed_max_bytes=r.row.observed_max_bytes,
                predicted_bytes=r.predicted_bytes,
                ratio=round(r.ratio, 6),
            )
            for r in results
        ),
    )


_METHOD = (
    "linear program (OR-Tools GLOP): minimize the sum of predicted/observed over rows subject to "
    "every row's predicted peak_bytes (safety included) >= its observed maximum and every "
    "coefficient >= 0; rows priced through Problem.build and price_wave (one wave, full "
    "sharing, the planner's CP ownership); coefficients rounded up to "
    f"{_SIGNIFICANT_DIGITS} significant digits"
)


def _with(model: ModelCard, coefficients: dict[str, float]) -> ModelCard:
    calibration = model.calibration or Calibration()
    return model.model_copy(
        update={"calibration": calibration.model_copy(update={"coefficients": dict(coefficients)})}
    )


def _merge_repeats(rows: Sequence[Measurement]) -> tuple[list[Measurement], tuple[Measurement, ...]]:
    """One row per set of conditions: the one with the largest observed maximum (first on ties)."""
    best: dict[tuple, Measurement] = {}
    for row in rows:
        kept = best.get(row.conditions)
        if kept is None or row.observed_max_bytes > kept.observed_max_bytes:
            best[row.conditions] = row
    used = sorted(best.values(), key=lambda r: r.line)
    merged = tuple(r for r in rows if best[r.conditions] is not r)
    return used, merged


def _raw(card: ModelCard, row: Measurement, quantities: np.ndarray) -> np.ndarray:
    """Every rank's every envelope before the safety factor: shape (ranks, envelopes)."""
    return envelope_bytes(card.resolve(row.topology, num_layers=row.layers, phase=row.phase), quantities)


def _slopes(
    model: ModelCard,
    zero: dict[str, float],
    names: list[str],
    row: Measurement,
    wave: np.ndarray,
    source: str,
) -> np.ndarray:
    """Bytes per unit of each coefficient in every rank's envelopes, shape (coefficients, ranks,
    envelopes), after checking that the coefficients enter linearly (double one, add all)."""
    a = _raw(_with(model, zero), row, wave)
    one = [_raw(_with(model, {**zero, n: 1.0}), row, wave) - a for n in names]
    slopes = np.array(one)
    doubled = [_raw(_with(model, {**zero, n: 2.0}), row, wave) - a for n in names]
    together = _raw(_with(model, {**zero, **dict.fromkeys(names, 1.0)}), row, wave) - a
    tolerance = 1e-9 * max(float(np.abs(a).max()), 1.0)
    for k, name in enumerate(names):
        if np.abs(doubled[k] - 2 * slopes[k]).max() > tolerance:
            raise InputError(
                f"coefficient {name!r} does not enter the card's formulas linearly; calibrate fits only "
                "coefficients that multiply bytes",
                file=model.path,
                field=f"calibration.coefficients.{name}",
            )
    if np.abs(together - slopes.sum(axis=0)).max() > tolerance:
        raise InputError(
            f"coefficients {', '.join(names)} interact in the card's formulas (not additive)",
            file=model.path,
            field="calibration.coefficients",
        )
    if (slopes < -tolerance).any():
        raise InputError(
            "a calibrated coefficient lowers a floor; calibrated bytes must be non-negative",
            file=model.path,
            field="calibration.coefficients",
        )
    return np.maximum(slopes, 0.0)


def _check_constrained(names: list[str], slopes: list[np.ndarray], source: str) -> None:
    for k, name in enumerate(names):
        if not any(b[k].any() for b in slopes):
            raise InputError(
                f"no row constrains coefficient {name!r} (it acts on none of the rows' ranks and "
                "envelopes, e.g. a cold-phase coefficient with only warm rows); add such rows or leave "
                "it out of --fit",
                file=source,
                field="rows",
            )


def _solve(
    base: list[np.ndarray], slopes: list[np.ndarray], observed: list[int], safety: float
) -> list[float]:
    """The LP of the module docstring, in GB, iterating anchors to a fixed point; the best solution."""
    num_coefficients = slopes[0].shape[0]
    anchors = [
        np.unravel_index(int(np.argmax(a + b.sum(axis=0))), a.shape)
        for a, b in zip(base, slopes, strict=True)
    ]
    best: tuple[float, list[float]] | None = None
    for _ in range(_MAX_ANCHOR_ROUNDS):
        solution = _solve_anchored(base, slopes, observed, safety, anchors, num_coefficients)
        if solution is None:
            break
        objective, values = solution
        if best is None or objective < best[0]:
            best = (objective, values)
        moved = [
            np.unravel_index(int(np.argmax(a + np.tensordot(values, b, axes=1))), a.shape)
            for a, b in zip(base, slopes, strict=True)
        ]
        if moved == anchors:
            break
        anchors = moved
    if best is None:
        raise InputError("the rows admit no safe fit (the linear program is infeasible)", field="rows")
    return best[1]


def _solve_anchored(base, slopes, observed, safety, anchors, num_coefficients):
    solver = pywraplp.Solver.CreateSolver("GLOP")
    assert solver is not None
    c = [solver.NumVar(0.0, solver.infinity(), f"c{k}") for k in range(num_coefficients)]
    objective = solver.Objective()
    for i, (a, b, obs) in enumerate(zip(base, slopes, observed, strict=True)):
        t = solver.NumVar(0.0, solver.infinity(), f"t{i}")
        objective.SetCoefficient(t, GB / obs)
        for position in np.ndindex(a.shape):
            row = solver.Constraint(safety * a[position] / GB, solver.infinity())
            row.SetCoefficient(t, 1.0)
            for k in range(num_coefficients):
                row.SetCoefficient(c[k], -safety * b[(k, *position)] / GB)
        anchor = solver.Constraint((obs - safety * a[anchors[i]]) / GB, solver.infinity())
        for k in range(num_coefficients):
            anchor.SetCoefficient(c[k], safety * b[(k, *anchors[i])] / GB)
    objective.SetMinimization()
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        return None
    return objective.Value(), [max(v.solution_value(), 0.0) for v in c]


def _round_up(value: float) -> float:
    """Round up to a few significant digits (the TOML stays readable, the fit stays safe)."""
    if value <= 0:
        return 0.0
    step = 10.0 ** (math.floor(math.log10(value)) - _SIGNIFICANT_DIGITS + 1)
    return float(f"{math.ceil(value / step * (1 - 1e-12)) * step:.{_SIGNIFICANT_DIGITS + 2}g}")


def _check_tight(results: list[RowFit], max_ratio: float, source: str) -> None:
    loose = [r for r in results if r.ratio > max_ratio]
    if not loose:
        return
    worst = max(loose, key=lambda r: r.ratio)
    tight = [r for r in results if r.ratio <= min(max_ratio, 1.0 + 1e-4)] or [
        min(results, key=lambda r: r.ratio)
    ]
    raise InputError(
        f"rows contradict each other: keeping every row at or above its observed maximum predicts "
        f"{worst.predicted_bytes / GB:.2f} GB here against "
        f"{worst.row.observed_max_bytes / GB:.2f} GB observed "
        f"({worst.ratio:.3f}x, over the {max_ratio:.2f}x allowed), because of line(s) "
        f"{', '.join(str(r.row.line) for r in tight)} held at their observations",
        file=worst.row.file or source,
        line=worst.row.line,
        field=worst.row.observed_field,
    )


# ------------------------------------------------------------------------------------------- writing

_CALIBRATION_HEADER = re.compile(r"^\s*\[\[?\s*calibration\s*(\.|\]|$)")
_ANY_HEADER = re.compile(r"^\s*\[")


def render_calibration(calibration: Calibration) -> str:
    """The ``[calibration]`` section as TOML text."""
    lines = ["# Written by `cpplan calibrate`: provenance and fitted coefficients.", "[calibration]"]
    for key in ("source", "source_sha256", "hardware", "date", "method", "tool", "notes"):
        lines.append(f"{key} = {json.dumps(getattr(calibration, key))}")
    lines.append(f"fitted = [{', '.join(json.dumps(n) for n in calibration.fitted)}]")
    pairs = ", ".join(f"{name} = {_toml_float(v)}" for name, v in calibration.coefficients.items())
    lines.append(f"coefficients = {{ {pairs} }}")
    for row in calibration.rows:
        lines.append("")
        lines.append("[[calibration.rows]]")
        for key, value in row.model_dump().items():
            text = (
                json.dumps(value)
                if isinstance(value, str)
                else (_toml_float(value) if isinstance(value, float) else str(value))
            )
            lines.append(f"{key} = {text}")
    return "\n".join(lines) + "\n"


def _toml_float(value: float) -> str:
    text = repr(float(value))
    return text if any(ch in text for ch in ".e") else text + ".0"


def replace_calibration(card_text: str, section: str) -> str:
    """``card_text`` with its calibration tables (and the comment line written with them) replaced by
    ``section``, appended at the end."""
    kept: list[str] = []
    skipping = False
    for line in card_text.splitlines():
        if _CALIBRATION_HEADER.match(line):
            skipping = True
            if kept and kept[-1].startswith("# Written by `cpplan calibrate`"):
                kept.pop()
            continue
        if skipping and _ANY_HEADER.match(line):
            skipping = False
        if not skipping:
            kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    return "\n".join(kept) + "\n\n" + section


def write_card(fit: CalibrationFit, output: str | Path) -> ModelCard:
    """Write the calibrated card (the source card's text with a new calibration section) to
    ``output`` atomically, and load it back (validating it)."""
    model = fit.card
    assert model.calibration is not None
    if model.path is None or not Path(model.path).is_file():
        raise InputError("the model card has no source file to rewrite", field="model")
    text = replace_calibration(
        Path(model.path).read_text(encoding="utf-8"), render_calibration(model.calibration)
    )
    output = Path(output)
    tmp = output.with_name(output.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(output)
    except OSError as exc:
        raise InputError(f"cannot write the card: {exc.strerror}", file=str(output)) from None
    return load_card_file(output)
