"""Line numbers of keys in TOML text, so that errors about a card or profile field can name its line.

``tomllib`` keeps no positions, so the text is scanned once: table headers (``[a.b]``), arrays of
tables (``[[a.b]]``, element ``k`` is path ``(a, b, k)`` and, when it has a ``name = "x"`` key, also
``(a, b, "x")``) and ``key = value`` lines. A path that is not written in the file (a missing field)
falls back to its nearest enclosing table.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

_KEY = re.compile(r'^\s*("[^"]*"|\'[^\']*\'|[A-Za-z0-9_\-.]+(?:\s*\.\s*[A-Za-z0-9_\-]+)*)\s*=')


def _split(key: str) -> tuple[str, ...]:
    return tuple(part.strip().strip("\"'") for part in key.split("."))


def line_index(text: str) -> dict[tuple[str | int, ...], int]:
    """Every table and key path in ``text`` mapped to the line (1-based) that first defines it."""
    index: dict[tuple[str | int, ...], int] = {}
    elements: dict[tuple[str | int, ...], int] = {}
    header: tuple[str | int, ...] = ()
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("[["):
            name = _split(stripped[2 : stripped.find("]]")])
            k = elements.get(name, 0)
            elements[name] = k + 1
            header = (*name, k)
        elif stripped.startswith("["):
            header = _split(stripped[1 : stripped.find("]")])
        else:
            match = _KEY.match(line)
            if match is None:
                continue
            key = _split(match.group(1))
            index.setdefault((*header, *key), number)
            if key == ("name",) and header and isinstance(header[-1], int):
                value = stripped.split("=", 1)[1].strip().strip("\"'")
                index.setdefault((*header[:-1], value), index[header])
            continue
        for end in range(1, len(header) + 1):
            index.setdefault(header[:end], number)
    return index


def toml_line(text: str, path: Sequence[str | int]) -> int | None:
    """The line defining ``path`` in ``text``, or that of its nearest enclosing table written there."""
    index = line_index(text)
    path = tuple(path)
    for end in range(len(path), 0, -1):
        if path[:end] in index:
            return index[path[:end]]
    return None


def file_line(file: str | Path | None, field: str | Sequence[str | int]) -> int | None:
    """:func:`toml_line` for a TOML file and a dotted field name (``None`` when it cannot be read)."""
    if file is None or not str(file).endswith(".toml"):
        return None
    try:
        text = Path(file).read_text(encoding="utf-8")
    except OSError:
        return None
    path = tuple(field.split(".")) if isinstance(field, str) else tuple(field)
    return toml_line(text, path)
