"""Input safety: text from a person or a file is data, never SQL, never a path out of its folder,
and the explorer's web server listens on this machine only unless told otherwise.

Search and filter text goes through the store's search (`db.queries`), the explorer's paged
queries (`db.browse`), the CLI (`ptxbench report`, `ptxbench eval`) and the explorer's search box;
each is tried with SQL injection and FTS5 query syntax. Afterwards the tables are all there with
the rows they had.
"""

from __future__ import annotations

import json
import os
import random
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "hostile"))

from hostile_store import SOURCE, TASK, build_store

from ptxbench.db import browse, browse_summary
from ptxbench.db.queries import fts_query, search_samples
from ptxbench.db.records import Evaluation, Sample
from ptxbench.db.store import open_store
from ptxbench.db.writes import add_evaluation, add_sample

INJECTIONS = [
    "'; DROP TABLE samples; --",
    '" OR 1=1 --',
    "' OR '1'='1",
    "x' UNION SELECT sql FROM sqlite_master --",
    "1; DELETE FROM evaluations",
    "samples_fts MATCH 'x'",
    '"unbalanced',
    "unbalanced'",
    "NEAR(",
    "NEAR(a b, 3)",
    "*",
    "**",
    "a*b*",
    "-",
    "+x",
    "^start",
    "AND",
    "OR",
    "NOT x",
    "a OR b NOT c",
    "code:foo",
    "{code source}: x",
    "((((",
    "))))",
    '""',
    "%",
    "_",
    "\\",
    "\x00",
    "a\x00b",
    "",
    "   ",
    "\n\t",
    "😀 emoji",
    "ünïcödé",
    "x" * 5000,
]
# What a person can type into the search box (one line), a cross-section of the list above.
UI_TEXTS = ["'; DROP TABLE samples; --", '" OR 1=1 --', "x' UNION SELECT sql FROM sqlite_master --", '"unbalanced',
            "NEAR(", "*", "**", "^start", "NOT x", "{code source}: x", "))))", '""', "%", "\\", "😀 emoji"]
MARKED_TEXT = "'; DROP TABLE samples; -- \" OR 1=1 -- NEAR( \"unbalanced"


@pytest.fixture
def store(tmp_path) -> Path:
    """A store with 12 samples, one holding injection text in its code, and evaluations whose
    evidence holds some too (so both full-text indexes have rows to match)."""
    path = tmp_path / "store.sqlite"
    ids = build_store(path, 12)
    db = open_store(path)
    try:
        marked = add_sample(db, Sample(task_id=TASK, language="ptx", code=f"// {MARKED_TEXT}\n.version 8.0\n",
                                       source=SOURCE, sample_index=99))
        for sid in ids[:6] + [marked.id]:
            note = f"near {MARKED_TEXT}" if sid == marked.id else "Parsing error near 'add'"
            add_evaluation(db, Evaluation(sample_id=sid, engine_version="test", status="judged",
                                          category="syntax", source=SOURCE, evidence={"message": note},
                                          assembler_log="ptxas: error"))
    finally:
        db.conn.close()
    return path


def snapshot(path: Path) -> dict[str, object]:
    """The schema and every table's row count."""
    conn = sqlite3.connect(path)
    try:
        schema = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name").fetchall()
        tables = [n for t, n, _ in schema if t == "table" and not n.startswith("sqlite_")]
        return {"schema": schema, "rows": {t: conn.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in tables},
                "integrity": conn.execute("PRAGMA integrity_check").fetchall()}
    finally:
        conn.close()


# -- db: search and filters -------------------------------------------------------------------------

def test_search_treats_every_text_as_words(store):
    before = snapshot(store)
    db = open_store(store, readonly=True)
    try:
        for text in INJECTIONS:
            hits = search_samples(db, text)
            assert isinstance(hits, list)
            hits_code_only = search_samples(db, text, include_evaluations=False, task_id=text, model_id=1)
            assert hits_code_only == []
        # The words of an injection string are found as words, in code and in evidence.
        found = search_samples(db, "DROP TABLE samples", include_evaluations=False)
        assert [s.sample_index for s in found] == [99]
        assert len(search_samples(db, "\"unbalanced NEAR(")) == 1
        assert len(search_samples(db, "OR 1=1")) == 1
    finally:
        db.conn.close()
    assert snapshot(store) == before


def test_any_text_makes_a_valid_full_text_query(store):
    """Random strings over the characters FTS5 gives meaning to: every one is a valid MATCH."""
    conn = sqlite3.connect(store)
    rng = random.Random(11)
    alphabet = list("\"'*^:(){}+-.,;/\\ \t%_") + ["NEAR", "AND", "OR", "NOT", "code", "x", "é", "\x00"]
    try:
        for _ in range(300):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
            query = fts_query(text)
            if query:
                conn.execute("SELECT rowid FROM samples_fts WHERE samples_fts MATCH ?", [query]).fetchall()
                conn.execute("SELECT rowid FROM evaluations_fts WHERE evaluations_fts MATCH ?", [query]).fetchall()
    finally:
        conn.close()


def test_explorer_queries_take_any_filter_text(store):
    before = snapshot(store)
    conn = browse.connect(store, cached=False)
    try:
        all_cells = browse_summary.cells(conn)
        total = browse.sample_count(conn, browse.SampleFilter())
        for text in INJECTIONS:
            for field in ("task_id", "model", "arch", "context_level", "category"):
                flt = browse.SampleFilter(**{field: text})
                page = browse.sample_page(conn, flt)
                count = browse.sample_count(conn, flt)
                assert browse.sample_ids(conn, flt) == [r.id for r in page.rows]
                if text.strip():
                    assert count == 0 and page.rows == [], (field, text)
            flt = browse.SampleFilter(text=text, labelled_only=True)
            browse.sample_page(conn, flt)
            assert browse.sample_count(conn, browse.SampleFilter(text=text)) <= total
            browse.compare(conn, text, text)
            browse_summary.plot_data(conn, all_cells, text)
            assert browse.task(conn, text) is None
        assert browse.sample_count(conn, browse.SampleFilter(text="DROP TABLE samples")) == 1
        assert browse.sample_count(conn, browse.SampleFilter()) == total
    finally:
        conn.close()
    assert snapshot(store) == before


# -- the CLI -------------------------------------------------------------------------------------------

def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PTXBENCH_CACHE": str((cwd or Path.cwd()) / "asm-cache")}
    return subprocess.run([sys.executable, "-m", "ptxbench.cli.main", *args], capture_output=True, text=True,
                          timeout=120, env=env, cwd=cwd)


def _invoke(*args: str):
    """The real CLI, in this process (each run of a subprocess would pay for the imports again)."""
    from typer.testing import CliRunner

    from ptxbench.cli.main import app

    return CliRunner().invoke(app, list(args))


def test_report_filters_take_any_text(store):
    before = snapshot(store)
    for text in ("'; DROP TABLE samples; --", '" OR 1=1 --', "x') OR ('1'='1", "NEAR(", "*", "1 OR 1=1"):
        for option in ("--model", "--task", "--context", "--arch", "--run"):
            done = _invoke("report", "--db", str(store), option, text, "--json", "-")
            assert done.exit_code in (0, 2), (option, text, done.output[-1500:])
            assert done.exception is None or isinstance(done.exception, SystemExit), repr(done.exception)
            if done.exit_code == 0:
                rows = json.loads(done.stdout)
                assert not rows or all(r.get("samples", 0) == 0 for r in rows), (option, text, rows)
    assert snapshot(store) == before


def test_eval_task_filter_is_not_sql(store, tmp_path):
    before = snapshot(store)
    done = _cli("eval", "--db", str(store), "--task", "vector_add_smoke' OR '1'='1", "--static", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert snapshot(store) == before


# -- the explorer's search box -------------------------------------------------------------------------

async def test_explorer_search_box_takes_any_text(store, tmp_path):
    from textual.widgets import Input
    from textual.worker import WorkerCancelled

    from ptxbench.tui.app import make_app

    before = snapshot(store)
    app = make_app(store, engine_cmd=[sys.executable, "-c", "pass"], gpu_lock_dir=tmp_path)
    failures: list[str] = []
    shown = app.notify

    def notify(message, *args, **kwargs):
        if kwargs.get("severity") == "error":
            failures.append(str(message))
        return shown(message, *args, **kwargs)

    app.notify = notify

    async def settle(pilot) -> None:
        for _ in range(50):
            try:
                await app.workers.wait_for_complete()
            except WorkerCancelled:
                pass
            await pilot.pause()
            if not any(w.is_running for w in app.workers):
                return

    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("3")
        await settle(pilot)
        screen = app.screen
        search = screen.query_one("#samples-search", Input)
        for text in UI_TEXTS + ["DROP TABLE samples"]:
            search.value = text
            search.focus()
            await pilot.press("enter")
            await settle(pilot)
            assert screen.filter.text == text.strip()
            assert screen.total is not None, text
        assert screen.total == 1 and [r.sample_index for r in screen.rows] == [99]
    assert failures == []
    assert snapshot(store) == before


# -- import: files named by a line stay inside the file's folder ----------------------------------------

def _jsonl(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


@pytest.fixture
def seeded(store) -> Path:
    """`ptxbench import` opens a store the way the default store is opened: seeded with the
    project's tasks and expert solutions first. Seed it here, so what changes is the import's."""
    from ptxbench.db.seed import ensure_default_store

    ensure_default_store(store).conn.close()
    return store


def test_import_refuses_files_outside_its_folder(seeded, tmp_path):
    store = seeded
    folder = tmp_path / "a" / "b"
    folder.mkdir(parents=True)
    (folder / "link.ptx").symlink_to("/etc/passwd")
    (tmp_path / "outside.ptx").write_text((Path(__file__).parent / "hostile" / "gpu" / "control_ok.ptx").read_text())
    before = snapshot(store)
    first_line = Path("/etc/passwd").read_text().splitlines()[0]
    for name in ("../../outside.ptx", "/etc/passwd", "~/.bashrc", "link.ptx", "../b/../../outside.ptx",
                 "sub/../../../outside.ptx"):
        for key in ("code_file", "manifest_file"):
            line = {"task": TASK, "model": "hostile-import", key: name}
            if key == "manifest_file":
                line["code"] = "// kernel"
                line["language"] = "ptx"
            src = _jsonl(folder / "in.jsonl", [line])
            done = _invoke("import", str(src), "--db", str(store), "--no-judge")
            assert done.exit_code == 2, (key, name, done.output[-1500:])
            assert done.exception is None or isinstance(done.exception, SystemExit), repr(done.exception)
            assert "outside" in done.output or "relative" in done.output, done.output[-500:]
            assert first_line not in done.output
            assert snapshot(store) == before, (key, name)


def test_import_names_are_stored_as_text_not_paths(seeded, tmp_path):
    """Model, run and source names that look like paths create no files anywhere."""
    store = seeded
    folder = tmp_path / "a" / "b"
    folder.mkdir(parents=True)
    evil = "../../escaped"
    src = _jsonl(folder / "in.jsonl", [{
        "task": TASK, "model": evil, "run": evil + "-run", "source": evil + "-source",
        "code": (Path(__file__).parent / "hostile" / "gpu" / "control_ok.ptx").read_text(), "language": "ptx",
    }])
    before = {p for p in tmp_path.rglob("*")}
    done = _cli("import", str(src), "--db", str(store), "--no-judge", cwd=folder)
    assert done.returncode == 0, done.stderr[-2000:]
    created = {p for p in tmp_path.rglob("*")} - before
    assert all(p.name.startswith(store.name) or p.parent.name == "asm-cache" or "asm-cache" in p.parts
               for p in created), sorted(map(str, created))
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "escaped-run").exists()
    conn = sqlite3.connect(store)
    try:
        assert conn.execute("SELECT COUNT(*) FROM models WHERE name = ?", [evil]).fetchone()[0] == 1
    finally:
        conn.close()


# -- ptxbench-tui --serve ------------------------------------------------------------------------------------

def test_serve_defaults_to_this_machine_only():
    from ptxbench.tui.app import parse_args

    assert parse_args(["--serve"]).host == "127.0.0.1"
    assert parse_args([]).host == "127.0.0.1"
    assert parse_args(["--serve", "--host", "0.0.0.0"]).host == "0.0.0.0"


def _listeners(port: int) -> list[str]:
    """Local addresses (hex, as /proc/net shows them) listening on `port`."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, hexport = local.rsplit(":", 1)
            if state == "0A" and int(hexport, 16) == port:
                found.append(address)
    return found


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs /proc/net/tcp to see the listening address")
def test_serve_listens_on_loopback_only(store, tmp_path):
    """The real server, started as a person would start it: its socket is bound to 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "ptxbench.tui.app", "--db", str(store), "--serve", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not _listeners(port):
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            assert time.monotonic() < deadline, "the server did not start listening"
            time.sleep(0.1)
        assert set(_listeners(port)) == {"0100007F"}, _listeners(port)
    finally:
        os.killpg(proc.pid, 9)
        proc.wait(timeout=10)
        if proc.stderr:
            proc.stderr.close()
