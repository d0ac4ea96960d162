"""Options shared by the subcommands that price plans, and how they become :class:`Settings`.

Importing this module stays light (click only): ``cpplan --help`` must not pull in the planner.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from cpplan.errors import InputError
from cpplan.spec.units import (
    MEMORY_MEANING,
    format_bytes,
    format_bytes_like,
    memory_from_gpu,
    memory_warning,
    parse_memory,
)

if TYPE_CHECKING:
    from cpplan.spec.records import RecordFields
    from cpplan.spec.settings import Settings
    from cpplan.spec.topology import Topology

MEMORY_HELP = (
    f"{MEMORY_MEANING[0].upper()}{MEMORY_MEANING[1:]}, e.g. 40GiB (units: GiB, GB, MiB, MB, KiB, KB, "
    "TiB, TB; a number alone is bytes; 40G is refused: write 40GiB or 40GB). Or give --gpu-memory and "
    "--resident."
)
PROBLEM_KEYS = (
    "model",
    "topology",
    "dynamic_cp",
    "equal_waves",
    "memory",
    "gpu_memory",
    "resident",
    "layers",
    "phase",
)
RECORD_KEYS = ("tokens_field", "id_field")


def problem_options(*, from_plan: bool = False) -> Callable:
    """``--model --topology --memory (or --gpu-memory --resident) --layers --phase``. With ``from_plan``
    every one is optional: what is left out is read from the plan being checked."""
    later = " (default: the plan's)" if from_plan else ""
    options = [
        click.option(
            "--model",
            required=not from_plan,
            metavar="NAME|PATH",
            help=f"Shipped model card name or path to a TOML card{later}.",
        ),
        click.option(
            "--topology",
            default=None,
            metavar="tp=1,cp=4,...",
            help=f"Parallel sizes, comma-separated; those left out are 1{later}.",
        ),
        click.option(
            "--dynamic-cp",
            "dynamic_cp",
            is_flag=True,
            default=False,
            help="Pool the dp x cp GPUs: each wave chooses its CP group size (a power of two) and the cost "
            "is the step's makespan (also dynamic_cp=1 in --topology).",
        ),
        click.option(
            "--equal-waves/--no-equal-waves",
            "equal_waves",
            default=None,
            help="Every GPU of the dp x cp pool runs the same number of waves (GPUs with fewer run empty "
            "padding waves, each at the card's per-wave cost), as FSDP and ZeRO-3 need. Default: on when "
            "the pool holds more than one CP group (dp > 1 or --dynamic-cp); --no-equal-waves for a "
            f"trainer that only reduces after the step (also equal_waves=0|1 in --topology){later}.",
        ),
        click.option("--memory", default=None, metavar="SIZE", help=MEMORY_HELP + later),
        click.option(
            "--gpu-memory",
            "gpu_memory",
            default=None,
            metavar="SIZE",
            help="The GPU's memory (e.g. 141GB); with --resident, --memory is their difference.",
        ),
        click.option(
            "--resident",
            default=None,
            metavar="SIZE",
            help="Bytes resident before the wave on each rank: weights, optimizer state, framework reserves.",
        ),
        click.option(
            "--layers",
            type=int,
            default=None,
            metavar="N",
            help=f"Run the card with N layers, keeping its layer pattern{later}.",
        ),
        click.option(
            "--phase",
            type=click.Choice(["cold", "warm"]),
            default=None,
            help=f"Price a first (cold, the default) call or a warm repeat{later}.",
        ),
    ]

    def decorate(func: Callable) -> Callable:
        return functools.reduce(lambda f, option: option(f), reversed(options), func)

    return decorate


def record_options(func: Callable) -> Callable:
    """``--tokens-field --id-field``: where records keep their token ids and their id."""
    options = [
        click.option(
            "--tokens-field",
            "tokens_field",
            default=None,
            metavar="NAME",
            help="Read the token ids from this field (Hugging Face form: labels / loss_mask beside it).",
        ),
        click.option(
            "--id-field",
            "id_field",
            default=None,
            metavar="NAME",
            help="Read the item id from this field (a string or an integer).",
        ),
    ]
    return functools.reduce(lambda f, option: option(f), reversed(options), func)


def split_options(values: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """Pop ``keys`` out of a command's keyword arguments."""
    return {key: values.pop(key) for key in keys}


def record_fields(values: dict[str, Any]) -> RecordFields:
    """The record fields ``--tokens-field`` and ``--id-field`` name."""
    from cpplan.spec.records import RecordFields

    return RecordFields(id=values.get("id_field") or "id", tokens=values.get("tokens_field"))


def memory_bytes(values: dict[str, Any], *, required: bool = True) -> int | None:
    """``--memory``, or ``--gpu-memory`` less ``--resident`` (saying what was assumed on standard
    error); ``None`` when neither is given and ``required`` is false."""
    memory, gpu, resident = values.get("memory"), values.get("gpu_memory"), values.get("resident")
    if memory is not None and (gpu is not None or resident is not None):
        raise InputError("give --memory, or --gpu-memory with --resident, not both", field="memory")
    if gpu is not None or resident is not None:
        if gpu is None or resident is None:
            raise InputError("--gpu-memory and --resident go together", field="memory")
        from_gpu = memory_from_gpu(gpu, resident)
        click.echo(
            f"cpplan: --memory {from_gpu:,} bytes ({format_bytes_like(from_gpu, gpu)}) = "
            f"--gpu-memory {gpu} - --resident {resident}: {MEMORY_MEANING}",
            err=True,
        )
        return from_gpu
    if memory is not None:
        value = parse_memory(memory)
        warning = memory_warning(value)
        if warning:
            click.echo(warning, err=True)
        return value
    if required:
        raise InputError(
            f"missing: give --memory SIZE ({MEMORY_MEANING}), or --gpu-memory and --resident",
            field="memory",
        )
    return None


def read_settings(values: dict[str, Any], plan: dict[str, Any] | None = None) -> Settings:
    """Settings from the problem options; with ``plan`` (plan JSON), what is left out is read from it
    and what was taken is said on standard error."""
    from cpplan.spec.settings import Settings, topology_from_json

    chosen = {
        "model": values.get("model"),
        "topology": values.get("topology"),
        "memory_bytes": memory_bytes(values, required=plan is None),
        "num_layers": values.get("layers"),
        "phase": values.get("phase"),
    }
    if plan is not None:
        chosen = _fill_from_plan(chosen, plan)
    topology = chosen["topology"]
    if isinstance(topology, dict):
        topology = topology_from_json(topology)
    if values.get("dynamic_cp"):
        topology = _dynamic(topology)
    if values.get("equal_waves") is not None:
        topology = _equal_waves(topology, values["equal_waves"])
    return Settings.from_user(
        topology=topology or "",
        model=chosen["model"],
        memory_bytes=chosen["memory_bytes"],
        num_layers=chosen["num_layers"],
        phase=chosen["phase"] or "cold",
    )


def _dynamic(topology: Topology | str | None) -> Topology | str:
    """``--dynamic-cp`` folded into the topology (its ``dynamic_cp`` flag)."""
    if isinstance(topology, str) or topology is None:
        return f"{topology},dynamic_cp=1" if topology else "dynamic_cp=1"
    from cpplan.spec.topology import Topology

    return Topology.create(**{**topology.model_dump(exclude={"equal_waves"}), "dynamic_cp": True})


def _equal_waves(topology: Topology | str | None, on: bool) -> Topology | str:
    """``--equal-waves`` / ``--no-equal-waves`` folded into the topology (its ``equal_waves`` flag)."""
    if isinstance(topology, str) or topology is None:
        from cpplan.spec.topology import Topology

        topology = Topology.parse(topology or "")
    return topology.model_copy(update={"equal_waves": on})


def _fill_from_plan(chosen: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    """The settings left out, from the plan's fields (the settings' JSON form, each must be there)."""
    from cpplan.spec.settings import JSON_KEYS

    if chosen["model"] is not None and chosen["num_layers"] is None:
        _check_same_model(chosen["model"], plan)
    taken = []
    for key, field in JSON_KEYS.items():
        if chosen[key] is not None:
            continue
        if field not in plan:
            raise InputError(f"the plan does not say its {field}: pass --{field}", field=field)
        if field == "model":
            _check_shipped(plan[field])
        chosen[key] = plan[field]
        taken.append(field)
    if taken:
        shown = ", ".join(f"{field} {_shown(field, plan[field])}" for field in taken)
        click.echo(f"cpplan: from the plan: {shown}", err=True)
    return chosen


def _check_same_model(model: Any, plan: dict[str, Any]) -> None:
    """Refuse a ``--model`` other than the plan's when ``--layers`` is left out (before the plan's layer
    count, its own model's, is read against the other card); with ``--layers``, ``cpplan verify`` refuses
    it as one violation naming both models."""
    from cpplan.spec.card import ModelCard, load_model

    made_for = plan.get("model")
    if not isinstance(made_for, str):
        return
    given = model.name if isinstance(model, ModelCard) else load_model(model).name
    if given != made_for:
        layers = plan.get("layers")
        depth = f" ({layers} layers)" if isinstance(layers, int) else ""
        raise InputError(
            f"the plan was made for model {made_for!r}{depth}, not for {given!r} (--model): leave --model "
            "out to check it as it was made",
            field="model",
        )


def _check_shipped(name: Any) -> None:
    from cpplan.spec.card import available_models

    if name not in available_models():
        raise InputError(
            f"the plan was made with model card {name!r}, which is not a shipped card: pass --model PATH",
            field="model",
        )


def _shown(field: str, value: Any) -> str:
    if field == "memory_bytes" and isinstance(value, int):
        return f"{value:,} ({format_bytes(value)})"
    if field == "topology" and isinstance(value, dict):
        sizes = [f"{k}={v}" for k, v in value.items() if k != "dynamic_cp" and v != 1]
        return ",".join([*sizes, *(["dynamic_cp"] if value.get("dynamic_cp") else [])]) or "single rank"
    return str(value)
