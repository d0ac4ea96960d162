"""The commonest reasons in a pack's ``rejects.jsonl``, for a pack that planned nothing."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

_WHERE = re.compile(r"^.*?:\d+(?:, |: )")
_QUOTED = re.compile(r"'[^']*'")
_NUMBER = re.compile(r"\d[\d,.]*")


def reason_kind(reason: str) -> str:
    """A reason with its place, quoted names and numbers blanked, so that like reasons group together."""
    return _NUMBER.sub("N", _QUOTED.sub("'…'", _WHERE.sub("", reason, count=1)))


def summarize_rejects(path: Path, top: int = 3) -> str:
    """The ``top`` commonest kinds of reason in a rejects file, each with its count and a first example
    (its line and full reason), one per line."""
    counts: Counter[tuple[str, str]] = Counter()
    examples: dict[tuple[str, str], dict] = {}
    with path.open(encoding="utf-8") as handle:
        for text in handle:
            if not text.strip():
                continue
            entry = json.loads(text)
            key = (entry.get("kind", "?"), reason_kind(str(entry.get("reason", ""))))
            counts[key] += 1
            examples.setdefault(key, entry)
    lines = []
    for (kind, _), count in counts.most_common(top):
        example = examples[(kind, _)]
        lines.append(f"  {count:,} x {kind}, e.g. line {example.get('line')}: {example.get('reason')}")
    if len(counts) > top:
        lines.append(f"  ... and {len(counts) - top} other kind(s) of reason")
    return "\n".join(lines)
