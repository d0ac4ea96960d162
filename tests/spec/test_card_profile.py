"""Model cards and solver profiles: loading, validation and resolution."""

from __future__ import annotations

from pathlib import Path

import pytest

import cpplan
from cpplan import InputError, Topology, UnsupportedTopologyError


def test_shipped_cards_and_profiles_load():
    """Every shipped card and profile loads and validates; names and aliases resolve."""
    for name in cpplan.available_models():
        assert cpplan.load_model(name).name == name
    assert cpplan.load_model("Qwen3.6-35B-A3B").name == "qwen3.6-35b-a3b"
    assert set(cpplan.available_solvers()) >= {"runtime", "offline", "deterministic"}
    assert cpplan.load_solver("runtime").time_budget_s == pytest.approx(0.1)


def test_unknown_names():
    """Unknown model and solver names are refused listing what ships."""
    with pytest.raises(InputError, match=r"unknown model 'gpt-9'.*qwen3-8b"):
        cpplan.load_model("gpt-9")
    with pytest.raises(InputError, match=r"unknown solver profile 'fast'.*runtime"):
        cpplan.load_solver("fast")


def test_layers_keep_the_pattern(qwen36):
    """Truncating to N layers keeps the 3:1 GDN:attention pattern: 8 layers are 6 GDN + 2 attention."""
    assert qwen36.geometry.layer_counts(8) == {
        "layers": 8,
        "attn_layers": 2,
        "gdn_layers": 6,
        "moe_layers": 8,
        "dense_layers": 0,
    }
    assert qwen36.resolve(Topology(), num_layers=8).num_layers == 8
    with pytest.raises(InputError, match="layers"):
        qwen36.resolve(Topology(), num_layers=0)


def test_pp_refused(qwen36):
    """A topology the card cannot price (pp > 1) is refused, never priced as zero."""
    with pytest.raises(UnsupportedTopologyError, match="pp == 1"):
        qwen36.resolve(Topology(pp=2))


def card_text(qwen36_path, old: str, new: str) -> str:
    text = Path(qwen36_path).read_text()
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        ('bytes_per_unit = "layers * hidden * dtype_bytes"', 'bytes_per_unit = "layers * hiden"', "hiden"),
        (
            'bytes_per_unit = "layers * hidden * dtype_bytes"',
            'bytes_per_unit = "-layers * hidden"',
            "negative",
        ),
        ("safety = 1.1", "safety = nan", "safety"),
        ('quantity = "segments"', 'quantity = "pages"', "unknown quantity"),
        ("hidden = 2048\n", "", "hidden"),
    ],
)
def test_invalid_card_names_file_and_field(tmp_path, qwen36, old, new, needle):
    """A card with an unknown name, a negative term, NaN, an unknown quantity or a missing field is
    refused with its file and the field (and line where it can be found)."""
    path = tmp_path / "bad.toml"
    path.write_text(card_text(qwen36.path, old, new))
    with pytest.raises(InputError) as info:
        cpplan.load_model(path)
    assert str(path) in str(info.value) and needle in str(info.value)


def test_invalid_toml_syntax(tmp_path):
    """A TOML syntax error names the file and the line."""
    path = tmp_path / "bad.toml"
    path.write_text('name = "x"\nhidden = = 3\n')
    with pytest.raises(InputError, match=r"bad.toml:2"):
        cpplan.load_model(path)


def test_invalid_profile(tmp_path):
    """A profile with a non-positive time budget or unknown strategy is refused naming the field."""
    path = tmp_path / "p.toml"
    path.write_text('name = "p"\ntime_budget_s = 0\n')
    with pytest.raises(InputError, match="time_budget_s"):
        cpplan.load_solver(path)
    path.write_text('name = "p"\ntime_budget_s = 1\nstrategies = ["magic"]\n')
    with pytest.raises(InputError, match="strategies"):
        cpplan.load_solver(path)
    with pytest.raises(InputError, match="time_budget"):
        cpplan.load_solver("runtime").with_time_budget(-1)
