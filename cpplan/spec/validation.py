"""pydantic's validation errors as :class:`~cpplan.errors.InputError`: the first error, with the file,
the line and the field it concerns, and pydantic's ``Value error, `` prefix dropped."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ValidationError

from cpplan.errors import InputError
from cpplan.spec.tomlines import toml_line


def input_error(
    exc: ValidationError,
    *,
    file: str | Path | None = None,
    line: int | None = None,
    toml_text: str | None = None,
    field_root: str | None = None,
    field_in_message: bool = False,
) -> InputError:
    """The first error of ``exc`` as an :class:`InputError` naming ``file``, ``line`` and the field.

    ``toml_text``: the text of ``file`` (a TOML card or profile); the line is that of the field there, and
    a missing field reads "required field is missing". ``field_root`` is put in front of the field's path
    (``topology`` gives ``topology.cp``). ``field_in_message`` names the field at the start of the message
    instead (``items: ...``), for an error about a whole object.
    """
    error = exc.errors()[0]
    path = tuple(error["loc"])
    message = _in_our_words(error)
    if toml_text is not None:
        line = toml_line(toml_text, path)
        if error["type"] == "missing":
            message = "required field is missing"
    field = ".".join(str(p) for p in ((field_root,) if field_root else ()) + path) or None
    file = None if file is None else str(file)
    if field_in_message:
        return InputError(f"{field}: {message}" if field else message, file=file, line=line)
    return InputError(message, file=file, line=line, field=field)


def _in_our_words(error: dict) -> str:
    """pydantic's message of one error, its length limits said as cpplan says them ("must not be
    empty"), its ``Value error, `` prefix dropped."""
    if error["type"] in ("too_short", "string_too_short"):
        least = error.get("ctx", {}).get("min_length", 1)
        what = "characters" if error["type"] == "string_too_short" else "entries"
        return "must not be empty" if least == 1 else f"must hold at least {least} {what}"
    return error["msg"].removeprefix("Value error, ")


class InputErrors(type(BaseModel)):
    """Metaclass of the models users build by hand (``Topology(cp=0)``, ``Request(tokens=[])``): a
    direct construction that fails raises :func:`input_error` (an :class:`InputError`, so a
    ``ValueError``, naming the field) instead of pydantic's ``ValidationError``. A class sets
    ``FIELD_ROOT`` (a ``ClassVar``) to put a name in front of its fields (``topology.cp``). Validation of
    nested data (``Item.model_validate``) is untouched and still raises ``ValidationError``, which the
    readers turn into errors naming the file and the line."""

    def __call__(cls, *args: object, **kwargs: object) -> object:
        try:
            return super().__call__(*args, **kwargs)
        except ValidationError as exc:
            raise input_error(exc, field_root=getattr(cls, "FIELD_ROOT", None)) from None
