"""Every Python block of docs/*.md runs as written, from the repository's root, in a fresh namespace,
unless it says on its first line that it is a sketch (a fragment of the reader's own loop, which names
what the reader supplies); sketches must still compile. docs/integrations.md's blocks need the trainers'
extras and are run by tests/integrations/test_integration_docs.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.hf_models import one_thread  # noqa: F401 (autouse fixture)

ROOT = Path(__file__).resolve().parents[1]
SKETCH = "# A sketch ("
RUN_ELSEWHERE = {"integrations.md": "tests/integrations/test_integration_docs.py"}


def blocks() -> list[tuple[str, int, str]]:
    """Each Python block of docs/*.md as (file name, its index in the file, its code)."""
    found = []
    for doc in sorted((ROOT / "docs").glob("*.md")):
        text = doc.read_text(encoding="utf-8")
        for k, match in enumerate(re.finditer(r"```python\n(.*?)```", text, flags=re.DOTALL)):
            found.append((doc.name, k, match.group(1)))
    return found


BLOCKS = blocks()
RUNNABLE = [b for b in BLOCKS if b[0] not in RUN_ELSEWHERE and not b[2].startswith(SKETCH)]


def test_every_block_either_runs_or_says_it_is_a_sketch():
    """A sketch names on its first line what the reader supplies; every block compiles; the pages with
    runnable blocks are the ones expected (so that a regex slip cannot empty the runs below)."""
    for name, k, code in BLOCKS:
        compile(code, f"docs/{name} block {k}", "exec")
        if code.startswith(SKETCH):
            assert "are yours" in code.splitlines()[0] or "is yours" in code.splitlines()[0], (name, k)
    assert {name for name, _, _ in RUNNABLE} >= {"dynamic_cp.md", "hf.md", "materialize.md"}


@pytest.mark.parametrize(("name", "index", "code"), RUNNABLE, ids=[f"{b[0]}-{b[1]}" for b in RUNNABLE])
def test_doc_block_runs_as_written(name, index, code, monkeypatch):
    """The block, exactly as the page has it, runs without error from the repository's root in an
    empty namespace (every name it uses is its own or imported)."""
    monkeypatch.chdir(ROOT)
    scope: dict = {}
    exec(compile(code, str(ROOT / "docs" / name), "exec"), scope)
    assert {k for k in scope if not k.startswith("__")}, "the block bound nothing"
