"""The `ptxbench` command line."""

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, help="PTXBench: judge model-written PTX kernels.")


@app.command()
def version() -> None:
    """Print the engine version."""
    from ptxbench.engine import ENGINE_VERSION

    typer.echo(ENGINE_VERSION)
