"""Requests and items: the validated, immutable pieces of a workload (a request's tokens and flags, an
item's requests that share prefixes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StrictBool, ValidationInfo, field_validator

from cpplan.errors import InputError
from cpplan.spec.prefix_digest import PrefixDigest, prefix_digest
from cpplan.spec.validation import InputErrors

MAX_TOKEN_ID = 2**31 - 1
Output = Literal["loss", "logits", "hidden", "none"]


class Request(BaseModel, metaclass=InputErrors):
    """One token sequence with its flags.

    ``tokens`` is stored as a read-only 1-D ``int64`` numpy array of ids in ``[0, 2**31)``.
    ``grad``: gradients are taken through it. ``output``: what the trainer reads back.
    ``loss_mask``: optional, one 0/1 per token; 1 at ``t`` means predicting token ``t`` counts in the
    loss (completion-only losses for GRPO/PPO, assistant-only masks for chat). Token 0 is never
    predicted, so its entry never counts. ``None`` (the default): every predicted token counts when
    ``output`` is ``"loss"``. Stored as a read-only ``bool`` array.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, extra="forbid")

    tokens: np.ndarray
    grad: StrictBool = True
    output: Output = "loss"
    loss_mask: np.ndarray | None = None

    @field_validator("tokens", mode="before")
    @classmethod
    def _tokens_array(cls, value: Any) -> np.ndarray:
        value = _from_array_like(value)
        if isinstance(value, str | bytes) or not isinstance(value, Sequence | np.ndarray):
            raise ValueError("must be a list of integer token ids")
        try:
            array = np.asarray(value)
        except ValueError:
            array = np.asarray(value, dtype=object)
        if array.ndim != 1:
            raise ValueError("must be a flat list of integer token ids")
        if array.size == 0:
            raise ValueError("must not be empty")
        if array.dtype.kind not in "iu" or (isinstance(value, list) and bool in map(type, value)):
            ids = value.tolist() if isinstance(value, np.ndarray) else value
            bad = next((i for i, t in enumerate(ids) if not _is_int(t) or not 0 <= t <= MAX_TOKEN_ID), 0)
            if _is_int(ids[bad]):
                raise ValueError(f"token {bad} is {ids[bad]}, outside [0, {MAX_TOKEN_ID}]")
            raise ValueError(f"token {bad} is {ids[bad]!r}, not an integer")
        array = array.astype(np.int64, copy=True)
        out_of_range = np.flatnonzero((array < 0) | (array > MAX_TOKEN_ID))
        if out_of_range.size:
            k = int(out_of_range[0])
            raise ValueError(f"token {k} is {int(array[k])}, outside [0, {MAX_TOKEN_ID}]")
        array.flags.writeable = False
        return array

    @field_validator("grad", mode="before")
    @classmethod
    def _grad_is_bool(cls, value: Any) -> bool:
        if not isinstance(value, bool | np.bool_):
            raise ValueError(f"must be a boolean (true or false), got {value!r}")
        return bool(value)

    @field_validator("loss_mask", mode="before")
    @classmethod
    def _mask_array(cls, value: Any) -> np.ndarray | None:
        if value is None:
            return None
        value = _from_array_like(value)
        if isinstance(value, str | bytes) or not isinstance(value, Sequence | np.ndarray):
            raise ValueError("must be a list of 0/1 per token")
        array = np.asarray(value, dtype=object) if isinstance(value, Sequence) else np.asarray(value)
        if array.ndim != 1:
            raise ValueError("must be a flat list of 0/1 per token")
        bad = next((i for i, v in enumerate(array.tolist()) if v not in (0, 1) or isinstance(v, float)), None)
        if bad is not None:
            raise ValueError(f"entry {bad} is {array.tolist()[bad]!r}; every entry must be 0 or 1")
        mask = array.astype(bool)
        mask.flags.writeable = False
        return mask

    @field_validator("loss_mask")
    @classmethod
    def _mask_length(cls, mask: np.ndarray | None, info: ValidationInfo) -> np.ndarray | None:
        tokens = info.data.get("tokens")
        if mask is not None and tokens is not None and mask.size != tokens.size:
            raise ValueError(f"has {mask.size} entries for {tokens.size} tokens: give one 0/1 per token")
        return mask

    @property
    def num_tokens(self) -> int:
        """Number of tokens."""
        return int(self.tokens.size)

    def predicted(self) -> np.ndarray:
        """Per position ``t < n - 1``, whether the logits at ``t`` (predicting token ``t + 1``) count in
        the loss: the mask shifted by one, or every position without a mask; none unless ``output`` is
        ``"loss"``."""
        if self.output != "loss":
            return np.zeros(self.num_tokens - 1, dtype=bool)
        if self.loss_mask is None:
            return np.ones(self.num_tokens - 1, dtype=bool)
        return self.loss_mask[1:].copy()

    def logits_needed(self) -> np.ndarray:
        """Per token ``t``, whether the trainer needs the logits at ``t`` (what the planner prices the LM
        head on): every token for ``output == "logits"``; for ``"loss"``, the positions
        :meth:`predicted` sets when the request has a ``loss_mask`` (the head runs only where a loss
        target is read), every token when it has none (the head runs over the whole sequence);
        none for ``"hidden"`` and ``"none"``."""
        if self.output == "logits" or (self.output == "loss" and self.loss_mask is None):
            return np.ones(self.num_tokens, dtype=bool)
        needed = np.zeros(self.num_tokens, dtype=bool)
        if self.output == "loss":
            needed[:-1] = self.loss_mask[1:]
        return needed


def _from_array_like(value: Any) -> Any:
    """A torch tensor (on any device) or another array numpy reads (``__array__``) as a numpy array, so
    every array library's ids are taken as numpy's are; anything else unchanged."""
    if isinstance(value, Sequence | np.ndarray) or not hasattr(value, "__array__"):
        return value
    if callable(getattr(value, "detach", None)) and callable(getattr(value, "cpu", None)):
        value = value.detach().cpu()
    return np.asarray(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


class Item(BaseModel, metaclass=InputErrors):
    """The unit placed into a wave: requests that must run together (one prompt's samples, say)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    requests: tuple[Request, ...] = Field(min_length=1)
    _prefix_digest: PrefixDigest = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        """Compute the prefix digest once, with the item (a few microseconds; the validated requests
        cost more)."""
        self._prefix_digest = prefix_digest([r.tokens for r in self.requests])

    @property
    def prefix_digest(self) -> PrefixDigest:
        """What the replica partition reads of this item (:mod:`cpplan.spec.prefix_digest`)."""
        return self.__pydantic_private__["_prefix_digest"]  # without pydantic's __getattr__ (2 us)

    @property
    def num_tokens(self) -> int:
        """Logical (unpacked) tokens over the item's requests."""
        return sum(r.num_tokens for r in self.requests)


def check_vocabulary(
    item: Item, vocab: int, *, source: str | None, line: int | None, field_prefix: str = ""
) -> None:
    """Raise :class:`InputError` for the first token id of ``item`` that the model's vocabulary of
    ``vocab`` ids (``0 .. vocab - 1``) does not hold: its embedding row does not exist, so no wave
    holding it can run, whatever its plan."""
    for k, request in enumerate(item.requests):
        if request.tokens.size and np.maximum.reduce(request.tokens) >= vocab:  # one pass, no array
            t = int(np.flatnonzero(request.tokens >= vocab)[0])
            raise InputError(
                f"item {item.id!r} request {k}: token {t} is {int(request.tokens[t]):,}, beyond the model's "
                f"vocabulary of {vocab:,} ids (0 to {vocab - 1:,})",
                file=source,
                line=line,
                field=f"{field_prefix}requests[{k}].tokens",
            )
