"""The ``cpplan`` command line. Exit codes: 0 plan / valid, 1 verify found violations, 2 bad input,
3 nothing fits, 70 internal error (set ``CPPLAN_DEBUG=1`` for the traceback).

Subcommands live in their own modules and are imported only when run (:class:`LazyGroup`), so
``cpplan --help`` does not load numpy, the planners or OR-Tools."""

from __future__ import annotations

import importlib
import os
import sys

import click

from cpplan.errors import InputError, NoFitError

EXIT_OK, EXIT_INVALID, EXIT_BAD_INPUT, EXIT_NO_FIT, EXIT_INTERNAL = 0, 1, 2, 3, 70


SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "bench": (
        "cpplan.cli.bench_cmd",
        "Run every baseline planner and cpplan on the fixed suite; print and save the table.",
    ),
    "calibrate": (
        "cpplan.cli.calibrate_cmd",
        "Fit the card's calibrated coefficients to MEASUREMENTS.csv as a safe upper envelope (a linear "
        "program: every row predicted at or above its observed maximum, total over-prediction minimized, "
        "coefficients non-negative), print predicted/observed per row and write the card to --output.",
    ),
    "pack": (
        "cpplan.cli.pack_cmd",
        "Pack DATASET (workload JSONL, Parquet, or ShareGPT conversation JSON) into plan shards.",
    ),
    "plan": ("cpplan.cli.plan_cmd", "Plan WORKLOAD (JSONL, one item a line) into verified waves."),
    "report": (
        "cpplan.cli.report_cmd",
        "Write a report of the pack in OUTDIR: packed tokens, rank peaks against the budget, seconds per "
        "wave and tokens saved by sharing.",
    ),
    "verify": (
        "cpplan.cli.verify_cmd",
        "Check PLAN.json against WORKLOAD: exit 0 when valid, 1 listing each violation.",
    ),
}
"""Each subcommand: the module that registers it on :data:`cli`, and the first sentence of its help,
which ``cpplan --help`` lists without importing the module (a test checks each against the command)."""


class LazyGroup(click.Group):
    """A group whose subcommands (:data:`SUBCOMMANDS`) are imported when looked up, not when listed."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every subcommand name, registered or not yet imported."""
        return sorted({*self.commands, *SUBCOMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The subcommand, importing its module (which registers it) on first use."""
        if cmd_name not in self.commands and cmd_name in SUBCOMMANDS:
            importlib.import_module(SUBCOMMANDS[cmd_name][0])
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of ``--help``, as click writes it, from the summaries (importing nothing)."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = [(name, short_help(self, name, limit)) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def short_help(group: click.Group, name: str, limit: int) -> str:
    """A subcommand's one-line help: the registered command's own, or its summary when not imported."""
    if name in group.commands:
        return group.commands[name].get_short_help_str(limit)
    return click.Command(name, help=SUBCOMMANDS[name][1]).get_short_help_str(limit)


@click.group(
    cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110}
)
@click.version_option(package_name="cpplan")
def cli() -> None:
    """Plan packed, context-parallel LLM training waves with CP-SAT."""


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
        click.echo(f"cpplan: error: {exc}", err=True)
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


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


__all__ = ["SUBCOMMANDS", "LazyGroup", "cli", "main", "run", "short_help"]
