"""The ``cpplan`` command line. Exit codes: 0 plan / valid, 1 verify found violations, 2 bad input,
3 nothing fits, 70 internal error (set ``CPPLAN_DEBUG=1`` for the traceback)."""

from __future__ import annotations

import os
import sys

import click

from cpplan.errors import InputError, NoFitError

EXIT_OK, EXIT_INVALID, EXIT_BAD_INPUT, EXIT_NO_FIT, EXIT_INTERNAL = 0, 1, 2, 3, 70


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
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


# Subcommands register themselves on ``cli``.
from cpplan.cli import (  # noqa: E402
    bench_cmd,
    calibrate_cmd,
    measure_cmd,
    pack_cmd,
    plan_cmd,
    report_cmd,
    verify_cmd,
)

__all__ = [
    "bench_cmd",
    "calibrate_cmd",
    "cli",
    "main",
    "measure_cmd",
    "pack_cmd",
    "plan_cmd",
    "report_cmd",
    "run",
    "verify_cmd",
]
