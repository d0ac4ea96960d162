"""The ``cpplan`` command line. Exit codes: 0 plan / valid, 1 verify found violations, 2 bad input,
3 nothing fits, 70 internal error (set ``CPPLAN_DEBUG=1`` for the traceback).

Subcommands load on first use: ``cpplan --help`` lists them from :data:`COMMANDS` without importing
the planner, OR-Tools or torch. Each subcommand module registers itself on :data:`cli` when imported.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from cpplan.errors import InputError, NoFitError

EXIT_OK, EXIT_INVALID, EXIT_BAD_INPUT, EXIT_NO_FIT, EXIT_INTERNAL = 0, 1, 2, 3, 70

COMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("cpplan.cli.plan_cmd", "Plan WORKLOAD (JSONL, one item a line) into verified waves."),
    "verify": ("cpplan.cli.verify_cmd", "Check a plan, a shard or a whole pack against its workload."),
    "pack": ("cpplan.cli.pack_cmd", "Pack a whole dataset into self-describing plan shards."),
    "report": ("cpplan.cli.report_cmd", "Write an HTML report with plots of a pack folder."),
    "bench": ("cpplan.cli.bench_cmd", "Run every baseline planner and cpplan on the fixed suite."),
    "calibrate": ("cpplan.cli.calibrate_cmd", "Fit the card's calibrated coefficients to measured peaks."),
    "measure": ("cpplan.cli.measure_cmd", "Run a plan's waves on a GPU; log peaks and seconds."),
    "gpu-check": ("cpplan.cli.gpu_check_cmd", "Prove the kernels path and measure the cards on one GPU."),
}
"""Subcommand name: (module that defines it, the one-line summary ``cpplan --help`` shows)."""


class LazyGroup(click.Group):
    """A click group whose subcommands are imported only when they run or their own help is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every subcommand: the registered ones and those :data:`COMMANDS` can load."""
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The subcommand, importing its module the first time."""
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            importlib.import_module(COMMANDS[cmd_name][0])
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of ``--help``, from :data:`COMMANDS` (a command registered otherwise gives its own
        short help), the same whether or not a command was loaded."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names))
        rows = []
        for name in names:
            command = self.commands.get(name)
            text = (
                COMMANDS[name][1]
                if name in COMMANDS or command is None
                else command.get_short_help_str(limit)
            )
            rows.append((name, text))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(
    cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110}
)
@click.version_option(package_name="cpplan")
def cli() -> None:
    """Plan packed, context-parallel LLM training waves with CP-SAT.

    Exit codes: 0 done (a plan, a valid plan, a pack), 1 `verify` found violations, 2 bad input (the
    message names the file, line and field), 3 nothing fits (or a pack planned no item, or rejected more
    than --max-rejected allows), 70 an internal error (CPPLAN_DEBUG=1 shows the traceback).
    """


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and map errors to exit codes without tracebacks."""
    try:
        result = cli.main(args=argv, prog_name="cpplan", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("cpplan: aborted", err=True)
        return EXIT_BAD_INPUT
    except click.ClickException as exc:
        exc.show()
        return EXIT_BAD_INPUT if exc.exit_code == 2 else exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except InputError as exc:
        click.echo(f"cpplan: error: {_with_meaning(exc)}", err=True)
        return EXIT_BAD_INPUT
    except NoFitError as exc:
        click.echo(f"cpplan: nothing fits: {exc}", err=True)
        return EXIT_NO_FIT
    except KeyboardInterrupt:
        click.echo("cpplan: interrupted", err=True)
        return 130
    except Exception as exc:
        if os.environ.get("CPPLAN_DEBUG"):
            raise
        click.echo(
            f"cpplan: internal error: {type(exc).__name__}: {exc} (set CPPLAN_DEBUG=1 for details)", err=True
        )
        return EXIT_INTERNAL
    return int(result or 0)


def _with_meaning(exc: InputError) -> str:
    """The message, with what --memory means when the error is about it (and does not say so)."""
    from cpplan.spec.units import MEMORY_MEANING

    text = str(exc)
    if exc.field == "memory" and MEMORY_MEANING not in text:
        text += f" (--memory is {MEMORY_MEANING})"
    return text


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


__all__ = [
    "COMMANDS",
    "EXIT_BAD_INPUT",
    "EXIT_INVALID",
    "EXIT_NO_FIT",
    "EXIT_OK",
    "LazyGroup",
    "cli",
    "main",
    "run",
]
