"""Online recalibration: observed per-rank peaks and wave seconds in, a safe :class:`Correction` out.

Every observation is compared with what the card *alone* predicted for that wave and rank (its
``card_peak_bytes``, or the wave's seconds ``max_r time_r + overhead``), so the learned scale is absolute
and never compounds. Per context (the planner's model, topology, depth and phase) and per kind (memory,
time), a :class:`_Track` keeps the ordered ratios ``observed / card``:

- **trust window**: a ratio is believed when it lies within ``[ref / trust_factor, ref × trust_factor]``,
  ``ref`` the median of the believed ratios in the window (1, the card itself, before any). A ratio
  outside is rejected and reported. Rejections on the same side from ``confirm`` distinct steps that
  agree with each other (within ``trust_factor``) are a change of regime, not noise: they are re-admitted
  and replace the window (a real change is learned after ``confirm`` steps; one wild reading, even on
  every rank of a wave, never is).
- **memory scale** (an upper bound: admission budgets against it): the largest believed ratio among the
  last ``window`` believed ones, times ``1 + margin``, rounded up to ``digits`` significant digits;
  ``margin = max(min_margin, first_margin / n)`` with ``n`` the distinct waves those ratios come from.
  Every believed observation is therefore predicted at least ``1 + margin`` times over by the corrected
  card. The ratio is taken against the card's prediction *with* its safety factor, so the card's own
  margin is what an observation replaces, not something the learned margin multiplies: one observation
  at ratio ``r`` shrinks the budgeted capacity by ``r × 1.03``, not ``r × 1.10 × 1.10``.
- **time scale** (a best estimate: it ranks plans and predicts their seconds, it guards nothing): the
  median believed ratio in the window, rounded up, with no margin.

The scale is a pure function of the ordered observations and the card: the same observations in the same
order give the same correction, byte for byte (data-parallel ranks that feed each other's observations in
one agreed order agree). The state saves as JSON lines (:func:`write_log`, :func:`read_log`): a header
line (the planner's settings, solver profile and policy), then one observation a line.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from decimal import ROUND_CEILING, Decimal
from pathlib import Path
from typing import Any, Literal

import numpy as np

from cpplan.errors import InputError
from cpplan.pricing.evaluator import price, wave_cost_s
from cpplan.spec.card import ResolvedCard
from cpplan.spec.correction import Correction, identity_for
from cpplan.spec.quantities import QUANTITY_NAMES

Kind = Literal["memory", "time"]
KINDS: tuple[Kind, ...] = ("memory", "time")
LOG_FORMAT = "cpplan-learned/1"


@dataclass(frozen=True, kw_only=True)
class TrustPolicy:
    """How observations become a correction (see the module docstring)."""

    trust_factor: float = 2.0
    """A ratio is believed within this factor of the median believed ratio (of 1 before any)."""

    window: int = 32
    """The last this many believed ratios per kind set the scale; older ones age out."""

    confirm: int = 3
    """Rejected ratios on one side from this many distinct steps that agree are re-admitted."""

    first_margin: float = 0.03
    """The memory margin above the largest believed ratio after one observed wave; divided by the number
    of distinct observed waves after that. (The card's own safety factor, 1.1 on the shipped cards, is
    the margin before any observation; a measured peak leaves only the spread between waves to cover.)"""

    min_margin: float = 0.02
    """The memory margin never falls below this."""

    digits: int = 6
    """Scales are rounded up to this many significant digits."""

    time_estimate: Literal["median", "bound"] = "median"
    """``median``: the time scale is the median believed ratio (a best estimate); ``bound``: the largest
    times ``1 + margin``, as the memory scale (what states saved before this field existed used; their policy,
    which lacks this field, reads as ``bound`` so they replay to the correction they had)."""

    def __post_init__(self) -> None:
        checks = {
            "trust_factor": self.trust_factor > 1,
            "window": isinstance(self.window, int) and self.window >= 1,
            "confirm": isinstance(self.confirm, int) and self.confirm >= 2,
            "first_margin": 0 <= self.first_margin < 1,
            "min_margin": 0 <= self.min_margin <= self.first_margin,
            "digits": isinstance(self.digits, int) and 1 <= self.digits <= 15,
        }
        if self.time_estimate not in ("median", "bound"):
            raise InputError(
                f"must be 'median' or 'bound', got {self.time_estimate!r}", field="policy.time_estimate"
            )
        for name, ok in checks.items():
            if not ok or not math.isfinite(getattr(self, name)):
                raise InputError(f"invalid value {getattr(self, name)!r}", field=f"policy.{name}")

    def margin(self, num_waves: int) -> float:
        """The margin over the largest believed ratio when it rests on ``num_waves`` distinct waves."""
        return max(self.min_margin, self.first_margin / max(num_waves, 1))


@dataclass(frozen=True, kw_only=True, eq=False)
class Observation:
    """One wave's measurement on one rank: the wave's local quantities on every rank (what the card
    prices), and the peak bytes above the pre-wave baseline and/or the seconds the rank measured."""

    step: int
    wave: int
    rank: int
    quantities: np.ndarray
    peak_bytes: int | None = None
    seconds: float | None = None
    line: int | None = None
    handoff_s: float = 0.0
    """The wave's GDN hand-off seconds under the card alone, which its quantities cannot price (0 for
    logs written before it was recorded)."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON line of the log (quantities by name, one value per rank; the hand-off where any)."""
        line = {
            "step": self.step,
            "wave": self.wave,
            "rank": self.rank,
            "peak_bytes": self.peak_bytes,
            "seconds": self.seconds,
            "quantities": {name: _plain(self.quantities[:, i]) for i, name in enumerate(QUANTITY_NAMES)},
        }
        return line | ({"handoff_s": self.handoff_s} if self.handoff_s else {})


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """What became of one observed value: its ratio to the card alone and whether it is believed."""

    kind: Kind
    step: int
    wave: int
    rank: int
    observed: float
    predicted: float
    ratio: float
    trusted: bool
    reason: str = ""

    def describe(self) -> str:
        """One line: where, what was observed against what the card predicted, and the verdict."""
        unit = "bytes" if self.kind == "memory" else "s"
        status = "believed" if self.trusted else "rejected"
        why = f" ({self.reason})" if self.reason else ""
        return (
            f"step {self.step} wave {self.wave} rank {self.rank}: {self.kind} {self.observed:,.6g} {unit} "
            f"observed, card {self.predicted:,.6g} ({self.ratio:.4f}x): {status}{why}"
        )


@dataclass
class _Track:
    """One kind's evidence in order: the believed ratios (window), the pending rejections, verdicts."""

    policy: TrustPolicy
    kind: Kind = "memory"
    trusted: deque = field(default_factory=deque)
    pending: list[int] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)

    def reference(self) -> float:
        """The median believed ratio (1: the card, before any is believed)."""
        return statistics.median(v.ratio for v in self.trusted) if self.trusted else 1.0

    def add(self, verdict: Verdict) -> Verdict:
        """Judge ``verdict`` (built untrusted) against the trust window, record and return it."""
        ref, f = self.reference(), self.policy.trust_factor
        if ref / f <= verdict.ratio <= ref * f:
            verdict = replace(verdict, trusted=True)
            self.pending.clear()
            self._believe(verdict)
            self.verdicts.append(verdict)
            return verdict
        reason = f"outside the trust window [{ref / f:.4g}, {ref * f:.4g}] around {ref:.4g}"
        self.verdicts.append(replace(verdict, reason=reason))
        if self.pending and (self.verdicts[self.pending[0]].ratio > ref) != (verdict.ratio > ref):
            self.pending.clear()
        self.pending.append(len(self.verdicts) - 1)
        self._maybe_readmit()
        return self.verdicts[-1]

    def _believe(self, verdict: Verdict) -> None:
        self.trusted.append(verdict)
        while len(self.trusted) > self.policy.window:
            self.trusted.popleft()

    def _maybe_readmit(self) -> None:
        """Re-admit the pending rejections when they come from ``confirm`` distinct steps and agree."""
        ratios = [self.verdicts[i].ratio for i in self.pending]
        steps = {self.verdicts[i].step for i in self.pending}
        if len(steps) < self.policy.confirm or max(ratios) > min(ratios) * self.policy.trust_factor:
            return
        self.trusted.clear()
        for i in self.pending:
            readmitted = replace(
                self.verdicts[i],
                trusted=True,
                reason=f"re-admitted: {len(self.pending)} agreeing observations from {len(steps)} steps",
            )
            self.verdicts[i] = readmitted
            self._believe(readmitted)
        self.pending.clear()

    def scale(self) -> float:
        """Memory: the largest believed ratio in the window times ``1 + margin``; time: the median
        believed ratio; rounded up (1: none believed)."""
        if not self.trusted:
            return 1.0
        if self.kind == "time" and self.policy.time_estimate == "median":
            return round_up(self.reference(), self.policy)
        waves = {(v.step, v.wave) for v in self.trusted}
        return round_up(
            max(v.ratio for v in self.trusted) * (1.0 + self.policy.margin(len(waves))), self.policy
        )

    def rejected(self) -> list[Verdict]:
        """The observations not believed (now)."""
        return [v for v in self.verdicts if not v.trusted]


def round_up(value: float, policy: TrustPolicy) -> float:
    """``value`` rounded up to the policy's significant digits (deterministic, never below ``value``)."""
    exact = Decimal(value)
    quantum = Decimal(1).scaleb(exact.adjusted() - policy.digits + 1)
    return float(exact.quantize(quantum, rounding=ROUND_CEILING))


@dataclass(frozen=True, kw_only=True)
class LearningReport:
    """Where learning stands: the correction, how many observations each kind believes, every
    rejection (with its reason)."""

    correction: Correction
    believed: dict[str, int]
    rejected: tuple[Verdict, ...]

    def summary(self) -> str:
        """A few lines for a log."""
        c = self.correction
        lines = [
            f"learned correction for {c.model} {c.topology}, {c.layers} layers, {c.phase}: memory x"
            f"{c.memory_scale:g} ({self.believed['memory']} believed), time x{c.time_scale:g} "
            f"({self.believed['time']} believed), {len(self.rejected)} rejected"
        ]
        lines += [f"  rejected {v.describe()}" for v in self.rejected]
        return "\n".join(lines)


class OnlineCalibration:
    """The learned state of one context: the ordered observations and what they imply.

    ``card`` is the context's card alone (no correction); every observation is priced with it.
    """

    def __init__(self, card: ResolvedCard, policy: TrustPolicy | None = None) -> None:
        self.card = card
        self.policy = policy or TrustPolicy()
        self.observations: list[Observation] = []
        self._tracks = {kind: _Track(self.policy, kind) for kind in KINDS}

    def observe(self, observation: Observation) -> tuple[Verdict, ...]:
        """Record one observation; the verdict on each value it carries."""
        prices = price(self.card, observation.quantities)
        verdicts = []
        for kind, observed, predicted in (
            ("memory", observation.peak_bytes, float(prices.peak_bytes[observation.rank])),
            ("time", observation.seconds, wave_cost_s(self.card, prices) + observation.handoff_s),
        ):
            if observed is None:
                continue
            ratio = float(observed) / predicted if predicted > 0 else math.inf
            verdict = Verdict(
                kind=kind,
                step=observation.step,
                wave=observation.wave,
                rank=observation.rank,
                observed=float(observed),
                predicted=predicted,
                ratio=ratio,
                trusted=False,
            )
            verdicts.append(self._tracks[kind].add(verdict))
        self.observations.append(observation)
        return tuple(verdicts)

    @property
    def correction(self) -> Correction:
        """The correction the observations so far imply."""
        memory, time = self._tracks["memory"], self._tracks["time"]
        return replace(
            identity_for(self.card),
            memory_scale=memory.scale(),
            time_scale=time.scale(),
            memory_observations=len(memory.trusted),
            time_observations=len(time.trusted),
        )

    def report(self) -> LearningReport:
        """The correction, the believed counts and every rejection, in order."""
        rejected = [v for kind in KINDS for v in self._tracks[kind].rejected()]
        rejected.sort(key=lambda v: (v.step, v.wave, v.rank, v.kind))
        return LearningReport(
            correction=self.correction,
            believed={kind: len(self._tracks[kind].trusted) for kind in KINDS},
            rejected=tuple(rejected),
        )

    def verdicts(self, kind: Kind) -> tuple[Verdict, ...]:
        """Every verdict of one kind, in observation order (re-admissions applied)."""
        return tuple(self._tracks[kind].verdicts)


# ------------------------------------------------------------------------------------------- the log


def write_log(path: str | Path, header: dict[str, Any], observations: list[Observation]) -> None:
    """Write the state as JSON lines (a header, then one observation a line), atomically."""
    path = Path(path)
    lines = [json.dumps({"format": LOG_FORMAT, **header}, allow_nan=False)]
    lines += [json.dumps(o.to_dict(), allow_nan=False) for o in observations]
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        raise InputError(f"cannot write the planner state: {exc.strerror}", file=str(path)) from None


def read_log(path: str | Path) -> tuple[dict[str, Any], list[Observation]]:
    """Read :func:`write_log`'s file: the header and the observations. Every error names the file,
    the line and the field."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read the planner state: {exc.strerror}", file=str(path)) from None
    rows = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not rows:
        raise InputError("empty: no header line", file=str(path))
    header = _json_line(path, *rows[0])
    if header.get("format") != LOG_FORMAT:
        raise InputError(
            f"not a cpplan planner state (format {header.get('format')!r}, expected {LOG_FORMAT!r})",
            file=str(path),
            line=rows[0][0],
            field="format",
        )
    return header, [_observation(_json_line(path, n, line), path, n) for n, line in rows[1:]]


def _json_line(path: Path, number: int, line: str) -> dict[str, Any]:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON: {exc.msg}", file=str(path), line=number) from None
    if not isinstance(data, dict):
        raise InputError("must be a JSON object", file=str(path), line=number)
    return data


def _observation(data: dict[str, Any], path: Path, line: int) -> Observation:
    """One logged observation, every field checked (errors name the file, line and field)."""

    def fail(name: str, message: str) -> InputError:
        return InputError(message, file=str(path), line=line, field=name)

    for name in ("step", "wave", "rank"):
        if not _is_int(data.get(name)) or data[name] < 0:
            raise fail(name, f"must be a non-negative integer, got {data.get(name)!r}")
    quantities = data.get("quantities")
    if not isinstance(quantities, dict):
        raise fail("quantities", "must map quantity names to one value per rank")
    matrix = _quantity_matrix(quantities, fail)
    if data["rank"] >= matrix.shape[0]:
        raise fail("rank", f"rank {data['rank']} but the wave has {matrix.shape[0]} ranks")
    peak, seconds = data.get("peak_bytes"), data.get("seconds")
    check_measurement(peak, seconds, fail)
    return Observation(
        step=data["step"],
        wave=data["wave"],
        rank=data["rank"],
        quantities=matrix,
        peak_bytes=peak,
        seconds=None if seconds is None else float(seconds),
        line=line,
        handoff_s=float(data.get("handoff_s", 0.0)),
    )


def _quantity_matrix(quantities: dict[str, Any], fail) -> np.ndarray:
    """A (ranks, quantities) matrix in registry order; a quantity the log lacks (one added to the
    registry after it was written) counts 0, a name the registry lacks is refused."""
    unknown = sorted(set(quantities) - set(QUANTITY_NAMES))
    if unknown:
        raise fail(f"quantities.{unknown[0]}", f"unknown quantity; known: {', '.join(QUANTITY_NAMES)}")
    lengths = {len(v) for v in quantities.values() if isinstance(v, list)}
    if len(lengths) != 1 or not all(isinstance(v, list) for v in quantities.values()):
        raise fail("quantities", "every quantity must list one value per rank, all of one length")
    (num_ranks,) = lengths
    matrix = np.zeros((num_ranks, len(QUANTITY_NAMES)))
    for i, name in enumerate(QUANTITY_NAMES):
        values = quantities.get(name, [0] * num_ranks)
        if not all(_is_number(v) and v >= 0 for v in values):
            raise fail(f"quantities.{name}", "values must be non-negative numbers")
        matrix[:, i] = values
    if num_ranks < 1:
        raise fail("quantities", "must list at least one rank")
    return matrix


def check_measurement(peak_bytes: Any, seconds: Any, fail) -> None:
    """Refuse (``fail(field, message)``) a peak that is not a non-negative whole number of bytes, seconds
    that are not a positive finite number, and neither given."""
    if peak_bytes is None and seconds is None:
        raise fail("peak_bytes", "give peak_bytes and/or seconds")
    if peak_bytes is not None and (not _is_int(peak_bytes) or peak_bytes < 0):
        raise fail("peak_bytes", f"must be a non-negative whole number of bytes, got {peak_bytes!r}")
    if seconds is not None and (not _is_number(seconds) or not math.isfinite(seconds) or seconds <= 0):
        raise fail("seconds", f"must be a positive finite number of seconds, got {seconds!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)


def _plain(column: np.ndarray) -> list:
    return [int(v) if float(v).is_integer() else float(v) for v in column.tolist()]


def policy_to_dict(policy: TrustPolicy) -> dict[str, Any]:
    """The policy as JSON."""
    return asdict(policy)


def policy_from_dict(data: Any, *, file: str | None = None, line: int | None = None) -> TrustPolicy:
    """Read :func:`policy_to_dict`'s form; errors name the field."""
    if not isinstance(data, dict):
        raise InputError("must be an object", file=file, line=line, field="policy")
    unknown = sorted(set(data) - set(TrustPolicy.__dataclass_fields__))
    if unknown:
        raise InputError(f"unknown field {unknown[0]!r}", file=file, line=line, field="policy")
    data = {"time_estimate": "bound", **data}
    try:
        return TrustPolicy(**data)
    except (InputError, TypeError) as exc:
        raise InputError(str(exc), file=file, line=line) from None
