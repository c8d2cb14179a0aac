"""`ptxbench --version` names the package and the engine; `ptxbench version` stays the engine's alone."""

from __future__ import annotations

from typer.testing import CliRunner

from ptxbench.cli.main import app
from ptxbench.engine import ENGINE_VERSION


def test_version_flag_and_command():
    both = CliRunner().invoke(app, ["--version"])
    assert both.exit_code == 0 and both.stdout.startswith("ptxbench ") and f"engine {ENGINE_VERSION}" in both.stdout
    alone = CliRunner().invoke(app, ["version"])
    assert alone.exit_code == 0 and alone.stdout.strip() == ENGINE_VERSION
