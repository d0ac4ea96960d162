"""The catalogue of bad inputs: each case runs through the CLI and through the Python API.

Shared by ``tests/cli/test_bad_input.py`` (which checks every case) and ``docs/make_bad_input.py`` (which
writes the table in ``docs/bad_input.md`` from the messages the cases actually produce). Every case
runs in its own working directory, so the file names in messages are the relative names below.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import cpplan
from cpplan.cli import main
from cpplan.spec.records import RecordFields

TINY_CARD = """\
# A small dense model card for the bad-input catalogue.
name = "tiny"
supports = "pp == 1"

[geometry]
hidden = 1024
num_heads = 8
num_kv_heads = 2
head_dim = 128
num_layers = 4
vocab = 32000
max_context = 4096

[hardware]
name = "test accelerator"
bf16_flops_per_s = 1e15
mfu = 0.5
hbm_bytes_per_s = 4e12
interconnect_bytes_per_s = 4e11
wave_overhead_s = 0.01

[memory]
safety = 1.1

[memory.terms.activations]
quantity = "tokens"
bytes_per_unit = "layers * hidden * dtype_bytes"

[memory.terms.logits]
quantity = "loss_tokens"
bytes_per_unit = "vocab * dtype_bytes"

[[memory.envelopes]]
name = "layer"
static_bytes = "2**20"
terms = ["activations"]

[[memory.envelopes]]
name = "head"
static_bytes = "2**20"
terms = ["activations", "logits"]

[cost.terms.forward]
quantity = "tokens"
seconds_per_unit = "1e-6"
"""

RUNTIME_PROFILE = """\
name = "custom"
time_budget_s = 0.1
strategies = ["greedy", "full_sharing"]

[greedy]
layouts = ["full", "none"]
"""

OK_LINE = '{"id": "p0", "requests": [{"tokens": [1, 2, 3, 4], "grad": true}, {"tokens": [1, 2, 3, 5]}]}\n'
OK_WORKLOAD = OK_LINE + '{"id": "p1", "tokens": [7, 8, 9]}\n'


def _card(old: str, new: str) -> str:
    assert old in TINY_CARD, old
    return TINY_CARD.replace(old, new, 1)


def _moe_card(geometry: str) -> str:
    """The tiny card with expert fields added to its geometry."""
    return _card("max_context = 4096", f"max_context = 4096\n{geometry}")


def _profile(old: str, new: str) -> str:
    assert old in RUNTIME_PROFILE, old
    return RUNTIME_PROFILE.replace(old, new, 1)


@dataclass(frozen=True, kw_only=True)
class Case:
    """One kind of bad input.

    The CLI runs ``cpplan plan WORKLOAD --model MODEL --topology T --memory M --solver S [...]`` with
    the fields below (``cli_args`` replaces the whole argument list); the API runs the equivalent
    ``Workload.from_jsonl`` / ``Topology.parse`` / ``cpplan.plan`` calls unless ``api`` is given.
    ``expect`` are substrings both messages must contain (the field, the file and the line).
    ``cli_only`` cases (files only the CLI reads) have no API counterpart; ``api_only`` cases (Python
    objects of the wrong type) have no CLI counterpart.
    """

    kind: str
    what: str
    files: dict[str, str | bytes] = field(default_factory=dict)
    workload: str = "ok.jsonl"
    model: str = "tiny.toml"
    topology: str = ""
    memory: str = "64MiB"
    solver: str = "custom.toml"
    time_budget: float | None = None
    layers: int | None = None
    cli_args: tuple[str, ...] | None = None
    api: Callable[[], object] | None = None
    api_error: type[Exception] = cpplan.InputError
    cli_only: bool = False
    api_only: bool = False
    expect: tuple[str, ...] = ()

    def argv(self) -> list[str]:
        """The CLI arguments of the case."""
        if self.cli_args is not None:
            return list(self.cli_args)
        args = ["plan", self.workload, "--model", self.model, "--memory", self.memory, "--quiet"]
        args += ["--solver", self.solver]
        if self.topology:
            args += ["--topology", self.topology]
        if self.time_budget is not None:
            args += ["--time-budget", str(self.time_budget)]
        if self.layers is not None:
            args += ["--layers", str(self.layers)]
        return args

    def call_api(self) -> object:
        """The Python API path of the case."""
        if self.api is not None:
            return self.api()
        workload = cpplan.Workload.from_jsonl(self.workload)
        return cpplan.plan(
            workload,
            topology=cpplan.Topology.parse(self.topology),
            model=self.model,
            memory_bytes=self.memory,
            solver=self.solver,
            time_budget_s=self.time_budget,
            num_layers=self.layers,
        )


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What one case gave: CLI exit code and standard error, API exception (``None`` if none)."""

    case: Case
    exit_code: int | str
    stderr: str
    api_exception: BaseException | None


@contextlib.contextmanager
def _inside(directory: Path):
    previous = Path.cwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(previous)


def run_case(case: Case, directory: Path) -> Outcome:
    """Write the case's files into ``directory`` and run it through the CLI and the API there."""
    files = {"ok.jsonl": OK_WORKLOAD, "tiny.toml": TINY_CARD, "custom.toml": RUNTIME_PROFILE, **case.files}
    for name, content in files.items():
        path = directory / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    with _inside(directory):
        err = io.StringIO()
        code: int | str = "n/a"
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                if not case.api_only:
                    code = main(case.argv())
            except BaseException as exc:  # reported by the tests, never expected
                code = f"raised {type(exc).__name__}: {exc}"
        api_exception = None
        if not case.cli_only:
            try:
                case.call_api()
            except Exception as exc:
                api_exception = exc
    return Outcome(case=case, exit_code=code, stderr=err.getvalue(), api_exception=api_exception)


def _ok_plan() -> cpplan.PlanResult:
    """The plan of ``ok.jsonl`` for the tiny card (one wave)."""
    workload = cpplan.Workload.from_jsonl("ok.jsonl")
    return cpplan.plan(workload, model="tiny.toml", memory_bytes="64MiB", solver="custom.toml")


def _other_workload() -> cpplan.Workload:
    """``ok.jsonl`` with its first request one token longer: not the workload the plan was made for."""
    items = list(cpplan.Workload.from_jsonl("ok.jsonl").items)
    first = items[0].requests[0]
    longer = cpplan.Request(tokens=[*first.tokens.tolist(), 9])
    items[0] = cpplan.Item(id=items[0].id, requests=(longer, *items[0].requests[1:]))
    return cpplan.Workload(items=tuple(items))


def _packed_logprobs_of_linear() -> object:
    """Run a planned wave through a module that is not a causal LM cpplan.hf can route."""
    import torch

    import cpplan.hf

    workload = cpplan.Workload.from_jsonl("ok.jsonl")
    return cpplan.hf.packed_logprobs(torch.nn.Linear(4, 4), _ok_plan(), workload, wave=0)


def _long_line(num_tokens: int) -> str:
    return json.dumps({"id": "long", "tokens": list(range(num_tokens))}) + "\n"


CASES: tuple[Case, ...] = (
    # ------------------------------------------------------------------ workload JSONL
    Case(
        kind="malformed JSON line",
        what="line 2 is not JSON (unquoted key)",
        files={"w.jsonl": OK_LINE + '{id: "p1", "tokens": [1]}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "malformed JSON"),
    ),
    Case(
        kind="truncated JSONL",
        what="the last line is cut off mid-record",
        files={"w.jsonl": OK_LINE + '{"id": "p1", "tokens": [1, 2'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "malformed JSON"),
    ),
    Case(
        kind="line not an object",
        what="line 2 is a JSON array",
        files={"w.jsonl": OK_LINE + "[1, 2, 3]\n"},
        workload="w.jsonl",
        expect=("w.jsonl:2", "expected a JSON object"),
    ),
    Case(
        kind="not UTF-8",
        what="line 2 holds a byte that is not UTF-8",
        files={"w.jsonl": OK_LINE.encode() + b'{"id": "p\xff", "tokens": [1]}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "not UTF-8"),
    ),
    Case(
        kind="number with too many digits",
        what="a token written with 5,000 digits (more than Python converts)",
        files={"w.jsonl": OK_LINE + '{"id": "p1", "tokens": [' + "7" * 5000 + "]}\n"},
        workload="w.jsonl",
        expect=("w.jsonl:2", "malformed JSON", "digits"),
    ),
    Case(
        kind="brackets nested too deeply",
        what="line 2 opens 100,000 brackets",
        files={"w.jsonl": OK_LINE + "[" * 100_000 + "]" * 100_000 + "\n"},
        workload="w.jsonl",
        expect=("w.jsonl:2", "malformed JSON", "nested too deeply"),
    ),
    Case(
        kind="Parquet given to plan",
        what="cpplan plan data.parquet",
        files={"data.parquet": b"PAR1" + bytes(64) + b"PAR1"},
        workload="data.parquet",
        expect=("data.parquet", "Parquet file, not JSONL", "cpplan pack"),
    ),
    Case(
        kind="JSON array given to plan",
        what="cpplan plan on a file holding one JSON array of items",
        files={"a.json": '[\n  {"id": "p0", "tokens": [1, 2]}\n]\n'},
        workload="a.json",
        expect=("a.json:1", "JSON array, not JSONL", "cpplan pack"),
    ),
    Case(
        kind="missing id",
        what="an item without an id",
        files={"w.jsonl": OK_LINE + '{"tokens": [1, 2]}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'id'", "--id-field"),
    ),
    Case(
        kind="tokens under another name",
        what="the token ids are in a field 'text' (no 'tokens', 'requests' or 'input_ids')",
        files={"w.jsonl": OK_LINE + '{"id": "p1", "text": [1, 2]}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'requests'", "--tokens-field", "'text'"),
    ),
    Case(
        kind="plan JSON given as a workload",
        what="cpplan plan on the plan JSON that cpplan plan wrote",
        files={"plan.json": '{\n "cpplan_version": "0.1.0",\n "waves": []\n}\n'},
        workload="plan.json",
        expect=("plan.json:1", "cpplan plan JSON", "not a workload"),
    ),
    Case(
        kind="id of the wrong type",
        what="the id is 7.5 (a string or an integer is an id)",
        files={"w.jsonl": OK_LINE + '{"id": 7.5, "tokens": [1, 2]}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'id'", "must be a non-empty string or an integer, got 7.5"),
    ),
    Case(
        kind="empty id",
        what='the id is ""',
        files={"w.jsonl": OK_LINE + '{"id": "", "tokens": [1, 2]}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'id'"),
    ),
    Case(
        kind="duplicate item id",
        what="two lines with the same id",
        files={"w.jsonl": OK_LINE + '{"id": "p0", "tokens": [1, 2]}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'id'", "duplicate item id 'p0'", "first on line 1"),
    ),
    Case(
        kind="neither tokens nor requests",
        what="an item with only an id",
        files={"w.jsonl": OK_LINE + '{"id": "p1"}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'requests'"),
    ),
    Case(
        kind="both tokens and requests",
        what="an item giving both forms",
        files={"w.jsonl": OK_LINE + '{"id": "p1", "tokens": [1], "requests": [{"tokens": [2]}]}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'tokens'"),
    ),
    Case(
        kind="empty requests",
        what='"requests": []',
        files={"w.jsonl": OK_LINE + '{"id": "p1", "requests": []}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'requests'"),
    ),
    Case(
        kind="requests not a list",
        what='"requests" is an object',
        files={"w.jsonl": OK_LINE + '{"id": "p1", "requests": {"tokens": [1]}}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'requests'"),
    ),
    Case(
        kind="empty tokens",
        what='"tokens": []',
        files={"w.jsonl": OK_LINE + '{"id": "p1", "tokens": []}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'requests.0.tokens'", "must not be empty"),
    ),
    Case(
        kind="tokens of the wrong type",
        what='"tokens" is a string',
        files={"w.jsonl": OK_LINE + '{"id": "p1", "tokens": "hello"}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'requests.0.tokens'"),
    ),
    Case(
        kind="token not an integer",
        what="a token is 2.5",
        files={"w.jsonl": OK_LINE + '{"id": "p1", "tokens": [1, 2.5]}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'requests.0.tokens'", "token 1 is 2.5"),
    ),
    Case(
        kind="boolean token",
        what="a token is true",
        files={"w.jsonl": OK_LINE + '{"id": "p1", "tokens": [1, true]}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'requests.0.tokens'", "token 1 is True"),
    ),
    Case(
        kind="nested token list",
        what="tokens are a list of lists",
        files={"w.jsonl": OK_LINE + '{"id": "p1", "tokens": [[1, 2], [3]]}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'requests.0.tokens'"),
    ),
    Case(
        kind="token id beyond int32",
        what="a token is 2**31",
        files={"w.jsonl": OK_LINE + '{"id": "p1", "tokens": [1, 2147483648]}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'requests.0.tokens'", "outside [0, 2147483647]"),
    ),
    Case(
        kind="token id beyond int64",
        what="a token is 10**30",
        files={"w.jsonl": OK_LINE + '{"id": "p1", "tokens": [1, 1000000000000000000000000000000]}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'requests.0.tokens'", "outside [0, 2147483647]"),
    ),
    Case(
        kind="token id beyond the vocabulary",
        what="a token is the card's vocab (32,000 ids: 0 to 31,999)",
        files={"w.jsonl": OK_LINE + '{"id": "p1", "tokens": [1, 32000]}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'items[1].requests[0].tokens'", "beyond the model's vocabulary"),
    ),
    Case(
        kind="negative token id",
        what="a token is -1",
        files={"w.jsonl": OK_LINE + '{"id": "p1", "tokens": [-1, 2]}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'requests.0.tokens'", "outside"),
    ),
    Case(
        kind="grad of the wrong type",
        what='"grad": "no" (a string, not a boolean)',
        files={"w.jsonl": OK_LINE + '{"id": "p1", "tokens": [1, 2], "grad": "no"}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'requests.0.grad'", "must be a boolean"),
    ),
    Case(
        kind="unknown output",
        what='"output": "logprobs"',
        files={"w.jsonl": OK_LINE + '{"id": "p1", "tokens": [1, 2], "output": "logprobs"}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'requests.0.output'"),
    ),
    Case(
        kind="unknown request field",
        what='a request with a misspelt key "tokenz"',
        files={"w.jsonl": OK_LINE + '{"id": "p1", "requests": [{"tokens": [1], "tokenz": [2]}]}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'requests.0.tokenz'"),
    ),
    Case(
        kind="input_ids together with tokens",
        what='{"input_ids": [...], "tokens": [...]}',
        files={"w.jsonl": OK_LINE + '{"id": "p1", "tokens": [1], "input_ids": [1]}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'input_ids'", "one of"),
    ),
    Case(
        kind="labels that are not the input ids",
        what="labels[1] = 5 where input_ids[1] = 2 (pre-shifted labels, say)",
        files={"w.jsonl": OK_LINE + '{"input_ids": [1, 2, 3], "labels": [-100, 5, 3]}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'labels'", "labels[1] is 5 but input_ids[1] is 2"),
    ),
    Case(
        kind="labels and loss_mask disagree",
        what="labels count position 2, loss_mask does not",
        files={
            "w.jsonl": OK_LINE + '{"input_ids": [1, 2, 3], "labels": [-100, 2, 3], "loss_mask": [0, 1, 0]}\n'
        },
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'loss_mask'", "must agree"),
    ),
    Case(
        kind="labels of the wrong length",
        what="two labels for three input ids",
        files={"w.jsonl": OK_LINE + '{"input_ids": [1, 2, 3], "labels": [-100, 2]}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'labels'", "3 integers"),
    ),
    Case(
        kind="padded input_ids",
        what="an attention_mask with a 0 (padding)",
        files={"w.jsonl": OK_LINE + '{"input_ids": [1, 2, 0], "attention_mask": [1, 1, 0]}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'attention_mask'", "without padding"),
    ),
    Case(
        kind="mapped id field missing",
        what="--id-field uid on a record without uid",
        cli_args=("plan", "ok.jsonl", "--model", "tiny.toml", "--memory", "64MiB", "--id-field", "uid"),
        api=lambda: cpplan.Workload.from_jsonl("ok.jsonl", fields=RecordFields(id="uid")),
        expect=("ok.jsonl:1", "field 'uid': missing", "this record has fields 'id', 'requests'"),
    ),
    Case(
        kind="empty workload",
        what="a file with only blank lines",
        files={"w.jsonl": "\n\n"},
        workload="w.jsonl",
        expect=("w.jsonl", "empty"),
    ),
    Case(
        kind="API: Request built directly without tokens",
        what="cpplan.Request(tokens=[]): an InputError, not pydantic's ValidationError",
        api_only=True,
        api=lambda: cpplan.Request(tokens=[]),
        expect=("field 'tokens'", "must not be empty"),
    ),
    Case(
        kind="API: Item built directly without requests",
        what='cpplan.Item(id="a", requests=())',
        api_only=True,
        api=lambda: cpplan.Item(id="a", requests=()),
        expect=("field 'requests'", "must not be empty"),
    ),
    Case(
        kind="API: Workload built directly without items",
        what="cpplan.Workload(items=())",
        api_only=True,
        api=lambda: cpplan.Workload(items=()),
        expect=("field 'items'", "must not be empty"),
    ),
    Case(
        kind="report given a file",
        what="cpplan report PLAN.json (a plan file, not a pack folder)",
        cli_args=("report", "ok.jsonl"),
        cli_only=True,
        expect=("report reads a pack folder (the --output DIR of cpplan pack); ok.jsonl is a file",),
    ),
    Case(
        kind="missing workload file",
        what="the path does not exist",
        workload="nothere.jsonl",
        expect=("nothere.jsonl", "cannot read workload"),
    ),
    Case(
        kind="sequence longer than the maximum context",
        what="a 5,000-token request for a card with max_context 4096",
        files={"w.jsonl": OK_LINE + _long_line(5000)},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'items[1].requests[0].tokens'", "maximum context of 4096"),
    ),
    # ------------------------------------------------------------------ topology
    Case(
        kind="topology sizes that do not divide",
        what="ep=3 with tp*cp*dp = 2",
        topology="cp=2,ep=3",
        expect=("field 'topology'", "must divide"),
    ),
    Case(
        kind="unknown topology axis",
        what="xp=2",
        topology="xp=2",
        expect=("field 'topology'", "'xp=2'"),
    ),
    Case(
        kind="topology size not an integer",
        what="cp=two",
        topology="cp=two",
        expect=("field 'topology.cp'", "not an integer"),
    ),
    Case(
        kind="topology size below 1",
        what="cp=0",
        topology="cp=0",
        expect=("field 'topology.cp'", "cp must be a positive integer, got 0"),
    ),
    Case(
        kind="negative topology size",
        what="cp=-2",
        topology="cp=-2",
        expect=("field 'topology.cp'", "cp must be a positive integer, got -2"),
    ),
    Case(
        kind="API: Topology built directly with a size below 1",
        what="cpplan.Topology(cp=0): an InputError, not pydantic's ValidationError",
        api_only=True,
        api=lambda: cpplan.Topology(cp=0),
        expect=("field 'topology.cp'", "cp must be a positive integer, got 0"),
    ),
    Case(
        kind="API: Topology size given as a string",
        what='cpplan.Topology(cp="2")',
        api_only=True,
        api=lambda: cpplan.Topology(cp="2"),
        expect=("field 'topology.cp'", "must be an integer (an int, not a str), got '2'", "Topology.parse"),
    ),
    Case(
        kind="API: Topology size given as a float",
        what="cpplan.Topology(cp=2.0)",
        api_only=True,
        api=lambda: cpplan.Topology(cp=2.0),
        expect=("field 'topology.cp'", "must be an integer (an int, not a float), got 2.0"),
    ),
    Case(
        kind="topology axis given twice",
        what="cp=2,cp=4",
        topology="cp=2,cp=4",
        expect=("field 'topology.cp'", "twice"),
    ),
    Case(
        kind="topology size with an underscore",
        what="cp=0_2 (Python's int() would read 2)",
        topology="cp=0_2",
        expect=("field 'topology.cp'", "digits 0-9"),
    ),
    Case(
        kind="topology size in other digits",
        what="cp=\u0662 (an Arabic-Indic two)",
        topology="cp=\u0662",
        expect=("field 'topology.cp'", "digits 0-9"),
    ),
    Case(
        kind="topology axis in capitals",
        what="CP=2",
        topology="CP=2",
        expect=("field 'topology'", "lower case"),
    ),
    Case(
        kind="topology sizes separated by a space",
        what='"cp=2 tp=1"',
        topology="cp=2 tp=1",
        expect=("field 'topology.cp'", "separate the sizes with commas"),
    ),
    Case(
        kind="API: topology size given as a boolean",
        what="Topology.create(cp=True) (CLI: cp=true)",
        topology="cp=true",
        api=lambda: cpplan.Topology.create(cp=True),
        expect=("field 'topology.cp'",),
    ),
    Case(
        kind="topology the card cannot price",
        what="pp=2 for a card that supports pp == 1",
        topology="pp=2",
        expect=("field 'topology'", "cannot price"),
    ),
    Case(
        kind="dynamic CP pool the group sizes do not tile",
        what="dp=3,cp=4,dynamic_cp=1: 12 GPUs hold no aligned group of 8",
        topology="dp=3,cp=4,dynamic_cp=1",
        expect=("field 'topology'", "12 is not a multiple of group size 8"),
    ),
    Case(
        kind="dynamic CP group size the card cannot price",
        what="dp=2,cp=2,dynamic_cp=1 for a card that supports cp <= 2",
        files={"card.toml": _card('supports = "pp == 1"', 'supports = "pp == 1 and cp <= 2"')},
        model="card.toml",
        topology="dp=2,cp=2,dynamic_cp=1",
        expect=("field 'topology.dynamic_cp'", "cannot price dynamic CP group size 4"),
    ),
    Case(
        kind="dynamic_cp flag not a boolean",
        what="cp=2,dynamic_cp=maybe",
        topology="cp=2,dynamic_cp=maybe",
        expect=("field 'topology.dynamic_cp'", "not 0, 1, true or false"),
    ),
    Case(
        kind="tp that does not divide the attention heads",
        what="tp=3 for a card with 8 attention heads",
        topology="tp=3",
        expect=("field 'topology.tp'", "tp=3 must divide the model's 8 attention heads", "takes: 1, 2"),
    ),
    Case(
        kind="tp that splits key/value heads",
        what="tp=4 for a card with 8 attention heads and 2 key/value heads (4 divides the heads, not the "
        "key/value heads)",
        files={"card.toml": _card("num_heads = 8\nnum_kv_heads = 2", "num_heads = 8\nnum_kv_heads = 2")},
        model="card.toml",
        topology="tp=4",
        expect=("field 'topology.tp'", "tp=4 must divide the model's 2 key/value heads (num_kv_heads)"),
    ),
    Case(
        kind="tp that does not divide the GDN heads",
        what="tp=2 for a card whose GDN layers have 3 key heads",
        files={
            "card.toml": _card(
                "num_layers = 4", 'num_layers = 4\nlayer_pattern = ["gdn", "attention"]'
            ).replace("max_context = 4096", "max_context = 4096\ngdn_value_heads = 6\ngdn_key_heads = 3")
        },
        model="card.toml",
        topology="tp=2",
        expect=("field 'topology.tp'", "3 GDN key heads (gdn_key_heads)"),
    ),
    Case(
        kind="ep that does not divide the experts",
        what="ep=4 for a card with 6 experts",
        files={"card.toml": _moe_card("num_experts = 6\ntop_k = 2\nexpert_ffn = 256")},
        model="card.toml",
        topology="ep=4,dp=4",
        expect=("field 'topology.ep'", "ep=4 must divide the model's 6 experts", "takes: 1, 2, 3, 6"),
    ),
    Case(
        kind="ep on a model without experts",
        what="ep=2 for a dense card",
        topology="ep=2,dp=2",
        expect=("field 'topology.ep'", "ep=2 on a model without experts"),
    ),
    Case(
        kind="etp that does not divide the expert FFN",
        what="etp=5 for experts of FFN width 256",
        files={"card.toml": _moe_card("num_experts = 6\ntop_k = 2\nexpert_ffn = 256")},
        model="card.toml",
        topology="etp=5,dp=5",
        expect=("field 'topology.etp'", "etp=5 must divide the model's 256 expert FFN width"),
    ),
    # ------------------------------------------------------------------ model and solver names
    Case(
        kind="unknown model name",
        what="--model gpt-5",
        model="gpt-5",
        expect=("field 'model'", "unknown model 'gpt-5'"),
    ),
    Case(
        kind="missing model card file",
        what="--model nothere.toml",
        model="nothere.toml",
        expect=("nothere.toml", "cannot read model card"),
    ),
    Case(
        kind="unknown solver profile name",
        what="--solver fastest",
        solver="fastest",
        expect=("field 'solver'", "unknown solver profile 'fastest'"),
    ),
    # ------------------------------------------------------------------ model cards
    Case(
        kind="card: invalid TOML",
        what="hidden = = 1024",
        files={"card.toml": _card("hidden = 1024", "hidden = = 1024")},
        model="card.toml",
        expect=("card.toml:6", "invalid TOML"),
    ),
    Case(
        kind="card: missing field",
        what="[geometry] without hidden",
        files={"card.toml": _card("hidden = 1024\n", "")},
        model="card.toml",
        expect=("card.toml:5", "field 'geometry.hidden'", "missing"),
    ),
    Case(
        kind="card: missing section",
        what="no [hardware] table",
        files={
            "card.toml": TINY_CARD.split("[hardware]")[0] + "[memory]" + TINY_CARD.split("[memory]", 1)[1]
        },
        model="card.toml",
        expect=("card.toml", "field 'hardware'", "missing"),
    ),
    Case(
        kind="card: wrong type",
        what='hidden = "big"',
        files={"card.toml": _card("hidden = 1024", 'hidden = "big"')},
        model="card.toml",
        expect=("card.toml:6", "field 'geometry.hidden'"),
    ),
    Case(
        kind="card: unknown key",
        what="a misspelt key hiden = 1024",
        files={"card.toml": _card("hidden = 1024", "hidden = 1024\nhiden = 1024")},
        model="card.toml",
        expect=("card.toml:7", "field 'geometry.hiden'"),
    ),
    Case(
        kind="card: negative coefficient",
        what="bytes_per_unit = -4",
        files={"card.toml": _card('bytes_per_unit = "vocab * dtype_bytes"', "bytes_per_unit = -4")},
        model="card.toml",
        expect=("card.toml:31", "field 'memory.terms.logits.bytes_per_unit'", "cannot be negative"),
    ),
    Case(
        kind="card: formula that evaluates negative",
        what='seconds_per_unit = "1e-6 - 1e-5"',
        files={"card.toml": _card('seconds_per_unit = "1e-6"', 'seconds_per_unit = "1e-6 - 1e-5"')},
        model="card.toml",
        expect=("card.toml:45", "field 'cost.terms.forward.seconds_per_unit'", "cannot be negative"),
    ),
    Case(
        kind="card: NaN coefficient",
        what="bytes_per_unit = nan",
        files={"card.toml": _card('bytes_per_unit = "vocab * dtype_bytes"', "bytes_per_unit = nan")},
        model="card.toml",
        expect=("card.toml:31", "field 'memory.terms.logits.bytes_per_unit'", "not a finite number"),
    ),
    Case(
        kind="card: infinite static bytes",
        what="static_bytes = inf",
        files={"card.toml": _card('static_bytes = "2**20"', "static_bytes = inf")},
        model="card.toml",
        expect=("card.toml:33", "field 'memory.envelopes.layer.static_bytes'", "not a finite number"),
    ),
    Case(
        kind="card: NaN hardware figure",
        what="mfu = nan",
        files={"card.toml": _card("mfu = 0.5", "mfu = nan")},
        model="card.toml",
        expect=("card.toml:17", "field 'hardware.mfu'", "finite"),
    ),
    Case(
        kind="card: unknown unit in a formula",
        what='static_bytes = "1 MiB"',
        files={"card.toml": _card('static_bytes = "2**20"', 'static_bytes = "1 MiB"')},
        model="card.toml",
        expect=("card.toml:33", "field 'memory.envelopes.layer.static_bytes'", "'1 MiB'"),
    ),
    Case(
        kind="card: unknown name in a formula",
        what='bytes_per_unit = "layers * hiden"',
        files={
            "card.toml": _card(
                'bytes_per_unit = "layers * hidden * dtype_bytes"', 'bytes_per_unit = "layers * hiden"'
            )
        },
        model="card.toml",
        expect=("card.toml:25", "field 'memory.terms.activations'", "hiden"),
    ),
    Case(
        kind="card: unknown quantity",
        what='quantity = "loss_tokenz"',
        files={"card.toml": _card('quantity = "loss_tokens"', 'quantity = "loss_tokenz"')},
        model="card.toml",
        expect=("card.toml:30", "field 'memory.terms.logits.quantity'", "unknown quantity"),
    ),
    Case(
        kind="card: NaN constant",
        what="[constants] skew = nan",
        files={"card.toml": _card("[hardware]", "[constants]\nskew = nan\n\n[hardware]")},
        model="card.toml",
        expect=("card.toml:15", "field 'constants.skew'", "finite"),
    ),
    Case(
        kind="card: key/value heads that do not divide the heads",
        what="num_kv_heads = 3 beside num_heads = 8",
        files={"card.toml": _card("num_kv_heads = 2", "num_kv_heads = 3")},
        model="card.toml",
        expect=("card.toml:8", "field 'geometry.num_kv_heads'", "must divide num_heads = 8"),
    ),
    Case(
        kind="card: top_k above the experts",
        what="top_k = 300 with num_experts = 256",
        files={"card.toml": _moe_card("num_experts = 256\ntop_k = 300\nexpert_ffn = 256")},
        model="card.toml",
        expect=("card.toml:14", "field 'geometry.top_k'", "between 1 and num_experts = 256"),
    ),
    Case(
        kind="card: experts without top_k",
        what="num_experts = 8 and no top_k",
        files={"card.toml": _moe_card("num_experts = 8\nexpert_ffn = 256")},
        model="card.toml",
        expect=("card.toml:5", "field 'geometry.top_k'", "top_k = 0 must be between 1 and num_experts = 8"),
    ),
    Case(
        kind="card: GDN key heads that do not divide the value heads",
        what="gdn_key_heads = 4 beside gdn_value_heads = 6",
        files={"card.toml": _moe_card("gdn_value_heads = 6\ngdn_key_heads = 4")},
        model="card.toml",
        expect=("card.toml:14", "field 'geometry.gdn_key_heads'", "must divide gdn_value_heads = 6"),
    ),
    # ------------------------------------------------------------------ solver profiles
    Case(
        kind="profile: time budget <= 0",
        what="time_budget_s = 0",
        files={"p.toml": _profile("time_budget_s = 0.1", "time_budget_s = 0")},
        solver="p.toml",
        expect=("p.toml:2", "field 'time_budget_s'", "greater than 0"),
    ),
    Case(
        kind="profile: time budget with a unit",
        what='time_budget_s = "100ms"',
        files={"p.toml": _profile("time_budget_s = 0.1", 'time_budget_s = "100ms"')},
        solver="p.toml",
        expect=("p.toml:2", "field 'time_budget_s'", "valid number"),
    ),
    Case(
        kind="profile: NaN time budget",
        what="time_budget_s = nan",
        files={"p.toml": _profile("time_budget_s = 0.1", "time_budget_s = nan")},
        solver="p.toml",
        expect=("p.toml:2", "field 'time_budget_s'", "finite"),
    ),
    Case(
        kind="profile: missing field",
        what="no time_budget_s",
        files={"p.toml": _profile("time_budget_s = 0.1\n", "")},
        solver="p.toml",
        expect=("p.toml", "field 'time_budget_s'", "missing"),
    ),
    Case(
        kind="profile: unknown strategy",
        what='strategies = ["greedy", "magic"]',
        files={"p.toml": _profile('["greedy", "full_sharing"]', '["greedy", "magic"]')},
        solver="p.toml",
        expect=("p.toml:3", "field 'strategies.1'"),
    ),
    Case(
        kind="profile: unknown layout",
        what='layouts = ["full", "min_span:lots"]',
        files={"p.toml": _profile('["full", "none"]', '["full", "min_span:lots"]')},
        solver="p.toml",
        expect=("p.toml:6", "field 'greedy.layouts'", "unknown layout 'min_span:lots'"),
    ),
    Case(
        kind="profile: negative CP-SAT workers",
        what="[cpsat] num_workers = -2",
        files={"p.toml": RUNTIME_PROFILE + "\n[cpsat]\nnum_workers = -2\n"},
        solver="p.toml",
        expect=("p.toml:9", "field 'cpsat.num_workers'"),
    ),
    # ------------------------------------------------------------------ sizes and budgets
    Case(
        kind="memory with an unknown unit",
        what="--memory 80GIGS",
        memory="80GIGS",
        expect=("field 'memory'", "unknown unit 'GIGS'"),
    ),
    Case(
        kind="memory not a size",
        what="--memory lots",
        memory="lots",
        expect=("field 'memory'", "cannot read size"),
    ),
    Case(
        kind="negative memory",
        what="--memory -5GiB",
        memory="-5GiB",
        expect=("field 'memory'", "memory must be positive", "'-5GiB'"),
    ),
    Case(
        kind="negative memory without a unit",
        what="--memory -1",
        memory="-1",
        expect=("field 'memory'", "memory must be positive, got '-1'"),
    ),
    Case(
        kind="memory unit without its B",
        what="--memory 8G (8 GiB or 8 GB?)",
        memory="8G",
        expect=("field 'memory'", "write 8GiB (binary", "or 8GB (decimal", "GiB, GB, MiB, MB, KiB, KB"),
    ),
    Case(
        kind="memory below one byte",
        what="--memory 0.5B",
        memory="0.5B",
        expect=("field 'memory'", "'0.5B' is less than one byte"),
    ),
    Case(
        kind="memory with a fraction and no unit",
        what="--memory 8.5 (8.5 bytes, meant as 8.5 GiB)",
        memory="8.5",
        expect=("field 'memory'", "so it is 8.5 bytes", "write 8.5GiB"),
    ),
    Case(
        kind="memory just below 1 MiB without a unit",
        what="--memory 1048575 (no unit makes it a size a GPU has free)",
        memory="1048575",
        expect=("field 'memory'", "so it is 1,048,575 bytes, less than 1 MiB: give a unit"),
    ),
    Case(
        kind="API: memory given as a float",
        what="memory_bytes=8.5e9 (CLI: --memory 8.5e9 is 8,500,000,000 bytes)",
        api=lambda: cpplan.plan(
            cpplan.Workload.from_jsonl("ok.jsonl"), model="tiny.toml", memory_bytes=8.5e9
        ),
        api_only=True,
        expect=("field 'memory'", "must be a whole number of bytes (an int) or a size string"),
    ),
    Case(
        kind="memory not finite",
        what="--memory 1e400",
        memory="1e400",
        expect=("field 'memory'", "not finite"),
    ),
    Case(
        kind="memory without a unit",
        what="--memory 80 (80 bytes, meant as 80 GiB)",
        memory="80",
        expect=("field 'memory'", "has no unit", "80GiB"),
    ),
    Case(
        kind="memory above 2^63",
        what="--memory 18446744073709551616 (API: memory_bytes=2**64)",
        memory=str(2**64),
        api=lambda: cpplan.plan(
            cpplan.Workload.from_jsonl("ok.jsonl"), model="tiny.toml", memory_bytes=2**64
        ),
        expect=("field 'memory'", "2^63 - 1"),
    ),
    Case(
        kind="GPU memory without what is resident",
        what="--gpu-memory 141GB alone",
        cli_args=("plan", "ok.jsonl", "--model", "tiny.toml", "--gpu-memory", "141GB"),
        cli_only=True,
        expect=("field 'memory'", "--gpu-memory and --resident go together"),
    ),
    Case(
        kind="resident above the GPU memory",
        what="--gpu-memory 80GB --resident 90GB",
        cli_args=("plan", "ok.jsonl", "--model", "tiny.toml", "--gpu-memory", "80GB", "--resident", "90GB"),
        cli_only=True,
        expect=("field 'resident'", "leaves nothing"),
    ),
    Case(
        kind="memory given twice",
        what="--memory 40GiB with --gpu-memory 141GB --resident 75GB",
        cli_args=(
            "plan",
            "ok.jsonl",
            "--model",
            "tiny.toml",
            "--memory",
            "40GiB",
            "--gpu-memory",
            "141GB",
            "--resident",
            "75GB",
        ),
        cli_only=True,
        expect=("field 'memory'", "not both"),
    ),
    Case(
        kind="budget below the static floor",
        what="--memory 1MiB where the card's static floor is 1.1 MiB",
        memory="1MiB",
        expect=("field 'memory'", "below the static floor"),
    ),
    Case(
        kind="time budget <= 0",
        what="--time-budget 0",
        time_budget=0.0,
        expect=("field 'time_budget'", "positive"),
    ),
    Case(
        kind="time budget not finite",
        what="--time-budget inf",
        time_budget=float("inf"),
        expect=("field 'time_budget'", "positive"),
    ),
    Case(
        kind="layers not a whole number",
        what="--layers 2.5 (API: card.resolve(num_layers=2.5))",
        layers=None,
        cli_args=("plan", "ok.jsonl", "--model", "tiny.toml", "--memory", "64MiB", "--layers", "2.5"),
        api=lambda: cpplan.load_model("tiny.toml").resolve(cpplan.Topology(), num_layers=2.5),
        expect=("layers", "2.5"),
    ),
    Case(
        kind="API: time budget given as a string",
        what='cpplan.plan(..., time_budget_s="1")',
        api=lambda: cpplan.plan(
            cpplan.Workload.from_jsonl("ok.jsonl"), model="tiny.toml", memory_bytes="64MiB", time_budget_s="1"
        ),
        api_only=True,
        expect=("field 'time_budget'", "'1'"),
    ),
    Case(
        kind="API: time budget given as a boolean",
        what="cpplan.plan(..., time_budget_s=True)",
        api=lambda: cpplan.plan(
            cpplan.Workload.from_jsonl("ok.jsonl"), model="tiny.toml", memory_bytes=2**26, time_budget_s=True
        ),
        api_only=True,
        expect=("field 'time_budget'", "True"),
    ),
    Case(
        kind="layers below 1",
        what="--layers 0",
        layers=0,
        expect=("field 'layers'", "must be between 1"),
    ),
    Case(
        kind="unknown phase",
        what="--phase hot (API: phase='hot')",
        cli_args=("plan", "ok.jsonl", "--model", "tiny.toml", "--memory", "64MiB", "--phase", "hot"),
        api=lambda: cpplan.plan(
            cpplan.Workload.from_jsonl("ok.jsonl"), model="tiny.toml", memory_bytes="64MiB", phase="hot"
        ),
        expect=("phase",),
    ),
    Case(
        kind="missing required option",
        what="no --memory (API: memory_bytes=0)",
        cli_args=("plan", "ok.jsonl", "--model", "tiny.toml"),
        api=lambda: cpplan.plan(cpplan.Workload.from_jsonl("ok.jsonl"), model="tiny.toml", memory_bytes=0),
        expect=("memory",),
    ),
    Case(
        kind="output in a missing directory",
        what="--output nowhere/plan.json",
        cli_args=(
            "plan",
            "ok.jsonl",
            "--model",
            "tiny.toml",
            "--memory",
            "64MiB",
            "--output",
            "nowhere/p.json",
        ),
        cli_only=True,
        expect=("nowhere/p.json", "field 'output'", "directory does not exist"),
    ),
    # ------------------------------------------------------------------ cpplan verify
    Case(
        kind="verify: plan file not JSON",
        what="cpplan verify on a truncated plan file",
        files={"plan.json": '{"waves": [\n'},
        cli_args=("verify", "plan.json", "ok.jsonl", "--model", "tiny.toml", "--memory", "64MiB"),
        cli_only=True,
        expect=("plan.json:2", "malformed JSON"),
    ),
    Case(
        kind="verify: plan file nested too deeply",
        what="cpplan verify on a plan file of 100,000 opening brackets",
        files={"plan.json": "[" * 100_000 + "]" * 100_000 + "\n"},
        cli_args=("verify", "plan.json", "ok.jsonl", "--model", "tiny.toml", "--memory", "64MiB"),
        cli_only=True,
        expect=("plan.json", "malformed JSON"),
    ),
    Case(
        kind="verify: plan not an object",
        what="cpplan verify on a plan file holding a list",
        files={"plan.json": "[]\n"},
        cli_args=("verify", "plan.json", "ok.jsonl", "--model", "tiny.toml", "--memory", "64MiB"),
        cli_only=True,
        expect=("plan.json", "JSON object"),
    ),
    # ------------------------------------------------------------------ Python-only inputs
    Case(
        kind="API: memory given as a boolean",
        what="memory_bytes=True (CLI: --memory true)",
        memory="true",
        api=lambda: cpplan.plan(cpplan.Workload.from_jsonl("ok.jsonl"), model="tiny.toml", memory_bytes=True),
        expect=("field 'memory'",),
    ),
    Case(
        kind="API: workload given as a path",
        what='cpplan.plan("ok.jsonl", ...) instead of a Workload',
        api=lambda: cpplan.plan("ok.jsonl", model="tiny.toml", memory_bytes="64MiB"),
        api_only=True,
        expect=("field 'workload'", "Workload.from_jsonl"),
    ),
    Case(
        kind="API: topology of the wrong type",
        what="topology={'cp': 2}",
        api=lambda: cpplan.plan(
            cpplan.Workload.from_jsonl("ok.jsonl"), topology={"cp": 2}, model="tiny.toml", memory_bytes=2**26
        ),
        api_only=True,
        expect=("field 'topology'", "got dict"),
    ),
    Case(
        kind="API: model of the wrong type",
        what="model=42",
        api=lambda: cpplan.plan(cpplan.Workload.from_jsonl("ok.jsonl"), model=42, memory_bytes="64MiB"),
        api_only=True,
        expect=("field 'model'", "got int"),
    ),
    Case(
        kind="API: empty workload",
        what="Workload.from_items([]) (CLI: an empty file)",
        files={"w.jsonl": ""},
        workload="w.jsonl",
        api=lambda: cpplan.Workload.from_items([], source="w.jsonl"),
        expect=("w.jsonl",),
    ),
    Case(
        kind="API: duplicate ids in memory",
        what="Workload.from_items with two items 'a' (CLI: two lines with id 'a')",
        files={"w.jsonl": '{"id": "a", "tokens": [1]}\n{"id": "a", "tokens": [2]}\n'},
        workload="w.jsonl",
        api=lambda: cpplan.Workload.from_items(
            [
                cpplan.Item(id="a", requests=(cpplan.Request(tokens=[1]),)),
                cpplan.Item(id="a", requests=(cpplan.Request(tokens=[2]),)),
            ],
            source="w.jsonl",
        ),
        expect=("duplicate item id 'a'",),
    ),
    # ------------------------------------------------------------------ loss masks, plans at runtime
    Case(
        kind="loss_mask of the wrong length",
        what='"loss_mask": [0, 1] for 3 tokens',
        files={"w.jsonl": OK_LINE + '{"id": "p1", "tokens": [1, 2, 3], "loss_mask": [0, 1]}\n'},
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'requests.0.loss_mask'", "item 'p1' request 0", "2 entries for 3 tokens"),
    ),
    Case(
        kind="loss_mask value not 0 or 1",
        what='"loss_mask": [0, 1, 2]',
        files={
            "w.jsonl": OK_LINE + '{"id": "p1", "requests": [{"tokens": [1, 2, 3], "loss_mask": [0, 1, 2]}]}\n'
        },
        workload="w.jsonl",
        expect=("w.jsonl:2", "field 'requests.0.loss_mask'", "item 'p1' request 0", "must be 0 or 1"),
    ),
    Case(
        kind="API: materialize with another workload",
        what="cpplan.materialize(plan of ok.jsonl, a workload whose request is one token longer, ...)",
        api=lambda: cpplan.materialize(_ok_plan(), _other_workload(), wave=0, rank=0),
        api_only=True,
        expect=("field 'items[", "is this the workload the plan was made for"),
    ),
    Case(
        kind="API: wave index out of range",
        what="cpplan.materialize(plan, workload, wave=5, rank=0) for a one-wave plan",
        api=lambda: cpplan.materialize(_ok_plan(), cpplan.Workload.from_jsonl("ok.jsonl"), wave=5, rank=0),
        api_only=True,
        expect=("field 'wave'", "wave 5 is out of range: the plan has 1 waves"),
    ),
    Case(
        kind="API: a model cpplan.hf cannot route",
        what="cpplan.hf.packed_logprobs(torch.nn.Linear(4, 4), plan, workload, wave=0)",
        api=lambda: _packed_logprobs_of_linear(),
        api_only=True,
        expect=("field 'model'", "cannot route model class torch.nn.modules.linear.Linear"),
    ),
)
