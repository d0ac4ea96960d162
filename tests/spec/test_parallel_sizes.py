"""Parallel sizes a model cannot be sharded by are refused, wherever settings are made, and card
geometry that cannot exist is refused when the card is loaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cpplan
from cpplan import InputError, Topology, UnsupportedTopologyError
from cpplan.cli import main
from cpplan.spec.card import Geometry
from cpplan.spec.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "grpo.jsonl"
DENSE = {"hidden": 1024, "head_dim": 128, "num_layers": 4, "vocab": 1000}


def geometry(**fields) -> Geometry:
    """A small geometry with ``fields`` changed."""
    return Geometry(**{**DENSE, "num_heads": 12, "num_kv_heads": 4, **fields})


@pytest.mark.parametrize(
    ("name", "tp_sizes"),
    [
        ("qwen3.6-35b-a3b", [1, 2]),
        ("qwen3-8b", [1, 2, 4, 8]),
        ("qwen3-14b", [1, 2, 4, 8]),
        ("qwen3.5-27b", [1, 2, 4]),
        ("qwen3-30b-a3b", [1, 2, 4]),
    ],
)
def test_shipped_cards_take_the_tp_sizes_their_heads_allow(name, tp_sizes):
    """Each shipped card takes exactly the TP sizes that divide its attention heads, its key/value heads,
    its GDN heads and its FFN widths (qwen3.6-35b-a3b: 16 heads, 2 key/value heads, GDN 32 value and 16
    key heads: tp=4, 8 and 16 divide the heads but not the key/value heads)."""
    assert cpplan.load_model(name).geometry.parallel_sizes("tp") == tp_sizes


def test_the_key_value_heads_are_divided():
    """TP must divide the key/value heads as well as the heads (Megatron-LM's rule): with 12 heads and 4
    key/value heads, tp=2 and tp=4 divide both, tp=12 and tp=6 divide the heads only, tp=8 neither."""
    shape = geometry()
    assert shape.parallel_problem(tp=2) is None and shape.parallel_problem(tp=4) is None
    for tp in (6, 12):
        axis, reason = shape.parallel_problem(tp=tp)
        assert axis == "tp" and f"tp={tp} must divide the model's 4 key/value heads (num_kv_heads)" in reason
    assert "12 attention heads" in shape.parallel_problem(tp=8)[1]


def test_gdn_heads_bind_only_with_gdn_layers():
    """The GDN heads limit TP only on a model with GDN layers; the FFN widths always do."""
    gdn = {"gdn_value_heads": 6, "gdn_key_heads": 3}
    assert geometry(**gdn).parallel_problem(tp=2) is None
    reason = geometry(**gdn, layer_pattern=("gdn", "attention")).parallel_problem(tp=2)[1]
    assert "3 GDN key heads" in reason
    assert "FFN width (ffn)" in geometry(num_heads=12, ffn=1001).parallel_problem(tp=2)[1]


def test_expert_sizes_divide_the_experts_and_their_ffn():
    """EP must divide the experts and ETP the expert FFN; a model without experts takes only ep = etp = 1."""
    moe = geometry(num_experts=6, top_k=2, expert_ffn=256)
    assert moe.parallel_sizes("ep") == [1, 2, 3, 6]
    assert "6 experts" in moe.parallel_problem(ep=4)[1]
    assert "256 expert FFN width" in moe.parallel_problem(etp=3)[1]
    assert moe.parallel_problem(ep=3, etp=2) is None
    assert geometry().parallel_problem(ep=2) == ("ep", "ep=2 on a model without experts (num_experts = 0)")


@pytest.mark.parametrize(
    ("fields", "field", "needle"),
    [
        ({"num_heads": 16, "num_kv_heads": 3}, "num_kv_heads", "num_kv_heads = 3 must divide num_heads = 16"),
        ({"num_experts": 256, "top_k": 300}, "top_k", "top_k = 300 must be between 1 and num_experts = 256"),
        ({"num_experts": 8}, "top_k", "top_k = 0 must be between 1 and num_experts = 8"),
        ({"top_k": 8}, "top_k", "top_k = 8 on a card without experts"),
        ({"gdn_value_heads": 6, "gdn_key_heads": 4}, "gdn_key_heads", "must divide gdn_value_heads = 6"),
    ],
)
def test_geometry_that_cannot_exist_is_refused(fields, field, needle):
    """Key/value heads that do not divide the heads, top_k outside 1..num_experts (0 without experts) and
    GDN key heads that do not divide the value heads are refused naming the field."""
    with pytest.raises(ValueError) as info:
        geometry(**fields)
    error = info.value.errors()[0]
    assert error["loc"] == (field,) and needle in error["msg"]


def test_a_custom_card_with_impossible_geometry_names_file_line_and_field(tmp_path):
    """The shipped qwen3.6-35b-a3b card with `num_kv_heads = 3` (beside 16 heads), or `top_k = 300`
    (with 256 experts), is refused when loaded, naming the file, the line and the field."""
    text = Path(cpplan.load_model("qwen3.6-35b-a3b").path).read_text(encoding="utf-8")
    lines = text.splitlines()
    for old, new, field in (
        ("num_kv_heads = 2", "num_kv_heads = 3", "geometry.num_kv_heads"),
        ("top_k = 8", "top_k = 300", "geometry.top_k"),
    ):
        path = tmp_path / f"{field}.toml"
        path.write_text(text.replace(old, new, 1), encoding="utf-8")
        line = lines.index(old) + 1
        with pytest.raises(InputError, match=rf"^{path}:{line}, field '{field}': "):
            cpplan.load_model(path)


def test_every_way_of_making_settings_refuses_a_tp_the_heads_forbid(tmp_path):
    """tp=3 on qwen3.6-35b-a3b (16 heads) is refused by Settings, Settings.from_user, cpplan.Planner,
    cpplan.plan and the card's resolve, each naming topology.tp and the sizes the card takes."""
    card = cpplan.load_model("qwen3.6-35b-a3b")
    workload = cpplan.Workload.from_jsonl(EXAMPLE)
    makers = (
        lambda: Settings(topology=Topology(tp=3), model=card, memory_bytes=2**33),
        lambda: Settings.from_user(topology="tp=3", model="qwen3.6-35b-a3b", memory_bytes="8GiB"),
        lambda: cpplan.Planner(model=card, topology="tp=3", memory_bytes="8GiB"),
        lambda: cpplan.plan(workload, topology=Topology(tp=3), model=card, memory_bytes="8GiB"),
        lambda: card.resolve(Topology(tp=3)),
    )
    for make in makers:
        with pytest.raises(UnsupportedTopologyError) as info:
            make()
        assert info.value.field == "topology.tp"
        assert "tp=3 must divide the model's 16 attention heads" in str(info.value)
        assert "the tp sizes it takes: 1, 2" in str(info.value)


@pytest.mark.parametrize("command", ["plan", "verify", "pack"])
def test_the_cli_exits_2_on_a_tp_the_heads_forbid(command, tmp_path, capsys):
    """`cpplan plan`, `verify` and `pack` with --topology tp=32 (beyond the 16 heads) or tp=16 (beyond the
    2 key/value heads) on qwen3.6-35b-a3b exit 2 naming topology.tp, where tp=2 is accepted."""
    settings = ["--model", "qwen3.6-35b-a3b", "--memory", "8GiB", "--quiet"]
    plan = tmp_path / "plan.json"
    assert main(["plan", str(EXAMPLE), *settings, "--topology", "tp=2", "-o", str(plan)]) == 0
    capsys.readouterr()
    args = {
        "plan": ["plan", str(EXAMPLE), *settings, "-o", str(tmp_path / "p.json")],
        "verify": ["verify", str(plan), str(EXAMPLE), "--model", "qwen3.6-35b-a3b", "--memory", "8GiB"],
        "pack": ["pack", str(EXAMPLE), *settings, "--output", str(tmp_path / "out")],
    }[command]
    assert main([*args, "--topology", "tp=32"]) == 2
    err = capsys.readouterr().err
    assert "field 'topology.tp': tp=32 must divide the model's 16 attention heads" in err, err
    assert "Traceback" not in err
    assert json.loads(plan.read_text())["topology"]["tp"] == 2
    assert main([*args, "--topology", "tp=16"]) == 2
    err = capsys.readouterr().err
    assert "field 'topology.tp': tp=16 must divide the model's 2 key/value heads (num_kv_heads)" in err, err
