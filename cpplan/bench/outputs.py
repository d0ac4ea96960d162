"""Where a benchmark writes its JSON: the committed results file for a full run, a file under
``./cpplan-bench/`` for a quick one (whose smaller runs are not the figures the docs cite), or the path
its ``--output`` names."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

QUICK_FOLDER = Path("cpplan-bench")
"""Where quick runs write by default: relative to the current directory, away from the results."""


@dataclass(frozen=True, kw_only=True)
class ResultFiles:
    """A benchmark's committed results file and the file its quick runs write instead."""

    results: Path
    quick: Path

    def path(self, *, quick: bool, output: Path | None) -> Path:
        """``output`` when given; else :attr:`quick` for a quick run and :attr:`results` for a full one."""
        if output is not None:
            return output
        return self.quick if quick else self.results

    def add_option(self, parser: argparse.ArgumentParser) -> None:
        """``--output PATH`` on ``parser``, its help naming both defaults."""
        parser.add_argument(
            "--output",
            type=Path,
            default=None,
            help=f"default results/{self.results.name}; with --quick, ./{self.quick}",
        )
