"""The plan JSON's fields: the one schema :mod:`~cpplan.plans.plan_writer` writes and
:mod:`~cpplan.plans.plan_reader` reads.

Each tuple names one kind of object's fields in the order the writer writes them (the order is part of
a plan file's readability). The writer builds every object with :func:`record`, which refuses a field
the schema does not name and a field it names that the writer left out; the reader reads no key that
is not named here (``tests/plans/test_plan_fields.py`` checks that).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from cpplan.pricing.handoff_mode import GDN_HANDOFF_MODES as MODES
from cpplan.spec.quantities import QUANTITY_NAMES
from cpplan.spec.topology import Topology

SETTINGS_FIELDS = ("model", "layers", "phase", "topology", "memory_bytes", "chunk_tokens", "safety")
"""The settings a plan was priced under: every part of one plan (every line of a shard) shares them."""

TOPOLOGY_FIELDS = tuple(Topology.model_fields)
"""The ``topology`` object: the :class:`~cpplan.spec.topology.Topology` the plan was priced under."""

TOTAL_FIELDS = ("cost_s", "num_waves", "logical_tokens", "packed_tokens", "peak_bytes")
"""The plan's totals over its waves."""

HEADER_FIELDS = ("cpplan_version", *SETTINGS_FIELDS, "correction", "strategy", *TOTAL_FIELDS, "padding")
"""A plan's fields before ``workload`` and ``waves`` (``padding`` only under equal waves)."""

HEADER_OPTIONAL = ("padding",)
"""Header fields written only where they apply: ``padding`` when the topology says ``equal_waves``."""

PADDING_FIELDS = ("waves", "wave_cost_s")
"""The ``padding`` object of a plan under equal waves (``topology.equal_waves``): ``waves``, the empty
waves each pool rank runs after its last wave so that every rank runs the same number (a trainer runs
each as a zero-token forward and backward), and ``wave_cost_s``, the seconds of one, counted in
``cost_s``."""

RESULT_FIELDS = ("profile", "solver", "candidates", "wall_s")
"""What the portfolio adds after ``waves`` (the full plan JSON of ``cpplan plan``)."""

PLAN_FIELDS = (*HEADER_FIELDS, "workload", "pack", "waves", *RESULT_FIELDS)
"""A plan object: ``workload`` (its digests), ``pack`` (a shard line's position) and the result fields
are written only where they apply (see :data:`PLAN_OPTIONAL`)."""

PLAN_OPTIONAL = ("workload", "pack", *HEADER_OPTIONAL, *RESULT_FIELDS)
"""Plan fields a plan alone (the verifier's input) or a shard line leaves out."""

WORKLOAD_FIELDS = ("items", "requests", "sha256", "wave_sha256")
"""The ``workload`` object: counts and the digests that tell the workload a plan was made for."""

PACK_FIELDS = (
    "window",
    "wave",
    "waves",
    "format",
    "tokenizer",
    "fields",
    "start",
    "end",
    "first_line",
    "last_line",
)
"""The ``pack`` object of a ``cpplan pack`` shard line: its window, its wave in the window and where
the window's records are read."""

PLACEMENT_FIELDS = ("gpus", "start_s")
"""A placed wave's pool ranks (rank ``r`` on ``gpus[r]``) and start."""

WAVE_FIELDS = (
    "index",
    "dp_rank",
    "cp",
    *PLACEMENT_FIELDS,
    "items",
    "layout",
    "split",
    "packed_tokens",
    "logical_tokens",
    "cost_s",
    "card_cost_s",
    "gdn_handoff",
    "segments",
    "requests",
    "ranks",
)
"""A wave object (``segments``: ``[parent, position, length]`` of each packed segment; ``gdn_handoff``:
how its GDN states cross CP ranks, one of :data:`GDN_HANDOFF_MODES`, ``"rounds"`` where a plan written
before the field leaves it out)."""

GDN_HANDOFF_MODES = MODES
"""The values of a wave's ``gdn_handoff`` (:mod:`cpplan.pricing.handoff_mode`)."""

REQUEST_FIELDS = ("item", "request", "segments")
"""A request of a wave: its item id, its index in the item and its chain of segments."""

RANK_FIELDS = (
    "rank",
    "ranges",
    *QUANTITY_NAMES,
    "peak_bytes",
    "card_peak_bytes",
    "envelope",
    "breakdown",
    "time_s",
)
"""A CP rank of a wave: its owned ``[start, end)`` ranges, local quantities and prices."""

CANDIDATE_FIELDS = ("strategy", "cost_s", "valid", "reason", "num_waves", "wall_s")
"""A portfolio candidate."""

SOLVER_FIELDS = (
    "status",
    "objective_s",
    "bound_s",
    "bound_scope",
    "gap",
    "model_gap",
    "wall_s",
    "deterministic_time",
    "num_booleans",
    "num_integers",
    "num_constraints",
    "ortools_version",
    "stage_s",
    "price_terms_s",
    "outcomes",
)
"""The solver statistics (``price_terms_s`` empty where the ownership model did not run; ``outcomes``:
one record per model run, the deciding one last, see :class:`~cpplan.plans.outcome.ModelOutcome`)."""

TIMING_FIELDS = ("wall_s", "stage_s", "deterministic_time")
"""Wall-clock fields (left out of byte-for-byte comparisons of plans)."""


def record(fields: tuple[str, ...], values: Mapping[str, Any], *, optional: Collection[str] = ()) -> dict:
    """``values`` as a plan-JSON object in the order of ``fields``; every field must be given except
    those in ``optional``, and nothing outside ``fields``."""
    unknown = [name for name in values if name not in fields]
    assert not unknown, f"plan JSON fields outside the schema: {unknown}"
    missing = [name for name in fields if name not in values and name not in optional]
    assert not missing, f"plan JSON fields left out: {missing}"
    return {name: values[name] for name in fields if name in values}
