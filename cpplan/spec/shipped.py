"""Where the shipped model cards and solver profiles live.

In a wheel they are the packages ``cpplan.cards`` (from ``models/``) and ``cpplan.profiles`` (from
``solvers/``); in a source checkout or an editable install they are those top-level folders.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

_SOURCE_DIRS = {"cpplan.cards": "models", "cpplan.profiles": "solvers"}


def data_dir(package: str) -> Path:
    """The folder holding ``package``'s TOML files."""
    try:
        return Path(str(resources.files(package)))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[2] / _SOURCE_DIRS[package]


def toml_files(package: str) -> dict[str, Path]:
    """Shipped TOML files by stem."""
    return {path.stem: path for path in sorted(data_dir(package).glob("*.toml"))}
