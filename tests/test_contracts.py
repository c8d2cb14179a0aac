"""The layers are enforced by import-linter's contracts (pyproject.toml), and the contracts bite.

Each case lays the packages out as installed (`ptxbench.<name>` → a folder), copies the one it
breaks into a temporary folder, adds one forbidden import there, and runs `lint-imports` on that
tree: the contract named must fail, and the real tree must pass.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "engine": "engine",
    "tasks": "tasks",
    "db": "db",
    "fixit": "fixit",
    "models": "models",
    "services": "services",
    "cli": "cli",
    "tui": "ptxbench_tui",
    "themes": "themes",
}
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(
    not LINT_IMPORTS.exists(), reason="import-linter is not installed (pip install -e '.[dev]')"
)


def _lint(tree: Path | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if tree is not None:  # the copy first on the path: it is the `ptxbench` namespace that gets read
        env["PYTHONPATH"] = os.pathsep.join([str(tree), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run(
        [str(LINT_IMPORTS), str(ROOT / "pyproject.toml"), "--no-cache"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tree or ROOT,
        env=env,
    )


def _tree_with(tmp_path: Path, package: str, module: str, line: str) -> Path:
    """A `ptxbench` namespace in tmp_path: links to the real folders, and a copy of `package` in which
    `module` gains `line`."""
    base = tmp_path / "ptxbench"
    base.mkdir()
    for name, folder in PACKAGES.items():
        if name == package:
            shutil.copytree(ROOT / folder, base / name, ignore=shutil.ignore_patterns("__pycache__"), symlinks=True)
        else:
            (base / name).symlink_to(ROOT / folder, target_is_directory=True)
    target = base / package / module
    target.write_text(target.read_text() + f"\n{line}\n")
    return tmp_path


def test_the_tree_keeps_every_contract():
    proc = _lint(None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


@pytest.mark.parametrize(
    "package, module, line, contract",
    [
        ("engine", "categories.py", "import textual  # forbidden", "import no Textual"),
        ("db", "verdict.py", "from ptxbench.services import batch  # upward", "One way down"),
        ("cli", "tasks.py", "from ptxbench.engine import pipeline  # around the services", "through services"),
        ("services", "errors.py", "import rich  # services return results", "no typer, rich or Textual"),
        ("tasks", "records.py", "from ptxbench.tasks import spec  # spec imports records", "No module cycles"),
    ],
)
def test_a_forbidden_import_breaks_its_contract(tmp_path, package, module, line, contract):
    proc = _lint(_tree_with(tmp_path, package, module, line))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    broken = " ".join(out.split("Broken contracts")[-1].split())  # the names wrap at 80 columns
    assert contract in broken, out
