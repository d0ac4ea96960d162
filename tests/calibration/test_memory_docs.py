"""docs/memory.md is generated from the shipped card, not typed by hand."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _table_module():
    spec = importlib.util.spec_from_file_location("memory_table", ROOT / "benchmarks" / "memory_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_memory_table_is_current():
    """Regenerating the table (reference rows, CP4 at 8 and 40 layers, the 40-layer one observed by
    reference line 12 and predicted within [1.00, 1.15] of it) reproduces docs/memory.md byte for byte;
    after changing a card or the pricing, run `python benchmarks/memory_table.py`."""
    module = _table_module()
    results = module.compute()
    assert [r["scenario"] for r in results][-2:] == ["CP4, 8 layers", "CP4, 40 layers (reference line 12)"]
    assert all(r["cp"] == 4 for r in results[-2:])
    assert 1.0 <= results[-1]["ratio"] <= 1.15
    assert (ROOT / "docs" / "memory.md").read_text(encoding="utf-8") == module.render(results)
