"""A store for the crash- and input-safety tests, written through the store's own functions, and
a runner for the real `ptxbench eval` process that can kill it at a chosen event."""

from __future__ import annotations

import json
import os
import selectors
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptxbench.db.records import Sample, Task
from ptxbench.db.store import open_store
from ptxbench.db.writes import add_sample, get_or_create_model, upsert_task
from ptxbench.tasks.spec import get_task

HERE = Path(__file__).resolve().parent
CONTROL = (HERE / "gpu" / "control_ok.ptx").read_text()
SOURCE = "fixture: tests/hostile/hostile_store.py"
TASK = "vector_add_smoke"


def sample_codes(n: int) -> list[tuple[str, str | None]]:
    """(code, response) pairs for a batch that mixes the costs of real candidates: distinct correct
    kernels (ptxas and cuobjdump run: each declares its own global, so even the cubins differ and
    no cache answers), copies of one kernel (the assembly cache answers), kernels with a syntax error
    (ptxas only), and responses with no code (extract only)."""
    out: list[tuple[str, str | None]] = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            out.append((CONTROL.replace(".address_size 64", f".address_size 64\n.visible .global .u32 variant_{i};", 1),
                        None))
        elif kind == 1:
            out.append((CONTROL, None))
        elif kind == 2:
            out.append((f"// variant {i}\n" + CONTROL.replace("add.rn.f32", "add.rn.f32 %f9,"), None))
        else:
            out.append(("", f"Sample {i}: I would add the vectors with one thread per element."))
    return out


def build_store(path: Path, n: int) -> list[int]:
    """A store with the vector-add task and `n` samples; returns their ids."""
    db = open_store(path)
    try:
        spec = get_task(TASK)
        upsert_task(db, Task(id=spec.id, title=spec.title, operation=spec.operation, arch=spec.arch,
                             families=list(spec.families), spec=spec.to_dict(), source=SOURCE))
        model = get_or_create_model(db, "hostile-fixture", kind="import", source=SOURCE)
        ids = []
        for i, (code, response) in enumerate(sample_codes(n)):
            s = add_sample(db, Sample(task_id=TASK, language="ptx" if code else "none", code=code,
                                      response=response, source=SOURCE, model_id=model.id, sample_index=i))
            ids.append(s.id)
        return ids
    finally:
        db.conn.close()


def eval_env(cache_dir: Path) -> dict[str, str]:
    """The engine's assembly cache in a temporary folder, never the user's."""
    return {**os.environ, "PTXBENCH_CACHE": str(cache_dir), "PYTHONUNBUFFERED": "1"}


@dataclass
class EvalRun:
    events: list[dict[str, Any]] = field(default_factory=list)
    returncode: int | None = None
    killed: bool = False
    stderr: str = ""

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("event") == kind]


def run_eval(args: list[str], env: dict[str, str], *, kill_when: Callable[[dict[str, Any], EvalRun], bool] | None = None,
             kill_after_s: float | None = None, timeout_s: float = 120.0,
             on_start: Callable[[subprocess.Popen], None] | None = None) -> EvalRun:
    """Run `ptxbench eval ARGS --json-progress`; SIGKILL its process group (it and the tools it
    started) as soon as `kill_when(event)` says so or `kill_after_s` has passed."""
    cmd = [sys.executable, "-m", "ptxbench.cli.main", "eval", *args, "--json-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    if on_start is not None:
        on_start(proc)
    run = EvalRun()
    started = time.monotonic()
    buffer = b""
    sel = selectors.DefaultSelector()
    assert proc.stdout is not None
    sel.register(proc.stdout, selectors.EVENT_READ)
    os.set_blocking(proc.stdout.fileno(), False)

    def kill() -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        run.killed = True

    while not run.killed:
        if kill_after_s is not None and time.monotonic() - started >= kill_after_s:
            kill()
            break
        if time.monotonic() - started > timeout_s:
            kill()
            raise TimeoutError(f"ptxbench eval ran past {timeout_s} s: {run.events[-3:]}")
        wait = 0.05 if kill_after_s is not None else 0.5
        if not sel.select(timeout=wait):
            if proc.poll() is not None:
                break
            continue
        chunk = os.read(proc.stdout.fileno(), 1 << 16)
        if not chunk:
            break
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            event = json.loads(line)
            run.events.append(event)
            if kill_when is not None and kill_when(event, run):
                kill()
                break
    run.returncode = proc.wait(timeout=30)
    sel.close()
    run.stderr = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
    proc.stdout.close()
    if proc.stderr:
        proc.stderr.close()
    return run


# -- checks on a store after a crash ------------------------------------------------------------------

def evaluation_rows(path: Path) -> dict[int, tuple]:
    conn = sqlite3.connect(path)
    try:
        return {r[0]: tuple(r) for r in conn.execute("SELECT * FROM evaluations ORDER BY id")}
    finally:
        conn.close()


def store_problems(path: Path) -> list[str]:
    """Everything SQLite and the schema can say is wrong with the store (empty when sound)."""
    problems = []
    conn = sqlite3.connect(path)
    try:
        rows = [r[0] for r in conn.execute("PRAGMA integrity_check")]
        if rows != ["ok"]:
            problems.append(f"integrity_check: {rows}")
        bad_keys = conn.execute("PRAGMA foreign_key_check").fetchall()
        if bad_keys:
            problems.append(f"foreign_key_check: {bad_keys[:5]}")
        for fts in ("samples_fts", "evaluations_fts"):
            try:
                conn.execute(f"INSERT INTO {fts} ({fts}) VALUES ('integrity-check')")
            except sqlite3.DatabaseError as exc:
                problems.append(f"{fts}: {exc}")
        orphans = conn.execute(
            "SELECT COUNT(*) FROM measurements WHERE evaluation_id NOT IN (SELECT id FROM evaluations)").fetchone()[0]
        if orphans:
            problems.append(f"{orphans} measurements without their evaluation")
        for eid, *texts in conn.execute("SELECT id, evidence, tool_versions, warnings, resources FROM evaluations"):
            for text in texts:
                try:
                    json.loads(text)
                except (TypeError, ValueError):
                    problems.append(f"evaluation {eid}: a JSON column does not parse")
    finally:
        conn.close()
    return problems
