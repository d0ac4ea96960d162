"""cpplan inside ART (OpenPipe's Agent Reinforcement Trainer): its packer with cpplan's plan as rows.

:func:`packed_tensors_from_tokenized_results` has the signature and return of ART's
``art.preprocessing.pack.packed_tensors_from_tokenized_results`` (tested with openpipe-art 0.5.18);
:func:`packer` binds the cpplan settings once. This package does not import ART;
:func:`cpplan.integrations.art.art_import.import_art` imports ART's packer and loss for a comparison.
"""

from cpplan.integrations.art.art_pack import (
    ArtPacking,
    pack_results_with_plan,
    packed_tensors_from_tokenized_results,
    packer,
)

__all__ = ["ArtPacking", "pack_results_with_plan", "packed_tensors_from_tokenized_results", "packer"]
