"""``cpplan --help`` and ``import cpplan`` stay light: subcommands load on first use, public names too."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import click
import pytest

import cpplan
from cpplan.cli import COMMANDS, cli, main

HEAVY = ("torch", "ortools", "numpy", "pydantic", "rich", "cpplan.api", "cpplan.planner")
MY_COMMANDS = ("plan", "verify", "pack", "report", "bench")
ROOT = Path(__file__).resolve().parents[2]


def _modules_after(code: str) -> list[str]:
    """The top-level modules (and cpplan modules) a fresh interpreter holds after running ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_help_imports_neither_torch_nor_ortools():
    """`cpplan --help` lists the commands without importing torch, OR-Tools, numpy, pydantic, rich or the
    planner (the test fails when the CLI's top-level import pulls any of them in)."""
    loaded = _modules_after("from cpplan.cli import main\nmain(['--help'])")
    heavy = [m for m in loaded if m in HEAVY or m.split(".")[0] in HEAVY[:5]]
    assert heavy == []


def test_import_cpplan_does_not_import_torch_or_ortools():
    """`import cpplan` loads its public names on first use: neither torch nor OR-Tools is imported, and
    `cpplan.PackDataset` (a torch IterableDataset) imports torch only when touched."""
    loaded = _modules_after("import cpplan")
    assert not [m for m in loaded if m.split(".")[0] in ("torch", "ortools")]
    touched = _modules_after("import cpplan\ncpplan.PackDataset")
    assert "torch" in touched


def test_help_lists_every_command_with_its_summary(capsys):
    """The command list of `cpplan --help` names every subcommand with the summary of COMMANDS, and each
    of them loads as a command of that name whose own short help is that summary."""
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name, (_, summary) in COMMANDS.items():
        assert f"  {name}" in out and summary in out
        command = cli.get_command(click.Context(cli), name)
        assert isinstance(command, click.Command) and command.name == name
        if name in MY_COMMANDS:
            assert command.short_help == summary


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_subcommand_help_exits_0(name, capsys):
    """`cpplan NAME --help` loads the command and prints its options."""
    assert main([name, "--help"]) == 0
    assert "Usage: cpplan" in capsys.readouterr().out


def test_version_attribute():
    """`cpplan.__version__` is the installed version, the one `cpplan --version` prints."""
    assert cpplan.__version__ == version("cpplan")
    assert "__version__" in dir(cpplan) and "PackDataset" in cpplan.__all__


def test_unknown_attribute_is_an_attribute_error():
    """A name cpplan does not export raises AttributeError, as for any module."""
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        cpplan.nope  # noqa: B018
