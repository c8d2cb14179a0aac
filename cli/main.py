"""The `ptxbench` command line.

Each command lives in its own module of this package as a plain function and is registered
below in one table (cli/conventions.py `register`); heavy imports stay inside the commands so
that `ptxbench --help` is instant. Commands parse their options, call the service layer
(`ptxbench.services`) and render what it returns.
"""

import typer

from ptxbench.cli import fixit
from ptxbench.cli.check import check_command
from ptxbench.cli.conventions import register
from ptxbench.cli.eval import eval_command
from ptxbench.cli.export import export_command
from ptxbench.cli.import_ import import_command
from ptxbench.cli.mcp import mcp_command
from ptxbench.cli.migrate import migrate_command
from ptxbench.cli.report import report_command
from ptxbench.cli.run import run_command
from ptxbench.cli.tasks import tasks_command

app = typer.Typer(no_args_is_help=True, add_completion=False, help="PTXBench: judge model-written PTX kernels.")


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ptxbench")
    except PackageNotFoundError:
        return "unknown"


def _version_option(value: bool) -> None:
    if value:
        from ptxbench.engine import ENGINE_VERSION

        typer.echo(f"ptxbench {_package_version()} (engine {ENGINE_VERSION}: verdicts compare within one)")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version_option, is_eager=True,
                                 help="Print the package and engine versions and exit."),
) -> None:
    """PTXBench: judge model-written PTX kernels."""


def version_command() -> None:
    """Print the engine version."""
    from ptxbench.engine import ENGINE_VERSION

    typer.echo(ENGINE_VERSION)


def tui_command(ctx: typer.Context) -> None:
    """Open the explorer (the same as `ptxbench-tui`; its options follow: --db, --theme, --serve … --help)."""
    from ptxbench.tui.app import main

    main(list(ctx.args), prog="ptxbench tui")


COMMANDS = (
    ("version", version_command),
    ("tasks", tasks_command),
    ("check", check_command),
    ("run", run_command),
    ("import", import_command),
    ("report", report_command),
    ("eval", eval_command),
    ("mcp", mcp_command),
    ("migrate", migrate_command),
    ("export", export_command),
    ("tui", tui_command),
)
register(app, COMMANDS, pass_through=("tui",))
app.add_typer(fixit.app, name="fixit")


if __name__ == "__main__":
    app()
