"""Write docs/kernel_fields.png: one wave's pieces, key paths and state sources, from a real plan.

    python docs/make_kernel_fields_figure.py [--output docs/kernel_fields.png]

A 10-token system prompt shared by two completions, and a lone request, packed with the ``full``
layout at CP2 in 4-token chunks dealt to the ranks 0, 1, 1, 0, ... Top: the packed sequence, each token
coloured by its owner, with segment boundaries. Below, one row per piece (rank by rank, in owned
order): the piece's key path (``attn_k_index``) as grey cells, its queries (the path's last cells) in
the owner's colour, and on the right the piece its recurrent state starts from.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cpplan import Item, Plan, Request, Settings, Topology, Workload, load_model, materialize_wave  # noqa: E402
from cpplan.pricing.problem import Problem  # noqa: E402
from cpplan.pricing.wave import price_wave  # noqa: E402

COLOURS = ("#4c72b0", "#dd8452")
CHUNK_TOKENS = 4


def example():
    """The example wave's rank batches (and the workload)."""
    system = list(range(10, 20))
    workload = Workload(
        items=(
            Item(
                id="g", requests=(Request(tokens=[*system, 1, 2, 3, 4]), Request(tokens=[*system, 5, 6, 7]))
            ),
            Item(id="lone", requests=(Request(tokens=[30, 31, 32, 33, 34, 35]),)),
        )
    )
    settings = Settings(topology=Topology(cp=2), model=load_model("qwen3-8b"), memory_bytes=2**40)
    problem = dataclasses.replace(Problem.build(workload, settings), chunk_tokens=CHUNK_TOKENS)
    items = list(range(workload.num_items))
    packed = problem.pack(items, "full")
    num_chunks = -(-packed.packed_tokens // CHUNK_TOKENS)
    owner = np.array([0, 1, 1, 0] * num_chunks)[:num_chunks]
    plan = Plan(strategy="figure", waves=(price_wave(problem, items, packed, "full", owner),))
    return materialize_wave(plan, workload, wave=0)


def draw(path: Path) -> None:
    """Render the figure to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    batches = example()
    first = batches[0]
    n = first.packed_tokens
    rows = [(b, i) for b in batches for i in range(b.num_pieces)]
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.42 * (len(rows) + 2)))
    owner, segment = first.token_owner.numpy(), first.segment_ids.numpy()
    top = len(rows) + 1.2
    for p in range(n):
        ax.add_patch(plt.Rectangle((p, top), 0.95, 0.8, color=COLOURS[owner[p]]))
        ax.text(p + 0.47, top + 0.4, str(segment[p]), ha="center", va="center", fontsize=7, color="white")
    for s in range(first.num_segments):
        x = int(first.seg_offset[s])
        ax.plot([x - 0.03, x - 0.03], [top - 0.1, top + 0.9], color="black", lw=1.5)
    ax.text(-0.6, top + 0.4, "packed tokens\n(segment id)", ha="right", va="center", fontsize=8)
    for y, (b, i) in enumerate(reversed(rows)):
        q = b.piece_cu_seqlens
        keys = b.attn_k_index[int(b.attn_k_cu_seqlens[i]) : int(b.attn_k_cu_seqlens[i + 1])].numpy()
        num_queries = int(q[i + 1] - q[i])
        for j, p in enumerate(keys):
            is_query = j >= keys.size - num_queries
            colour = COLOURS[b.rank] if is_query else "#bbbbbb"
            ax.add_patch(plt.Rectangle((p, y), 0.95, 0.8, color=colour))
        ax.text(-0.6, y + 0.4, f"rank {b.rank} piece {i}", ha="right", va="center", fontsize=8)
        src_rank, src_piece = int(b.state_source_rank[i]), int(b.state_source_piece[i])
        source = "zero state" if src_rank < 0 else f"state of rank {src_rank} piece {src_piece}"
        ax.text(n + 0.4, y + 0.4, source, ha="left", va="center", fontsize=8)
    ax.set_xlim(-7, n + 8)
    ax.set_ylim(-0.5, top + 1.6)
    ax.set_xticks(range(0, n, 2))
    ax.set_yticks([])
    ax.set_xlabel("packed position")
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    ax.set_title(
        "Pieces (coloured: the piece's queries, by owner), key paths (grey: keys the queries see before "
        "them) and state sources; CP2, 4-token chunks",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "kernel_fields.png")
    draw(parser.parse_args().output)


if __name__ == "__main__":
    main()
