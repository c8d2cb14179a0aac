"""Two explorers and a writer on one store for a while: nothing a person wrote is lost.

Two explorer processes (tests/tui/explorer_driver.py: the real app, driven by Pilot) label
samples and flip Fixit marks while a third process imports new samples and re-judges a task
with `ptxbench import` and `ptxbench eval --static`. At the end every label and note is in
the store and seen by a fresh reader, SQLite's integrity check passes, and neither explorer
reported a store failure or damage. Bounded: SOAK_S of work, about 35 s in all on two cores.

What is checked is what each explorer was given to keep (`kept`: every call of its
`save_label`, the driver having made sure each typed note is what the explorer took): the
rows added to `labels` are exactly those, each once, and no row that was there is gone.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from ptxbench.db.reader import StoreReader
from ptxbench.db.seed import ensure_default_store

HERE = Path(__file__).parent
DRIVER = HERE / "explorer_driver.py"
PTXBENCH = str(Path(sys.executable).with_name("ptxbench"))
SOLUTION = HERE.parents[1] / "tasks" / "solutions" / "vector_add_smoke"
SOAK_S = 12


def _import_lines(round_: int) -> str:
    code = (SOLUTION / "kernel.ptx").read_text()
    manifest = json.loads((SOLUTION / "manifest.json").read_text())
    return "".join(
        json.dumps({"task": "vector_add_smoke", "model": "soak-writer", "run": f"soak-{round_}", "language": "ptx",
                    "code": code, "manifest": manifest, "sample_index": i, "source": "test: tests/tui/test_soak.py"}) + "\n"
        for i in range(3)
    )


def _writer(store: Path, folder: Path, stop: threading.Event, done: list[str]) -> None:
    """Import and judge until stopped: the writer the explorers share the store with."""
    round_ = 0
    while not stop.is_set():
        lines = folder / f"round-{round_}.jsonl"
        lines.write_text(_import_lines(round_))
        for cmd in ([PTXBENCH, "import", str(lines), "--db", str(store), "--gpu", "off"],
                    [PTXBENCH, "eval", "--db", str(store), "--task", "vector_add_smoke", "--static"]):
            result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            done.append(f"{cmd[1]} rc={result.returncode} {result.stderr.strip()[-300:]}")
            if stop.is_set():
                break
        round_ += 1


def _label_rows(conn) -> list[tuple[int, str, int]]:
    return conn.execute("SELECT sample_id, note, fixit_candidate FROM labels").fetchall()


def test_two_explorers_and_a_writer_lose_nothing(tmp_path):
    started = time.monotonic()
    store = tmp_path / "store.sqlite"
    ensure_default_store(store).conn.close()  # the seeded store, as a new user has it
    env = {**os.environ, "PTXBENCH_CACHE_DIR": str(tmp_path / "cache")}
    before = StoreReader(store)
    rows_before = Counter(before.read(_label_rows))
    before.close()

    stop = threading.Event()
    writes: list[str] = []
    writer = threading.Thread(target=_writer, args=(store, tmp_path, stop, writes), daemon=True)
    writer.start()
    explorers = {
        tag: subprocess.Popen([sys.executable, str(DRIVER), str(store), str(tmp_path / f"{tag}.json"), "soak",
                               "--seconds", str(SOAK_S), "--tag", tag], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for tag in ("A", "B")
    }
    try:
        for tag, proc in explorers.items():
            output, _ = proc.communicate(timeout=90)
            assert proc.returncode == 0, f"explorer {tag} failed:\n{output[-3000:]}"
    finally:
        stop.set()
        for proc in explorers.values():
            if proc.poll() is None:
                proc.kill()
        writer.join(timeout=120)

    results = {tag: json.loads((tmp_path / f"{tag}.json").read_text()) for tag in explorers}
    assert all(line.split()[1] == "rc=0" for line in writes), writes
    assert any(line.startswith("import") for line in writes) and any(line.startswith("eval") for line in writes)
    for tag, r in results.items():
        assert r["failures"] == [] and r["damage"] is None, (tag, r["failures"], r["damage"])
        assert r["all_saved"] and r["unsaved"] == 0, (tag, r)
        assert len(r["notes"]) >= 3, (tag, r)  # the soak did label, on a machine this busy too

    fresh = StoreReader(store)  # a reader that never saw any of it
    rows = Counter(fresh.read(_label_rows))
    kept = Counter((sid, note, int(fixit)) for r in results.values() for sid, note, fixit, _ in r["kept"])
    assert all(len(r["kept"]) == r["saves"] for r in results.values())  # each label and Fixit mark was taken
    stored = {(sid, note) for sid, note, _ in rows}
    missing = [(tag, sid, note) for tag, r in results.items() for sid, note in r["notes"] if (sid, note) not in stored]
    assert missing == []
    assert rows_before - rows == Counter()  # no row that was there is gone
    assert rows - rows_before == kept  # and every label kept is there, once
    assert fresh.read(lambda c: c.execute("PRAGMA integrity_check").fetchall()) == [("ok",)]
    fresh.close()
    assert time.monotonic() - started < 60


async def test_the_driver_reports_only_labels_the_explorer_took_on_a_slow_machine(store, monkeypatch):
    """On a busy machine the label dialog is on the screen stack a while before it has mounted
    and focused its note field; keys sent then reach no field, and the explorer saves what did
    reach it ("-5" for "A-5"). The driver must type only into the focused field and report what
    the explorer kept, so that the soak's "missing" means a lost row, never a lost keystroke."""
    import explorer_driver as driver

    from ptxbench.db.reader import prepare_store
    from ptxbench.tui.config import Config
    from ptxbench.tui.labelling import Labelling
    from ptxbench.tui.screens.dialogs import LabelDialog

    read_detail, on_mount = Labelling._read_detail, LabelDialog.on_mount

    def slow_read(self, sample_id):
        time.sleep(0.3)
        return read_detail(self, sample_id)

    async def slow_mount(self) -> None:
        await asyncio.sleep(0.3)
        on_mount(self)

    monkeypatch.setattr(Labelling, "_read_detail", slow_read)
    monkeypatch.setattr(LabelDialog, "on_mount", slow_mount)
    reader = StoreReader(store)
    before = Counter(reader.read(_label_rows))
    app = driver.RecordingApp(Config(db_path=store), reader=StoreReader(store, access=prepare_store(store)))
    async with app.run_test(size=driver.SIZE) as pilot:
        out = await driver.soak(app, pilot, 2.0, "A")
    added = Counter(reader.read(_label_rows)) - before
    reader.close()
    assert out["all_saved"] and app.failures == []
    stored = {(sid, note) for sid, note, _ in added}
    assert [tuple(n) for n in out["notes"] if tuple(n) not in stored] == [], added  # reported saved, not there
    assert len(out["notes"]) >= 2
    assert added == Counter((sid, note, int(fixit)) for sid, note, fixit, _ in out["kept"])
