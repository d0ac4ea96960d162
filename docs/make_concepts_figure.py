"""Write docs/packed_tree.png: one wave of a small GRPO workload, as cpplan packs and owns it.

    python docs/make_concepts_figure.py [--output docs/packed_tree.png]

Two prompts with three completions each share a 256-token system prompt. The wave is priced under the
``full`` layout (every shared prefix stored once) at CP4, and every token is coloured by the CP rank
that owns it. Top: the prefix tree, each segment at its original positions (the x axis is a request's
token position, so RoPE positions read straight off it). Bottom: the same segments in packed order, cut
into 128-token chunks, the unit of ownership.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cpplan import Settings, Topology, load_model  # noqa: E402
from cpplan.bench.synthetic import grpo  # noqa: E402
from cpplan.plans.plan_reader import WaveArrays  # noqa: E402
from cpplan.pricing.problem import Problem  # noqa: E402
from cpplan.pricing.wave import best_wave  # noqa: E402

COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52")


def wave_arrays() -> WaveArrays:
    """The example wave: six requests under one system prompt, packed with the full layout at CP4."""
    workload = grpo(
        num_prompts=2, group_size=3, system_tokens=256, prompt_tokens=(300, 420), completion_tokens=(90, 200)
    )
    settings = Settings(topology=Topology(cp=4), model=load_model("qwen3-8b"), memory_bytes=2**40)
    problem = Problem.build(workload, settings)
    wave, _ = best_wave(problem, range(workload.num_items), ("full",))
    assert wave is not None
    return WaveArrays.from_wave_plan(wave)


def _runs(owner, start: int, length: int) -> list[tuple[int, int, int]]:
    """``(offset in the span, length, rank)`` of each run of one owner over ``length`` tokens."""
    runs, begin = [], 0
    for k in range(1, length + 1):
        if k == length or owner[start + k] != owner[start + begin]:
            runs.append((begin, k - begin, int(owner[start + begin])))
            begin = k
    return runs


def _depth_first(arrays: WaveArrays) -> list[int]:
    """Segments in depth-first order (a parent, then each child's subtree)."""
    children: dict[int, list[int]] = {}
    for s, parent in enumerate(arrays.seg_parent.tolist()):
        children.setdefault(parent, []).append(s)
    order, todo = [], list(reversed(children.get(-1, [])))
    while todo:
        s = todo.pop()
        order.append(s)
        todo.extend(reversed(children.get(s, [])))
    return order


def _tree(ax, arrays: WaveArrays) -> None:
    """The prefix tree: one row per segment, x by original position, coloured by owning rank."""
    order = _depth_first(arrays)
    row_of = {s: row for row, s in enumerate(order)}
    for s in order:
        y = -row_of[s]
        start, offset, length = (
            int(a[s]) for a in (arrays.seg_position, arrays.seg_offset, arrays.seg_length)
        )
        for begin, size, rank in _runs(arrays.token_owner, offset, length):
            ax.barh(y, size, left=start + begin, height=0.7, color=COLOURS[rank])
        ax.text(start + length + 8, y, f"segment {s} ({length} tokens)", va="center", fontsize=8)
        parent = int(arrays.seg_parent[s])
        if parent >= 0:
            ax.plot([start, start], [-row_of[parent] - 0.35, y + 0.35], color="#333", linestyle=":", lw=1)
    ax.set(title="Prefix tree of the wave (x: token position within a request)", xlabel="position")
    ax.set_yticks([])
    ax.set_xlim(0, int((arrays.seg_position + arrays.seg_length).max()) * 1.3)


def _packed(ax, arrays: WaveArrays) -> None:
    """The packed sequence: segments in packed order, 128-token chunk boundaries, owners' colours."""
    total = arrays.packed_tokens
    for begin, size, rank in _runs(arrays.token_owner, 0, total):
        ax.barh(0, size, left=begin, height=0.8, color=COLOURS[rank])
    for c in range(0, total + 1, arrays.chunk_tokens):
        ax.axvline(c, ymin=0.1, ymax=0.9, color="white", lw=1)
    for s in range(arrays.num_segments):
        x = int(arrays.seg_offset[s])
        ax.plot([x, x], [-0.45, 0.45], color="black", lw=1.2)
        ax.text(x + 4, -0.7, f"seg {s}", fontsize=8, va="center")
    ax.set(
        title=f"Packed sequence: {total:,} tokens; white lines: {arrays.chunk_tokens}-token chunks, "
        "black: segment starts",
        xlabel="packed position",
        xlim=(0, total),
        ylim=(-0.95, 0.5),
    )
    ax.set_yticks([])


def render(arrays: WaveArrays, path: Path) -> None:
    """Draw both panels and a legend of ranks into ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(10, 6.2), gridspec_kw={"height_ratios": [4, 1.5]}, layout="constrained"
    )
    _tree(top, arrays)
    _packed(bottom, arrays)
    legend = [Patch(color=COLOURS[r], label=f"CP rank {r}") for r in range(arrays.num_ranks)]
    fig.legend(handles=legend, loc="outside lower center", ncol=arrays.num_ranks, frameon=False)
    fig.suptitle("One wave: 2 prompts x 3 completions under a shared system prompt, full sharing, CP4")
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)


def main() -> None:
    """Write the figure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "packed_tree.png")
    path = parser.parse_args().output
    render(wave_arrays(), path)
    print(path)


if __name__ == "__main__":
    main()
