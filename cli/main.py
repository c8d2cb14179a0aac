"""The `ptxbench` command line.

Each command lives in its own module of this package and is registered
below with one line; heavy imports stay inside the commands so that
`ptxbench --help` is instant.
"""

import typer

from ptxbench.cli.check import check_command
from ptxbench.cli.eval import eval_command
from ptxbench.cli.import_ import import_command
from ptxbench.cli.report import report_command
from ptxbench.cli.run import run_command
from ptxbench.cli.tasks import tasks_command

app = typer.Typer(no_args_is_help=True, add_completion=False, help="PTXBench: judge model-written PTX kernels.")


@app.command()
def version() -> None:
    """Print the engine version."""
    from ptxbench.engine import ENGINE_VERSION

    typer.echo(ENGINE_VERSION)


app.command("tasks")(tasks_command)
app.command("check")(check_command)
app.command("run")(run_command)
app.command("import")(import_command)
app.command("report")(report_command)
app.command("eval")(eval_command)
app.add_typer(__import__("ptxbench.cli.fixit", fromlist=["app"]).app, name="fixit")


if __name__ == "__main__":
    app()
