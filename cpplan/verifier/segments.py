"""The verifier's reading of a wave's segment tree: ``[parent, position, length]`` triples, each parent
before its children, each child continuing its parent's positions."""

from __future__ import annotations

import itertools
from typing import Any

Segment = tuple[int, ...]


def read_segments(wave: dict[str, Any]) -> list[Segment]:
    """The wave's segments as integer ``(parent, position, length)`` triples."""
    raw = wave["segments"]
    if isinstance(raw, list):
        segments = [tuple(s) for s in raw if isinstance(s, list)]
        if len(segments) == len(raw) and set(map(type, itertools.chain.from_iterable(segments))) <= {int}:
            return segments  # already integers (every plan the writer makes)
    return [tuple(int(x) for x in s) for s in raw]


def check_segments(w: int, segments: list[Segment], violations: list[str]) -> None:
    """Every segment holds tokens, a root starts at position 0, a child's parent comes before it and
    the child continues the parent's positions."""
    for s, (parent, position, length) in enumerate(segments):
        if length < 1:
            violations.append(f"wave {w} segment {s}: length {length} < 1")
        if parent == -1:
            if position != 0:
                violations.append(
                    f"wave {w} segment {s}: a root segment starts at position {position}, not 0"
                )
        elif not 0 <= parent < s:
            violations.append(f"wave {w} segment {s}: parent {parent} does not come before it")
        elif position != segments[parent][1] + segments[parent][2]:
            violations.append(f"wave {w} segment {s}: position {position} does not continue parent {parent}")


def segment_offsets(segments: list[Segment]) -> tuple[list[int], int]:
    """Where each segment starts in the packed sequence (segments laid end to end), and its length."""
    offsets = [0] * len(segments)
    for s in range(1, len(segments)):
        offsets[s] = offsets[s - 1] + segments[s - 1][2]
    packed = offsets[-1] + segments[-1][2] if segments else 0
    return offsets, packed


def check_packed_tokens(w: int, wave: dict[str, Any], packed: int, violations: list[str]) -> None:
    """The wave's claimed ``packed_tokens`` is what its segments hold."""
    if wave.get("packed_tokens") != packed:
        violations.append(f"wave {w}: packed_tokens {wave.get('packed_tokens')} but segments hold {packed}")
