"""Typed errors. User errors are ``ValueError`` subclasses; the CLI maps them to exit codes."""

from __future__ import annotations


class CpplanError(ValueError):
    """Base class for every error cpplan reports to a user."""


class InputError(CpplanError):
    """Bad input: names the file, the line and the field where it can.

    The CLI exits 2 on it.
    """

    def __init__(
        self, message: str, *, file: str | None = None, line: int | None = None, field: str | None = None
    ) -> None:
        self.file = file
        self.line = line
        self.field = field
        where = []
        if file is not None:
            where.append(str(file) if line is None else f"{file}:{line}")
        if field is not None:
            where.append(f"field '{field}'")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class UnsupportedTopologyError(InputError):
    """The model card cannot price this topology (for example pp > 1)."""


class NoFitError(CpplanError):
    """Nothing fits: names the item (and request), the rank, the bytes and the budget. The CLI exits 3."""

    def __init__(
        self,
        message: str,
        *,
        item: str | None = None,
        request: int | None = None,
        rank: int | None = None,
        needed_bytes: int | None = None,
        memory_bytes: int | None = None,
    ) -> None:
        self.item = item
        self.request = request
        self.rank = rank
        self.needed_bytes = needed_bytes
        self.memory_bytes = memory_bytes
        super().__init__(message)
