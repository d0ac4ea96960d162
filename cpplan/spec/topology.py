"""Parallel topology: TP, CP, EP, ETP, PP and DP sizes."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from cpplan.errors import InputError
from cpplan.spec.validation import InputErrors

AXES = ("tp", "cp", "ep", "etp", "pp", "dp")


class Topology(BaseModel, metaclass=InputErrors):
    """Sizes of the parallel axes; each defaults to 1.

    CP shards tokens (rows), TP shards features, EP shards experts (ETP shards each expert's features),
    PP shards layers and DP replicates the model over different items. The expert grid ``ep * etp``
    must divide the dense grid ``tp * cp * dp`` it is folded onto.

    With ``dynamic_cp`` the ``dp * cp`` GPUs of each TP group form one pool, and every wave chooses its
    own CP group size: a power of two dividing the pool, placed on an aligned block of pool ranks
    (:meth:`group_sizes`, :meth:`group`). The pool must then be a power of two, so every group size up
    to the pool tiles it, and ``cp`` (the fixed-CP candidate's size) is one of them.

    ``equal_waves``: every GPU of the pool runs the same number of waves (a GPU with fewer real waves
    runs empty padding waves, each priced at the card's fixed per-wave cost), as FSDP and ZeRO-3 need
    (every forward all-gathers parameters over the whole pool). ``None`` (the default) is resolved when
    the topology is made: on exactly when the pool holds more than one CP group (``dp > 1`` or dynamic
    CP); ``False`` for a trainer that only reduces after the step. So ``Topology(dp=2)`` equals
    ``Topology(dp=2, equal_waves=True)``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    FIELD_ROOT: ClassVar[str] = "topology"

    tp: int = Field(default=1, le=1024)
    cp: int = Field(default=1, le=1024)
    ep: int = Field(default=1, le=1024)
    etp: int = Field(default=1, le=1024)
    pp: int = Field(default=1, le=1024)
    dp: int = Field(default=1, le=65536)
    dynamic_cp: bool = False
    equal_waves: bool | None = None

    @field_validator(*AXES, mode="before")
    @classmethod
    def _an_integer(cls, value: object) -> object:
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise ValueError(
                f"must be an integer (an int, not a {type(value).__name__}), got {value!r}; "
                "Topology.parse('cp=2') reads sizes from text"
            )
        return int(value)

    @field_validator(*AXES)
    @classmethod
    def _positive(cls, value: int, info: ValidationInfo) -> int:
        if value < 1:
            raise ValueError(f"{info.field_name} must be a positive integer, got {value}")
        return value

    @model_validator(mode="after")
    def _expert_grid_divides(self) -> Topology:
        dense = self.tp * self.cp * self.dp
        if dense % (self.ep * self.etp) != 0:
            raise ValueError(f"ep*etp = {self.ep * self.etp} must divide tp*cp*dp = {dense}")
        return self

    @model_validator(mode="after")
    def _pool_tiles(self) -> Topology:
        pool = self.pool
        if self.dynamic_cp and pool & (pool - 1):
            raise ValueError(
                f"dynamic_cp needs a pool of dp x cp GPUs that every group size divides: dp={self.dp} x "
                f"cp={self.cp} = {pool} is not a multiple of group size {(pool & -pool) * 2} (group sizes "
                "are the powers of two up to the pool; use a pool of 1, 2, 4, 8, 16, ... GPUs)"
            )
        return self

    @property
    def pool(self) -> int:
        """GPUs of one TP group's data- and context-parallel grid: ``dp * cp``."""
        return self.dp * self.cp

    @model_validator(mode="after")
    def _resolve_equal_waves(self) -> Topology:
        if self.equal_waves is None:
            self.__dict__["equal_waves"] = self.several_groups
        return self

    @property
    def several_groups(self) -> bool:
        """Whether the pool holds more than one CP group (``dp > 1`` or dynamic CP)."""
        return self.dynamic_cp or self.dp > 1

    @property
    def needs_equal_waves(self) -> bool:
        """Whether every GPU of the pool must run the same number of waves (:attr:`equal_waves`,
        resolved)."""
        return bool(self.equal_waves)

    def group_sizes(self) -> tuple[int, ...]:
        """The CP group sizes a wave may take: every power of two up to the pool under ``dynamic_cp``,
        else the fixed ``cp``."""
        if not self.dynamic_cp:
            return (self.cp,)
        return tuple(1 << k for k in range(self.pool.bit_length()))

    def group(self, size: int) -> Topology:
        """The fixed-CP topology a wave of CP group ``size`` runs under: the same pool, ``cp = size``,
        ``dp = pool / size``, and the pool's equal-waves requirement."""
        assert self.pool % size == 0, f"group size {size} does not divide the pool of {self.pool}"
        equal = self.needs_equal_waves
        return self.model_copy(
            update={"cp": size, "dp": self.pool // size, "dynamic_cp": False, "equal_waves": equal}
        )

    @classmethod
    def parse(cls, text: str) -> Topology:
        """Parse ``tp=1,cp=4,ep=1,etp=1,pp=1,dp=1``: comma-separated ``NAME=SIZE`` pairs, names in lower
        case, sizes in ASCII digits; sizes left out are 1. ``dynamic_cp=1`` and ``equal_waves=0|1`` set
        those flags."""
        sizes: dict[str, int] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, sep, value = part.partition("=")
            flag = name.strip()
            if flag in ("dynamic_cp", "equal_waves") and flag not in sizes:
                sizes[flag] = _flag(value.strip() if sep else "1", flag)
                continue
            name, size = _axis_size(part)
            if name in sizes:
                raise InputError(f"{name} given twice", field=f"topology.{name}")
            sizes[name] = size
        return cls.create(**sizes)

    @classmethod
    def create(cls, **sizes: int) -> Topology:
        """Validated construction that reports problems as :class:`InputError` (as ``Topology(...)``
        itself does)."""
        return cls(**sizes)

    def __str__(self) -> str:
        text = ",".join(f"{axis}={getattr(self, axis)}" for axis in AXES)
        text += ",dynamic_cp=1" if self.dynamic_cp else ""
        equal = self.needs_equal_waves
        return text + (f",equal_waves={int(equal)}" if equal != self.several_groups else "")

    def as_env(self) -> dict[str, float]:
        """The sizes as formula names."""
        return {axis: float(getattr(self, axis)) for axis in AXES}


def _axis_size(part: str) -> tuple[str, int]:
    """One ``NAME=SIZE`` pair of a topology string."""
    name, sep, value = part.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or name not in AXES:
        hint = f"; axis names are lower case ({name.lower()})" if name.lower() in AXES else ""
        raise InputError(
            f"cannot read {part!r}; expected NAME=SIZE with NAME in {', '.join(AXES)}{hint}",
            field="topology",
        )
    digits = value.removeprefix("-")
    if not (digits.isascii() and digits.isdigit()):
        hint = (
            "; separate the sizes with commas, e.g. cp=2,tp=1"
            if "=" in value or " " in value
            else "; write it in the digits 0-9"
        )
        raise InputError(f"{name}={value!r} is not an integer{hint}", field=f"topology.{name}")
    return name, int(value)


def _flag(value: str, name: str) -> bool:
    """``dynamic_cp=1`` / ``true`` / ``0`` / ``false`` (or ``equal_waves=...``) in a topology string."""
    lowered = value.lower()
    if lowered in ("1", "true", "yes"):
        return True
    if lowered in ("0", "false", "no"):
        return False
    raise InputError(f"{name}={value!r} is not 0, 1, true or false", field=f"topology.{name}")
