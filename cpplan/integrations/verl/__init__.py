"""cpplan inside verl: :func:`prepare_micro_batches`, a drop-in for verl's own, set up by
:func:`configure`."""

from cpplan.integrations.verl.micro_batches import configure, flat_profile, prepare_micro_batches

__all__ = ["configure", "flat_profile", "prepare_micro_batches"]
