"""The installed cpplan version (light: ``import cpplan`` and the CLI read it without the planner)."""

from __future__ import annotations

import functools
from importlib.metadata import PackageNotFoundError, version


@functools.cache
def cpplan_version() -> str:
    """The installed cpplan version (``0+unknown`` when cpplan runs from a source tree not installed)."""
    try:
        return version("cpplan")
    except PackageNotFoundError:
        return "0+unknown"
