"""ART's packer, tokenized-result type and loss, imported for a comparison on the CPU (tests, the
benchmark) without side effects on the rest of the process.

``import art`` needs two things undone or avoided here: LiteLLM (an ART dependency) fetches a remote
cost map when imported unless ``LITELLM_LOCAL_MODEL_COST_MAP`` is set, and ART replaces
``transformers.masking_utils._preprocess_mask_arguments`` with a version written for an older
transformers signature, after which a transformers 5.10 model's forward raises a ``TypeError``.
:func:`import_art` sets the first and puts the original helper back after the import.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True, kw_only=True)
class ArtModules:
    """ART's modules this project compares against and the installed ``version``."""

    pack: ModuleType
    tokenize: ModuleType
    loss: ModuleType
    version: str


def art_version() -> str | None:
    """The installed openpipe-art version, or ``None`` when it is not installed (imports nothing)."""
    try:
        return importlib.metadata.version("openpipe-art")
    except importlib.metadata.PackageNotFoundError:
        return None


def import_art() -> ArtModules:
    """Import ``art.preprocessing.pack``, ``art.preprocessing.tokenize`` and ``art.loss`` with
    LiteLLM's local cost map, then restore transformers' mask helper that ``import art`` patches.
    Raises ``ImportError`` when openpipe-art is not installed (``pip install 'cpplan[art]'``)."""
    version = art_version()
    if version is None:
        raise ImportError("openpipe-art is not installed: pip install 'cpplan[art]' (tested with 0.5.18)")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    masking = importlib.import_module("transformers.masking_utils")
    original = masking._preprocess_mask_arguments
    try:
        pack = importlib.import_module("art.preprocessing.pack")
        tokenize = importlib.import_module("art.preprocessing.tokenize")
        loss = importlib.import_module("art.loss")
    finally:
        masking._preprocess_mask_arguments = original
    return ArtModules(pack=pack, tokenize=tokenize, loss=loss, version=version)


__all__ = ["ArtModules", "art_version", "import_art"]
