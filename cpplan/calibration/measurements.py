"""Measured per-rank peaks (the calibration CSV), the workload each row describes, and its prediction.

A row names a model, a truncated depth, a topology, a phase and a workload shape (``requests`` unique
requests totalling ``total_tokens`` tokens, run as one wave). :func:`predict` prices that workload the
way ``cpplan plan`` does: :meth:`Problem.build`, the full-sharing packing and the planner's own choice
of CP ownership (:func:`price_wave`), with a budget large enough that the whole workload is one wave.
"""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cpplan.errors import InputError
from cpplan.pricing.ownership import chunk_stats, contiguous_split
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import WavePlan, price_wave
from cpplan.spec.card import ModelCard, Phase
from cpplan.spec.settings import Settings
from cpplan.spec.topology import AXES, Topology
from cpplan.spec.workload import Item, Request, Workload

GB = 10**9
COLUMNS = (
    "model",
    "layers",
    *AXES,
    "requests",
    "total_tokens",
    "phase",
    "observed_min_gb",
    "observed_max_gb",
)
UNBOUNDED_BYTES = 2**62
_VOCAB = 150_000


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """One measured row: the conditions and the observed per-rank peak range (bytes above the
    pre-wave baseline)."""

    line: int
    model: str
    layers: int
    topology: Topology
    requests: int
    total_tokens: int
    phase: Phase
    observed_min_bytes: int
    observed_max_bytes: int
    file: str | None = None
    """The file the row was read from (errors name it)."""
    quantities: np.ndarray | None = field(default=None, compare=False)
    """An observed wave's local quantities on the observed rank, shape (1, quantities): the row is priced
    on them (an observation of a planner's log) instead of on ``requests`` unique requests."""
    rank: int | None = None
    """The observed rank of an observation row."""
    label: str = ""
    """Where an observation row comes from (``step 3 wave 0 rank 1``)."""

    @property
    def conditions(self) -> tuple:
        """Everything but the observation: rows with equal conditions are repeats (an observation row
        repeats nothing)."""
        key = (self.model.lower(), self.layers, self.topology, self.requests, self.total_tokens, self.phase)
        return key if self.quantities is None else (*key, self.file, self.line)

    @property
    def observed_field(self) -> str:
        """The field that holds the observation in the row's file."""
        return "observed_max_gb" if self.quantities is None else "peak_bytes"


def read_measurements(path: str | Path) -> list[Measurement]:
    """Read a measurements CSV (``#`` lines are comments). Errors name the file, line and column."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read measurements: {exc.strerror}", file=str(path)) from None
    numbered = [
        (n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip() and line[0] != "#"
    ]
    if not numbered:
        raise InputError("no header and no rows", file=str(path))
    header_line, header = numbered[0]
    columns = [c.strip() for c in next(csv.reader([header]))]
    missing = [c for c in COLUMNS if c not in columns and c != "observed_min_gb"]
    if missing:
        raise InputError(
            f"missing column(s) {', '.join(missing)}; expected {','.join(COLUMNS)}",
            file=str(path),
            line=header_line,
            field=missing[0],
        )
    rows = []
    for number, line in numbered[1:]:
        values = [v.strip() for v in next(csv.reader([line]))]
        if len(values) != len(columns):
            raise InputError(
                f"has {len(values)} values for {len(columns)} columns", file=str(path), line=number
            )
        rows.append(_row(dict(zip(columns, values, strict=True)), path, number))
    return rows


def _row(record: dict[str, str], path: Path, line: int) -> Measurement:
    def fail(name: str, message: str) -> InputError:
        return InputError(message, file=str(path), line=line, field=name)

    def integer(name: str, low: int = 1) -> int:
        try:
            value = int(record[name])
        except ValueError:
            raise fail(name, f"{record[name]!r} is not an integer") from None
        if value < low:
            raise fail(name, f"must be at least {low}, got {value}")
        return value

    def gigabytes(name: str) -> int:
        try:
            value = float(record[name])
        except ValueError:
            raise fail(name, f"{record[name]!r} is not a number of GB") from None
        if not np.isfinite(value) or value <= 0:
            raise fail(name, f"must be a positive number of GB, got {record[name]!r}")
        return round(value * GB)

    sizes = {axis: integer(axis) for axis in AXES}
    try:
        topology = Topology(**sizes)
    except ValueError as exc:
        raise fail("tp", f"invalid topology {sizes}: {exc}") from None
    phase = record["phase"].lower()
    if phase not in ("cold", "warm"):
        raise fail("phase", f"must be 'cold' or 'warm', got {record['phase']!r}")
    observed_max = gigabytes("observed_max_gb")
    observed_min = gigabytes("observed_min_gb") if record.get("observed_min_gb") else observed_max
    if observed_min > observed_max:
        raise fail("observed_min_gb", f"{record['observed_min_gb']} is above observed_max_gb")
    requests = integer("requests")
    total = integer("total_tokens")
    if total < requests:
        raise fail("total_tokens", f"{total} tokens cannot make {requests} non-empty requests")
    if not record["model"]:
        raise fail("model", "must name the model")
    return Measurement(
        line=line,
        file=str(path),
        model=record["model"],
        layers=integer("layers"),
        topology=topology,
        requests=requests,
        total_tokens=total,
        phase=phase,  # type: ignore[arg-type]
        observed_min_bytes=observed_min,
        observed_max_bytes=observed_max,
    )


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes (calibration provenance)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def unique_workload(num_requests: int, total_tokens: int, seed: int = 0) -> Workload:
    """``num_requests`` requests with no shared tokens, ``total_tokens`` in all, near-equal lengths
    (the first ``total_tokens % num_requests`` one token longer), random ids; every request takes
    gradients and a loss. Deterministic in its arguments."""
    rng = np.random.default_rng(seed)
    base, extra = divmod(total_tokens, num_requests)
    items = []
    for k in range(num_requests):
        tokens = rng.integers(num_requests, _VOCAB, base + (k < extra))
        tokens[0] = k  # distinct first tokens: the prefix tree shares nothing
        items.append(Item(id=f"r{k}", requests=(Request(tokens=tokens),)))
    return Workload(items=tuple(items))


def predict(
    model: ModelCard,
    *,
    topology: Topology,
    num_layers: int,
    phase: Phase,
    num_requests: int,
    total_tokens: int,
) -> WavePlan:
    """Price ``num_requests`` unique requests of ``total_tokens`` tokens as one wave, as the reference
    runs ran it: full-sharing packing, the ranks owning contiguous near-even token shares, at
    ``num_layers`` and ``phase`` (the planner may choose another ownership, priced by the same card)."""
    settings = Settings(
        topology=topology, model=model, memory_bytes=UNBOUNDED_BYTES, num_layers=num_layers, phase=phase
    )
    problem = Problem.build(unique_workload(num_requests, total_tokens), settings)
    items = range(problem.num_items)
    layout = problem.pack(items, "full")
    tokens = chunk_stats(layout, problem.chunk_tokens).tokens.astype(np.float64)
    return price_wave(problem, items, layout, "full", owner=contiguous_split(tokens, topology.cp))


def predict_row(model: ModelCard, row: Measurement, *, source: str | None = None) -> WavePlan:
    """:func:`predict` for a measured row; errors name the measurement file and the row's line."""
    try:
        return predict(
            model,
            topology=row.topology,
            num_layers=row.layers,
            phase=row.phase,
            num_requests=row.requests,
            total_tokens=row.total_tokens,
        )
    except InputError as exc:
        raise InputError(f"cannot price this row: {exc}", file=row.file or source, line=row.line) from None


def row_quantities(model: ModelCard, row: Measurement, *, source: str | None = None) -> np.ndarray:
    """The local quantities a row is priced on, shape (ranks, quantities): an observation row's own, a
    measured row's from :func:`predict_row` (the planner's wave for its workload)."""
    if row.quantities is not None:
        return row.quantities
    return predict_row(model, row, source=source).quantities
