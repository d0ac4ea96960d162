"""docs/cli.md is generated from the commands, so it lists every command and option as they are."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_current():
    """docs/cli.md is exactly what docs/make_cli_reference.py writes (regenerate it after changing an
    option), and it has a section for every command."""
    module = _module("make_cli_reference")
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert text == module.render()
    for name in module.COMMANDS:
        assert f"## `cpplan {name}`" in text


def test_concepts_figure_script_draws_the_packed_tree(tmp_path):
    """docs/make_concepts_figure.py draws a real wave (full sharing at CP4, every rank owning tokens)."""
    module = _module("make_concepts_figure")
    arrays = module.wave_arrays()
    assert arrays.num_ranks == 4 and set(arrays.token_owner.tolist()) == {0, 1, 2, 3}
    assert arrays.num_segments == 9 and int((arrays.seg_parent == -1).sum()) == 1
    path = tmp_path / "tree.png"
    module.render(arrays, path)
    assert path.read_bytes().startswith(b"\x89PNG")
