"""The package installs under one namespace and keeps its layers apart."""

import ast
import importlib
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_imports_are_namespaced():
    for name in ("ptxbench.engine", "ptxbench.tasks", "ptxbench.db", "ptxbench.tui", "ptxbench.cli"):
        importlib.import_module(name)
    for bare in ("engine", "db", "tasks"):
        code = f"import importlib.util,sys; sys.exit(importlib.util.find_spec({bare!r}) is not None)"
        assert subprocess.run([sys.executable, "-c", code], cwd="/").returncode == 0, f"bare `{bare}` importable"


def _imports(folder: str) -> set[str]:
    found: set[str] = set()
    for path in (ROOT / folder).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
                if node.module.startswith("ptxbench."):
                    found.add(node.module)
    return found


def test_engine_db_tasks_never_import_textual():
    for folder in ("engine", "db", "tasks"):
        assert "textual" not in _imports(folder), f"{folder}/ imports textual"


def test_dependencies_point_one_way():
    # engine → tasks only; tasks → nothing of ours; db → engine/tasks data, never the TUI or CLI.
    def ours(folder):
        return {m for m in _imports(folder) if m.startswith("ptxbench.")}

    assert not {m for m in ours("tasks") if not m.startswith("ptxbench.tasks")}
    assert not {m for m in ours("engine") if m.split(".")[1] not in ("engine", "tasks")}
    assert not {m for m in ours("db") if m.split(".")[1] in ("tui", "cli")}
