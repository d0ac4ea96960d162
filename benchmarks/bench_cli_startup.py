"""Start-up time of the ``cpplan`` command and of ``import cpplan``, each in a fresh interpreter.

    python benchmarks/bench_cli_startup.py [--repeats 20]

Prints the median and the fastest wall time of ``cpplan --help`` (run as ``python -c "from cpplan.cli
import run; run()" --help``, what the console script does), of ``import cpplan``, and of a bare
``python -c pass`` for reference.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {
    "python -c pass": ["-c", "pass"],
    "import cpplan": ["-c", "import cpplan"],
    "cpplan --help": ["-c", "from cpplan.cli import run; run()", "--help"],
}


def measure(args: list[str], repeats: int) -> list[float]:
    """Wall seconds of ``repeats`` fresh interpreters running ``args``."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([sys.executable, *args], cwd=ROOT, check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    """Measure every case and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    repeats = parser.parse_args().repeats
    print(f"{'command':<16} {'median s':>9} {'fastest s':>10}")
    for name, args in CASES.items():
        times = measure(args, repeats)
        print(f"{name:<16} {statistics.median(times):>9.3f} {min(times):>10.3f}")


if __name__ == "__main__":
    main()
