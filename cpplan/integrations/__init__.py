"""Adapters for the trainers people already run (the top layer: nothing in cpplan imports them).

:mod:`cpplan.integrations.trl` plugs cpplan's packed execution into TRL's ``GRPOTrainer``;
:mod:`cpplan.integrations.verl` plans verl's micro-batches; :mod:`cpplan.integrations.art` is ART's packer
with rows sized by the per-rank floors and taken from the plan. :mod:`.rollout_items` turns a trainer's
rows into cpplan items, the G samples of one prompt sharing it in a prefix tree. Importing an adapter
needs its trainer installed (the ``trl`` and ``verl`` extras; the ART adapter imports no ART); this
package alone imports none of them.
"""
