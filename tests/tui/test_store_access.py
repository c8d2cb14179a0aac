"""The explorer and the store: one reader, no descriptor outside SQLite, the evaluation rule
in view, labels never dropped, damage and read-only media said and kept, no spinning on a
closed standard input. Real SQLite and real processes throughout."""

from __future__ import annotations

import ast
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from conftest import SIZE, settle

from ptxbench.db.reader import StoreReader
from ptxbench.db.records import Evaluation
from ptxbench.db.store import open_store
from ptxbench.db.writes import add_evaluation
from ptxbench.tui.screens.sample import SampleScreen
from ptxbench.tui.widgets.row_table import RowTable
from ptxbench.tui.widgets.store_banner import StoreBanner

sys.path.insert(0, str(Path(__file__).parents[1]))
from store_faults import damage_middle, readonly_command

TUI = Path(__file__).parents[2] / "ptxbench_tui"
DRIVER = Path(__file__).parent / "explorer_driver.py"


async def until(pilot, condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        await pilot.pause(0.05)


async def open_samples_row(app, pilot, sample_id: int):
    await pilot.press("3")
    await settle(pilot)
    screen = app.screen
    screen.query_one(RowTable).move_cursor(row=next(i for i, r in enumerate(screen.rows) if r.id == sample_id))
    return screen


def labels(store: Path, sample_id: int) -> list[tuple]:
    conn = sqlite3.connect(store)
    try:
        return conn.execute("SELECT category, note, fixit_candidate, created_at FROM labels WHERE sample_id = ? ORDER BY id",
                            (sample_id,)).fetchall()
    finally:
        conn.close()


# -- 1. one reader; nothing else opens the store ---------------------------------------------


def test_no_module_of_the_explorer_opens_the_store_or_runs_sql():
    """SQL and connections live in db/; the explorer reads and writes through its StoreReader."""
    found = []
    for path in sorted(TUI.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                if any(n.split(".")[0] in ("sqlite3", "sqlite_utils") or n in ("open_store", "connect_reader", "connect")
                       for n in names):
                    found.append(f"{path.name}:{node.lineno} imports {names}")
            elif isinstance(node, ast.Attribute) and node.attr in ("execute", "executescript", "executemany", "connect"):
                found.append(f"{path.name}:{node.lineno} .{node.attr}")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.lstrip().upper().startswith(
                    ("SELECT ", "INSERT ", "UPDATE ", "DELETE ", "PRAGMA ")):
                found.append(f"{path.name}:{node.lineno} SQL text")
    assert found == []


OPENED: list[str] = []
WATCHED: list[str] = []


def _audit(event: str, args: tuple) -> None:
    if event == "open" and WATCHED and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.path.abspath(os.fsdecode(args[0]))
        if any(path.startswith(w) for w in WATCHED):
            OPENED.append(path)


sys.addaudithook(_audit)  # audit hooks stay for the process; this one only looks while WATCHED is set


async def test_the_explorer_opens_no_descriptor_of_the_store_outside_sqlite(app_for, store, ids):
    """Python raises an `open` audit event for every file it opens; SQLite's own opens are
    not Python's. Browse every view, open a sample, diff, label: none may touch the store."""
    from ptxbench.tui.messages import ShowDiff, ShowSample

    app = app_for()
    WATCHED[:] = [str(store.resolve())]
    OPENED.clear()
    try:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            for key in "12345781":
                await pilot.press(key)
                await settle(pilot)
            app.post_message(ShowSample(ids.wgmma_missing))
            await settle(pilot)
            await pilot.press("l")
            await settle(pilot)
            await pilot.press(*"seen", "enter")
            await settle(pilot)
            app.post_message(ShowDiff(ids.wgmma_missing, None))
            await settle(pilot)
    finally:
        WATCHED.clear()
    assert OPENED == []
    assert labels(store, ids.wgmma_missing)[-1][1] == "seen"


# -- 2. which evaluation a view shows ----------------------------------------------------------


async def test_a_static_recheck_keeps_the_gpu_verdict_in_view_and_V_shows_the_newest(app_for, store, ids):
    db = open_store(store)
    recheck = add_evaluation(db, Evaluation(sample_id=ids.wgmma_ok, engine_version="fixture", status="static",
                                            category="ok", compiled=True, uses_ptx=True, source="ptxbench eval --static")).id
    db.conn.close()
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        from ptxbench.tui.messages import ShowSample

        app.post_message(ShowSample(ids.wgmma_ok))
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, SampleScreen)
        assert screen.detail.latest.speedup == 0.97 and screen.detail.latest.id != recheck
        history = str(screen.query_one("#sample-history").render())
        assert f"▸ #{screen.detail.latest.id}" in history and f"  #{recheck}" in history  # both, the GPU one speaks
        await pilot.press("V")
        await settle(pilot)
        assert app.screen.detail.latest.id == recheck  # the person asked for the newest
        assert "▸ #%d" % recheck in str(app.screen.query_one("#sample-history").render())
        await pilot.press("escape", "1")
        await settle(pilot)
        assert "newest evaluation" in str(app.screen.query_one("#overview-status").render())


# -- 4. labels --------------------------------------------------------------------------------------


async def test_a_bare_enter_in_the_label_dialog_saves_nothing(app_for, store, ids):
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await open_samples_row(app, pilot, ids.wgmma_ok)
        await pilot.press("l")
        await settle(pilot)
        dialog = app.screen
        assert type(dialog).__name__ == "LabelDialog"
        await pilot.press("enter")
        await settle(pilot)
        assert app.screen is dialog  # still open, and it says why
        assert "Nothing to save yet" in str(dialog.query_one("#label-hint").render())
        await pilot.press(*"tile on wgmma", "enter")
        await settle(pilot)
        assert type(app.screen).__name__ == "SamplesScreen"
        # The label now exists: Enter on it unchanged adds nothing.
        await pilot.press("l")
        await settle(pilot)
        assert app.screen.query_one("#label-note").value == "tile on wgmma"
        await pilot.press("enter")
        await settle(pilot)
        assert type(app.screen).__name__ == "SamplesScreen"
    assert [(c, n, f) for c, n, f, _ in labels(store, ids.wgmma_ok)] == [(None, "tile on wgmma", 0)]


async def test_a_label_typed_while_the_store_is_locked_is_kept_and_saved_later(app_for, store, ids):
    app = app_for(reader=StoreReader(store, write_timeout=0.2))
    holder = sqlite3.connect(store, isolation_level=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await open_samples_row(app, pilot, ids.wgmma_ok)
        holder.execute("BEGIN IMMEDIATE")  # another writer holds the store, as a long eval does
        try:
            await pilot.press("l")
            await settle(pilot)
            await pilot.press(*"kept while locked", "enter")
            await until(pilot, lambda: app.store_notice[0].startswith("1 label not saved yet"))
            assert "another writer holds the store" in app.store_notice[0]
            assert app.screen.query_one(StoreBanner).display
            await pilot.press("l")  # the dialog shows what was typed, not what the store has
            await settle(pilot)
            assert app.screen.query_one("#label-note").value == "kept while locked"
            await pilot.press("escape", "q")  # quitting with a label unsaved asks first
            await settle(pilot)
            assert type(app.screen).__name__ == "ConfirmDialog"
            await pilot.press("escape")  # wait
            await settle(pilot)
            assert labels(store, ids.wgmma_ok) == []
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        await until(pilot, lambda: not app.unsaved)  # the retry, every RETRY_S
        await settle(pilot)
        assert app.store_notice == ("", False) and not app.screen.query_one(StoreBanner).display
    saved = labels(store, ids.wgmma_ok)
    assert [(c, n) for c, n, _, _ in saved] == [(None, "kept while locked")]


# -- 3. damage and read-only media ---------------------------------------------------------------


async def test_a_store_damaged_in_the_middle_says_so_and_keeps_saying_it(tmp_path):
    from ptxbench.tui.app import make_app
    from ptxbench.tui.messages import StoreFailed

    store = tmp_path / "s.sqlite"
    damage_middle(store)
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await until(pilot, lambda: app.reader.damage is not None)  # the quick check after the first paint
        await settle(pilot)
        for key in ("3", "4", "1"):
            await pilot.press(key)
            await settle(pilot)
            banner = app.screen.query_one(StoreBanner)
            assert banner.display and "Damaged store" in str(banner.render()) and banner.has_class("-error")
        app.post_message(StoreFailed("a later, unrelated failure"))
        await settle(pilot)
        assert "is damaged" in app.store_notice[0]


def test_a_store_on_read_only_media_opens_read_only_with_writing_off(store, tmp_path):
    media = tmp_path / "media"
    media.mkdir()
    copy = media / "store.sqlite"
    copy.write_bytes(store.read_bytes())
    out = tmp_path / "out" / "readonly.json"
    out.parent.mkdir()
    out.parent.chmod(0o777)
    env = {**os.environ, "PTXBENCH_CACHE_DIR": str(out.parent)}
    argv = readonly_command(media, [sys.executable, str(DRIVER), str(copy), str(out), "readonly"])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    got = json.loads(out.read_text())
    assert got["notice"].startswith("Read-only:") and got["banner"]
    assert got["screen_after_l"] == got["screen_after_f"] == got["screen_after_r"] == got["screen_after_R"] == "SamplesScreen"
    refusals = [s for s in got["said"] if s.startswith("This store is read-only")]
    assert len(refusals) == 4 and all(s.endswith("is off here.") for s in refusals)
    assert got["labels"] == 1 and got["failures"] == [] and got["damage"] is None


# -- the command line -----------------------------------------------------------------------------


def run_tui(*args: str, stdin=subprocess.DEVNULL, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ptxbench.tui.app", *args], capture_output=True, text=True,
                          stdin=stdin, timeout=timeout)


def test_an_empty_file_given_as_the_store_is_refused_with_one_line(tmp_path):
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    result = run_tui("--db", str(empty))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "is an empty file, not a PTXBench store" in result.stderr
    assert empty.stat().st_size == 0 and not list(tmp_path.glob("empty.sqlite-*"))


def test_standard_input_at_end_of_file_exits_instead_of_spinning(store):
    started = time.monotonic()
    result = run_tui("--db", str(store), timeout=30)
    assert result.returncode == 2 and "standard input is not a terminal" in result.stderr
    assert time.monotonic() - started < 30


def test_a_default_store_on_read_only_media_is_read_as_it_is(store, tmp_path):
    """Seeding writes; a default store that cannot be written is opened unseeded, not refused."""
    media = tmp_path / "media"
    media.mkdir()
    (media / "store.sqlite").write_bytes(store.read_bytes())
    argv = readonly_command(media, [sys.executable, "-m", "ptxbench.tui.app"])
    result = subprocess.run(argv, env={**os.environ, "PTXBENCH_DB": str(media / "store.sqlite")},
                            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    # The store was ready; only the missing terminal stopped it.
    assert result.returncode == 2 and "standard input is not a terminal" in result.stderr, result.stderr
