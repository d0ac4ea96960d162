"""The ART section of docs/integrations.md runs as written: its direct-call block packs synthetic
results, and (with openpipe-art installed) its one-line change puts cpplan's packer where ART's
LocalBackend calls its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cpplan.integrations.art.art_import import art_version

DOC = Path(__file__).resolve().parents[3] / "docs" / "integrations.md"
SECTION = "## ART: `packed_tensors_from_tokenized_results`"


def art_blocks() -> list[str]:
    """The Python blocks of the ART section, in order."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    return re.findall(r"```python\n(.*?)```", text[start:end], flags=re.DOTALL)


def test_direct_call_block_packs(capsys):
    """The direct-call block runs as written: it prints the tensors' shape, padded to a multiple of
    1,024 columns, whose rows hold each group's prompt once (real tokens: every result's own tokens
    plus one prompt a group, the groups being in one row each)."""
    blocks = art_blocks()
    assert len(blocks) == 2
    scope: dict = {}
    exec(compile(blocks[1], str(DOC), "exec"), scope)
    shape = tuple(scope["tensors"]["tokens"].shape)
    assert shape[1] % 1024 == 0
    results = scope["results"]
    prompts = {r.prompt_id: r.prompt_length for r in results}
    own = sum(len(r.token_ids) - r.prompt_length for r in results)
    assert int((scope["tensors"]["group_ids"] != -1).sum()) == own + sum(prompts.values())
    assert str(shape) in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.skipif(art_version() is None, reason="openpipe-art is not installed (pip install 'cpplan[art]')")
def test_one_line_change_replaces_arts_packer(monkeypatch):
    """The one-line block, run as written after ART's import, leaves ``art.local.backend`` calling a
    function of ART's signature that packs with cpplan (its bound planner has the block's budget)."""
    import inspect

    from cpplan.integrations.art.art_import import import_art

    art = import_art()
    backend = pytest.importorskip("art.local.backend", reason="ART's LocalBackend does not import here")
    monkeypatch.setattr(
        backend, "packed_tensors_from_tokenized_results", backend.packed_tensors_from_tokenized_results
    )
    exec(compile(art_blocks()[0], str(DOC), "exec"), {})
    replaced = backend.packed_tensors_from_tokenized_results
    assert replaced.keywords["planner"].memory_bytes == 60 * 2**30
    ours = list(inspect.signature(replaced.func).parameters)[:7]
    theirs = list(inspect.signature(art.pack.packed_tensors_from_tokenized_results).parameters)
    assert ours == theirs
