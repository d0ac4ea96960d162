"""cpplan inside verl: :class:`CpplanFSDPEngine`, verl's FSDP2 engine running each step's planned waves
tree-packed (registered as ``cpplan_language_model``, set up by :func:`configure_engine`), and
:func:`prepare_micro_batches`, a drop-in for verl's own micro-batching, set up by :func:`configure`."""

from cpplan.integrations.verl.engine import MODEL_TYPE, CpplanFSDPEngine, configure_engine
from cpplan.integrations.verl.micro_batches import configure, flat_profile, prepare_micro_batches

__all__ = [
    "MODEL_TYPE",
    "CpplanFSDPEngine",
    "configure",
    "configure_engine",
    "flat_profile",
    "prepare_micro_batches",
]
