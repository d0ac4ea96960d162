"""Import cost: ``import cpplan`` and ``cpplan --help`` load neither OR-Tools nor torch."""

from __future__ import annotations

import json
import subprocess
import sys

import click

from cpplan.cli import SUBCOMMANDS, cli

HEAVY = ("torch", "ortools", "pandas")


def _loaded_after(code: str) -> list[str]:
    """Top-level packages of :data:`HEAVY` loaded by running ``code`` in a fresh interpreter."""
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return [m for m in json.loads(out.stdout.strip().splitlines()[-1]) if m in HEAVY]


def test_import_cpplan_loads_no_solver_or_torch():
    """``import cpplan`` (and touching its public planning names) imports neither OR-Tools nor torch:
    both are imported only where a CP-SAT model is built or tensors are made."""
    assert _loaded_after("import cpplan") == []
    assert _loaded_after("import cpplan\ncpplan.Planner, cpplan.Workload, cpplan.plan, cpplan.verify") == []


def test_cli_help_imports_no_subcommand():
    """``cpplan --help`` lists every subcommand without importing their modules (nor numpy)."""
    code = "\n".join(
        [
            "import contextlib, io, sys",
            "from cpplan.cli import main",
            "with contextlib.redirect_stdout(io.StringIO()):",
            "    main(['--help'])",
            "assert 'numpy' not in sys.modules and 'cpplan.cli.plan_cmd' not in sys.modules",
        ]
    )
    assert _loaded_after(code) == []


def test_lazy_summaries_match_the_commands():
    """Each subcommand's summary in the lazy table gives the same one-line help as the command itself,
    at click's default width and at the CLI's wider one."""
    ctx = click.Context(cli)
    for name, (_, summary) in SUBCOMMANDS.items():
        command = cli.get_command(ctx, name)
        assert command is not None and command.name == name
        for limit in (45, 95):
            assert click.Command(name, help=summary).get_short_help_str(limit) == command.get_short_help_str(
                limit
            )


def test_public_names_resolve():
    """Every name in ``cpplan.__all__`` resolves, and an unknown attribute is an AttributeError."""
    import cpplan

    for name in cpplan.__all__:
        assert getattr(cpplan, name) is not None
    try:
        cpplan.no_such_name  # noqa: B018
    except AttributeError:
        pass
    else:
        raise AssertionError("unknown attribute resolved")
