"""Busy processes beside a benchmark: the machine under load, made on purpose and the same in every run."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

SETTLE_S = 5.0
"""Seconds the spinners get to take their cores before the measured work starts."""


@contextmanager
def busy_processes(count: int, *, settle_s: float = SETTLE_S) -> Iterator[list[subprocess.Popen]]:
    """``count`` Python processes spinning a core each while the block runs (none for ``0``), killed and
    reaped when it ends, even on an error; the block starts ``settle_s`` after them."""
    spin = "while True:\n    pass\n"
    processes = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(count)]
    try:
        if processes:
            time.sleep(settle_s)
        yield processes
    finally:
        for process in processes:
            process.kill()
        for process in processes:
            process.wait()
