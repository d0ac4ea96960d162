"""Run as a script by tests/spec/test_quantities.py: plan and verify with one more registry entry.

``python tests/extended_registry.py CARD.toml WORKLOAD.jsonl`` installs ``cpplan.spec.quantities`` with
a ``logit_tokens`` entry added (before anything of cpplan is imported; nothing else of cpplan is
changed), plans the workload with the shipped qwen3-8b card and with CARD, verifies both plans, and
prints what the test checks as JSON.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

MARKER = '\n)\n"""Every local quantity'
ENTRY = (
    '\n    Quantity(name="logit_tokens", count="token", only="loss", rank_bound="chunk_cap_or_total",'
    ' doc="owned tokens whose logits are needed"),'
)


def install_extended_registry() -> None:
    """Put the registry with the extra entry in ``sys.modules`` before cpplan is imported."""
    assert "cpplan" not in sys.modules, "install the registry before cpplan is imported"
    package = importlib.util.find_spec("cpplan")  # a top-level spec: finds cpplan without importing it
    path = Path(package.origin).parent / "spec" / "quantities.py"
    source = path.read_text()
    assert source.count(MARKER) == 1, "the registry's closing line moved: update MARKER"
    module = types.ModuleType("cpplan.spec.quantities")
    module.__file__ = str(path)
    sys.modules["cpplan.spec.quantities"] = module
    exec(compile(source.replace(MARKER, ENTRY + MARKER), str(path), "exec"), module.__dict__)


def main(card_path: str, workload_path: str) -> dict:
    """Plan and verify with the base and the extended card."""
    import cpplan
    from cpplan.verifier import verify_plan

    workload = cpplan.Workload.from_jsonl(workload_path)
    out = {}
    for name, card in (("base", "qwen3-8b"), ("extended", card_path)):
        result = cpplan.plan(
            workload, topology=cpplan.Topology(cp=2), model=card, memory_bytes="30GiB", solver="deterministic"
        )
        data = result.to_dict()
        verdict = verify_plan(data, workload, result.problem.card, result.problem.memory_bytes)
        ranks = [r for w in data["waves"] for r in w["ranks"]]
        out[name] = {
            "valid": verdict.valid,
            "strategies": sorted({c["strategy"] for c in data["candidates"] if c["valid"]}),
            "logit": [r.get("logit_tokens") for r in ranks],
            "loss": [r["loss_tokens"] for r in ranks],
            "peaks": [r["peak_bytes"] for r in ranks],
            "waves": [w["items"] for w in data["waves"]],
        }
    return out


if __name__ == "__main__":
    install_extended_registry()
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
